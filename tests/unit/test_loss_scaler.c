/* Tests of the loss scaler. Each case feeds a sequence of overflowing (O) and
 * good (G) steps and compares the scale after every update with a sequence
 * worked out by hand from DeepSpeed's DynamicLossScaler rules, written in the
 * comments. The rules, with iter counting updates from 0 and
 * last_overflow_iter starting at -1:
 *   O: if hysteresis == 1 or cur_hysteresis == 1: scale = max(scale/2, min)
 *      (or fail at the minimum under "abort"); else cur_hysteresis -= 1;
 *      last_overflow_iter = iter.
 *   G: if consecutive_hysteresis: cur_hysteresis = hysteresis.
 *      stable = iter - last_overflow_iter - 1; if stable > 0 and
 *      stable % window == 0: scale *= 2 (and refill the hysteresis when not
 *      consecutive).
 *   iter += 1 either way. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/config_schema.h"
#include "mixed_precision/loss_scaler.h"
#include "test_util.h"

/* fp16 with dynamic scaling and zeroshard's documented defaults for the keys
 * a case does not name. */
static zs__settings fp16_dynamic(int power, int64_t window, int hysteresis) {
    zs__settings s;
    memset(&s, 0, sizeof s);
    s.precision.dtype = ZS_DTYPE_FP16;
    s.precision.loss_scale = 0.0;
    s.precision.initial_scale_power = power;
    s.precision.loss_scale_window = window;
    s.precision.hysteresis = hysteresis;
    s.precision.consecutive_hysteresis = 0;
    s.precision.min_loss_scale = 1.0;
    s.precision.on_min_scale = ZS_MIN_SCALE_ABORT;
    s.precision.max_consecutive_skips = 100;
    s.precision.check_overflow = 1;
    return s;
}

/* Applies `pattern` ('O' overflow, 'G' good) from step `first_step` on and
 * checks the scale after each update against expected[i]. */
static void expect_scales_(zs__loss_scaler *s, const char *pattern, const double *expected,
                           size_t count, int64_t first_step, int line) {
    size_t n = strlen(pattern);
    zt_checks++;
    if (n != count) {
        zt_fail_header(__FILE__, line);
        fprintf(stderr, "  pattern \"%s\" has %zu steps but %zu scales are expected\n", pattern, n,
                count);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        zs_status st = zs__loss_scaler_update(s, pattern[i] == 'O', first_step + (int64_t)i);
        double got = zs__loss_scaler_scale(s);
        zt_checks++;
        if (st != ZS_OK || got != expected[i]) {
            zt_fail_header(__FILE__, line);
            fprintf(stderr,
                    "  pattern \"%s\", update %zu ('%c'): status %s (%s)\n"
                    "  scale:    %.17g\n  expected: %.17g\n",
                    pattern, i, pattern[i], zs_status_name(st), st == ZS_OK ? "" : zs_last_error(),
                    got, expected[i]);
            return;
        }
    }
}
#define EXPECT_SCALES(s, pattern, first_step, ...)                                        \
    expect_scales_((s), (pattern), (const double[]){__VA_ARGS__},                         \
                   sizeof((const double[]){__VA_ARGS__}) / sizeof(double), (first_step), \
                   __LINE__)

/* n good steps in a row, all of which must keep the scale at `scale`. */
static void good_steps_at(zs__loss_scaler *s, int n, double scale, int line) {
    for (int i = 0; i < n; i++) {
        zs_status st = zs__loss_scaler_update(s, 0, 0);
        zt_checks++;
        if (st != ZS_OK || zs__loss_scaler_scale(s) != scale) {
            zt_fail_header(__FILE__, line);
            fprintf(stderr, "  good step %d of %d: status %s, scale %.17g, expected %.17g\n", i + 1,
                    n, zs_status_name(st), zs__loss_scaler_scale(s), scale);
            return;
        }
    }
}
#define GOOD_STEPS_AT(s, n, scale) good_steps_at((s), (n), (scale), __LINE__)

/* The defaults come from the configuration module itself, so a change of a
 * documented default shows up here. */
static void test_config_defaults(void) {
    char path[] = "/tmp/zs_loss_scaler_XXXXXX";
    int fd = mkstemp(path);
    ZT_REQUIRE(fd >= 0);
    static const char text[] = "optimizer: { lr = 1e-3; };\nprecision: { dtype = \"fp16\"; };\n";
    ZT_REQUIRE(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
    close(fd);
    zs_config *cfg = NULL;
    ZT_OK(zs_config_load(path, &cfg));
    unlink(path);
    ZT_REQUIRE(cfg != NULL);
    zs__loss_scaler s;
    zs__loss_scaler_init(&s, zs__config_settings(cfg));
    zs_config_destroy(cfg);

    ZT_EQ_INT(zs__loss_scaler_is_dynamic(&s), 1);
    ZT_CHECK(zs__loss_scaler_scale(&s) == 65536.0); /* 2^16 */
    ZT_EQ_INT(zs__loss_scaler_hysteresis_left(&s), 2);
    ZT_EQ_INT(zs__loss_scaler_consecutive_overflows(&s), 0);

    /* Hysteresis 2: the first overflow only uses it up (2 -> 1), the second
     * and third halve. The third overflow is update (iter) 2. */
    EXPECT_SCALES(&s, "OOO", 1, 65536.0, 32768.0, 16384.0);
    ZT_EQ_INT(zs__loss_scaler_hysteresis_left(&s), 1);
    ZT_EQ_INT(zs__loss_scaler_consecutive_overflows(&s), 3);
    ZT_EQ_INT(zs__loss_scaler_overflows_total(&s), 3);
    /* last_overflow_iter = 2; the good step at iter 2 + k has stable = k - 1,
     * so k = 1..1000 keep the scale and k = 1001 (stable = 1000) doubles it
     * and refills the hysteresis. */
    GOOD_STEPS_AT(&s, 1000, 16384.0);
    ZT_EQ_INT(zs__loss_scaler_consecutive_overflows(&s), 0);
    ZT_EQ_INT(zs__loss_scaler_hysteresis_left(&s), 1);
    EXPECT_SCALES(&s, "G", 1004, 32768.0);
    ZT_EQ_INT(zs__loss_scaler_hysteresis_left(&s), 2);
    /* The refilled hysteresis again absorbs one overflow before halving. */
    EXPECT_SCALES(&s, "OO", 1005, 32768.0, 16384.0);

    /* From the start, last_overflow_iter = -1 makes stable = iter, so the
     * first doubling is at iter 1000, the 1001st good step, and the next at
     * iter 2000, 1000 steps later. */
    zs__settings d = fp16_dynamic(16, 1000, 2);
    zs__loss_scaler fresh;
    zs__loss_scaler_init(&fresh, &d);
    GOOD_STEPS_AT(&fresh, 1000, 65536.0);
    EXPECT_SCALES(&fresh, "G", 1000, 131072.0);
    GOOD_STEPS_AT(&fresh, 999, 131072.0);
    EXPECT_SCALES(&fresh, "G", 2000, 262144.0);

    /* The scaler's cap is the top of precision.loss_scale's range. */
    const zs__key *key = zs__config_key_find("precision.loss_scale");
    ZT_REQUIRE(key != NULL);
    ZT_CHECK(key->float_max == ZS_LOSS_SCALE_MAX);
    ZT_CHECK(ldexp(1.0, 64) == ZS_LOSS_SCALE_MAX);
}

static void test_small_windows(void) {
    zs__loss_scaler s;
    zs__settings d;

    /* Window 1 from the start: iter 0 has stable 0 (no growth), then every
     * good step doubles. */
    d = fp16_dynamic(0, 1, 2);
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "GGG", 0, 1.0, 2.0, 4.0);

    /* Window 2 from the start: stable = 0, 1, 2, 3, 4 -> doubles at 2 and 4. */
    d = fp16_dynamic(0, 2, 2);
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "GGGGG", 0, 1.0, 1.0, 2.0, 2.0, 4.0);

    /* Window 3, hysteresis 1, start 8: the overflow at iter 0 halves to 4;
     * good steps at iter 1..7 have stable 0..6 -> doubles at stable 3 (iter 4)
     * and 6 (iter 7). */
    d = fp16_dynamic(3, 3, 1);
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "OGGGGGGG", 0, 4.0, 4.0, 4.0, 4.0, 8.0, 8.0, 8.0, 16.0);

    /* Window 2 with an overflow in the middle: G at iter 0 (stable 0) keeps 8;
     * O at iter 1 halves to 4; G at iter 2..6 have stable 0..4 -> doubles at
     * stable 2 (iter 4) and 4 (iter 6). The overflow restarts the count. */
    d = fp16_dynamic(3, 2, 1);
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "GOGGGGG", 0, 8.0, 4.0, 4.0, 4.0, 8.0, 8.0, 16.0);

    /* Window 1 after an overflow: the first good step (stable 0) never grows. */
    d = fp16_dynamic(4, 1, 1);
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "GOGGOGG", 0, 16.0, 8.0, 8.0, 16.0, 8.0, 8.0, 16.0);
}

static void test_hysteresis(void) {
    zs__loss_scaler s;
    zs__settings d;

    /* Not consecutive: a good step does not refill the hysteresis, so the
     * overflow after it halves. Window 3 keeps growth out of the way. */
    d = fp16_dynamic(4, 3, 2);
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "O", 0, 16.0);
    ZT_EQ_INT(zs__loss_scaler_hysteresis_left(&s), 1);
    EXPECT_SCALES(&s, "G", 1, 16.0);
    ZT_EQ_INT(zs__loss_scaler_hysteresis_left(&s), 1);
    EXPECT_SCALES(&s, "OO", 2, 8.0, 4.0);
    ZT_EQ_INT(zs__loss_scaler_hysteresis_left(&s), 1);

    /* Consecutive: the good step refills it to 2, so the next overflow is
     * absorbed again and only the one after it halves. */
    d.precision.consecutive_hysteresis = 1;
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "O", 0, 16.0);
    ZT_EQ_INT(zs__loss_scaler_hysteresis_left(&s), 1);
    EXPECT_SCALES(&s, "G", 1, 16.0);
    ZT_EQ_INT(zs__loss_scaler_hysteresis_left(&s), 2);
    EXPECT_SCALES(&s, "OO", 2, 16.0, 8.0);

    /* Not consecutive, but the scale grows: growth refills the hysteresis.
     * Window 1, start 16: O at iter 0 absorbed (h 2 -> 1); G at iter 1
     * (stable 0) keeps 16; G at iter 2 (stable 1) doubles to 32 and refills
     * h = 2; O absorbed; O halves. */
    d = fp16_dynamic(4, 1, 2);
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "OGG", 0, 16.0, 16.0, 32.0);
    ZT_EQ_INT(zs__loss_scaler_hysteresis_left(&s), 2);
    EXPECT_SCALES(&s, "OO", 3, 32.0, 16.0);

    /* Hysteresis 3: two overflows absorbed (3 -> 2 -> 1), then each halves
     * until something refills it. */
    d = fp16_dynamic(4, 1000, 3);
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "OOOOO", 0, 16.0, 16.0, 8.0, 4.0, 2.0);

    /* Hysteresis 1 halves on every overflow. */
    d = fp16_dynamic(4, 1000, 1);
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "OGO", 0, 8.0, 8.0, 4.0);
}

static void test_min_scale(void) {
    zs__loss_scaler s, before;
    zs__settings d;

    /* abort, hysteresis 1, start 4, min 1: steps 10 and 11 halve to 2 and 1;
     * the overflow of step 12 finds the scale at the minimum and fails. */
    d = fp16_dynamic(2, 1000, 1);
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "OO", 10, 2.0, 1.0);
    before = s;
    ZT_FAILS_WITH(zs__loss_scaler_update(&s, 1, 12), ZS_ERR_NUMERIC,
                  "step 12: gradients overflowed with the fp16 loss scale already at its minimum 1 "
                  "(precision.min_loss_scale); consecutive overflowing steps: 3; stopping because "
                  "precision.on_min_scale = \"abort\". Lower the learning rate, check the data");
    ZT_CHECK(strstr(zs_last_error(), "precision.dtype = \"bf16\"") != NULL);
    ZT_CHECK(strstr(zs_last_error(), "lower precision.min_loss_scale") != NULL);
    /* A failed update changes nothing. */
    ZT_CHECK(memcmp(&s, &before, sizeof s) == 0);
    ZT_CHECK(zs__loss_scaler_scale(&s) == 1.0);
    ZT_EQ_INT(zs__loss_scaler_consecutive_overflows(&s), 2);

    /* Hysteresis 2: O absorbed at 4, then 2, 1, and the 4th overflow fails. */
    d = fp16_dynamic(2, 1000, 2);
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "OOO", 0, 4.0, 2.0, 1.0);
    ZT_FAILS_WITH(zs__loss_scaler_update(&s, 1, 3), ZS_ERR_NUMERIC,
                  "step 3: gradients overflowed with the fp16 loss scale already at its minimum 1 "
                  "(precision.min_loss_scale); consecutive overflowing steps: 4");

    /* Starting at the minimum (2^0 = 1): hysteresis left means no failure
     * yet (DeepSpeed checks the minimum only when it would halve). */
    d = fp16_dynamic(0, 1000, 2);
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "O", 0, 1.0);
    ZT_FAILS_WITH(zs__loss_scaler_update(&s, 1, 1), ZS_ERR_NUMERIC, "step 1: gradients overflowed");

    /* A good step in between does not save a run at the minimum: the count in
     * the message restarts, the policy does not. */
    d = fp16_dynamic(1, 1000, 1);
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "OG", 0, 1.0, 1.0);
    ZT_FAILS_WITH(zs__loss_scaler_update(&s, 1, 2), ZS_ERR_NUMERIC,
                  "step 2: gradients overflowed with the fp16 loss scale already at its minimum 1 "
                  "(precision.min_loss_scale); consecutive overflowing steps: 1;");

    /* continue: the scale stays at the minimum and steps keep being skipped. */
    d = fp16_dynamic(2, 1000, 1);
    d.precision.on_min_scale = ZS_MIN_SCALE_CONTINUE;
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "OOOOO", 0, 2.0, 1.0, 1.0, 1.0, 1.0);
    ZT_EQ_INT(zs__loss_scaler_consecutive_overflows(&s), 5);
    /* Growth from the minimum works as anywhere: last overflow at iter 4,
     * window 1000, so the 1001st good step (iter 1005, stable 1000) doubles. */
    GOOD_STEPS_AT(&s, 1000, 1.0);
    EXPECT_SCALES(&s, "G", 1005, 2.0);

    /* A minimum that is not a power of two (allowed, as in DeepSpeed): the
     * scale is clamped to it, and growth doubles from there. Window 1, start
     * 16, min 3: 8, 4, max(2, 3) = 3; G at iter 3 (stable 0) keeps 3; G at
     * iter 4 (stable 1) doubles to 6. */
    d = fp16_dynamic(4, 1, 1);
    d.precision.min_loss_scale = 3.0;
    d.precision.on_min_scale = ZS_MIN_SCALE_CONTINUE;
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "OOOGG", 0, 8.0, 4.0, 3.0, 3.0, 6.0);

    /* A fractional minimum below 1. */
    d = fp16_dynamic(0, 1000, 1);
    d.precision.min_loss_scale = 0.25;
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "OO", 0, 0.5, 0.25);
    ZT_FAILS_WITH(zs__loss_scaler_update(&s, 1, 2), ZS_ERR_NUMERIC, "at its minimum 0.25 ");
}

static void test_max_consecutive_skips(void) {
    zs__loss_scaler s, before;
    zs__settings d;

    /* Dynamic, continue at the minimum, at most 3 skips in a row: three
     * overflows pass (2 -> 1, then stay), the 4th (step 103) fails. */
    d = fp16_dynamic(1, 1000, 1);
    d.precision.on_min_scale = ZS_MIN_SCALE_CONTINUE;
    d.precision.max_consecutive_skips = 3;
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "OOO", 100, 1.0, 1.0, 1.0);
    before = s;
    ZT_FAILS_WITH(zs__loss_scaler_update(&s, 1, 103), ZS_ERR_NUMERIC,
                  "step 103: 4 consecutive steps had non-finite gradients and were skipped, more "
                  "than precision.max_consecutive_skips = 3 (loss scale 1); training is not making "
                  "progress");
    ZT_CHECK(memcmp(&s, &before, sizeof s) == 0);
    /* A good step resets the count: three more overflows pass again. */
    EXPECT_SCALES(&s, "GOOO", 104, 1.0, 1.0, 1.0, 1.0);
    ZT_EQ_INT(zs__loss_scaler_consecutive_overflows(&s), 3);
    ZT_EQ_INT(zs__loss_scaler_overflows_total(&s), 6);

    /* Dynamic, far from the minimum: the bound applies while the scale is
     * still halving (1024 -> 512 -> 256 -> 128, then the 4th fails). */
    d = fp16_dynamic(10, 1000, 1);
    d.precision.max_consecutive_skips = 3;
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "OOO", 0, 512.0, 256.0, 128.0);
    ZT_FAILS_WITH(zs__loss_scaler_update(&s, 1, 3), ZS_ERR_NUMERIC,
                  "step 3: 4 consecutive steps had non-finite gradients and were skipped, more "
                  "than precision.max_consecutive_skips = 3 (loss scale 128)");
    ZT_CHECK(zs__loss_scaler_scale(&s) == 128.0);

    /* Static fp16 scale 1024, at most 2: the 3rd overflow in a row fails. */
    d = fp16_dynamic(16, 1000, 2);
    d.precision.loss_scale = 1024.0;
    d.precision.max_consecutive_skips = 2;
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "OO", 7, 1024.0, 1024.0);
    ZT_FAILS_WITH(zs__loss_scaler_update(&s, 1, 9), ZS_ERR_NUMERIC,
                  "step 9: 3 consecutive steps had non-finite gradients and were skipped, more "
                  "than precision.max_consecutive_skips = 2 (loss scale 1024)");
    EXPECT_SCALES(&s, "GOO", 10, 1024.0, 1024.0, 1024.0);

    /* bf16 with loss_scale = 0 (scale 1, overflow checking on). */
    d = fp16_dynamic(16, 1000, 2);
    d.precision.dtype = ZS_DTYPE_BF16;
    d.precision.max_consecutive_skips = 2;
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "OO", 0, 1.0, 1.0);
    ZT_FAILS_WITH(zs__loss_scaler_update(&s, 1, 2), ZS_ERR_NUMERIC,
                  "step 2: 3 consecutive steps had non-finite gradients");

    /* fp32, at most 1: the second overflow in a row fails. */
    d.precision.dtype = ZS_DTYPE_FP32;
    d.precision.max_consecutive_skips = 1;
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "OGO", 0, 1.0, 1.0, 1.0);
    ZT_FAILS_WITH(zs__loss_scaler_update(&s, 1, 3), ZS_ERR_NUMERIC,
                  "step 3: 2 consecutive steps had non-finite gradients");

    /* When both errors apply (abort at the minimum and too many skips), the
     * minimum's message, the more specific one, wins. */
    d = fp16_dynamic(1, 1000, 1);
    d.precision.max_consecutive_skips = 1;
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "O", 0, 1.0);
    ZT_FAILS_WITH(zs__loss_scaler_update(&s, 1, 1), ZS_ERR_NUMERIC, "already at its minimum 1");
}

static void test_static(void) {
    zs__loss_scaler s;
    zs__settings d;

    /* A static fp16 scale never changes, whatever the window and hysteresis. */
    d = fp16_dynamic(4, 1, 1);
    d.precision.loss_scale = 128.0;
    zs__loss_scaler_init(&s, &d);
    ZT_EQ_INT(zs__loss_scaler_is_dynamic(&s), 0);
    ZT_CHECK(zs__loss_scaler_scale(&s) == 128.0);
    EXPECT_SCALES(&s, "GGGGGOOGGG", 0, 128.0, 128.0, 128.0, 128.0, 128.0, 128.0, 128.0, 128.0,
                  128.0, 128.0);
    /* Any positive value is allowed for a static scale. */
    d.precision.loss_scale = 1000.0;
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "GOG", 0, 1000.0, 1000.0, 1000.0);

    /* bf16 and fp32 without a static scale: 1, never changing, whatever the
     * dynamic keys say. */
    static const zs_dtype unscaled[] = {ZS_DTYPE_BF16, ZS_DTYPE_FP32};
    for (size_t i = 0; i < 2; i++) {
        d = fp16_dynamic(7, 1, 1);
        d.precision.dtype = unscaled[i];
        zs__loss_scaler_init(&s, &d);
        ZT_EQ_INT(zs__loss_scaler_is_dynamic(&s), 0);
        EXPECT_SCALES(&s, "GGGOGG", 0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0);
    }
    /* bf16 with a static scale uses it. */
    d = fp16_dynamic(7, 1, 1);
    d.precision.dtype = ZS_DTYPE_BF16;
    d.precision.loss_scale = 8.0;
    zs__loss_scaler_init(&s, &d);
    EXPECT_SCALES(&s, "GOG", 0, 8.0, 8.0, 8.0);
}

static void test_range(void) {
    zs__loss_scaler s;
    zs__settings d;

    /* 2^64, the largest initial scale, is exact; growth stops there. Window
     * 1 from 2^63: iter 0 (stable 0) keeps it, iter 1 doubles to 2^64, iter 2
     * would double again but stays at the cap. */
    d = fp16_dynamic(63, 1, 2);
    zs__loss_scaler_init(&s, &d);
    const double p63 = 9223372036854775808.0, p64 = 18446744073709551616.0;
    EXPECT_SCALES(&s, "GGG", 0, p63, p64, p64);
    ZT_CHECK(isfinite(zs__loss_scaler_scale(&s)));

    /* Over a long mixed run with a power-of-two minimum the scale stays a
     * power of two (frexp gives a mantissa of exactly 0.5) within [1, 2^64]. */
    d = fp16_dynamic(16, 3, 2);
    d.precision.on_min_scale = ZS_MIN_SCALE_CONTINUE;
    zs__loss_scaler_init(&s, &d);
    uint32_t x = 12345;
    int bad = 0;
    for (int i = 0; i < 20000; i++) {
        x = x * 1664525u + 1013904223u; /* a fixed pseudo-random O/G pattern */
        int overflow = (x >> 28) < 5;   /* about 5 in 16 overflow */
        if (zs__loss_scaler_update(&s, overflow, i) != ZS_OK) bad++;
        int exponent;
        double scale = zs__loss_scaler_scale(&s);
        if (frexp(scale, &exponent) != 0.5 || scale < 1.0 || scale > p64) bad++;
    }
    ZT_EQ_INT(bad, 0);
}

int main(void) {
    test_config_defaults();
    test_small_windows();
    test_hysteresis();
    test_min_scale();
    test_max_consecutive_skips();
    test_static();
    test_range();
    return zt_finish("test_loss_scaler");
}
