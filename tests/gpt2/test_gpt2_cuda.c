/*
 * The CUDA backend against the CPU backend: whole training steps of small
 * models with the same parameters and tokens on both, comparing the
 * per-position losses, the residual stream after every block, every
 * parameter gradient and one row of logits; in fp32 (the exact mode) and in
 * bf16 (tensor cores) against the CPU's fp32. Also on the GPU: the same step
 * twice gives the same bits in both dtypes (no atomics), head_forward's
 * losses are head_forward_backward's, and each deliberately wrong kernel of
 * the test hook (GPT2_CUDA_FAULT) fails the bf16 comparison. The fused
 * epilogues: every GELU fusion mode and the bias fallback (unfused_bias)
 * pass the bf16 comparison, and on sm_80 and sm_90, where cuBLASLt has
 * them, a model with GPT-2 124M's aligned widths (768 channels, 12 heads)
 * must run every bias, GELU and DGELU product fused (the counts of
 * gpt2_cuda_backend_stats): a fused path that silently never runs fails
 * here. The embedding backward with a token repeated across many tiles,
 * and column sums over more partials than the finish has lanes, against
 * the CPU; GPT2_CUDA_PROFILE's table, parsed as scripts parse it. Exits 77
 * (skipped) without a usable CUDA device.
 *
 * fp32 tolerances. Both backends run the same element math bit for bit
 * (nn_layer_math.h and nn_math.h, with GPT2_CUDA_FMAD and NN_CUDA_FMAD off, their
 * default; no TF32; with them on, nvcc's contractions move an element by a
 * few ulp, far inside the bounds below); they differ in the order of sums:
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
#define _POSIX_C_SOURCE 200809L // setenv, fileno, dup
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "gpt2_backend.h"
#include "model_check.h"
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
    REQUIRE(be->dev->ops->download(be->dev, out->losses, m.losses, sizeof(float) * BT) == 0);
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
    mt_init_params(&gpt2_param_table, d, in->params, 31, gain, 0.2);
    if (bf16) {
        uint16_t *b = malloc(sizeof(uint16_t) * (size_t)np);
        REQUIRE(b != NULL);
        REQUIRE(zs_convert(b, ZS_DTYPE_BF16, in->params, ZS_DTYPE_FP32, np) == ZS_OK);
        REQUIRE(zs_convert(in->params, ZS_DTYPE_FP32, b, ZS_DTYPE_BF16, np) == ZS_OK);
        free(b);
    }
    mt_random_tokens(BT, d->vocab, in->tokens, 32);
    mt_random_tokens(BT, d->vocab, in->targets, 33);
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
        const int64_t base = mt_unit_offset(&gpt2_param_table, d, u);
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
        const int64_t base = mt_unit_offset(&gpt2_param_table, d, u);
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

static gpt2_backend *cuda_backend(nn_dtype dtype, const char *fault) {
    if (fault != NULL)
        setenv("GPT2_CUDA_FAULT", fault, 1);
    else
        unsetenv("GPT2_CUDA_FAULT");
    const gpt2_cuda_options options = {.dtype = dtype, .gelu_fusion = -1};
    gpt2_backend *be = NULL;
    char err[512];
    if (gpt2_cuda_backend_create(NULL, &options, &be, err, sizeof(err)) != NN_OK) {
        fprintf(stderr, "test_gpt2_cuda: %s\n", err);
        exit(1);
    }
    unsetenv("GPT2_CUDA_FAULT");
    return be;
}

/* A bf16 backend with the given fusion settings. */
static gpt2_backend *fusion_backend(int gelu_fusion, int unfused_bias) {
    const gpt2_cuda_options options = {
        .dtype = NN_BF16, .gelu_fusion = gelu_fusion, .unfused_bias = unfused_bias};
    gpt2_backend *be = NULL;
    char err[512];
    if (gpt2_cuda_backend_create(NULL, &options, &be, err, sizeof(err)) != NN_OK) {
        fprintf(stderr, "test_gpt2_cuda: %s\n", err);
        exit(1);
    }
    return be;
}

/* The launch counts of be, printed as the benchmarks print them. */
static gpt2_cuda_stats stats_of(gpt2_backend *be) {
    gpt2_cuda_stats st;
    char line[512];
    REQUIRE(gpt2_cuda_backend_stats(be, &st, line, sizeof(line)) == NN_OK);
    printf("  %s\n", line);
    return st;
}

/* What one training step (run) must have counted on a backend of mode
 * gelu_fusion / unfused_bias for an L-layer model: every block's c_fc GELU
 * fused or fallen back exactly once when the mode asks for it, nothing
 * otherwise, and the forced bias fallback taken every time. */
static void check_counts(const char *model, const gpt2_cuda_stats *st, int L, int gelu_fusion,
                         int unfused_bias) {
    const long long gelu = gelu_fusion >= 1 ? L : 0, dgelu = gelu_fusion >= 2 ? L : 0;
    CHECK_MSG(st->gelu_fusion == gelu_fusion && st->unfused_bias == unfused_bias,
              "%s: stats say gelu_fusion %d, unfused_bias %d; asked for %d, %d", model,
              st->gelu_fusion, st->unfused_bias, gelu_fusion, unfused_bias);
    CHECK_MSG(st->gelu_fused + st->gelu_fallback == gelu,
              "%s, gelu_fusion %d: gelu fused %lld + fallback %lld, expected %lld", model,
              gelu_fusion, st->gelu_fused, st->gelu_fallback, gelu);
    CHECK_MSG(st->dgelu_fused + st->dgelu_fallback == dgelu,
              "%s, gelu_fusion %d: dgelu fused %lld + fallback %lld, expected %lld", model,
              gelu_fusion, st->dgelu_fused, st->dgelu_fallback, dgelu);
    CHECK_MSG(st->bias_fused + st->bias_fallback >= 3LL * L,
              "%s: %lld bias products for %d blocks (at least 3 each)", model,
              st->bias_fused + st->bias_fallback, L);
    if (unfused_bias)
        CHECK_MSG(st->bias_fused == 0 && st->bias_fallback > 0,
                  "%s, unfused_bias: bias fused %lld, fallback %lld", model, st->bias_fused,
                  st->bias_fallback);
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
    // The gelu fusions and the bias epilogue's fallback are alternatives of
    // one computation: each passes, and each took the path it counts.
    for (int mode = 0; mode <= 3; mode++) {
        const int fusion = mode < 3 ? mode : 2, unfused_bias = mode == 3;
        gpt2_backend *be = fusion_backend(fusion, unfused_bias);
        host_step f;
        run(be, d, B, T, chunk, in.params, in.tokens, in.targets, &f);
        printf(" gelu_fusion %d, unfused_bias %d:", fusion, unfused_bias);
        const double w = bf16_margin(d, BT, &f, &c);
        CHECK_MSG(w <= 1.0, "bf16 with gelu_fusion %d, unfused_bias %d: %.3g times a bound",
                  fusion, unfused_bias, w);
        const gpt2_cuda_stats st = stats_of(be);
        check_counts("bf16", &st, d->n_layer, fusion, unfused_bias);
        free_step(&f);
        be->ops->destroy(be);
    }
    // Each wrong kernel of the test hook must fail the same comparison.
    const char *faults[] = {"softmax_no_mask", "qkv_transposed"};
    for (int i = 0; i < 2; i++) {
        gpt2_backend *bad = cuda_backend(NN_BF16, faults[i]);
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

/* GPT-2 124M's widths (768 channels, 12 heads of 64, 4C = 3072: every
 * leading dimension a multiple of 8, every tensor of the flat bf16 layout
 * 16-byte aligned) in one block: the products of the real model, shape for
 * shape but the number of rows. On sm_80 and sm_90 cuBLASLt has the bias,
 * GELU_AUX_BIAS and DGELU epilogues for them in bf16, so each must run
 * fused every time; elsewhere the counts are printed only. Each mode also
 * passes the bf16 comparison with the CPU. */
static void test_fusion_aligned(gpt2_backend *cpu) {
    const gpt2_dims d = {.n_layer = 1, .n_head = 12, .n_embd = 768, .vocab = 512,
                         .block_size = 64};
    const int B = 4, T = 64, BT = B * T, chunk = 128;
    inputs in;
    make_inputs(&d, BT, 1.0, 1, &in);
    printf("bf16 fusion, 124M's widths: %d layer, %d heads, %d channels, vocab %d; B %d, T %d\n",
           d.n_layer, d.n_head, d.n_embd, d.vocab, B, T);
    host_step c;
    run(cpu, &d, B, T, chunk, in.params, in.tokens, in.targets, &c);
    for (int fusion = 0; fusion <= 2; fusion++) {
        gpt2_backend *be = fusion_backend(fusion, 0);
        host_step f;
        run(be, &d, B, T, chunk, in.params, in.tokens, in.targets, &f);
        printf(" gelu_fusion %d:", fusion);
        const double w = bf16_margin(&d, BT, &f, &c);
        CHECK_MSG(w <= 1.0, "124M's widths, gelu_fusion %d: %.3g times a bound", fusion, w);
        const gpt2_cuda_stats st = stats_of(be);
        check_counts("124M's widths", &st, d.n_layer, fusion, 0);
        if (st.sm == 80 || st.sm == 90) {
            CHECK_MSG(st.bias_fused > 0 && st.bias_fallback == 0,
                      "sm_%d, 124M's widths: the bias epilogue fused %lld times, fell back %lld "
                      "times; cuBLASLt should take every one (see nn_cuda_matmul.cu)",
                      st.sm, st.bias_fused, st.bias_fallback);
            if (fusion >= 1)
                CHECK_MSG(st.gelu_fused > 0 && st.gelu_fallback == 0,
                          "sm_%d, 124M's widths, gelu_fusion %d: GELU fused %lld times, fell "
                          "back %lld times; the fused forward never runs",
                          st.sm, fusion, st.gelu_fused, st.gelu_fallback);
            if (fusion >= 2)
                CHECK_MSG(st.dgelu_fused > 0 && st.dgelu_fallback == 0,
                          "sm_%d, 124M's widths, gelu_fusion 2: DGELU fused %lld times, fell "
                          "back %lld times; the fused backward never runs",
                          st.sm, st.dgelu_fused, st.dgelu_fallback);
        } else {
            printf("  (sm_%d: the counts are not required; sm_80 and sm_90 are)\n", st.sm);
        }
        free_step(&f);
        be->ops->destroy(be);
    }
    free_step(&c);
    free_inputs(&in);
}

/* The embedding backward with one token filling more than 32 tiles of the
 * sorted positions (so the finish's lanes add several tiles each), runs cut
 * by tile boundaries and runs inside one tile, in fp32 against the CPU, and
 * twice on the GPU for the same bits. C = 40 leaves a partial group of
 * columns. */
static void test_embed_backward_runs(gpt2_backend *cpu, gpt2_backend *gpu) {
    const gpt2_dims d = {.n_layer = 1, .n_head = 4, .n_embd = 40, .vocab = 50,
                         .block_size = 256};
    const int B = 6, T = 256, BT = B * T, C = d.n_embd;
    const size_t n_wte = (size_t)d.vocab * C, n_wpe = (size_t)d.block_size * C;
    int *tokens = malloc(sizeof(int) * BT);
    float *dx = malloc(sizeof(float) * (size_t)BT * C);
    float *out[3];
    REQUIRE(tokens && dx);
    mt_random_tokens(BT, d.vocab, tokens, 51);
    for (int r = 0; r < 1200; r++) tokens[(r * 7) % BT] = 3; // 1200 rows of token 3, spread
    uint64_t state = 52;
    for (size_t i = 0; i < (size_t)BT * C; i++) dx[i] = (float)mt_normal(&state);
    gpt2_backend *bes[3] = {cpu, gpu, gpu};
    for (int k = 0; k < 3; k++) {
        gpt2_backend *be = bes[k];
        void *g = NULL, *dev_dx = NULL;
        int *dev_tokens = NULL;
        out[k] = malloc(sizeof(float) * (n_wte + n_wpe + 2 * (size_t)C));
        REQUIRE(out[k] != NULL);
        REQUIRE(be->dev->ops->alloc(be->dev, sizeof(float) * (n_wte + n_wpe + 2 * (size_t)C), &g) == 0);
        REQUIRE(be->dev->ops->alloc(be->dev, sizeof(float) * (size_t)BT * C, &dev_dx) == 0);
        REQUIRE(be->dev->ops->alloc(be->dev, sizeof(int) * BT, (void **)&dev_tokens) == 0);
        REQUIRE(be->dev->ops->upload(be->dev, dev_dx, dx, sizeof(float) * (size_t)BT * C) == 0);
        REQUIRE(be->dev->ops->upload(be->dev, dev_tokens, tokens, sizeof(int) * BT) == 0);
        gpt2_embed_w gw;
        gpt2_embed_w_carve(&d, NN_F32, g, &gw);
        REQUIRE(be->ops->embed_backward(be, &d, B, T, &gw, dev_tokens, dev_dx) == 0);
        REQUIRE(be->dev->ops->download(be->dev, out[k], g,
                                  sizeof(float) * (n_wte + n_wpe + 2 * (size_t)C)) == 0);
        be->dev->ops->free(be->dev, g);
        be->dev->ops->free(be->dev, dev_dx);
        be->dev->ops->free(be->dev, dev_tokens);
    }
    printf("embedding backward: %d rows, token 3 in 1200 of them, C %d\n", BT, C);
    compare("embedding backward: wte gradient", out[1], out[0], n_wte, TOL_REL);
    compare("embedding backward: wpe gradient", out[1] + n_wte, out[0] + n_wte, n_wpe, TOL_REL);
    CHECK_MSG(memcmp(out[1], out[2], sizeof(float) * (n_wte + n_wpe)) == 0,
              "embedding backward: two runs on the GPU differ in some bit");
    for (int k = 0; k < 3; k++) free(out[k]);
    free(tokens);
    free(dx);
}

/* The rows of GPT2_CUDA_PROFILE's table that scripts read: "profile NAME
 * CALLS TOTAL_MS MS_PER_STEP PCT_STEP". 1 when `name`'s row is in text. */
static int profile_row(const char *text, const char *name, long long *calls, double *total,
                       double *pct) {
    char key[64];
    snprintf(key, sizeof(key), "\nprofile %s ", name);
    const char *at = strstr(text, key);
    double per_step = 0.0;
    return at != NULL && sscanf(at + strlen(key), "%lld %lf %lf %lf", calls, total, &per_step,
                                pct) == 4;
}

/* GPT2_CUDA_PROFILE: malformed values are refused at creation; "1,1" times
 * the second of three micro-steps and prints, at destroy, a table whose rows
 * count each op once per call in that micro-step, ops inside the step. */
static void test_profile(void) {
    const char *bad[] = {"0", "x", "2,", "2,-1", "3;1"};
    for (int i = 0; i < 5; i++) {
        setenv("GPT2_CUDA_PROFILE", bad[i], 1);
        const gpt2_cuda_options options = {.dtype = NN_BF16, .gelu_fusion = -1};
        gpt2_backend *be = NULL;
        char err[512];
        const int s = gpt2_cuda_backend_create(NULL, &options, &be, err, sizeof(err));
        CHECK_MSG(s == NN_ERR_ARG && be == NULL && strstr(err, "GPT2_CUDA_PROFILE") != NULL,
                  "GPT2_CUDA_PROFILE=\"%s\": status %d, message \"%s\"", bad[i], s, err);
        if (be != NULL) be->ops->destroy(be);
    }
    setenv("GPT2_CUDA_PROFILE", "1,1", 1);
    const gpt2_dims d = {.n_layer = 2, .n_head = 4, .n_embd = 32, .vocab = 64, .block_size = 16};
    const int B = 2, T = 16, BT = B * T;
    gpt2_backend *be = cuda_backend(NN_BF16, NULL);
    unsetenv("GPT2_CUDA_PROFILE");
    inputs in;
    make_inputs(&d, BT, 10.0, 1, &in);
    gpt2_tm m;
    REQUIRE(gpt2_tm_init(&m, be, &d, B, T, 12) == 0);
    REQUIRE(gpt2_tm_set_params(&m, in.params) == 0);
    REQUIRE(gpt2_tm_set_data(&m, in.tokens, in.targets) == 0);
    double loss;
    for (int step = 0; step < 3; step++) REQUIRE(gpt2_tm_step(&m, 1.0f / BT, 1, &loss) == 0);
    gpt2_tm_free(&m);
    // The table goes to stderr at destroy: catch it in a file.
    FILE *catch = tmpfile();
    REQUIRE(catch != NULL);
    fflush(stderr);
    const int saved = dup(fileno(stderr));
    REQUIRE(saved >= 0 && dup2(fileno(catch), fileno(stderr)) >= 0);
    be->ops->destroy(be);
    fflush(stderr);
    REQUIRE(dup2(saved, fileno(stderr)) >= 0);
    close(saved);
    static char text[1 << 16];
    text[0] = '\n'; // so that every row, the first too, follows a newline
    rewind(catch);
    const size_t n = fread(text + 1, 1, sizeof(text) - 2, catch);
    text[n + 1] = '\0';
    fclose(catch);
    printf("GPT2_CUDA_PROFILE=1,1 printed:%s", text);
    long long calls = 0;
    double total = 0.0, pct = 0.0, ops_total = 0.0, step_total = 0.0;
    CHECK_MSG(profile_row(text, "step", &calls, &step_total, &pct) && calls == 1 &&
                  step_total > 0.0 && fabs(pct - 100.0) < 0.01,
              "profile: no \"step\" row for 1 step (calls %lld, %.3f ms, %.2f%%)", calls,
              step_total, pct);
    CHECK_MSG(profile_row(text, "matmul_qkv_fwd", &calls, &total, &pct) && calls == d.n_layer,
              "profile: matmul_qkv_fwd counted %lld calls in one micro-step of %d blocks", calls,
              d.n_layer);
    CHECK_MSG(profile_row(text, "encoder_bwd_wte", &calls, &total, &pct) && calls == 1,
              "profile: encoder_bwd_wte counted %lld calls in one micro-step", calls);
    CHECK_MSG(profile_row(text, "all_ops", &calls, &ops_total, &pct) && ops_total > 0.0 &&
                  ops_total <= step_total + 1e-3 * (double)calls,
              "profile: the ops take %.3f ms of a %.3f ms step", ops_total, step_total);
    CHECK_MSG(strstr(text, "\nfusion: bias fused ") != NULL,
              "profile: no fusion line after the table");
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
    mt_init_params(&gpt2_param_table, &d, params, 41, 5.0, 0.1);
    mt_random_tokens(BT, d.vocab, tokens, 42);
    REQUIRE(gpt2_tm_set_params(&m, params) == 0);
    REQUIRE(gpt2_tm_set_data(&m, tokens, tokens) == 0);
    double loss;
    REQUIRE(gpt2_tm_loss(&m, &loss) == 0);
    REQUIRE(gpu->dev->ops->download(gpu->dev, a, m.losses, sizeof(a)) == 0);
    REQUIRE(gpt2_tm_step(&m, 1.0f / BT, 1, &loss) == 0);
    REQUIRE(gpu->dev->ops->download(gpu->dev, b, m.losses, sizeof(b)) == 0);
    CHECK_MSG(memcmp(a, b, sizeof(a)) == 0,
              "%s: head_forward and head_forward_backward losses differ on the GPU (first: "
              "%.9g vs %.9g)",
              nn_dtype_name(gpu->dtype), a[0], b[0]);
    free(params);
    gpt2_tm_free(&m);
}

/* The pinned-memory ops a trainer's step uses: upload_async, losses_sum. */
static void test_async_transfers(gpt2_backend *gpu) {
    enum { N = 1000 };
    float *host = NULL;
    double *sum = NULL;
    float *dev = NULL;
    REQUIRE(gpu->dev->ops->host_alloc(gpu->dev, sizeof(float) * N, (void **)&host) == 0);
    REQUIRE(gpu->dev->ops->host_alloc(gpu->dev, sizeof(double), (void **)&sum) == 0);
    REQUIRE(gpu->dev->ops->alloc(gpu->dev, sizeof(float) * N, (void **)&dev) == 0);
    double expect = 0.0;
    for (int i = 0; i < N; i++) {
        host[i] = (float)(i % 7) * 0.25f + 1.0f / (float)(i + 1);
        expect += host[i];
    }
    REQUIRE(gpu->dev->ops->upload_async(gpu->dev, dev, host, sizeof(float) * N) == 0);
    REQUIRE(gpu->dev->ops->host_wait(gpu->dev, host) == 0);
    REQUIRE(gpu->dev->ops->losses_sum(gpu->dev, dev, N, sum) == 0);
    REQUIRE(gpu->dev->ops->host_wait(gpu->dev, sum) == 0);
    CHECK_MSG(fabs(*sum - expect) <= 1e-12 * expect, "losses_sum %.17g, host %.17g", *sum,
              expect);
    gpu->dev->ops->free(gpu->dev, dev);
    gpu->dev->ops->host_free(gpu->dev, host);
    gpu->dev->ops->host_free(gpu->dev, sum);
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
    gpt2_backend *gpu = cuda_backend(NN_F32, NULL);
    gpt2_backend *gpu16 = cuda_backend(NN_BF16, NULL);
    CHECK(strcmp(gpu->ops->name, "cuda") == 0);
    CHECK(gpu->dtype == NN_F32 && gpu16->dtype == NN_BF16);
    // The gradient check's model (every size a power of two) ...
    const gpt2_dims tiny = {.n_layer = 2, .n_head = 4, .n_embd = 32, .vocab = 64,
                            .block_size = 16};
    // ... and one where nothing divides anything: odd head size, a vocab
    // that is no multiple of the reduction width or of the padded vocab,
    // T < block_size, partial head chunks, more than 32 rows.
    const gpt2_dims odd = {.n_layer = 2, .n_head = 3, .n_embd = 45, .vocab = 301,
                           .block_size = 24};
    // ... and one with more rows (1536) than the column sums' finish has
    // lanes times partial rows (32 x 32), and tokens repeated across the
    // embedding backward's tiles.
    const gpt2_dims rows = {.n_layer = 1, .n_head = 2, .n_embd = 64, .vocab = 128,
                            .block_size = 64};
    test_fp32(cpu, gpu, &tiny, 2, 16, 12, 10.0);
    test_fp32(cpu, gpu, &odd, 3, 13, 5, 5.0);
    test_fp32(cpu, gpu, &rows, 24, 64, 256, 5.0);
    test_bf16(cpu, gpu16, &tiny, 2, 16, 12, 10.0);
    test_bf16(cpu, gpu16, &odd, 3, 13, 5, 5.0);
    test_fusion_aligned(cpu);
    test_embed_backward_runs(cpu, gpu);
    test_profile();
    test_head_consistency(gpu);
    test_head_consistency(gpu16);
    test_async_transfers(gpu);
    gpu->ops->destroy(gpu);
    gpu16->ops->destroy(gpu16);
    cpu->ops->destroy(cpu);
    return model_check_finish("test_gpt2_cuda");
}
