/* Tests of app.global_batch's split (examples/trainer/ex_batch.h): every
 * branch of ex_batch_derive (the largest micro-batch under the cap, no cap
 * needed, a prime per-rank count, a world that does not divide the global
 * batch, accumulation past the runtime's bound, bad arguments), and that
 * the split read the way the trainer reads its batches (ex_train_batch,
 * the data position advancing by world x micro-batch per micro-step)
 * consumes the same global samples in every optimizer step at every world
 * size. */
#include <stdlib.h>
#include <string.h>

#include "data_test_files.h"
#include "ex_batch.h"
#include "ex_data.h"

static void expect(int64_t g, int world, int cap, int b, int a) {
    ex_batch out = {0, 0};
    char err[512];
    GT_OK(ex_batch_derive(g, world, cap, &out, err, sizeof err), err);
    ZT_CHECK_MSG(out.micro_batch == b && out.accumulation == a,
                 "G = %lld, W = %d, cap %d: got B = %d, A = %d, expected B = %d, A = %d",
                 (long long)g, world, cap, out.micro_batch, out.accumulation, b, a);
}

static void test_derive(void) {
    expect(8, 4, 2, 2, 1);     /* the cap is met exactly: no accumulation */
    expect(8, 2, 2, 2, 2);     /* half the ranks: twice the micro-steps */
    expect(8, 1, 2, 2, 4);
    expect(8, 8, 2, 1, 1);     /* more ranks than the cap needs: a smaller micro-batch */
    expect(12, 2, 4, 3, 2);    /* the largest divisor of 6 under 4 is 3 */
    expect(12, 1, 5, 4, 3);    /* of 12 under 5: 4 */
    expect(16, 2, 100, 8, 1);  /* a cap above the per-rank count */
    expect(14, 2, 3, 1, 7);    /* 7 is prime: micro-batch 1 */
    expect(65536, 1, 1, 1, 65536); /* accumulation at the runtime's bound */
}

static void test_refusals(void) {
    ex_batch out = {0, 0};
    char err[512];
    GT_FAILS_WITH(ex_batch_derive(8, 3, 4, &out, err, sizeof err), err,
                  "app.global_batch = 8", "over 3 ranks", "run on 1, 2, 4 or 8 ranks",
                  "a multiple of 3 (e.g. 6 or 9)");
    GT_FAILS_WITH(ex_batch_derive(2, 4, 4, &out, err, sizeof err), err,
                  "over 4 ranks", "run on 1 or 2 ranks", "e.g. 4 or 8");
    GT_FAILS_WITH(ex_batch_derive(65537 * 2, 1, 1, &out, err, sizeof err), err,
                  "app.batch_size = 1", "131074 micro-steps", "gradient_accumulation_steps",
                  "raise app.batch_size");
    GT_FAILS_WITH(ex_batch_derive(0, 1, 1, &out, err, sizeof err), err, "bad arguments");
    GT_FAILS_WITH(ex_batch_derive(8, 0, 1, &out, err, sizeof err), err, "world size 0");
    GT_FAILS_WITH(ex_batch_derive(8, 1, 0, &out, err, sizeof err), err, "app.batch_size = 0");
    GT_FAILS_WITH(ex_batch_derive(8, 1, 1, NULL, err, sizeof err), err, "bad arguments");
    ZT_EQ_INT(out.micro_batch, 0); /* untouched by the refusals */
}

enum { N_TOKENS = 2000, T = 5 };

/* The samples (by window) one optimizer step of the trainer reads at world
 * W: A micro-steps, each giving rank r rows pos + r B + b, then pos += W B.
 * Sorted, so that the split's order does not matter; returns the new pos. */
static int64_t step_windows(ex_view v, int64_t pos, int W, ex_batch s, int64_t *out) {
    char err[EX_ERR_CAP];
    int32_t in[64 * T], tg[64 * T];
    int n = 0;
    for (int m = 0; m < s.accumulation; m++) {
        for (int r = 0; r < W; r++) {
            GT_OK(ex_train_batch(v, T, 7, pos, r, s.micro_batch, in, tg, err, sizeof err), err);
            for (int b = 0; b < s.micro_batch; b++) out[n++] = in[b * T] / T;
        }
        pos += (int64_t)W * s.micro_batch;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            int64_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return pos;
}

static void test_same_samples_at_every_world_size(void) {
    char err[EX_ERR_CAP];
    ex_tokens *ts = gt_counting_stream("count.bin", N_TOKENS);
    ex_view v = ex_view_all(ts);
    enum { G = 24, CAP = 4, STEPS = 30 };
    const int worlds[] = {1, 2, 3, 4, 6, 8, 12, 24};
    int64_t ref[G], got[G];
    int64_t pos_ref = 0;
    for (int step = 0; step < STEPS; step++) {
        ex_batch s1;
        GT_OK(ex_batch_derive(G, 1, CAP, &s1, err, sizeof err), err);
        const int64_t start = pos_ref;
        pos_ref = step_windows(v, start, 1, s1, ref);
        ZT_EQ_INT(pos_ref - start, G);
        for (size_t k = 1; k < sizeof worlds / sizeof worlds[0]; k++) {
            ex_batch s;
            GT_OK(ex_batch_derive(G, worlds[k], CAP, &s, err, sizeof err), err);
            const int64_t end = step_windows(v, start, worlds[k], s, got);
            ZT_CHECK_MSG(end == pos_ref, "world %d: the data position advanced to %lld, at "
                         "world 1 to %lld", worlds[k], (long long)end, (long long)pos_ref);
            ZT_CHECK_MSG(memcmp(ref, got, sizeof ref) == 0,
                         "step %d: world %d (B = %d, A = %d) read other samples than world 1 "
                         "(first %lld vs %lld)", step, worlds[k], s.micro_batch, s.accumulation,
                         (long long)got[0], (long long)ref[0]);
        }
    }
    ex_tokens_destroy(ts);
}

int main(void) {
    test_derive();
    test_refusals();
    test_same_samples_at_every_world_size();
    return zt_finish("test_batch");
}
