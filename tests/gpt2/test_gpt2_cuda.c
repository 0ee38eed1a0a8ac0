/*
 * The CUDA backend against the CPU backend: whole training steps of small
 * models with the same parameters and tokens on both, comparing the
 * per-position losses, the residual stream after every block, every
 * parameter gradient and one row of logits; in fp32 (the exact mode) and in
 * bf16 (tensor cores) against the CPU's fp32. Also on the GPU: the same step
 * twice gives the same bits in both dtypes (no atomics), head_forward's
 * losses are head_forward_backward's, and each deliberately wrong kernel of
 * the test hook (GPT2_CUDA_FAULT) fails the bf16 comparison. Exits 77
 * (skipped) without a usable CUDA device.
 *
 * fp32 tolerances. Both backends run the same element math bit for bit
 * (gpt2_math.h, --fmad=false; no TF32); they differ in the order of sums:
 * cuBLAS's GEMM reductions and the GPU's tree/column-block sums against
 * OpenBLAS's and the CPU's lanes. Each such sum differs by a few ulp (~1e-7
 * relative); through two blocks and the head the differences stay below
 * ~1e-5 of a tensor's scale. So a tensor passes when
 *     max |cuda - cpu| <= TOL_REL * max |cpu|   (TOL_REL = 1e-3),
 * a hundredfold margin over rounding, while a wrong index, a missing term or
 * a 10% error anywhere is off by >= 1e-1 of the scale. Losses: 1e-5
 * relative, per position.
 *
 * bf16 tolerances. The bf16 path stores every activation and every
 * activation gradient in bf16 (8 significant bits: each stored value is off
 * by at most u = 2^-9 relative) and computes in fp32 (tensor cores
 * accumulate in fp32). The CPU reference gets the same bf16-rounded
 * parameters and keeps everything else in fp32, so the difference is the
 * rounding of ~12 stored tensors per block forward and as many backward,
 * each error passed on through LayerNorm-normalized paths with a gain near
 * one. They add like a random walk, ~sqrt(K) u for K roundings, and a
 * gradient element of a tensor sees up to ~2K of them. Measured with an
 * emulation of this rounding (fp64 autograd, rounding to bf16 every tensor
 * the backend stores, the raw attention scores included, and, through
 * the rounding's vector-Jacobian product, every gradient flowing back
 * through those points) on this file's models and on the trainer's tiny
 * model, three seeds each, the worst cases were:
 *     per-position loss  |d| / (1 + |loss|)     2^-7.8
 *     mean loss          |d| / |loss|           2^-12.2
 *     a gradient tensor  max |d| / max |cpu|    2^-5.2
 *     gradient norm      |d| / norm             2^-9.8
 * The bounds below sit 4.6-14x above those (for cuBLAS's other summation
 * orders and roundings the emulation does not place exactly), and far below
 * what a wrong kernel gives: in the same emulation a transposed or swapped
 * operand or a softmax without the causal mask moved a gradient tensor by
 * 2^-0.6 to 2^1 of its scale and a position's loss by 2^-4.3 or more.
 */
#define _POSIX_C_SOURCE 200809L // setenv
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpt2_backend.h"
#include "gpt2_check.h"
#include "gpt2_test_model.h"
#include "zeroshard.h"

#define TOL_REL 1e-3
#define TOL_LOSS 1e-5

#define BF16_POS_LOSS 0x1p-5  /* |d| <= this * (1 + |loss|), each position */
#define BF16_MEAN_LOSS 0x1p-9 /* |d| <= this * |mean loss| */
#define BF16_GRAD 0x1p-3      /* max |d| <= this * max |cpu|, each gradient tensor */
#define BF16_NORM 0x1p-6      /* |d| <= this * gradient norm */

typedef struct host_step {
    double loss, grad_norm;
    float *grads, *resid, *losses, *logits;
} host_step;

/* One step on `be` (parameters given in fp32, converted to its dtype);
 * everything read back in fp32. */
static void run(gpt2_backend *be, const gpt2_dims *d, int B, int T, int chunk,
                const float *params, const int *tokens, const int *targets, host_step *out) {
    gpt2_tm m;
    REQUIRE(gpt2_tm_init(&m, be, d, B, T, chunk) == 0);
    const size_t BT = (size_t)B * T;
    REQUIRE(gpt2_tm_set_params(&m, params) == 0);
    REQUIRE(gpt2_tm_set_data(&m, tokens, targets) == 0);
    REQUIRE(gpt2_tm_step(&m, 1.0f / (float)BT, 1, &out->loss) == 0);
    const size_t nr = (size_t)(d->n_layer + 1) * BT * d->n_embd;
    out->grads = malloc(sizeof(float) * (size_t)m.n_params);
    out->resid = malloc(sizeof(float) * nr);
    out->losses = malloc(sizeof(float) * BT);
    out->logits = malloc(sizeof(float) * (size_t)d->vocab);
    REQUIRE(out->grads && out->resid && out->losses && out->logits);
    REQUIRE(gpt2_tm_read(&m, m.grads, (size_t)m.n_params, out->grads) == 0);
    REQUIRE(gpt2_tm_read(&m, m.resid, nr, out->resid) == 0);
    REQUIRE(be->ops->download(be, out->losses, m.losses, sizeof(float) * BT) == 0);
    REQUIRE(be->ops->head_logits(be, d, B, T, &m.w0, gpt2_tm_resid(&m, d->n_layer), (int)BT - 1,
                                 out->logits, m.hscratch) == 0);
    double sq = 0.0;
    for (int64_t i = 0; i < m.n_params; i++) sq += (double)out->grads[i] * out->grads[i];
    out->grad_norm = sqrt(sq);
    gpt2_tm_free(&m);
}

static void free_step(host_step *s) {
    free(s->grads);
    free(s->resid);
    free(s->losses);
    free(s->logits);
}

/* max |a - b| over n and max |b|. */
static void max_diff(const float *a, const float *b, size_t n, double *worst, size_t *at,
                     double *scale) {
    *worst = 0.0;
    *scale = 0.0;
    *at = 0;
    for (size_t i = 0; i < n; i++) {
        *scale = fabs(b[i]) > *scale ? fabs(b[i]) : *scale;
        const double e = fabs((double)a[i] - (double)b[i]);
        if (e > *worst || e != e) {
            *worst = e;
            *at = i;
        }
    }
}

/* fp32: max |cuda - cpu| <= tol * max |cpu|; prints the worst element on
 * failure. */
static void compare(const char *what, const float *cuda, const float *cpu, size_t n,
                    double tol) {
    double worst, scale;
    size_t i;
    max_diff(cuda, cpu, n, &worst, &i, &scale);
    CHECK_MSG(worst <= tol * scale,
              "%s: max |cuda - cpu| = %.3g at [%zu] (cuda %.9g, cpu %.9g), scale %.3g, bound "
              "%.3g",
              what, worst, i, n ? cuda[i] : 0.0f, n ? cpu[i] : 0.0f, scale, tol * scale);
}

/* The test inputs of one model: parameters (rounded to bf16 and back when
 * `bf16`, so that both backends see the same weights), tokens, targets. */
typedef struct inputs {
    float *params;
    int *tokens, *targets;
} inputs;

static void make_inputs(const gpt2_dims *d, int BT, double gain, int bf16, inputs *in) {
    const int64_t np = gpt2_num_params(d);
    in->params = malloc(sizeof(float) * (size_t)np);
    in->tokens = malloc(sizeof(int) * BT);
    in->targets = malloc(sizeof(int) * BT);
    REQUIRE(in->params && in->tokens && in->targets);
    gpt2_tm_init_params(d, in->params, 31, gain, 0.2);
    if (bf16) {
        uint16_t *b = malloc(sizeof(uint16_t) * (size_t)np);
        REQUIRE(b != NULL);
        REQUIRE(zs_convert(b, ZS_DTYPE_BF16, in->params, ZS_DTYPE_FP32, np) == ZS_OK);
        REQUIRE(zs_convert(in->params, ZS_DTYPE_FP32, b, ZS_DTYPE_BF16, np) == ZS_OK);
        free(b);
    }
    gpt2_tm_random_tokens(BT, d->vocab, in->tokens, 32);
    gpt2_tm_random_tokens(BT, d->vocab, in->targets, 33);
    in->tokens[1] = in->tokens[BT - 1] = in->tokens[BT / 2]; // a repeated token
}

static void free_inputs(inputs *in) {
    free(in->params);
    free(in->tokens);
    free(in->targets);
}

static void check_same_bits(const char *dtype, const host_step *a, const host_step *b,
                            size_t n_params, size_t BT) {
    CHECK_MSG(memcmp(a->grads, b->grads, sizeof(float) * n_params) == 0 &&
                  memcmp(a->losses, b->losses, sizeof(float) * BT) == 0,
              "%s: two identical steps on the GPU differ in some bit", dtype);
}

static void test_fp32(gpt2_backend *cpu, gpt2_backend *gpu, const gpt2_dims *d, int B, int T,
                      int chunk, double gain) {
    const int BT = B * T;
    inputs in;
    make_inputs(d, BT, gain, 0, &in);
    printf("fp32: %d layers, %d heads, %d channels, vocab %d; B %d, T %d, chunk %d\n",
           d->n_layer, d->n_head, d->n_embd, d->vocab, B, T, chunk);
    host_step c, g, g2;
    run(cpu, d, B, T, chunk, in.params, in.tokens, in.targets, &c);
    run(gpu, d, B, T, chunk, in.params, in.tokens, in.targets, &g);
    run(gpu, d, B, T, chunk, in.params, in.tokens, in.targets, &g2);

    for (int r = 0; r < BT; r++) {
        CHECK_MSG(fabs((double)g.losses[r] - c.losses[r]) <= TOL_LOSS * fabs(c.losses[r]),
                  "position %d: loss cuda %.9g, cpu %.9g", r, g.losses[r], c.losses[r]);
    }
    const size_t slice = (size_t)BT * d->n_embd;
    for (int l = 0; l <= d->n_layer; l++) {
        char what[64];
        snprintf(what, sizeof(what), "residual stream into %s %d", l < d->n_layer ? "block" : "head",
                 l);
        compare(what, g.resid + (size_t)l * slice, c.resid + (size_t)l * slice, slice, TOL_REL);
    }
    for (int u = 0; u < gpt2_num_units(d); u++) {
        const int64_t base = gpt2_tm_unit_offset(d, u);
        for (int i = 0; i < gpt2_unit_num_params(d, u); i++) {
            gpt2_param_spec s;
            REQUIRE(gpt2_param_spec_get(d, u, i, &s) == 0);
            char what[96];
            snprintf(what, sizeof(what), "gradient of %s", s.name);
            compare(what, g.grads + base + s.offset, c.grads + base + s.offset, (size_t)s.numel,
                    TOL_REL);
        }
    }
    compare("logits of the last row", g.logits, c.logits, (size_t)d->vocab, TOL_REL);
    CHECK_MSG(fabs(g.grad_norm - c.grad_norm) <= 1e-4 * c.grad_norm,
              "gradient norm: cuda %.9g, cpu %.9g", g.grad_norm, c.grad_norm);
    check_same_bits("fp32", &g, &g2, (size_t)gpt2_num_params(d), (size_t)BT);
    free_step(&c);
    free_step(&g);
    free_step(&g2);
    free_inputs(&in);
}

/* bf16 on the GPU against fp32 on the CPU. Returns the largest ratio of a
 * measured difference to its bound (<= 1 passes) and prints each kind's. */
static double bf16_margin(const gpt2_dims *d, int BT, const host_step *g, const host_step *c) {
    double pos = 0.0;
    int pos_at = 0;
    for (int r = 0; r < BT; r++) {
        const double e = fabs((double)g->losses[r] - c->losses[r]) / (1.0 + fabs(c->losses[r]));
        if (e > pos || e != e) {
            pos = e;
            pos_at = r;
        }
    }
    const double mean = fabs(g->loss - c->loss) / fabs(c->loss);
    double grad = 0.0;
    const char *grad_at = "";
    for (int u = 0; u < gpt2_num_units(d); u++) {
        const int64_t base = gpt2_tm_unit_offset(d, u);
        for (int i = 0; i < gpt2_unit_num_params(d, u); i++) {
            gpt2_param_spec s;
            REQUIRE(gpt2_param_spec_get(d, u, i, &s) == 0);
            double worst, scale;
            size_t k;
            max_diff(g->grads + base + s.offset, c->grads + base + s.offset, (size_t)s.numel,
                     &worst, &k, &scale);
            const double e = scale > 0.0 ? worst / scale : worst;
            if (e > grad || e != e) {
                grad = e;
                grad_at = s.name;
            }
        }
    }
    const double norm = fabs(g->grad_norm - c->grad_norm) / c->grad_norm;
    printf("  per-position loss %.3g (bound %.3g, at %d); mean loss %.3g (bound %.3g); "
           "gradient %.3g of its scale (bound %.3g, %s); gradient norm %.3g (bound %.3g)\n",
           pos, BF16_POS_LOSS, pos_at, mean, BF16_MEAN_LOSS, grad, BF16_GRAD, grad_at, norm,
           BF16_NORM);
    const double r[4] = {pos / BF16_POS_LOSS, mean / BF16_MEAN_LOSS, grad / BF16_GRAD,
                         norm / BF16_NORM};
    double worst = 0.0;
    for (int i = 0; i < 4; i++) worst = r[i] > worst || r[i] != r[i] ? r[i] : worst;
    return worst;
}

static gpt2_backend *cuda_backend(gpt2_dtype dtype, const char *fault) {
    if (fault != NULL)
        setenv("GPT2_CUDA_FAULT", fault, 1);
    else
        unsetenv("GPT2_CUDA_FAULT");
    const gpt2_cuda_options options = {.dtype = dtype, .gelu_fusion = -1};
    gpt2_backend *be = NULL;
    char err[512];
    if (gpt2_cuda_backend_create(NULL, &options, &be, err, sizeof(err)) != GPT2_OK) {
        fprintf(stderr, "test_gpt2_cuda: %s\n", err);
        exit(1);
    }
    unsetenv("GPT2_CUDA_FAULT");
    return be;
}

static void test_bf16(gpt2_backend *cpu, gpt2_backend *gpu, const gpt2_dims *d, int B, int T,
                      int chunk, double gain) {
    const int BT = B * T;
    inputs in;
    make_inputs(d, BT, gain, 1, &in);
    printf("bf16: %d layers, %d heads, %d channels, vocab %d; B %d, T %d, chunk %d\n",
           d->n_layer, d->n_head, d->n_embd, d->vocab, B, T, chunk);
    host_step c, g, g2;
    run(cpu, d, B, T, chunk, in.params, in.tokens, in.targets, &c);
    run(gpu, d, B, T, chunk, in.params, in.tokens, in.targets, &g);
    run(gpu, d, B, T, chunk, in.params, in.tokens, in.targets, &g2);
    const double worst = bf16_margin(d, BT, &g, &c);
    CHECK_MSG(worst <= 1.0, "bf16 on the GPU is %.3g times a bound away from fp32 on the CPU",
              worst);
    check_same_bits("bf16", &g, &g2, (size_t)gpt2_num_params(d), (size_t)BT);
    // The gelu fusions are alternatives of one computation: each passes.
    for (int fusion = 0; fusion <= 2; fusion++) {
        const gpt2_cuda_options options = {.dtype = GPT2_BF16, .gelu_fusion = fusion};
        gpt2_backend *be = NULL;
        char err[512];
        REQUIRE(gpt2_cuda_backend_create(NULL, &options, &be, err, sizeof(err)) == GPT2_OK);
        host_step f;
        run(be, d, B, T, chunk, in.params, in.tokens, in.targets, &f);
        printf(" gelu_fusion %d:", fusion);
        const double w = bf16_margin(d, BT, &f, &c);
        CHECK_MSG(w <= 1.0, "bf16 with gelu_fusion %d: %.3g times a bound", fusion, w);
        free_step(&f);
        be->ops->destroy(be);
    }
    // Each wrong kernel of the test hook must fail the same comparison.
    const char *faults[] = {"softmax_no_mask", "qkv_transposed"};
    for (int i = 0; i < 2; i++) {
        gpt2_backend *bad = cuda_backend(GPT2_BF16, faults[i]);
        host_step f;
        run(bad, d, B, T, chunk, in.params, in.tokens, in.targets, &f);
        printf(" with the wrong kernel %s:", faults[i]);
        const double w = bf16_margin(d, BT, &f, &c);
        CHECK_MSG(w > 1.0, "the wrong kernel %s passed the bf16 comparison (%.3g of a bound)",
                  faults[i], w);
        free_step(&f);
        bad->ops->destroy(bad);
    }
    free_step(&c);
    free_step(&g);
    free_step(&g2);
    free_inputs(&in);
}

/* head_forward and head_forward_backward give the same losses on the GPU. */
static void test_head_consistency(gpt2_backend *gpu) {
    const gpt2_dims d = {.n_layer = 1, .n_head = 2, .n_embd = 32, .vocab = 300,
                         .block_size = 16};
    const int B = 2, T = 16, BT = B * T;
    gpt2_tm m;
    REQUIRE(gpt2_tm_init(&m, gpu, &d, B, T, 9) == 0);
    float *params = malloc(sizeof(float) * (size_t)m.n_params);
    int tokens[32];
    float a[32], b[32];
    REQUIRE(params != NULL);
    gpt2_tm_init_params(&d, params, 41, 5.0, 0.1);
    gpt2_tm_random_tokens(BT, d.vocab, tokens, 42);
    REQUIRE(gpt2_tm_set_params(&m, params) == 0);
    REQUIRE(gpt2_tm_set_data(&m, tokens, tokens) == 0);
    double loss;
    REQUIRE(gpt2_tm_loss(&m, &loss) == 0);
    REQUIRE(gpu->ops->download(gpu, a, m.losses, sizeof(a)) == 0);
    REQUIRE(gpt2_tm_step(&m, 1.0f / BT, 1, &loss) == 0);
    REQUIRE(gpu->ops->download(gpu, b, m.losses, sizeof(b)) == 0);
    CHECK_MSG(memcmp(a, b, sizeof(a)) == 0,
              "%s: head_forward and head_forward_backward losses differ on the GPU (first: "
              "%.9g vs %.9g)",
              gpt2_dtype_name(gpu->dtype), a[0], b[0]);
    free(params);
    gpt2_tm_free(&m);
}

/* The pinned-memory ops a trainer's step uses: upload_async, losses_sum. */
static void test_async_transfers(gpt2_backend *gpu) {
    enum { N = 1000 };
    float *host = NULL;
    double *sum = NULL;
    float *dev = NULL;
    REQUIRE(gpu->ops->host_alloc(gpu, sizeof(float) * N, (void **)&host) == 0);
    REQUIRE(gpu->ops->host_alloc(gpu, sizeof(double), (void **)&sum) == 0);
    REQUIRE(gpu->ops->alloc(gpu, sizeof(float) * N, (void **)&dev) == 0);
    double expect = 0.0;
    for (int i = 0; i < N; i++) {
        host[i] = (float)(i % 7) * 0.25f + 1.0f / (float)(i + 1);
        expect += host[i];
    }
    REQUIRE(gpu->ops->upload_async(gpu, dev, host, sizeof(float) * N) == 0);
    REQUIRE(gpu->ops->host_wait(gpu, host) == 0);
    REQUIRE(gpu->ops->losses_sum(gpu, dev, N, sum) == 0);
    REQUIRE(gpu->ops->host_wait(gpu, sum) == 0);
    CHECK_MSG(fabs(*sum - expect) <= 1e-12 * expect, "losses_sum %.17g, host %.17g", *sum,
              expect);
    gpu->ops->free(gpu, dev);
    gpu->ops->host_free(gpu, host);
    gpu->ops->host_free(gpu, sum);
}

int main(void) {
    int devices = 0;
    cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) {
        printf("SKIP: no usable CUDA device: %s\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices");
        return 77;
    }
    gpt2_backend *cpu = gpt2_cpu_backend_create();
    REQUIRE(cpu != NULL);
    gpt2_backend *gpu = cuda_backend(GPT2_F32, NULL);
    gpt2_backend *gpu16 = cuda_backend(GPT2_BF16, NULL);
    CHECK(strcmp(gpu->ops->name, "cuda") == 0);
    CHECK(gpu->dtype == GPT2_F32 && gpu16->dtype == GPT2_BF16);
    // The gradient check's model (every size a power of two) ...
    const gpt2_dims tiny = {.n_layer = 2, .n_head = 4, .n_embd = 32, .vocab = 64,
                            .block_size = 16};
    // ... and one where nothing divides anything: odd head size, a vocab
    // that is no multiple of the reduction width or of the padded vocab,
    // T < block_size, partial head chunks, more than 32 rows.
    const gpt2_dims odd = {.n_layer = 2, .n_head = 3, .n_embd = 45, .vocab = 301,
                           .block_size = 24};
    test_fp32(cpu, gpu, &tiny, 2, 16, 12, 10.0);
    test_fp32(cpu, gpu, &odd, 3, 13, 5, 5.0);
    test_bf16(cpu, gpu16, &tiny, 2, 16, 12, 10.0);
    test_bf16(cpu, gpu16, &odd, 3, 13, 5, 5.0);
    test_head_consistency(gpu);
    test_head_consistency(gpu16);
    test_async_transfers(gpu);
    gpu->ops->destroy(gpu);
    gpu16->ops->destroy(gpu16);
    cpu->ops->destroy(cpu);
    return gpt2_check_finish("test_gpt2_cuda");
}
