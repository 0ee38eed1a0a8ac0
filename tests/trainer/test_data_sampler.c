/* Tests of the GPT-2 example's batch sampling (examples/trainer/ex_data.h):
 * the per-epoch order is a permutation for many window counts, differs
 * between epochs and seeds and repeats for the same seed; the samples of a
 * micro-step do not depend on how the global batch is split over ranks;
 * ranks see disjoint windows; and resuming from a saved pos continues with
 * exactly the same samples. The stream is a shard whose token i is i, so a
 * row's first input names its window. */
#include <stdlib.h>
#include <string.h>

#include "ex_data.h"
#include "data_test_files.h"

/* ----------------------------------------------------------- permutation */

/* Fills order[i] = perm(seed, epoch, i) for i in [0, K); checks that it is a
 * permutation of [0, K). seen: [K] scratch. Returns 1 when it is. */
static int check_permutation(uint64_t seed, uint64_t epoch, int64_t K, int64_t *order,
                             unsigned char *seen) {
    memset(seen, 0, (size_t)K);
    for (int64_t i = 0; i < K; i++) {
        int64_t p = ex_perm_index(seed, epoch, K, i);
        order[i] = p;
        if (p < 0 || p >= K) {
            ZT_CHECK_MSG(0, "K = %lld, seed %llu, epoch %llu: perm(%lld) = %lld is outside [0, K)",
                         (long long)K, (unsigned long long)seed, (unsigned long long)epoch,
                         (long long)i, (long long)p);
            return 0;
        }
        if (seen[p]) {
            ZT_CHECK_MSG(0, "K = %lld, seed %llu, epoch %llu: window %lld is hit twice (again at "
                         "i = %lld)", (long long)K, (unsigned long long)seed,
                         (unsigned long long)epoch, (long long)p, (long long)i);
            return 0;
        }
        seen[p] = 1;
    }
    return 1;
}

static void test_permutation(void) {
    /* 1, 2, 3, primes, powers of two and their neighbours, and a few others. */
    static const int64_t Ks[] = {1,    2,    3,    4,    5,    6,    7,    8,     9,     11,
                                 13,   15,   16,   17,   31,   32,   33,   63,    64,    65,
                                 97,   127,  128,  129,  255,  256,  257,  1000,  1021,  1023,
                                 1024, 1025, 4095, 4096, 4097, 8191, 65535, 65536, 65537, 100003};
    const int nK = (int)(sizeof Ks / sizeof Ks[0]);
    const int64_t maxK = 100003;
    int64_t *a = malloc(sizeof(int64_t) * (size_t)maxK);
    int64_t *b = malloc(sizeof(int64_t) * (size_t)maxK);
    unsigned char *seen = malloc((size_t)maxK);
    ZT_REQUIRE(a && b && seen);
    for (int k = 0; k < nK; k++) {
        int64_t K = Ks[k];
        int all_ok = 1;
        for (uint64_t seed = 0; seed < 3; seed++)
            for (uint64_t epoch = 0; epoch < 3; epoch++)
                all_ok &= check_permutation(seed * 977 + 1, epoch, K, a, seen);
        ZT_CHECK_MSG(all_ok, "K = %lld is not a permutation for every (seed, epoch)", (long long)K);
        if (K < 8) continue;
        /* Epochs and seeds give different orders, neither is the identity,
         * and the same (seed, epoch) gives the same order. With K >= 8 there
         * are >= 40320 orders, so a clash would point at a broken key. */
        check_permutation(42, 0, K, a, seen);
        check_permutation(42, 1, K, b, seen);
        ZT_CHECK_MSG(memcmp(a, b, sizeof(int64_t) * (size_t)K) != 0,
                     "K = %lld: epochs 0 and 1 have the same order", (long long)K);
        check_permutation(43, 0, K, b, seen);
        ZT_CHECK_MSG(memcmp(a, b, sizeof(int64_t) * (size_t)K) != 0,
                     "K = %lld: seeds 42 and 43 have the same order", (long long)K);
        int64_t fixed = 0;
        for (int64_t i = 0; i < K; i++) fixed += a[i] == i;
        ZT_CHECK_MSG(fixed < K / 2 + 2, "K = %lld: %lld of %lld windows stay in place (the order "
                     "is barely shuffled)", (long long)K, (long long)fixed, (long long)K);
        for (int64_t i = K - 1; i >= 0; i--) b[i] = ex_perm_index(42, 0, K, i);
        ZT_CHECK_MSG(memcmp(a, b, sizeof(int64_t) * (size_t)K) == 0,
                     "K = %lld: the same seed and epoch gave two orders", (long long)K);
    }
    /* Small K must still shuffle: both orders of 2 windows, and several of
     * the 6 orders of 3 windows, occur over 64 epochs. */
    int swapped = 0, orders3 = 0, seen3[3][3] = {{0}};
    for (uint64_t e = 0; e < 64; e++) {
        swapped += ex_perm_index(7, e, 2, 0) == 1;
        int p0 = (int)ex_perm_index(7, e, 3, 0), p1 = (int)ex_perm_index(7, e, 3, 1);
        if (!seen3[p0][p1]++) orders3++;
    }
    ZT_CHECK_MSG(swapped > 8 && swapped < 56, "K = 2: swapped in %d of 64 epochs", swapped);
    ZT_CHECK_MSG(orders3 >= 5, "K = 3: only %d of 6 orders in 64 epochs", orders3);
    /* Arguments outside the domain. */
    ZT_EQ_INT(ex_perm_index(1, 0, 0, 0), -1);
    ZT_EQ_INT(ex_perm_index(1, 0, 5, 5), -1);
    ZT_EQ_INT(ex_perm_index(1, 0, 5, -1), -1);
    ZT_EQ_INT(ex_perm_index(1, 0, 1, 0), 0);
    /* Sample g is window perm(g / K)(g % K). */
    ZT_EQ_INT(ex_sample_window(9, 10, 37), ex_perm_index(9, 3, 10, 7));
    ZT_EQ_INT(ex_sample_window(9, 10, -1), -1);
    free(a);
    free(b);
    free(seen);
}

/* ----------------------------------------------------- batches and ranks */

enum { N_TOKENS = 1000, T = 7, VIEW_BEGIN = 5 };

/* The stream: token i = i, so window w of a view starting at VIEW_BEGIN has
 * inputs VIEW_BEGIN + w T + t and targets one more. */
static ex_tokens *open_counting_stream(void) { return gt_counting_stream("count.bin", N_TOKENS); }

/* Checks that row b of a batch is a whole window and returns its index. */
static int64_t row_window(const int32_t *inputs, const int32_t *targets, int b) {
    const int32_t *in = inputs + b * T, *tg = targets + b * T;
    int64_t w = (in[0] - VIEW_BEGIN) / T;
    int ok = (in[0] - VIEW_BEGIN) % T == 0;
    for (int t = 0; t < T; t++) ok &= in[t] == in[0] + t && tg[t] == in[0] + t + 1;
    ZT_CHECK_MSG(ok, "row %d is not a window: inputs start %d, targets start %d", b, in[0], tg[0]);
    return w;
}

/* The micro-step at pos as W ranks of B rows each, concatenated in rank
 * order into inputs, targets: [W B][T]. */
static void step_as(ex_view v, uint64_t seed, int64_t pos, int W, int B, int32_t *inputs,
                    int32_t *targets) {
    char err[EX_ERR_CAP];
    for (int r = 0; r < W; r++)
        GT_OK(ex_train_batch(v, T, seed, pos, r, B, inputs + (size_t)r * B * T,
                               targets + (size_t)r * B * T, err, sizeof err),
              err);
}

static void test_world_size_invariance(ex_tokens *ts) {
    char err[EX_ERR_CAP];
    ex_view v;
    GT_OK(ex_view_range(ts, VIEW_BEGIN, N_TOKENS, &v, err, sizeof err), err);
    const int64_t K = ex_view_num_windows(v, T); /* (995 - 1) / 7 = 142 */
    ZT_EQ_INT(K, 142);
    const uint64_t seed = 1234;
    int32_t in1[4 * T], tg1[4 * T], in2[4 * T], tg2[4 * T], in4[4 * T], tg4[4 * T];
    /* 80 micro-steps of 4 samples cross two epoch boundaries (142 is not a
     * multiple of 4, so one step straddles each). */
    unsigned char *seen = calloc((size_t)K * 3, 1); /* [epoch][window] */
    ZT_REQUIRE(seen != NULL);
    int64_t pos = 0;
    for (int step = 0; step < 80; step++, pos += 4) {
        step_as(v, seed, pos, 1, 4, in1, tg1);
        step_as(v, seed, pos, 2, 2, in2, tg2);
        step_as(v, seed, pos, 4, 1, in4, tg4);
        int same2 = memcmp(in1, in2, sizeof in1) == 0 && memcmp(tg1, tg2, sizeof tg1) == 0;
        int same4 = memcmp(in1, in4, sizeof in1) == 0 && memcmp(tg1, tg4, sizeof tg1) == 0;
        ZT_CHECK_MSG(same2, "step %d: 2 ranks x B=2 start rows at %d %d %d %d, 1 rank x B=4 at "
                     "%d %d %d %d", step, in2[0], in2[T], in2[2 * T], in2[3 * T], in1[0],
                     in1[T], in1[2 * T], in1[3 * T]);
        ZT_CHECK_MSG(same4, "step %d: 4 ranks x B=1 start rows at %d %d %d %d, 1 rank x B=4 at "
                     "%d %d %d %d", step, in4[0], in4[T], in4[2 * T], in4[3 * T], in1[0],
                     in1[T], in1[2 * T], in1[3 * T]);
        for (int b = 0; b < 4; b++) {
            int64_t g = pos + b, epoch = g / K;
            int64_t w = row_window(in1, tg1, b);
            ZT_CHECK_MSG(w == ex_sample_window(seed, K, g), "sample %lld: window %lld, "
                         "expected %lld", (long long)g, (long long)w,
                         (long long)ex_sample_window(seed, K, g));
            /* Rows of all ranks together: each window once per epoch, so
             * ranks are disjoint within an epoch. */
            if (epoch < 2 || (epoch == 2 && g < 3 * K)) {
                ZT_CHECK_MSG(!seen[epoch * K + w], "epoch %lld: window %lld seen twice (sample "
                             "%lld, rank %d of 4)", (long long)epoch, (long long)w, (long long)g, b);
                seen[epoch * K + w] = 1;
            }
        }
    }
    /* Epochs 0 and 1 are complete by pos = 320 > 284: every window seen. */
    int64_t missing = 0;
    for (int64_t w = 0; w < 2 * K; w++) missing += !seen[w];
    ZT_EQ_INT(missing, 0);
    free(seen);
}

static void test_resume(ex_tokens *ts) {
    ex_view v = ex_view_all(ts);
    const uint64_t seed = 99;
    enum { STEPS = 12, SAVE_AT = 5, GB = 6 };
    int32_t ref_in[STEPS][GB * T], ref_tg[STEPS][GB * T];
    /* The first job: 3 ranks x B = 2, saving pos after SAVE_AT steps. */
    int64_t pos = 0, saved = -1;
    for (int s = 0; s < STEPS; s++) {
        if (s == SAVE_AT) saved = pos;
        step_as(v, seed, pos, 3, 2, ref_in[s], ref_tg[s]);
        pos += GB;
    }
    /* The resumed job, on 2 ranks x B = 3 (same global batch), from the saved
     * pos alone. */
    pos = saved;
    for (int s = SAVE_AT; s < STEPS; s++) {
        int32_t in[GB * T], tg[GB * T];
        step_as(v, seed, pos, 2, 3, in, tg);
        ZT_CHECK_MSG(memcmp(in, ref_in[s], sizeof in) == 0 && memcmp(tg, ref_tg[s], sizeof tg) == 0,
                     "resumed step %d starts rows at %d, the uninterrupted job at %d", s, in[0],
                     ref_in[s][0]);
        pos += GB;
    }
    /* A different seed gives different batches. */
    int32_t in[GB * T], tg[GB * T];
    step_as(v, seed + 1, 0, 3, 2, in, tg);
    ZT_CHECK_MSG(memcmp(in, ref_in[0], sizeof in) != 0, "seeds %llu and %llu gave the same batch",
                 (unsigned long long)seed, (unsigned long long)seed + 1);
}

static void test_errors(ex_tokens *ts) {
    char err[EX_ERR_CAP];
    int32_t in[4 * T], tg[4 * T];
    ex_view v = ex_view_all(ts), tiny;
    GT_OK(ex_view_range(ts, 10, 10 + T, &tiny, err, sizeof err), err);
    GT_FAILS_WITH(ex_train_batch(tiny, T, 1, 0, 0, 1, in, tg, err, sizeof err), err,
                  "count.bin", "7 tokens", "too few for one window of T + 1 = 8");
    GT_FAILS_WITH(ex_train_batch(v, T, 1, -1, 0, 1, in, tg, err, sizeof err), err, "pos = -1");
    GT_FAILS_WITH(ex_train_batch(v, T, 1, 0, -2, 1, in, tg, err, sizeof err), err, "rank = -2");
    GT_FAILS_WITH(ex_train_batch(v, T, 1, 0, 0, 0, in, tg, err, sizeof err), err, "B = 0");
    GT_FAILS_WITH(ex_train_batch(v, 0, 1, 0, 0, 1, in, tg, err, sizeof err), err, "T = 0");
    GT_FAILS_WITH(ex_train_batch(v, T, 1, INT64_MAX - 2, 1, 4, in, tg, err, sizeof err), err,
                  "overflow");
    /* The last sample that fits is fine. */
    GT_OK(ex_train_batch(v, T, 1, INT64_MAX - 4, 0, 4, in, tg, err, sizeof err), err);
}

int main(void) {
    test_permutation();
    ex_tokens *ts = open_counting_stream();
    test_world_size_invariance(ts);
    test_resume(ts);
    test_errors(ts);
    ex_tokens_destroy(ts);
    ex_tokens_destroy(NULL);
    return zt_finish("test_data_sampler");
}
