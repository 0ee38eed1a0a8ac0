/*
 * bench_gpt2_model — the GPT-2 model's training step on the CPU backend
 * against the machine's sgemm at the model's own shapes.
 *
 *   bench_gpt2_model [--preset 124M | --layers L --heads NH --embd C --vocab V]
 *                    [--seq T] [--batch B] [--steps N] [--chunk R] [--breakdown]
 *                    [--backend cpu|cuda] [--dtype fp32|bf16|fp16] [--gelu-fusion F]
 *                    [--unfused-bias]
 *
 * Without a model option it runs two: a small one (4 layers, 4 heads, 256
 * channels, vocab 256, T 256, B 4) and GPT-2 124M at T 64, B 1.
 *
 * A step is what a trainer does per micro-batch: embed, every block forward,
 * the fused head, every block backward, the embedding backward (gradients
 * accumulate; zeroing them is the optimizer's business and not timed).
 * Achieved FLOP/s = gpt2_flops_per_token(T) * B * T / step time (nanoGPT's
 * 6N + 12 L C T, see gpt2_model.h). The reference is the FLOP/s of the
 * examples' own sgemm (ex_sgemm: fixed tiles of single-threaded BLAS calls on
 * OpenMP's threads, examples/common/cpu_blas.h) on
 * the MLP's three products (c_fc forward, its weight gradient and its input
 * gradient: [BT, C] x [C, 4C], [4C, BT] x [BT, C], [BT, 4C] x [4C, C]), the
 * bulk of the step's FLOPs, timed the same way; the ratio says how much of
 * the step is spent outside sgemm or in sgemm shapes slower than those.
 * The head's logits shape ([R, C] x [C, V]) is reported too.
 *
 * With --backend cuda the same step runs on the CUDA backend in --dtype
 * (fp32 default; bf16 as the trainer runs it) and the program prints the
 * model-only step time, tokens/s and FLOP/s without the sgemm reference:
 * bench_gpt2_cuda.sh subtracts it from the trainer's step to get the
 * runtime's share. The step is timed from its first launch to the device's
 * end (one synchronize); --breakdown synchronizes after each phase too.
 * --gelu-fusion (gpt2_cuda_options: -1 the device's default, 0, 1, 2) and
 * --unfused-bias choose the epilogue paths, so that a GPU measures both;
 * after the times a CUDA run prints gpt2_cuda_backend_stats's line,
 *   fusion: bias fused N fallback M; gelu fused N fallback M; dgelu fused N
 *   fallback M; gemm lt N classic M (gelu_fusion G, unfused_bias U, sm_XY)
 * (one line), which says whether the fused epilogues ran. With
 * GPT2_CUDA_PROFILE=STEPS[,WARMUP] in the environment the backend times
 * every op of those steps and prints its table to stderr at the end.
 *
 * Single-threaded numbers (as the project reports them):
 *   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ./bench_gpt2_model
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#include <omp.h>

#include "../lib/stats.h"
#include "core/number.h"
#include "cpu_blas.h"
#include "gpt2_backend.h"
#include "zeroshard.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define BENCH_TRY(call)                                                                       \
    do {                                                                                      \
        int bench_status_ = (call);                                                           \
        if (bench_status_ != NN_OK) {                                                       \
            fprintf(stderr, "bench_gpt2_model: %s failed: %s\n", #call,                       \
                    be->ops->last_error(be));                                                 \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static void *xalloc(gpt2_backend *be, size_t bytes) {
    void *p = NULL;
    BENCH_TRY(be->dev->ops->alloc(be->dev, bytes, &p));
    return p;
}

/* Uniform in [-a, a) from a counter hash: the values only need to be
 * GPT-2-like in scale. */
static void fill(float *p, size_t n, float a, uint64_t seed) {
    uint64_t s = seed * UINT64_C(0x9e3779b97f4a7c15) + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        p[i] = a * (2.0f * (float)(s >> 40) * (1.0f / 16777216.0f) - 1.0f);
    }
}

/* Best of `reps` timings of one sgemm, in FLOP/s. */
static double sgemm_rate(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, int reps) {
    float *A = malloc(sizeof(float) * (size_t)M * K);
    float *B = malloc(sizeof(float) * (size_t)K * N);
    float *C = calloc((size_t)M * N, sizeof(float));
    if (A == NULL || B == NULL || C == NULL) {
        fprintf(stderr, "bench_gpt2_model: out of memory for sgemm %dx%dx%d\n", M, N, K);
        exit(1);
    }
    fill(A, (size_t)M * K, 0.1f, 1);
    fill(B, (size_t)K * N, 0.1f, 2);
    const int lda = ta == CblasNoTrans ? K : M;
    const int ldb = tb == CblasNoTrans ? N : K;
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = now_s();
        ex_sgemm(ta != CblasNoTrans, tb != CblasNoTrans, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, N);
        double t = now_s() - t0;
        if (r > 0 && t < best) { // the first call warms up
            best = t;
        }
    }
    free(A);
    free(B);
    free(C);
    return 2.0 * M * N * K / best;
}

typedef struct phase_times {
    double embed, blocks_fwd, head, blocks_bwd, embed_bwd;
} phase_times;

/* Which backend the step runs on: the CPU (fp32, against sgemm) or CUDA
 * (fp32, bf16 or fp16; model-only step time, the baseline the trainer's
 * step is compared with in bench_gpt2_cuda.sh). */
typedef struct bench_options {
    int cuda;
    nn_dtype dtype;
    int gelu_fusion;
    int unfused_bias;
} bench_options;

static gpt2_backend *make_backend(const bench_options *o) {
    if (!o->cuda) {
        gpt2_backend *be = gpt2_cpu_backend_create();
        if (be == NULL) {
            fprintf(stderr, "bench_gpt2_model: out of memory\n");
            exit(1);
        }
        return be;
    }
    const gpt2_cuda_options options = {
        .dtype = o->dtype, .gelu_fusion = o->gelu_fusion, .unfused_bias = o->unfused_bias};
    gpt2_backend *be = NULL;
    char err[512];
    if (gpt2_cuda_backend_create(NULL, &options, &be, err, sizeof(err)) != NN_OK) {
        fprintf(stderr, "bench_gpt2_model: %s\n", err);
        exit(1);
    }
    return be;
}

static zs_dtype zs_dtype_of(nn_dtype t) {
    return t == NN_BF16 ? ZS_DTYPE_BF16 : t == NN_F16 ? ZS_DTYPE_FP16 : ZS_DTYPE_FP32;
}

/* Host fp32 values into backend memory of the backend's dtype. */
static void upload_f32(gpt2_backend *be, void *dst, const float *host, size_t n) {
    const size_t e = nn_dtype_size(be->dtype);
    void *staged = malloc(n * e);
    if (staged == NULL ||
        zs_convert(staged, zs_dtype_of(be->dtype), host, ZS_DTYPE_FP32, (int64_t)n) != ZS_OK) {
        fprintf(stderr, "bench_gpt2_model: cannot stage %zu parameters\n", n);
        exit(1);
    }
    BENCH_TRY(be->dev->ops->upload(be->dev, dst, staged, n * e));
    free(staged);
}

static void bench(const char *label, const gpt2_dims *d, int B, int T, int steps, int chunk,
                  int breakdown, const bench_options *o) {
    char err[256];
    if (gpt2_dims_check(d, err, sizeof(err)) != 0) {
        fprintf(stderr, "bench_gpt2_model: %s\n", err);
        exit(1);
    }
    gpt2_backend *be = make_backend(o);
    const nn_dtype dt = be->dtype;
    const size_t e = nn_dtype_size(dt);
    const int L = d->n_layer, C = d->n_embd, BT = B * T;
    const size_t np = (size_t)gpt2_num_params(d);
    const size_t unit1 = (size_t)gpt2_unit_numel(d, 1), unit0 = (size_t)gpt2_unit_numel(d, 0);
    // Parameters made on the host in fp32: uniform with GPT-2's std 0.02
    // (half-width 0.02 * sqrt(3)); LayerNorm gains at 1 as initialized.
    float *host = malloc(sizeof(float) * np);
    if (host == NULL) {
        fprintf(stderr, "bench_gpt2_model: out of memory\n");
        exit(1);
    }
    fill(host, np, 0.0346f, 3);
    gpt2_embed_w hw0;
    gpt2_embed_w_carve(d, NN_F32, host, &hw0);
    for (int c = 0; c < C; c++) ((float *)hw0.lnfw)[c] = 1.0f;
    for (int l = 0; l < L; l++) {
        gpt2_block_w hw;
        gpt2_block_w_carve(d, NN_F32, host + unit0 + (size_t)l * unit1, &hw);
        for (int c = 0; c < C; c++) {
            ((float *)hw.ln1w)[c] = 1.0f;
            ((float *)hw.ln2w)[c] = 1.0f;
        }
    }
    unsigned char *params = xalloc(be, e * np);
    unsigned char *grads = xalloc(be, e * np);
    upload_f32(be, params, host, np);
    free(host);
    gpt2_embed_w w0, g0;
    gpt2_embed_w_carve(d, dt, params, &w0);
    gpt2_embed_w_carve(d, dt, grads, &g0);
    gpt2_block_w *w = calloc((size_t)L, sizeof(*w)), *g = calloc((size_t)L, sizeof(*g));
    gpt2_block_acts *acts = calloc((size_t)L, sizeof(*acts));
    const size_t na = (size_t)gpt2_block_acts_bytes(d, B, T, dt);
    unsigned char *acts_mem = xalloc(be, na * (size_t)L);
    for (int l = 0; l < L; l++) {
        gpt2_block_w_carve(d, dt, params + e * (unit0 + (size_t)l * unit1), &w[l]);
        gpt2_block_w_carve(d, dt, grads + e * (unit0 + (size_t)l * unit1), &g[l]);
        gpt2_block_acts_carve(d, B, T, dt, acts_mem + (size_t)l * na, &acts[l]);
    }
    const size_t slice = e * (size_t)BT * C;
    unsigned char *resid = xalloc(be, slice * (size_t)(L + 1));
    void *dres[2] = {xalloc(be, slice), xalloc(be, slice)};
    void *bscratch = xalloc(be, be->ops->block_scratch_bytes(be, d, B, T));
    void *hscratch = xalloc(be, be->ops->head_scratch_bytes(be, d, chunk));
    float *losses = xalloc(be, sizeof(float) * (size_t)BT);
    int *tokens = xalloc(be, sizeof(int) * (size_t)BT);
    int *targets = xalloc(be, sizeof(int) * (size_t)BT);
    int *host_tokens = malloc(sizeof(int) * (size_t)BT * 2);
    float *host_losses = malloc(sizeof(float) * (size_t)BT);
    if (host_tokens == NULL || host_losses == NULL) {
        fprintf(stderr, "bench_gpt2_model: out of memory\n");
        exit(1);
    }
    for (int r = 0; r < BT; r++) {
        host_tokens[r] = (int)(((uint64_t)r * 2654435761u) % (uint64_t)d->vocab);
        host_tokens[BT + r] = (int)(((uint64_t)(r + 1) * 2654435761u) % (uint64_t)d->vocab);
    }
    BENCH_TRY(be->dev->ops->upload(be->dev, tokens, host_tokens, sizeof(int) * (size_t)BT));
    BENCH_TRY(be->dev->ops->upload(be->dev, targets, host_tokens + BT, sizeof(int) * (size_t)BT));

    // On CUDA a phase's time is only known after waiting for it, which adds
    // a bubble: the phases are timed only with --breakdown, the step always
    // from its start to the device's end.
    const int sync_phases = o->cuda && breakdown;
#define PHASE_END(t)                                                                          \
    do {                                                                                      \
        if (sync_phases) BENCH_TRY(be->dev->ops->synchronize(be->dev));                                 \
        (t) = now_s();                                                                        \
    } while (0)
    BENCH_TRY(be->dev->ops->synchronize(be->dev));
    double best = 1e30, total = 0.0;
    double *times = malloc(sizeof(double) * (size_t)steps);
    phase_times best_ph = {0};
    for (int s = 0; s < steps + 1; s++) {
        phase_times ph;
        double t0 = now_s(), t1, t2, t3, t4, t5;
        BENCH_TRY(be->ops->embed_forward(be, d, B, T, &w0, tokens, resid));
        PHASE_END(t1);
        for (int l = 0; l < L; l++) {
            BENCH_TRY(be->ops->block_forward(be, d, B, T, &w[l], resid + (size_t)l * slice,
                                             &acts[l], resid + (size_t)(l + 1) * slice,
                                             bscratch));
        }
        PHASE_END(t2);
        BENCH_TRY(be->ops->head_forward_backward(be, d, B, T, &w0, &g0,
                                                 resid + (size_t)L * slice, targets,
                                                 1.0f / BT, dres[0], losses, chunk, hscratch));
        PHASE_END(t3);
        for (int l = L - 1; l >= 0; l--) {
            BENCH_TRY(be->ops->block_backward(be, d, B, T, &w[l], &g[l],
                                              resid + (size_t)l * slice, &acts[l],
                                              dres[(L - 1 - l) % 2], dres[(L - l) % 2],
                                              bscratch));
        }
        PHASE_END(t4);
        BENCH_TRY(be->ops->embed_backward(be, d, B, T, &g0, tokens, dres[L % 2]));
        BENCH_TRY(be->dev->ops->synchronize(be->dev));
        t5 = now_s();
        ph.embed = t1 - t0;
        ph.blocks_fwd = t2 - t1;
        ph.head = t3 - t2;
        ph.blocks_bwd = t4 - t3;
        ph.embed_bwd = t5 - t4;
        const double t = t5 - t0;
        if (s > 0) { // the first step warms up caches, page tables and cuBLASLt's choices
            total += t;
            if (times) times[s - 1] = t;
            if (t < best) {
                best = t;
                best_ph = ph;
            }
        }
    }
#undef PHASE_END
    BENCH_TRY(be->dev->ops->download(be->dev, host_losses, losses, sizeof(float) * (size_t)BT));
    double loss = 0.0;
    for (int r = 0; r < BT; r++) {
        loss += host_losses[r];
    }
    loss /= BT;

    const double flops = gpt2_flops_per_token(d, T) * BT;
    const double achieved = flops / best;
    printf("%s: %d layers, %d heads, %d channels, vocab %d; B %d, T %d; ", label, L, d->n_head,
           C, d->vocab, B, T);
    if (o->cuda)
        printf("CUDA, %s\n", nn_dtype_name(dt));
    else
        printf("%d OpenMP threads (OPENBLAS_NUM_THREADS=%s)\n", omp_get_max_threads(),
               getenv("OPENBLAS_NUM_THREADS") ? getenv("OPENBLAS_NUM_THREADS") : "unset");
    const double median = times ? bench_median(times, steps) : total / steps;
    free(times);
    printf("  step: best %.4f s, mean %.4f s, median %.4f s over %d; loss %.4f; %.3g "
           "FLOP/step (6N + 12LCT)\n",
           best, total / steps, median, steps, loss, flops);
    printf("  achieved %.2f GFLOP/s; %.0f tokens/s\n", achieved * 1e-9, BT / best);
    if (!o->cuda) {
        const int reps = 3;
        const double fc_flops = 2.0 * BT * 4.0 * C * C;
        const double r_fwd = sgemm_rate(CblasNoTrans, CblasTrans, BT, 4 * C, C, reps);
        const double r_dw = sgemm_rate(CblasTrans, CblasNoTrans, 4 * C, C, BT, reps);
        const double r_dx = sgemm_rate(CblasNoTrans, CblasNoTrans, BT, C, 4 * C, reps);
        // The three at once: total FLOPs over total time.
        const double r_mlp =
            3.0 * fc_flops / (fc_flops / r_fwd + fc_flops / r_dw + fc_flops / r_dx);
        const int R = chunk < BT ? chunk : BT;
        const double r_head = sgemm_rate(CblasNoTrans, CblasTrans, R, d->vocab, C, reps);
        printf("  sgemm: c_fc fwd %.2f, dW %.2f, dx %.2f -> MLP %.2f GFLOP/s; head logits "
               "[%d,%d]x[%d,%d] %.2f GFLOP/s\n",
               r_fwd * 1e-9, r_dw * 1e-9, r_dx * 1e-9, r_mlp * 1e-9, R, C, C, d->vocab,
               r_head * 1e-9);
        printf("  ratio achieved / sgemm(MLP shapes) = %.3f\n", achieved / r_mlp);
    }
    if (breakdown) {
        printf("  best step by phase: embed %.4f, blocks fwd %.4f, head %.4f, blocks bwd "
               "%.4f, embed bwd %.4f s\n",
               best_ph.embed, best_ph.blocks_fwd, best_ph.head, best_ph.blocks_bwd,
               best_ph.embed_bwd);
    }
    if (o->cuda) {
        char line[512];
        if (gpt2_cuda_backend_stats(be, NULL, line, sizeof(line)) == NN_OK)
            printf("  %s\n", line);
    }
    fflush(stdout);

    be->dev->ops->free(be->dev, params);
    be->dev->ops->free(be->dev, grads);
    be->dev->ops->free(be->dev, acts_mem);
    be->dev->ops->free(be->dev, resid);
    be->dev->ops->free(be->dev, dres[0]);
    be->dev->ops->free(be->dev, dres[1]);
    be->dev->ops->free(be->dev, bscratch);
    be->dev->ops->free(be->dev, hscratch);
    be->dev->ops->free(be->dev, losses);
    be->dev->ops->free(be->dev, tokens);
    be->dev->ops->free(be->dev, targets);
    free(host_tokens);
    free(host_losses);
    free(w);
    free(g);
    free(acts);
    be->ops->destroy(be);
}

static int arg_int(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "bench_gpt2_model: %s needs a value\n", argv[*i]);
        exit(2);
    }
    int value = 0;
    if (zs__number_option_int(argv[*i], argv[*i + 1], INT_MIN, INT_MAX, &value) != ZS_OK) {
        fprintf(stderr, "bench_gpt2_model: %s\n", zs_last_error());
        exit(2);
    }
    ++*i;
    return value;
}

int main(int argc, char **argv) {
    gpt2_dims d = {0, 0, 0, 0, 0};
    int custom = 0, B = -1, T = -1, steps = 3, chunk = GPT2_HEAD_CHUNK_ROWS_DEFAULT;
    int breakdown = 0, chunk_given = 0;
    bench_options o = {.cuda = 0, .dtype = NN_F32, .gelu_fusion = -1, .unfused_bias = 0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--preset") == 0 && i + 1 < argc) {
            if (gpt2_dims_preset(argv[++i], &d) != 0) {
                fprintf(stderr, "bench_gpt2_model: unknown preset %s\n", argv[i]);
                return 2;
            }
            custom = 1;
        } else if (strcmp(argv[i], "--layers") == 0) {
            d.n_layer = arg_int(argc, argv, &i);
            custom = 1;
        } else if (strcmp(argv[i], "--heads") == 0) {
            d.n_head = arg_int(argc, argv, &i);
        } else if (strcmp(argv[i], "--embd") == 0) {
            d.n_embd = arg_int(argc, argv, &i);
        } else if (strcmp(argv[i], "--vocab") == 0) {
            d.vocab = arg_int(argc, argv, &i);
        } else if (strcmp(argv[i], "--seq") == 0) {
            T = arg_int(argc, argv, &i);
        } else if (strcmp(argv[i], "--batch") == 0) {
            B = arg_int(argc, argv, &i);
        } else if (strcmp(argv[i], "--steps") == 0) {
            steps = arg_int(argc, argv, &i);
        } else if (strcmp(argv[i], "--chunk") == 0) {
            chunk = arg_int(argc, argv, &i);
            chunk_given = 1;
        } else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
            o.cuda = strcmp(argv[++i], "cuda") == 0;
            if (!o.cuda && strcmp(argv[i], "cpu") != 0) {
                fprintf(stderr, "bench_gpt2_model: --backend is cpu or cuda, not %s\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
            ++i;
            o.dtype = strcmp(argv[i], "bf16") == 0   ? NN_BF16
                      : strcmp(argv[i], "fp16") == 0 ? NN_F16
                                                     : NN_F32;
            if (o.dtype == NN_F32 && strcmp(argv[i], "fp32") != 0) {
                fprintf(stderr, "bench_gpt2_model: --dtype is fp32, bf16 or fp16, not %s\n",
                        argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--gelu-fusion") == 0) {
            o.gelu_fusion = arg_int(argc, argv, &i);
        } else if (strcmp(argv[i], "--unfused-bias") == 0) {
            o.unfused_bias = 1;
        } else if (strcmp(argv[i], "--breakdown") == 0) {
            breakdown = 1;
        } else {
            fprintf(stderr,
                    "usage: bench_gpt2_model [--preset NAME | --layers L --heads NH --embd C "
                    "--vocab V] [--seq T] [--batch B] [--steps N] [--chunk R] [--breakdown] "
                    "[--backend cpu|cuda] [--dtype fp32|bf16|fp16] [--gelu-fusion -1|0|1|2] "
                    "[--unfused-bias]\n");
            return 2;
        }
    }
    if (o.cuda && !chunk_given) chunk = GPT2_HEAD_CHUNK_ROWS_DEFAULT_GPU;
    if (!o.cuda && o.dtype != NN_F32) {
        fprintf(stderr, "bench_gpt2_model: the CPU backend computes in fp32 only\n");
        return 2;
    }
    if (steps < 1 || chunk < 1) {
        fprintf(stderr, "bench_gpt2_model: --steps and --chunk must be >= 1\n");
        return 2;
    }
    if (custom) {
        if (T < 1) {
            T = 64;
        }
        if (B < 1) {
            B = 1;
        }
        if (d.block_size < T) {
            d.block_size = T;
        }
        bench("custom", &d, B, T, steps, chunk, breakdown, &o);
        return 0;
    }
    const gpt2_dims small = {.n_layer = 4, .n_head = 4, .n_embd = 256, .vocab = 256,
                             .block_size = 256};
    bench("small", &small, B > 0 ? B : 4, T > 0 ? T : 256, steps, chunk, breakdown, &o);
    gpt2_dims gpt2;
    gpt2_dims_preset("124M", &gpt2);
    bench("124M", &gpt2, B > 0 ? B : 1, T > 0 ? T : 64, steps, chunk, breakdown, &o);
    return 0;
}
