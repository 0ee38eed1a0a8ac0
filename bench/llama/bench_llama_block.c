/*
 * bench_llama_block — one Llama block against one GPT-2 block of the same
 * training FLOPs per token, forward + backward on the CPU backends, in one
 * run (issue 27: the two should be within 1.2x; both are GEMM-bound, so a
 * larger gap means a slow new operation: RMSNorm, RoPE, SwiGLU, the
 * grouped-query attention's bookkeeping).
 *
 *   bench_llama_block [--embd C] [--heads NH] [--kv-heads NKV] [--seq T]
 *                     [--batch B] [--steps N]
 *
 * Defaults: C 256, 4 heads of 64, T 256, B 4 (the demo's sizes). GPT-2's
 * block has 12 C^2 weights (qkv 3C^2, proj C^2, MLP 8C^2); the Llama block
 * (head size C / NH, NKV K/V heads, no biases) gets the intermediate size F
 * that gives it the same, C (NH + 2 NKV) hd + NH hd C + 3 C F = 12 C^2
 * (rounded down to an integer; the FLOPs of both are printed). Attention's
 * 12 NH hd T per token is the same for both (NH hd = C).
 *
 * The two steps alternate (Llama, GPT-2, Llama, ...) after a warm-up, so
 * that a neighbour's load on a shared machine falls on both; each side's
 * median step time is reported, and ratio = Llama / GPT-2 time per FLOP.
 * Single-threaded numbers: OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../lib/stats.h"
#include "gpt2_backend.h"
#include "llama_backend.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what, const char *why) {
    fprintf(stderr, "bench_llama_block: %s: %s\n", what, why ? why : "failed");
    exit(1);
}

static float *fill(size_t n, unsigned seed, float scale, float offset) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    if (p == NULL) die("malloc", NULL);
    unsigned s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = offset + scale * ((float)(s >> 8) / 16777216.0f - 0.5f);
    }
    return p;
}

int main(int argc, char **argv) {
    int C = 256, NH = 4, NKV = 2, T = 256, B = 4, steps = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        int *slot = strcmp(argv[i], "--embd") == 0       ? &C
                    : strcmp(argv[i], "--heads") == 0    ? &NH
                    : strcmp(argv[i], "--kv-heads") == 0 ? &NKV
                    : strcmp(argv[i], "--seq") == 0      ? &T
                    : strcmp(argv[i], "--batch") == 0    ? &B
                    : strcmp(argv[i], "--steps") == 0    ? &steps
                                                         : NULL;
        if (slot == NULL) die(argv[i], "unknown option (see the comment at the top)");
        *slot = atoi(argv[i + 1]);
    }
    const int hd = C / NH, BT = B * T;
    const long long Q = (long long)NH * hd, KV = (long long)NKV * hd;
    const long long F = (12LL * C * C - C * (Q + 2 * KV) - Q * C) / (3LL * C);
    if (C % NH != 0 || hd % 2 != 0 || NH % NKV != 0 || F < 1 || steps < 1)
        die("shape", "need C a multiple of NH, an even head size, NH a multiple of NKV");

    // ---- GPT-2
    gpt2_backend *gb = gpt2_cpu_backend_create();
    if (gb == NULL) die("gpt2_cpu_backend_create", NULL);
    const gpt2_dims gd = {.n_layer = 1, .n_head = NH, .n_embd = C, .vocab = 256, .block_size = T};
    const size_t gn = (size_t)gpt2_unit_numel(&gd, 1);
    float *gw = fill(gn, 1, 0.05f, 0.0f), *gg = calloc(gn, sizeof(float));
    gpt2_block_w gbw, gbg;
    gpt2_block_w_carve(&gd, NN_F32, gw, &gbw);
    gpt2_block_w_carve(&gd, NN_F32, gg, &gbg);
    void *gacts_mem = NULL, *gscratch = NULL;
    gpt2_block_acts gacts;
    if (gb->dev->ops->alloc(gb->dev, (size_t)gpt2_block_acts_bytes(&gd, B, T, NN_F32), &gacts_mem) ||
        gb->dev->ops->alloc(gb->dev, gb->ops->block_scratch_bytes(gb, &gd, B, T), &gscratch))
        die("gpt2 alloc", gb->ops->last_error(gb));
    gpt2_block_acts_carve(&gd, B, T, NN_F32, gacts_mem, &gacts);

    // ---- Llama
    nn_device *dev = nn_cpu_device_create();
    const llama_dims ld = {.n_layer = 1, .n_head = NH, .n_kv_head = NKV, .head_dim = hd,
                           .n_embd = C, .n_ff = (int)F, .vocab = 256, .max_seq = T,
                           .rms_eps = 1e-5, .rope_theta = 10000.0, .init_std = 0.02,
                           .model_type = "llama"};
    llama_backend *lb = NULL;
    char err[512];
    if (dev == NULL || llama_cpu_backend_create(dev, &ld, T, &lb, err, sizeof err) != 0)
        die("llama_cpu_backend_create", err);
    const size_t ln = (size_t)llama_unit_numel(&ld, 1);
    float *lw = fill(ln, 2, 0.05f, 0.0f), *lg = calloc(ln, sizeof(float));
    llama_block_w lbw, lbg;
    llama_block_w_carve(&ld, NN_F32, lw, &lbw);
    llama_block_w_carve(&ld, NN_F32, lg, &lbg);
    // Norm weights near 1.
    for (int c = 0; c < C; c++) ((float *)lbw.attn_norm)[c] = ((float *)lbw.mlp_norm)[c] = 1.0f;
    void *lacts_mem = NULL, *lscratch = NULL;
    llama_block_acts lacts;
    if (dev->ops->alloc(dev, (size_t)llama_block_acts_bytes(&ld, B, T, NN_F32), &lacts_mem) ||
        dev->ops->alloc(dev, lb->ops->block_scratch_bytes(lb, B, T), &lscratch))
        die("llama alloc", dev->ops->last_error(dev));
    llama_block_acts_carve(&ld, B, T, NN_F32, lacts_mem, &lacts);

    float *x = fill((size_t)BT * C, 3, 2.0f, 0.0f), *dy = fill((size_t)BT * C, 4, 0.01f, 0.0f);
    float *y = malloc(sizeof(float) * BT * C), *dx = malloc(sizeof(float) * BT * C);
    if (y == NULL || dx == NULL || gg == NULL || lg == NULL) die("malloc", NULL);

    // FLOPs per token of a training step through one block (6 per weight,
    // attention 12 NH hd T), as gpt2_flops_per_token / llama_flops_per_token.
    const double attn = 12.0 * C * T;
    const double g_flops = 6.0 * 12.0 * C * C + attn;
    const double l_flops = 6.0 * (double)(C * (Q + 2 * KV) + Q * C + 3 * C * F) + attn;

    double *tg = malloc(sizeof(double) * steps), *tl = malloc(sizeof(double) * steps);
    if (tg == NULL || tl == NULL) die("malloc", NULL);
    for (int s = -2; s < steps; s++) { // two warm-up rounds
        double t0 = now_s();
        if (lb->ops->block_forward(lb, B, T, &lbw, x, &lacts, y, lscratch) ||
            lb->ops->block_backward(lb, B, T, &lbw, &lbg, x, &lacts, dy, dx, lscratch))
            die("llama block", lb->ops->last_error(lb));
        const double t_llama = now_s() - t0;
        t0 = now_s();
        if (gb->ops->block_forward(gb, &gd, B, T, &gbw, x, &gacts, y, gscratch) ||
            gb->ops->block_backward(gb, &gd, B, T, &gbw, &gbg, x, &gacts, dy, dx, gscratch))
            die("gpt2 block", gb->ops->last_error(gb));
        const double t_gpt2 = now_s() - t0;
        if (s >= 0) {
            tl[s] = t_llama;
            tg[s] = t_gpt2;
        }
    }
    const double ml = bench_median(tl, steps), mg = bench_median(tg, steps);
    printf("threads %d, B %d, T %d, C %d, %d heads of %d\n", omp_get_max_threads(), B, T, C, NH,
           hd);
    printf("gpt2  block (MLP 4C = %lld):           %8.2f ms  %.3f MFLOP/token  %6.2f GFLOP/s\n",
           4LL * C, 1e3 * mg, g_flops / 1e6, g_flops * BT / mg / 1e9);
    printf("llama block (NKV %d, F %lld, SwiGLU):  %8.2f ms  %.3f MFLOP/token  %6.2f GFLOP/s\n",
           NKV, F, 1e3 * ml, l_flops / 1e6, l_flops * BT / ml / 1e9);
    printf("ratio llama / gpt2 (time per FLOP): %.3f\n", (ml / l_flops) / (mg / g_flops));

    free(tg);
    free(tl);
    free(x);
    free(dy);
    free(y);
    free(dx);
    free(gw);
    free(gg);
    free(lw);
    free(lg);
    gb->dev->ops->free(gb->dev, gacts_mem);
    gb->dev->ops->free(gb->dev, gscratch);
    gb->ops->destroy(gb);
    dev->ops->free(dev, lacts_mem);
    dev->ops->free(dev, lscratch);
    lb->ops->destroy(lb);
    dev->ops->destroy(dev);
    return 0;
}
