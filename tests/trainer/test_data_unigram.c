/* Tests of the unigram baseline (ex_unigram_baseline in
 * examples/trainer/ex_data.h) against values worked out by hand for small
 * streams, and its errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ex_data.h"
#include "data_test_files.h"

#define EXPECT_NEAR(got, want)                                                            \
    ZT_CHECK_MSG(fabs((got) - (want)) <= 1e-12 * (1.0 + fabs(want)),                     \
                 "%s = %.17g, by hand %s = %.17g", #got, (double)(got), #want, (double)(want))

static void test_text_by_hand(void) {
    char p[2048], err[EX_ERR_CAP];
    /* train = "aaabbc", val = "abd" (one stream, two views). */
    gt_write("uni.txt", "aaabbcabd", 9);
    ex_tokens *ts = NULL;
    GT_OK(ex_tokens_open(gt_path(p, sizeof p, "uni.txt"), &ts, err, sizeof err), err);
    ZT_REQUIRE(ts != NULL);
    ex_view train, val;
    GT_OK(ex_view_range(ts, 0, 6, &train, err, sizeof err), err);
    GT_OK(ex_view_range(ts, 6, 9, &val, err, sizeof err), err);
    ex_unigram u;
    memset(&u, 0, sizeof u);
    GT_OK(ex_unigram_baseline(train, val, 256, &u, err, sizeof err), err);
    /* Training counts a: 3, b: 2, c: 1 of n = 6, so
     *   H = -(1/2 ln 1/2 + 1/3 ln 1/3 + 1/6 ln 1/6)
     *     = 1/2 ln 2 + 1/3 ln 3 + 1/6 ln 6 = 1.0114042647073518...
     * With add-one smoothing over V = 256 the validation tokens cost
     *   a: -ln(4/262), b: -ln(3/262), d (unseen): -ln(1/262)
     * so the cross-entropy is ln 262 - (ln 4 + ln 3) / 3 = 4.740041...  */
    double h = 0.5 * log(2.0) + log(3.0) / 3.0 + log(6.0) / 6.0;
    double xent = log(262.0) - (log(4.0) + log(3.0)) / 3.0;
    EXPECT_NEAR(u.train_entropy, h);
    EXPECT_NEAR(u.train_entropy, 1.0114042647073518);
    EXPECT_NEAR(u.val_cross_entropy, xent);
    ZT_EQ_INT(u.train_tokens, 6);
    ZT_EQ_INT(u.val_tokens, 3);
    ZT_EQ_INT(u.vocab_size, 256);
    ZT_EQ_INT(u.train_distinct, 3);
    printf("train \"aaabbc\": entropy %.6f nats; val \"abd\": cross-entropy %.6f nats\n",
           u.train_entropy, u.val_cross_entropy);

    /* One symbol: entropy 0; validation on the training view itself with a
     * vocabulary of 98 ('a' = 97 is the largest id): q(a) = (3 + 1) / (3 + 98). */
    ex_view aaa;
    GT_OK(ex_view_range(ts, 0, 3, &aaa, err, sizeof err), err);
    GT_OK(ex_unigram_baseline(aaa, aaa, 98, &u, err, sizeof err), err);
    EXPECT_NEAR(u.train_entropy, 0.0);
    EXPECT_NEAR(u.val_cross_entropy, -log(4.0 / 101.0));

    /* No validation tokens: NAN. */
    ex_view none;
    GT_OK(ex_view_range(ts, 9, 9, &none, err, sizeof err), err);
    GT_OK(ex_unigram_baseline(train, none, 256, &u, err, sizeof err), err);
    ZT_CHECK_MSG(isnan(u.val_cross_entropy), "empty validation gave %g", u.val_cross_entropy);
    ZT_EQ_INT(u.val_tokens, 0);

    /* Errors: tokens outside the vocabulary ('d' = 100 in validation, 'c' =
     * 99 in training), an empty training view, a bad vocab. */
    GT_FAILS_WITH(ex_unigram_baseline(train, val, 100, &u, err, sizeof err), err,
                  "uni.txt", "token id 100 at token 8", "validation", "vocabulary of 100");
    GT_FAILS_WITH(ex_unigram_baseline(train, val, 99, &u, err, sizeof err), err,
                  "token id 99 at token 5", "training");
    GT_FAILS_WITH(ex_unigram_baseline(none, val, 256, &u, err, sizeof err), err,
                  "training view is empty");
    GT_FAILS_WITH(ex_unigram_baseline(train, val, 0, &u, err, sizeof err), err,
                  "vocab_size = 0");
    ex_tokens_destroy(ts);
}

static void test_shards_by_hand(void) {
    char p[2048], err[EX_ERR_CAP];
    /* Two shards: train is the first ([5, 5, 7, 1000]), val the second
     * ([7, 3]); V = 1001. Training p = (1/2, 1/4, 1/4):
     *   H = 1/2 ln 2 + 2 (1/4 ln 4) = 3/2 ln 2
     * q(7) = 2 / 1005, q(3) = 1 / 1005:
     *   cross-entropy = ln 1005 - ln(2) / 2 */
    const uint16_t a[4] = {5, 5, 7, 1000}, b[2] = {7, 3};
    gt_write_shard("uni_0.bin", 20240520, 1, 4, a, 4);
    gt_write_shard("uni_1.bin", 20240520, 1, 2, b, 2);
    ex_tokens *ts = NULL;
    GT_OK(ex_tokens_open(gt_path(p, sizeof p, "uni_*.bin"), &ts, err, sizeof err), err);
    ZT_REQUIRE(ts != NULL);
    ex_view train, val;
    GT_OK(ex_view_range(ts, 0, 4, &train, err, sizeof err), err);
    GT_OK(ex_view_range(ts, 4, 6, &val, err, sizeof err), err);
    ex_unigram u;
    GT_OK(ex_unigram_baseline(train, val, 1001, &u, err, sizeof err), err);
    EXPECT_NEAR(u.train_entropy, 1.5 * log(2.0));
    EXPECT_NEAR(u.val_cross_entropy, log(1005.0) - 0.5 * log(2.0));
    ZT_EQ_INT(u.train_distinct, 3);
    /* The error names the shard and the position in it. */
    GT_FAILS_WITH(ex_unigram_baseline(train, val, 1000, &u, err, sizeof err), err, "uni_0.bin",
                  "token id 1000 at token 3 of the file");
    ex_tokens_destroy(ts);
}

int main(void) {
    test_text_by_hand();
    test_shards_by_hand();
    return zt_finish("test_data_unigram");
}
