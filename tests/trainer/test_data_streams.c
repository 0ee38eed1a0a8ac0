/* Tests of the GPT-2 example's token streams (examples/trainer/ex_data.h):
 * raw text, llm.c shards (one file and a multi-shard glob read as one
 * stream), the errors of bad shards and patterns (checked by substring),
 * views, the train/validation split and the validation samples. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ex_data.h"
#include "data_test_files.h"

static const uint32_t MAGIC = 20240520;

static void test_text(void) {
    char p[2048], err[EX_ERR_CAP];
    const char text[] = "hello, world\n\x01\xff";
    gt_write("hello.txt", text, sizeof text - 1);
    ex_tokens *ts = NULL;
    GT_OK(ex_tokens_open(gt_path(p, sizeof p, "hello.txt"), &ts, err, sizeof err), err);
    ZT_REQUIRE(ts != NULL);
    ZT_EQ_INT(ex_tokens_count(ts), 15);
    ZT_EQ_INT(ex_tokens_is_text(ts), 1);
    ZT_EQ_INT(ex_tokens_num_files(ts), 1);
    ZT_CHECK_MSG(strcmp(ex_tokens_file_path(ts, 0), p) == 0, "file 0 is %s, expected %s",
                 ex_tokens_file_path(ts, 0), p);
    ZT_CHECK(ex_tokens_file_path(ts, 1) == NULL);
    ZT_EQ_INT(ex_tokens_at(ts, 0), 'h');
    ZT_EQ_INT(ex_tokens_at(ts, 12), '\n');
    ZT_EQ_INT(ex_tokens_at(ts, 13), 1);
    ZT_EQ_INT(ex_tokens_at(ts, 14), 255); /* bytes are unsigned */
    ZT_EQ_INT(ex_tokens_at(ts, 15), -1);
    ZT_EQ_INT(ex_tokens_at(ts, -1), -1);
    ZT_EQ_INT(ex_tokens_max_token(ts), 255);
    ZT_EQ_INT(ex_tokens_max_token(ts), 255); /* cached */
    int32_t got[5];
    GT_OK(ex_tokens_read(ts, 7, 5, got, err, sizeof err), err);
    ZT_CHECK_MSG(got[0] == 'w' && got[4] == 'd', "tokens 7..11 start %d end %d", got[0], got[4]);
    GT_FAILS_WITH(ex_tokens_read(ts, 12, 4, got, err, sizeof err), err, "[12, 12 + 4)",
                  "15 tokens", "hello.txt");
    ex_tokens_destroy(ts);

    /* A path that does not end in .bin is text, whatever it holds. */
    gt_write("looks_like_a_shard.bin.txt", "\x58\x2b\x35\x01", 4);
    GT_OK(ex_tokens_open(gt_path(p, sizeof p, "looks_like_a_shard.bin.txt"), &ts, err, sizeof err),
          err);
    ZT_CHECK(ts && ex_tokens_is_text(ts) && ex_tokens_count(ts) == 4);
    ex_tokens_destroy(ts);

    gt_write("empty.txt", "", 0);
    GT_FAILS_WITH(ex_tokens_open(gt_path(p, sizeof p, "empty.txt"), &ts, err, sizeof err), err,
                  "empty.txt is empty");
    ZT_CHECK(ts == NULL);
    GT_FAILS_WITH(ex_tokens_open(gt_path(p, sizeof p, "missing.txt"), &ts, err, sizeof err), err,
                  "cannot open", "missing.txt", "No such file");
    GT_FAILS_WITH(ex_tokens_open(gt_dir(), &ts, err, sizeof err), err, "not a regular file");
}

static void test_shards(void) {
    char p[2048], err[EX_ERR_CAP];
    /* Three shards; the middle one holds no tokens. Little-endian uint16
     * with both bytes in use (0x1234, 65535) checks the decoding. */
    const uint16_t a[5] = {50256, 1, 2, 0x1234, 65535};
    const uint16_t c[4] = {7, 8, 9, 10};
    gt_write_shard("train_000.bin", (int32_t)MAGIC, 1, 5, a, 5);
    gt_write_shard("train_001.bin", (int32_t)MAGIC, 1, 0, NULL, 0);
    gt_write_shard("train_002.bin", (int32_t)MAGIC, 1, 4, c, 4);
    gt_write("train_notes.txt", "not a shard", 11); /* not matched by *.bin */
    ex_tokens *ts = NULL;
    GT_OK(ex_tokens_open(gt_path(p, sizeof p, "train_*.bin"), &ts, err, sizeof err), err);
    ZT_REQUIRE(ts != NULL);
    ZT_EQ_INT(ex_tokens_is_text(ts), 0);
    ZT_EQ_INT(ex_tokens_num_files(ts), 3);
    ZT_EQ_INT(ex_tokens_count(ts), 9);
    const char *f2 = ex_tokens_file_path(ts, 2);
    ZT_CHECK_MSG(f2 && strstr(f2, "train_002.bin"), "file 2 is %s, expected train_002.bin (sorted)",
                 f2 ? f2 : "(null)");
    const int want[9] = {50256, 1, 2, 0x1234, 65535, 7, 8, 9, 10};
    for (int i = 0; i < 9; i++) ZT_EQ_INT(ex_tokens_at(ts, i), want[i]);
    int32_t got[9];
    /* Every range, across the shard boundaries (and the empty shard). */
    for (int first = 0; first <= 9; first++)
        for (int n = 0; first + n <= 9; n++) {
            memset(got, 0xff, sizeof got);
            GT_OK(ex_tokens_read(ts, first, n, got, err, sizeof err), err);
            for (int k = 0; k < n; k++)
                ZT_CHECK_MSG(got[k] == want[first + k], "read(%d, %d)[%d] = %d, expected %d",
                             first, n, k, got[k], want[first + k]);
        }
    ZT_EQ_INT(ex_tokens_max_token(ts), 65535);
    ex_tokens_destroy(ts);

    /* One shard named without a pattern. */
    GT_OK(ex_tokens_open(gt_path(p, sizeof p, "train_002.bin"), &ts, err, sizeof err), err);
    ZT_CHECK(ts && ex_tokens_count(ts) == 4 && ex_tokens_at(ts, 3) == 10);
    ex_tokens_destroy(ts);
}

/* llm.c's Llama 3 format: uint32 tokens (magic 20240801, version 7), ids
 * above 65535 decoded whole, across shards; a stream keeps one format. */
static void test_shards32(void) {
    char p[2048], err[EX_ERR_CAP];
    const uint32_t a[4] = {128000, 1, 0x12345678, 70000};
    const uint32_t b[3] = {65536, 2, 128255};
    gt_write_shard32("llama_000.bin", 4, a, 4);
    gt_write_shard32("llama_001.bin", 3, b, 3);
    ex_tokens *ts = NULL;
    GT_OK(ex_tokens_open(gt_path(p, sizeof p, "llama_*.bin"), &ts, err, sizeof err), err);
    ZT_REQUIRE(ts != NULL);
    ZT_EQ_INT(ex_tokens_is_text(ts), 0);
    ZT_EQ_INT(ex_tokens_count(ts), 7);
    const int want[7] = {128000, 1, 0x12345678, 70000, 65536, 2, 128255};
    int32_t got[7];
    GT_OK(ex_tokens_read(ts, 0, 7, got, err, sizeof err), err);
    for (int i = 0; i < 7; i++) {
        ZT_EQ_INT(ex_tokens_at(ts, i), want[i]);
        ZT_EQ_INT(got[i], want[i]);
    }
    ZT_EQ_INT(ex_tokens_max_token(ts), 0x12345678);
    ex_tokens_destroy(ts);
    /* An id beyond int32 reads as INT32_MAX, which every vocabulary
     * refuses, never as a negative id. */
    const uint32_t huge[2] = {5, 0xfffffff0u};
    gt_write_shard32("huge.bin", 2, huge, 2);
    GT_OK(ex_tokens_open(gt_path(p, sizeof p, "huge.bin"), &ts, err, sizeof err), err);
    ZT_CHECK(ts && ex_tokens_at(ts, 1) == INT32_MAX && ex_tokens_max_token(ts) == INT32_MAX);
    ex_tokens_destroy(ts);
    /* Formats mixed in one stream; a wrong version for the magic; truncation
     * counted in 4-byte tokens. */
    const uint16_t narrow[3] = {1, 2, 3};
    gt_write_shard("mixfmt_0.bin", (int32_t)MAGIC, 1, 3, narrow, 3);
    gt_write_shard32("mixfmt_1.bin", 3, a, 3);
    GT_FAILS_WITH(ex_tokens_open(gt_path(p, sizeof p, "mixfmt_*.bin"), &ts, err, sizeof err), err,
                  "mixfmt_1.bin", "uint32 tokens", "uint16 tokens", "one format");
    gt_write_shard("v1_wide.bin", 20240801, 1, 3, narrow, 3);
    GT_FAILS_WITH(ex_tokens_open(gt_path(p, sizeof p, "v1_wide.bin"), &ts, err, sizeof err), err,
                  "v1_wide.bin", "unsupported version 1", "version 7 (uint32 tokens)");
    gt_write_shard32("short32.bin", 5, a, 4);
    GT_FAILS_WITH(ex_tokens_open(gt_path(p, sizeof p, "short32.bin"), &ts, err, sizeof err), err,
                  "short32.bin", "truncated", "declares 5 tokens", "1044 bytes",
                  "the file has 1040");
    ZT_CHECK(ts == NULL);
}

static void test_shard_errors(void) {
    char p[2048], err[EX_ERR_CAP];
    ex_tokens *ts = NULL;
    const uint16_t tok[6] = {1, 2, 3, 4, 5, 6};

    gt_write_shard("bad_magic.bin", 20240326, 1, 6, tok, 6);
    GT_FAILS_WITH(ex_tokens_open(gt_path(p, sizeof p, "bad_magic.bin"), &ts, err, sizeof err),
                  err, "bad_magic.bin", "bad magic 20240326 at byte offset 0", "model file");
    ZT_CHECK(ts == NULL);
    gt_write_shard("bad_version.bin", (int32_t)MAGIC, 2, 6, tok, 6);
    GT_FAILS_WITH(ex_tokens_open(gt_path(p, sizeof p, "bad_version.bin"), &ts, err, sizeof err),
                  err, "bad_version.bin", "unsupported version 2 at byte offset 4");
    /* Truncated: the header declares 6 tokens, the file holds 4. */
    gt_write_shard("truncated.bin", (int32_t)MAGIC, 1, 6, tok, 4);
    GT_FAILS_WITH(ex_tokens_open(gt_path(p, sizeof p, "truncated.bin"), &ts, err, sizeof err),
                  err, "truncated.bin", "truncated", "declares 6 tokens", "1036 bytes",
                  "the file has 1032");
    /* The header declares fewer tokens than the file holds. */
    gt_write_shard("too_long.bin", (int32_t)MAGIC, 1, 3, tok, 6);
    GT_FAILS_WITH(ex_tokens_open(gt_path(p, sizeof p, "too_long.bin"), &ts, err, sizeof err),
                  err, "too_long.bin", "declares 3 tokens", "byte offset 1030",
                  "6 unexpected trailing bytes");
    gt_write_shard("negative.bin", (int32_t)MAGIC, 1, -4, tok, 0);
    GT_FAILS_WITH(ex_tokens_open(gt_path(p, sizeof p, "negative.bin"), &ts, err, sizeof err),
                  err, "negative.bin", "negative token count -4 at byte offset 8");
    gt_write("short_header.bin", "\x58\x2b\x35\x01", 4);
    GT_FAILS_WITH(ex_tokens_open(gt_path(p, sizeof p, "short_header.bin"), &ts, err, sizeof err),
                  err, "short_header.bin", "truncated header", "4 bytes");
    GT_FAILS_WITH(ex_tokens_open(gt_path(p, sizeof p, "absent.bin"), &ts, err, sizeof err), err,
                  "cannot open", "absent.bin");

    /* Patterns: nothing matches; one bad file among good ones; no tokens. */
    GT_FAILS_WITH(ex_tokens_open(gt_path(p, sizeof p, "nothing_*.bin"), &ts, err, sizeof err),
                  err, "no file matches", p);
    gt_write_shard("mixed_0.bin", (int32_t)MAGIC, 1, 6, tok, 6);
    gt_write_shard("mixed_1.bin", (int32_t)MAGIC, 1, 7, tok, 6);
    gt_write_shard("mixed_2.bin", (int32_t)MAGIC, 1, 6, tok, 6);
    GT_FAILS_WITH(ex_tokens_open(gt_path(p, sizeof p, "mixed_?.bin"), &ts, err, sizeof err), err,
                  "mixed_1.bin", "truncated");
    ZT_CHECK(ts == NULL);
    gt_write_shard("void_0.bin", (int32_t)MAGIC, 1, 0, NULL, 0);
    gt_write_shard("void_1.bin", (int32_t)MAGIC, 1, 0, NULL, 0);
    GT_FAILS_WITH(ex_tokens_open(gt_path(p, sizeof p, "void_[01].bin"), &ts, err, sizeof err),
                  err, "void_[01].bin", "(2 files) hold no tokens");
    GT_FAILS_WITH(ex_tokens_open("", &ts, err, sizeof err), err, "empty path");
    /* A NULL or tiny err buffer is allowed. */
    ZT_EQ_INT(ex_tokens_open(gt_path(p, sizeof p, "bad_magic.bin"), &ts, NULL, 0), -1);
    char small[8];
    ZT_EQ_INT(ex_tokens_open(gt_path(p, sizeof p, "bad_magic.bin"), &ts, small, sizeof small),
              -1);
    ZT_EQ_INT(strlen(small), 7);
}

/* A text stream of n bytes, byte i = 'a' + i % 26. */
static ex_tokens *open_alphabet(int64_t n) {
    char *buf = malloc((size_t)n);
    ZT_REQUIRE(buf != NULL);
    for (int64_t i = 0; i < n; i++) buf[i] = (char)('a' + i % 26);
    gt_write("alphabet.txt", buf, (size_t)n);
    free(buf);
    char p[2048], err[EX_ERR_CAP];
    ex_tokens *ts = NULL;
    GT_OK(ex_tokens_open(gt_path(p, sizeof p, "alphabet.txt"), &ts, err, sizeof err), err);
    ZT_REQUIRE(ts != NULL);
    return ts;
}

static void test_views_and_split(void) {
    char err[EX_ERR_CAP];
    ex_tokens *ts = open_alphabet(1000);
    ex_view all = ex_view_all(ts), v, train, val;
    ZT_EQ_INT(ex_view_length(all), 1000);
    GT_OK(ex_view_range(ts, 10, 20, &v, err, sizeof err), err);
    ZT_EQ_INT(ex_view_length(v), 10);
    ZT_EQ_INT(ex_view_num_windows(v, 3), 3); /* floor(9 / 3) */
    ZT_EQ_INT(ex_view_num_windows(v, 9), 1);
    ZT_EQ_INT(ex_view_num_windows(v, 10), 0);
    ZT_EQ_INT(ex_view_num_windows(v, 0), -1);
    GT_FAILS_WITH(ex_view_range(ts, 10, 1001, &v, err, sizeof err), err, "[10, 1001)",
                  "1000 tokens");
    GT_FAILS_WITH(ex_view_range(ts, 11, 10, &v, err, sizeof err), err, "[11, 10)");

    /* The documented case: N = 1000, T = 7, 5 %: n_val = 50, k = (999 - 50) / 7
     * = 135 training windows, train = [0, 946), val = [946, 1000). */
    GT_OK(ex_split(all, 7, 0.05, &train, &val, err, sizeof err), err);
    ZT_EQ_INT(train.begin, 0);
    ZT_EQ_INT(train.end, 946);
    ZT_EQ_INT(val.begin, 946);
    ZT_EQ_INT(val.end, 1000);
    ZT_EQ_INT(ex_view_num_windows(train, 7), 135);
    ZT_EQ_INT(ex_view_num_windows(val, 7), 7);

    /* The rule's invariants for many sizes, on a view that does not start at
     * 0: train ends right after its last window, val follows it, holds at
     * least n_val tokens and less than n_val + T. */
    ex_view sub;
    GT_OK(ex_view_range(ts, 13, 1000, &sub, err, sizeof err), err);
    const double fractions[] = {0.01, 0.05, 0.1, 0.25, 0.5};
    for (int T = 1; T <= 40; T += 3)
        for (int f = 0; f < 5; f++) {
            int64_t n = ex_view_length(sub);
            int64_t n_val = (int64_t)ceil(fractions[f] * (double)n);
            if (ex_split(sub, T, fractions[f], &train, &val, err, sizeof err) != 0) {
                ZT_CHECK_MSG(n - n_val < T + 1 || n_val < T + 1,
                             "T = %d, fraction %g: failed (%s) though both sides fit", T,
                             fractions[f], err);
                continue;
            }
            int64_t k = ex_view_num_windows(train, T);
            int ok = train.begin == 13 && train.end == 13 + k * T + 1 && val.begin == train.end &&
                     val.end == 1000 && ex_view_length(val) >= n_val &&
                     ex_view_length(val) < n_val + T && ex_view_num_windows(val, T) >= 1 && k >= 1;
            ZT_CHECK_MSG(ok, "T = %d, fraction %g: train [%lld, %lld) with %lld windows, val "
                         "[%lld, %lld), n_val %lld", T, fractions[f], (long long)train.begin,
                         (long long)train.end, (long long)k, (long long)val.begin,
                         (long long)val.end, (long long)n_val);
        }

    /* No validation: the whole view trains. */
    GT_OK(ex_split(all, 7, 0.0, &train, &val, err, sizeof err), err);
    ZT_CHECK(train.begin == 0 && train.end == 1000 && val.begin == 1000 && val.end == 1000);
    ZT_EQ_INT(ex_view_num_windows(val, 7), 0);

    /* Too short for either side, or a bad fraction. */
    GT_FAILS_WITH(ex_split(all, 600, 0.05, &train, &val, err, sizeof err), err,
                  "validation part", "fewer than one window of T + 1 = 601", "alphabet.txt");
    GT_FAILS_WITH(ex_split(all, 100, 0.95, &train, &val, err, sizeof err), err,
                  "too few remain for one training window of T + 1 = 101");
    GT_FAILS_WITH(ex_split(all, 7, 1.0, &train, &val, err, sizeof err), err, "[0, 1)");
    GT_FAILS_WITH(ex_split(all, 7, -0.1, &train, &val, err, sizeof err), err, "[0, 1)");
    GT_FAILS_WITH(ex_split(all, 7, NAN, &train, &val, err, sizeof err), err, "[0, 1)");
    GT_FAILS_WITH(ex_split(all, 0, 0.05, &train, &val, err, sizeof err), err, "T = 0");
    GT_FAILS_WITH(ex_split(all, 1000, 0.0, &train, &val, err, sizeof err), err,
                  "too few for one training window");

    /* Validation samples are the windows of the view, in order. */
    GT_OK(ex_split(all, 7, 0.05, &train, &val, err, sizeof err), err);
    for (int64_t j = 0; j < ex_view_num_windows(val, 7); j++) {
        int32_t in[7], tg[7];
        GT_OK(ex_val_sample(val, 7, j, in, tg, err, sizeof err), err);
        int ok = 1;
        for (int t = 0; t < 7; t++) {
            int64_t i = 946 + j * 7 + t;
            ok &= in[t] == 'a' + i % 26 && tg[t] == 'a' + (i + 1) % 26;
        }
        ZT_CHECK_MSG(ok, "validation sample %lld is not window %lld of the view (starts %c)",
                     (long long)j, (long long)j, (char)in[0]);
    }
    int32_t in[7], tg[7];
    GT_FAILS_WITH(ex_val_sample(val, 7, 7, in, tg, err, sizeof err), err,
                  "validation sample 7 does not exist", "has 7 windows");
    GT_FAILS_WITH(ex_val_sample(val, 7, -1, in, tg, err, sizeof err), err, "sample -1");
    ex_tokens_destroy(ts);
}

int main(void) {
    test_text();
    test_shards();
    test_shards32();
    test_shard_errors();
    test_views_and_split();
    return zt_finish("test_data_streams");
}
