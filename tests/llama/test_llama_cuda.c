/*
 * The Llama family on CUDA against the CPU (llama_layers.c on
 * nn_cpu_device_create): whole training steps of tiny models with the same
 * parameters and tokens on both, comparing the per-position losses, the
 * residual stream after every block, every parameter gradient and one row
 * of logits; in fp32 (the exact mode) and in bf16 (tensor cores) against
 * the CPU's fp32. The models are grouped-query (4 query heads on 2 K/V
 * heads, and on 1) with sizes that divide nothing (C = 40, head size 10,
 * F = 72, V = 53), tied and untied, without biases (q, k and v, gate and up
 * then run as one product each), with Qwen2's q/k/v biases, with every
 * bias, with llama3 RoPE scaling; one with more rows than the column sums'
 * finish has lanes times partial rows, several head chunks and tokens
 * repeated across the embedding backward's tiles; one with widths that
 * take every 16-byte vector path. On the GPU also: the same step twice
 * gives the same bits in both dtypes (no atomics), head_forward's losses
 * are head_forward_backward's, the backend refuses a CPU device, and
 * LLAMA_CUDA_PROFILE's table comes out in the format scripts parse. And
 * QLoRA's path: a block whose matrices come one at a time from the
 * backend's weight source matches the CPU's block with them in its struct
 * (fp32). Exits 77 (skipped) without a usable CUDA device.
 *
 * fp32 tolerances, as tests/gpt2/test_gpt2_cuda.c's: both backends run
 * nn_layer_math.h's and nn_math.h's element functions bit for bit (nvcc with
 * --fmad=false, NN_CUDA_FMAD's default; no TF32) and differ in the order of
 * sums (cuBLAS's reductions, the warp and column-block trees against
 * OpenBLAS's and the CPU's lanes), a few ulp each, below ~1e-5 of a
 * tensor's scale through two blocks and the head. So a tensor passes when
 * max |cuda - cpu| <= 1e-3 max |cpu|, and each position's loss within
 * 1e-5 relative; a wrong index, a missing term or a 10% error anywhere is
 * off by >= 1e-1 of the scale.
 *
 * bf16 tolerances, derived as GPT-2's test derives them. The bf16 path
 * stores every activation and activation gradient in bf16 (8 significant
 * bits: each stored value off by at most u = 2^-9 relative) and computes
 * in fp32; the CPU reference gets the same bf16-rounded parameters and
 * keeps everything else in fp32. A Llama block stores about as many
 * tensors as GPT-2's (forward: the two norms' outputs, q/k/v before and
 * after RoPE, the raw scores, the probabilities, the heads' outputs, res1,
 * gate, up, h, y; backward as many gradients), each error passed on
 * through RMS-normalized paths with a gain near one, adding like a random
 * walk. An emulation of exactly these roundings (the float64 numpy
 * reference of tests/llama/llama_numpy_ref.py with every tensor the backend
 * stores rounded to bf16: activations, the raw scores, gradients, the
 * head's chunk-by-chunk and the K/V groups' head-by-head accumulations in
 * bf16 buffers), on this file's five bf16 models with three seeds each
 * (15 models), against the unrounded reference, gave as worst cases:
 *     per-position loss  |d| / (1 + |loss|)     2^-7.8
 *     mean loss          |d| / |loss|           2^-12.0
 *     a gradient tensor  max |d| / max |cpu|    2^-5.3
 *     gradient norm      |d| / norm             2^-9.3
 * GPT-2's bounds (below) sit 4.9-9.8x above these, for cuBLAS's other
 * summation orders and roundings the emulation does not place exactly, and
 * far below what a wrong kernel gives in the same emulation: q and k
 * rotated the wrong way moved some gradient tensor by at least 2^0.2 of its
 * scale on every model; K/V heads serving the wrong query group, by at
 * least 2^0.6, and a position's loss by at least 2^-2.3.
 */
#define _POSIX_C_SOURCE 200809L // setenv, fileno, dup
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "model_check.h"
#include "llama_backend.h"
#include "llama_test_model.h"
#include "nn_cuda.h"
#include "zeroshard.h"

#define TOL_REL 1e-3
#define TOL_LOSS 1e-5

#define BF16_POS_LOSS 0x1p-5  /* |d| <= this * (1 + |loss|), each position */
#define BF16_MEAN_LOSS 0x1p-9 /* |d| <= this * |mean loss| */
#define BF16_GRAD 0x1p-3      /* max |d| <= this * max |cpu|, each gradient tensor */
#define BF16_NORM 0x1p-6      /* |d| <= this * gradient norm */

/* ------------------------------------------------------------ the model */

/* A whole model on one backend in its device's dtype (llama_tm is fp32
 * only): parameters and gradients in one flat array each, units in order
 * (llama_tm_unit_offset's layout), activations for every block, and one
 * call for a training step in a trainer's order. Host data goes in and out
 * in fp32, converted by the runtime's zs_convert (round to nearest even,
 * as the device rounds). */
typedef struct model {
    llama_backend *be;
    nn_device *dev;
    llama_dims d;
    int B, T, chunk;
    size_t elem; /* bytes of an element of the device's dtype */
    int64_t n_params;
    unsigned char *params, *grads; /* device [n_params] elements */
    llama_embed_w w0, g0;
    llama_head_w wh, gh;
    llama_block_w w[4], g[4];
    llama_block_acts acts[4];
    unsigned char *resid; /* device [L + 1][BT][C] elements */
    unsigned char *acts_mem;
    size_t acts_bytes;
    void *dres[2], *bscratch, *hscratch;
    float *losses;
    int *tokens, *targets;
    void *staging; /* host: max(n_params, (L + 1) BT C) elements */
} model;

#define DEV_OK(m, call)                                                                       \
    do {                                                                                      \
        if ((call) != NN_OK) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                     \
                    (m)->dev->ops->last_error((m)->dev));                                     \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)
#define BE_OK(m, call)                                                                        \
    do {                                                                                      \
        if ((call) != NN_OK) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                     \
                    (m)->be->ops->last_error((m)->be));                                       \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static zs_dtype zs_of(nn_dtype t) {
    return t == NN_BF16 ? ZS_DTYPE_BF16 : t == NN_F16 ? ZS_DTYPE_FP16 : ZS_DTYPE_FP32;
}

static void *at(void *base, size_t elem, size_t n) { return (unsigned char *)base + n * elem; }

static void model_init(model *m, llama_backend *be, int B, int T, int chunk) {
    memset(m, 0, sizeof *m);
    m->be = be;
    m->dev = be->dev;
    m->d = be->dims;
    m->B = B;
    m->T = T;
    m->chunk = chunk;
    const llama_dims *d = &m->d;
    const nn_dtype t = m->dev->dtype;
    const int L = d->n_layer;
    REQUIRE(L <= 4);
    const size_t BT = (size_t)B * T, C = (size_t)d->n_embd;
    m->elem = nn_dtype_size(t);
    m->n_params = llama_num_params(d);
    m->acts_bytes = (size_t)llama_block_acts_bytes(d, B, T, t);
    nn_device *dev = m->dev;
    const size_t resid = (size_t)(L + 1) * BT * C;
    m->staging = malloc(m->elem * ((size_t)m->n_params > resid ? (size_t)m->n_params : resid));
    REQUIRE(m->staging != NULL);
    DEV_OK(m, dev->ops->alloc(dev, m->elem * (size_t)m->n_params, (void **)&m->params));
    DEV_OK(m, dev->ops->alloc(dev, m->elem * (size_t)m->n_params, (void **)&m->grads));
    DEV_OK(m, dev->ops->alloc(dev, m->elem * resid, (void **)&m->resid));
    DEV_OK(m, dev->ops->alloc(dev, (size_t)L * m->acts_bytes, (void **)&m->acts_mem));
    DEV_OK(m, dev->ops->alloc(dev, m->elem * BT * C, &m->dres[0]));
    DEV_OK(m, dev->ops->alloc(dev, m->elem * BT * C, &m->dres[1]));
    DEV_OK(m, dev->ops->alloc(dev, be->ops->block_scratch_bytes(be, B, T), &m->bscratch));
    DEV_OK(m, dev->ops->alloc(dev, be->ops->head_scratch_bytes(be, B, T, chunk), &m->hscratch));
    DEV_OK(m, dev->ops->alloc(dev, sizeof(float) * BT, (void **)&m->losses));
    DEV_OK(m, dev->ops->alloc(dev, sizeof(int) * BT, (void **)&m->tokens));
    DEV_OK(m, dev->ops->alloc(dev, sizeof(int) * BT, (void **)&m->targets));
    llama_embed_w_carve(d, t, m->params, &m->w0);
    llama_embed_w_carve(d, t, m->grads, &m->g0);
    const int64_t head = mt_unit_offset(&llama_param_table, d, d->tied ? 0 : llama_head_unit(d));
    llama_head_w_carve(d, t, at(m->params, m->elem, (size_t)head), &m->wh);
    llama_head_w_carve(d, t, at(m->grads, m->elem, (size_t)head), &m->gh);
    for (int l = 0; l < L; l++) {
        const size_t off = (size_t)mt_unit_offset(&llama_param_table, d, 1 + l);
        llama_block_w_carve(d, t, at(m->params, m->elem, off), &m->w[l]);
        llama_block_w_carve(d, t, at(m->grads, m->elem, off), &m->g[l]);
        llama_block_acts_carve(d, B, T, t, m->acts_mem + (size_t)l * m->acts_bytes, &m->acts[l]);
    }
}

static void model_free(model *m) {
    void *bufs[] = {m->params, m->grads, m->resid, m->acts_mem, m->dres[0], m->dres[1],
                    m->bscratch, m->hscratch, m->losses, m->tokens, m->targets};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) m->dev->ops->free(m->dev, bufs[i]);
    free(m->staging);
    memset(m, 0, sizeof *m);
}

static void *resid_at(const model *m, int l) {
    return at(m->resid, m->elem, (size_t)l * m->B * m->T * m->d.n_embd);
}

/* n elements at device src into host fp32, and back. */
static void model_read(model *m, const void *src, size_t n, float *host) {
    DEV_OK(m, m->dev->ops->download(m->dev, m->staging, src, n * m->elem));
    REQUIRE(zs_convert(host, ZS_DTYPE_FP32, m->staging, zs_of(m->dev->dtype), (int64_t)n) ==
            ZS_OK);
}

static void model_write(model *m, void *dst, const float *host, size_t n) {
    REQUIRE(zs_convert(m->staging, zs_of(m->dev->dtype), host, ZS_DTYPE_FP32, (int64_t)n) ==
            ZS_OK);
    DEV_OK(m, m->dev->ops->upload(m->dev, dst, m->staging, n * m->elem));
}

static void forward_blocks(model *m) {
    llama_backend *be = m->be;
    BE_OK(m, be->ops->embed_forward(be, m->B, m->T, &m->w0, m->tokens, resid_at(m, 0)));
    for (int l = 0; l < m->d.n_layer; l++)
        BE_OK(m, be->ops->block_forward(be, m->B, m->T, &m->w[l], resid_at(m, l), &m->acts[l],
                                        resid_at(m, l + 1), m->bscratch));
}

/* A training step from zeroed gradients: the gradient of the mean loss. */
static void model_step(model *m) {
    llama_backend *be = m->be;
    const int L = m->d.n_layer;
    DEV_OK(m, m->dev->ops->zero(m->dev, m->grads, m->elem * (size_t)m->n_params));
    forward_blocks(m);
    BE_OK(m, be->ops->head_forward_backward(be, m->B, m->T, &m->wh, &m->gh, resid_at(m, L),
                                            m->targets, 1.0f / (float)(m->B * m->T), m->dres[0],
                                            m->losses, m->chunk, m->hscratch));
    for (int l = L - 1; l >= 0; l--)
        BE_OK(m, be->ops->block_backward(be, m->B, m->T, &m->w[l], &m->g[l], resid_at(m, l),
                                         &m->acts[l], m->dres[(L - 1 - l) % 2],
                                         m->dres[(L - l) % 2], m->bscratch));
    BE_OK(m, be->ops->embed_backward(be, m->B, m->T, &m->g0, m->tokens, m->dres[L % 2]));
}

/* What a step leaves, read back in fp32. */
typedef struct result {
    double loss, grad_norm;
    float *grads, *resid, *losses, *logits;
} result;

static void run(llama_backend *be, int B, int T, int chunk, const float *params,
                const int *tokens, const int *targets, result *out) {
    model m;
    model_init(&m, be, B, T, chunk);
    const size_t BT = (size_t)B * T, nr = (size_t)(m.d.n_layer + 1) * BT * m.d.n_embd;
    model_write(&m, m.params, params, (size_t)m.n_params);
    DEV_OK(&m, m.dev->ops->upload(m.dev, m.tokens, tokens, sizeof(int) * BT));
    DEV_OK(&m, m.dev->ops->upload(m.dev, m.targets, targets, sizeof(int) * BT));
    model_step(&m);
    out->grads = malloc(sizeof(float) * (size_t)m.n_params);
    out->resid = malloc(sizeof(float) * nr);
    out->losses = malloc(sizeof(float) * BT);
    out->logits = malloc(sizeof(float) * (size_t)m.d.vocab);
    REQUIRE(out->grads && out->resid && out->losses && out->logits);
    model_read(&m, m.grads, (size_t)m.n_params, out->grads);
    model_read(&m, m.resid, nr, out->resid);
    DEV_OK(&m, m.dev->ops->download(m.dev, out->losses, m.losses, sizeof(float) * BT));
    BE_OK(&m, be->ops->head_logits(be, B, T, &m.wh, resid_at(&m, m.d.n_layer), (int)BT - 1,
                                   out->logits, m.hscratch));
    double sum = 0.0, sq = 0.0;
    for (size_t r = 0; r < BT; r++) sum += out->losses[r];
    for (int64_t i = 0; i < m.n_params; i++) sq += (double)out->grads[i] * out->grads[i];
    out->loss = sum / (double)BT;
    out->grad_norm = sqrt(sq);
    model_free(&m);
}

static void free_result(result *r) {
    free(r->grads);
    free(r->resid);
    free(r->losses);
    free(r->logits);
}

/* ------------------------------------------------------------- inputs */

typedef struct inputs {
    float *params;
    int *tokens, *targets;
} inputs;

/* Parameters `gain` times the init, norms and biases off theirs (rounded to
 * bf16 and back when `bf16`, so both backends see the same weights); random
 * tokens with one repeated. */
static void make_inputs(const llama_dims *d, int BT, double gain, int bf16, uint64_t seed,
                        inputs *in) {
    const int64_t np = llama_num_params(d);
    in->params = malloc(sizeof(float) * (size_t)np);
    in->tokens = malloc(sizeof(int) * BT);
    in->targets = malloc(sizeof(int) * BT);
    REQUIRE(in->params && in->tokens && in->targets);
    mt_init_params(&llama_param_table, d, in->params, seed, gain, 0.2);
    if (bf16) {
        uint16_t *b = malloc(sizeof(uint16_t) * (size_t)np);
        REQUIRE(b != NULL);
        REQUIRE(zs_convert(b, ZS_DTYPE_BF16, in->params, ZS_DTYPE_FP32, np) == ZS_OK);
        REQUIRE(zs_convert(in->params, ZS_DTYPE_FP32, b, ZS_DTYPE_BF16, np) == ZS_OK);
        free(b);
    }
    mt_random_tokens(BT, d->vocab, in->tokens, seed + 1);
    mt_random_tokens(BT, d->vocab, in->targets, seed + 2);
    in->tokens[1] = in->tokens[BT - 1] = in->tokens[BT / 2]; // a repeated token
}

static void free_inputs(inputs *in) {
    free(in->params);
    free(in->tokens);
    free(in->targets);
}

/* ---------------------------------------------------------- comparing */

static void max_diff(const float *a, const float *b, size_t n, double *worst, size_t *at_out,
                     double *scale) {
    *worst = 0.0;
    *scale = 0.0;
    *at_out = 0;
    for (size_t i = 0; i < n; i++) {
        *scale = fabs(b[i]) > *scale ? fabs(b[i]) : *scale;
        const double e = fabs((double)a[i] - (double)b[i]);
        if (e > *worst || e != e) {
            *worst = e;
            *at_out = i;
        }
    }
}

static void compare(const char *model_name, const char *what, const float *cuda,
                    const float *cpu, size_t n, double tol) {
    double worst, scale;
    size_t i;
    max_diff(cuda, cpu, n, &worst, &i, &scale);
    CHECK_MSG(worst <= tol * scale,
              "%s: %s: max |cuda - cpu| = %.3g at [%zu] (cuda %.9g, cpu %.9g), scale %.3g, "
              "bound %.3g",
              model_name, what, worst, i, n ? cuda[i] : 0.0f, n ? cpu[i] : 0.0f, scale,
              tol * scale);
}

static void check_same_bits(const char *model_name, const char *dtype, const result *a,
                            const result *b, size_t n_params, size_t BT) {
    CHECK_MSG(memcmp(a->grads, b->grads, sizeof(float) * n_params) == 0 &&
                  memcmp(a->losses, b->losses, sizeof(float) * BT) == 0,
              "%s, %s: two identical steps on the GPU differ in some bit", model_name, dtype);
}

/* A tensor of the model by unit and index: its name and offset. */
typedef void (*tensor_fn)(void *ctx, const llama_param_spec *s, int64_t offset);
static void each_tensor(const llama_dims *d, tensor_fn f, void *ctx) {
    for (int u = 0; u < llama_num_units(d); u++)
        for (int i = 0; i < llama_unit_num_params(d, u); i++) {
            llama_param_spec s;
            REQUIRE(llama_param_spec_get(d, u, i, &s) == 0);
            f(ctx, &s, mt_param_offset(&llama_param_table, d, u, i));
        }
}

typedef struct fp32_grads {
    const char *name;
    const result *g, *c;
} fp32_grads;

static void compare_fp32_grad(void *p, const llama_param_spec *s, int64_t off) {
    const fp32_grads *x = p;
    char what[96];
    snprintf(what, sizeof what, "gradient of %s", s->name);
    compare(x->name, what, x->g->grads + off, x->c->grads + off, (size_t)s->numel, TOL_REL);
}

/* --------------------------------------------------------------- fp32 */

typedef struct backends {
    llama_backend *cpu, *gpu;
} backends;

static backends make_backends(nn_device *cpu, nn_device *gpu, const llama_dims *d) {
    backends b = {NULL, NULL};
    char err[512];
    if (llama_cpu_backend_create(cpu, d, d->max_seq, &b.cpu, err, sizeof err) != NN_OK ||
        llama_cuda_backend_create(gpu, d, d->max_seq, &b.gpu, err, sizeof err) != NN_OK) {
        fprintf(stderr, "test_llama_cuda: %s\n", err);
        exit(1);
    }
    return b;
}

static void free_backends(backends *b) {
    b->cpu->ops->destroy(b->cpu);
    b->gpu->ops->destroy(b->gpu);
}

static void test_fp32(const char *name, nn_device *cpu, nn_device *gpu, const llama_dims *d,
                      int B, int T, int chunk, double gain) {
    const int BT = B * T;
    backends be = make_backends(cpu, gpu, d);
    inputs in;
    make_inputs(d, BT, gain, 0, 31, &in);
    printf("fp32 %s: %d layers, %d heads on %d K/V, head %d, C %d, F %d, V %d; B %d, T %d, "
           "chunk %d\n",
           name, d->n_layer, d->n_head, d->n_kv_head, d->head_dim, d->n_embd, d->n_ff, d->vocab,
           B, T, chunk);
    result c, g, g2;
    run(be.cpu, B, T, chunk, in.params, in.tokens, in.targets, &c);
    run(be.gpu, B, T, chunk, in.params, in.tokens, in.targets, &g);
    run(be.gpu, B, T, chunk, in.params, in.tokens, in.targets, &g2);
    for (int r = 0; r < BT; r++)
        CHECK_MSG(fabs((double)g.losses[r] - c.losses[r]) <= TOL_LOSS * fabs(c.losses[r]),
                  "%s: position %d: loss cuda %.9g, cpu %.9g", name, r, g.losses[r], c.losses[r]);
    const size_t slice = (size_t)BT * d->n_embd;
    for (int l = 0; l <= d->n_layer; l++) {
        char what[64];
        snprintf(what, sizeof what, "residual stream into %s %d",
                 l < d->n_layer ? "block" : "head", l);
        compare(name, what, g.resid + (size_t)l * slice, c.resid + (size_t)l * slice, slice,
                TOL_REL);
    }
    fp32_grads x = {name, &g, &c};
    each_tensor(d, compare_fp32_grad, &x);
    compare(name, "logits of the last row", g.logits, c.logits, (size_t)d->vocab, TOL_REL);
    CHECK_MSG(fabs(g.grad_norm - c.grad_norm) <= 1e-4 * c.grad_norm,
              "%s: gradient norm: cuda %.9g, cpu %.9g", name, g.grad_norm, c.grad_norm);
    check_same_bits(name, "fp32", &g, &g2, (size_t)llama_num_params(d), (size_t)BT);
    free_result(&c);
    free_result(&g);
    free_result(&g2);
    free_inputs(&in);
    free_backends(&be);
}

/* --------------------------------------------------------------- bf16 */

typedef struct bf16_grads {
    const result *g, *c;
    double worst;
    const char *at_name;
} bf16_grads;

static void bf16_grad(void *p, const llama_param_spec *s, int64_t off) {
    bf16_grads *x = p;
    double worst, scale;
    size_t k;
    max_diff(x->g->grads + off, x->c->grads + off, (size_t)s->numel, &worst, &k, &scale);
    const double e = scale > 0.0 ? worst / scale : worst;
    if (e > x->worst || e != e) {
        x->worst = e;
        x->at_name = s->name;
    }
}

/* bf16 on the GPU against fp32 on the CPU: the largest ratio of a measured
 * difference to its bound (<= 1 passes), each kind's printed. */
static double bf16_margin(const llama_dims *d, int BT, const result *g, const result *c) {
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
    bf16_grads x = {g, c, 0.0, ""};
    each_tensor(d, bf16_grad, &x);
    const double norm = fabs(g->grad_norm - c->grad_norm) / c->grad_norm;
    printf("  per-position loss %.3g (bound %.3g, at %d); mean loss %.3g (bound %.3g); "
           "gradient %.3g of its scale (bound %.3g, %s); gradient norm %.3g (bound %.3g)\n",
           pos, BF16_POS_LOSS, pos_at, mean, BF16_MEAN_LOSS, x.worst, BF16_GRAD, x.at_name, norm,
           BF16_NORM);
    const double r[4] = {pos / BF16_POS_LOSS, mean / BF16_MEAN_LOSS, x.worst / BF16_GRAD,
                         norm / BF16_NORM};
    double worst = 0.0;
    for (int i = 0; i < 4; i++) worst = r[i] > worst || r[i] != r[i] ? r[i] : worst;
    return worst;
}

static void test_bf16(const char *name, nn_device *cpu, nn_device *gpu16, const llama_dims *d,
                      int B, int T, int chunk, double gain) {
    const int BT = B * T;
    backends be = make_backends(cpu, gpu16, d);
    inputs in;
    make_inputs(d, BT, gain, 1, 31, &in);
    printf("bf16 %s: B %d, T %d, chunk %d\n", name, B, T, chunk);
    result c, g, g2;
    run(be.cpu, B, T, chunk, in.params, in.tokens, in.targets, &c);
    run(be.gpu, B, T, chunk, in.params, in.tokens, in.targets, &g);
    run(be.gpu, B, T, chunk, in.params, in.tokens, in.targets, &g2);
    const double w = bf16_margin(d, BT, &g, &c);
    CHECK_MSG(w <= 1.0, "%s, bf16: %.3g times a bound", name, w);
    check_same_bits(name, "bf16", &g, &g2, (size_t)llama_num_params(d), (size_t)BT);
    free_result(&c);
    free_result(&g);
    free_result(&g2);
    free_inputs(&in);
    free_backends(&be);
}

/* ------------------------------------------------ QLoRA's weight source */

/*
 * Block 0 with its seven matrices NULL, taken from be->weights
 * (llama_backend.h) as llama_train's QLoRA takes them: one device buffer of
 * the largest matrix's size, filled with NaN and then overwritten with the
 * asked matrix on each get() (device copies on the stream, ordered with the
 * products), so a product reading a pointer after the next get() reads
 * another matrix or NaN. The layers then run q, k, v and gate, up as
 * separate GEMMs where the matrices in the struct, adjacent, run as one:
 * not the same bits, so it is held to the CPU (every matrix in the struct)
 * within the fp32 tolerance: activations, y, dx and the gradients (the
 * adapters' on a frozen base, as QLoRA's; the base's otherwise).
 */
typedef struct one_matrix {
    nn_device *dev;
    const void *mat[LLAMA_BLOCK_SLOTS]; /* by slot; NULL: not the source's */
    size_t bytes[LLAMA_BLOCK_SLOTS];
    void *mem, *nans; /* device [cap bytes] each */
    size_t cap;
    int asked; /* get()s so far */
} one_matrix;

static int one_matrix_get(void *user, int slot, const void **out, char *err, size_t cap) {
    one_matrix *s = user;
    s->asked++;
    if (slot < 0 || slot >= LLAMA_BLOCK_SLOTS || s->mat[slot] == NULL)
        return snprintf(err, cap, "no matrix in slot %d", slot), NN_ERR_ARG;
    int st = s->dev->ops->copy(s->dev, s->mem, s->nans, s->cap);
    if (st == NN_OK) st = s->dev->ops->copy(s->dev, s->mem, s->mat[slot], s->bytes[slot]);
    if (st != NN_OK) return snprintf(err, cap, "%s", s->dev->ops->last_error(s->dev)), st;
    *out = s->mem;
    return NN_OK;
}

/* Moves block w's matrices into the source s and installs it in be. */
static void one_matrix_take(one_matrix *s, llama_backend *be, llama_block_w *w) {
    void **field[7] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->wgate, &w->wup, &w->wdown};
    const int slot[7] = {LLAMA_P_WQ,    LLAMA_P_WK,  LLAMA_P_WV,   LLAMA_P_WO,
                         LLAMA_P_WGATE, LLAMA_P_WUP, LLAMA_P_WDOWN};
    memset(s, 0, sizeof *s);
    s->dev = be->dev;
    for (int i = 0; i < 7; i++) {
        llama_param_spec spec;
        REQUIRE(llama_param_spec_get(&be->dims, 1, llama_block_index(&be->dims, slot[i]),
                                     &spec) == 0);
        s->mat[slot[i]] = *field[i];
        s->bytes[slot[i]] = sizeof(float) * (size_t)spec.numel;
        s->cap = s->bytes[slot[i]] > s->cap ? s->bytes[slot[i]] : s->cap;
        *field[i] = NULL;
    }
    float *nans = malloc(s->cap);
    REQUIRE(nans != NULL);
    for (size_t i = 0; i < s->cap / sizeof(float); i++) nans[i] = NAN;
    REQUIRE(s->dev->ops->alloc(s->dev, s->cap, &s->mem) == NN_OK &&
            s->dev->ops->alloc(s->dev, s->cap, &s->nans) == NN_OK &&
            s->dev->ops->upload(s->dev, s->nans, nans, s->cap) == NN_OK);
    free(nans);
    be->weights = (llama_weight_source){one_matrix_get, s};
}

/* What block 0's forward and backward leave, on the host: its activations
 * (carved in acts_host), y, dx and the gradients. */
typedef struct block_result {
    unsigned char *acts_host;
    llama_block_acts acts;
    float *y, *dx, *grads;
    size_t n_io, n_grads;
} block_result;

/* Block 0 of a model of d on dev (fp32), from the same inputs whatever the
 * device: with `lora`, adapters on every Linear of a frozen base; with
 * `sourced`, the matrices from a one_matrix source. */
static void block_run(nn_device *dev, const llama_dims *d, int lora, int sourced,
                      block_result *out) {
    const int B = 2, T = 13, BT = B * T;
    llama_backend *be = NULL;
    char err[512];
    if (llama_layers_backend_create(dev, d, d->max_seq, &be, err, sizeof err) != NN_OK ||
        (lora && llama_backend_set_lora(be, 4, 8.0, 0.1, err, sizeof err) != NN_OK)) {
        fprintf(stderr, "test_llama_cuda: %s\n", err);
        exit(1);
    }
    be->lora.seed = 77;
    llama_tm m;
    REQUIRE(llama_tm_init(&m, be, B, T, 7) == NN_OK);
    inputs in;
    make_inputs(d, BT, 3.0, 0, 71, &in);
    REQUIRE(llama_tm_set_params(&m, in.params) == NN_OK);
    const unsigned targets[4] = {(1u << LLAMA_LORA_TARGETS) - 1, 0, 0, 0};
    REQUIRE(!lora || llama_tm_set_lora(&m, targets) == NN_OK);
    const size_t C = (size_t)d->n_embd, n = (size_t)BT * C;
    out->n_io = n;
    out->n_grads = lora ? (size_t)m.n_lora : (size_t)m.n_params;
    float *host = malloc(sizeof(float) * (n > out->n_grads ? n : out->n_grads));
    float *garbage = malloc(m.acts_bytes);
    REQUIRE(host && garbage);
    uint64_t rng = 73;
    for (size_t i = 0; i < out->n_grads; i++) host[i] = (float)(0.3 * mt_normal(&rng));
    REQUIRE(!lora || llama_tm_set_lora_params(&m, host) == NN_OK);
    for (size_t i = 0; i < m.acts_bytes / sizeof(float); i++) garbage[i] = (float)i * 0.37f;
    REQUIRE(dev->ops->upload(dev, m.acts_mem, garbage, m.acts_bytes) == NN_OK);
    for (size_t i = 0; i < n; i++) host[i] = (float)mt_normal(&rng);
    REQUIRE(dev->ops->upload(dev, llama_tm_resid(&m, 0), host, sizeof(float) * n) == NN_OK);
    for (size_t i = 0; i < n; i++) host[i] = (float)(0.1 * mt_normal(&rng));
    REQUIRE(dev->ops->upload(dev, m.dres[0], host, sizeof(float) * n) == NN_OK);
    float *grads = lora ? m.lora_grads : m.grads;
    REQUIRE(dev->ops->zero(dev, grads, sizeof(float) * out->n_grads) == NN_OK);
    llama_block_w w = m.w[0];
    one_matrix src = {0};
    if (sourced) one_matrix_take(&src, be, &w);
    float *x = llama_tm_resid(&m, 0), *y = llama_tm_resid(&m, 1);
    int st = be->ops->block_forward(be, B, T, &w, x, &m.acts[0], y, m.bscratch);
    CHECK_MSG(st == NN_OK && src.asked == 7 * sourced, "block_forward: %d, %d get()s: %s", st,
              src.asked, be->ops->last_error(be));
    st = be->ops->block_backward(be, B, T, &w, &m.g[0], x, &m.acts[0], m.dres[0], m.dres[1],
                                 m.bscratch);
    CHECK_MSG(st == NN_OK && src.asked == 14 * sourced, "block_backward: %d, %d get()s: %s", st,
              src.asked, be->ops->last_error(be));
    out->acts_host = malloc(m.acts_bytes);
    out->y = malloc(sizeof(float) * n);
    out->dx = malloc(sizeof(float) * n);
    out->grads = malloc(sizeof(float) * out->n_grads);
    REQUIRE(out->acts_host && out->y && out->dx && out->grads);
    REQUIRE(dev->ops->download(dev, out->acts_host, m.acts_mem, m.acts_bytes) == NN_OK &&
            dev->ops->download(dev, out->y, y, sizeof(float) * n) == NN_OK &&
            dev->ops->download(dev, out->dx, m.dres[1], sizeof(float) * n) == NN_OK &&
            dev->ops->download(dev, out->grads, grads, sizeof(float) * out->n_grads) == NN_OK);
    llama_block_acts_carve(d, B, T, NN_F32, out->acts_host, &out->acts);
    if (sourced) {
        dev->ops->free(dev, src.mem);
        dev->ops->free(dev, src.nans);
    }
    free(host);
    free(garbage);
    free_inputs(&in);
    llama_tm_free(&m);
    be->ops->destroy(be);
}

static void test_weight_source(const char *name, nn_device *cpu, nn_device *gpu,
                               const llama_dims *d, int lora) {
    block_result c, g;
    block_run(cpu, d, lora, 0, &c);
    block_run(gpu, d, lora, 1, &g);
    const size_t BT = c.n_io / (size_t)d->n_embd, F = (size_t)d->n_ff;
    const struct {
        const char *what;
        const void *cuda, *cpu;
        size_t n;
    } t[] = {{"qkv", g.acts.qkv, c.acts.qkv, BT * (size_t)llama_qkv_width(d)},
             {"res1", g.acts.res1, c.acts.res1, c.n_io},
             {"gate", g.acts.gate, c.acts.gate, BT * F},
             {"up", g.acts.up, c.acts.up, BT * F},
             {"h", g.acts.h, c.acts.h, BT * F},
             {"y", g.y, c.y, c.n_io},
             {"dx", g.dx, c.dx, c.n_io},
             {lora ? "adapter gradients" : "gradients", g.grads, c.grads, c.n_grads}};
    printf("weight source (%s): matrices one at a time on CUDA against the CPU\n", name);
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        compare(name, t[i].what, t[i].cuda, t[i].cpu, t[i].n, TOL_REL);
    block_result *r[2] = {&c, &g};
    for (int i = 0; i < 2; i++) {
        free(r[i]->acts_host);
        free(r[i]->y);
        free(r[i]->dx);
        free(r[i]->grads);
    }
}

/* ------------------------------------------------------------- others */

/* head_forward and head_forward_backward give the same losses. */
static void test_head_consistency(nn_device *gpu, const llama_dims *d) {
    llama_backend *be = NULL;
    char err[512];
    REQUIRE(llama_cuda_backend_create(gpu, d, d->max_seq, &be, err, sizeof err) == NN_OK);
    const int B = 2, T = 9, BT = B * T;
    inputs in;
    make_inputs(d, BT, 5.0, 1, 41, &in);
    model m;
    model_init(&m, be, B, T, 4);
    model_write(&m, m.params, in.params, (size_t)m.n_params);
    DEV_OK(&m, m.dev->ops->upload(m.dev, m.tokens, in.tokens, sizeof(int) * BT));
    DEV_OK(&m, m.dev->ops->upload(m.dev, m.targets, in.targets, sizeof(int) * BT));
    float a[18], b[18];
    forward_blocks(&m);
    BE_OK(&m, be->ops->head_forward(be, B, T, &m.wh, resid_at(&m, d->n_layer), m.targets,
                                    m.losses, m.chunk, m.hscratch));
    DEV_OK(&m, m.dev->ops->download(m.dev, a, m.losses, sizeof a));
    model_step(&m);
    DEV_OK(&m, m.dev->ops->download(m.dev, b, m.losses, sizeof b));
    CHECK_MSG(memcmp(a, b, sizeof a) == 0,
              "%s: head_forward and head_forward_backward losses differ (first: %.9g vs %.9g)",
              nn_dtype_name(gpu->dtype), a[0], b[0]);
    model_free(&m);
    free_inputs(&in);
    be->ops->destroy(be);
}

/* The CUDA backend refuses a device that is not a CUDA one. */
static void test_refuses_cpu_device(nn_device *cpu, const llama_dims *d) {
    llama_backend *be = NULL;
    char err[512] = "";
    const int s = llama_cuda_backend_create(cpu, d, d->max_seq, &be, err, sizeof err);
    CHECK_MSG(s == NN_ERR_ARG && be == NULL && strstr(err, "nn_cuda_device_create") != NULL,
              "a CPU device: status %d, message \"%s\"", s, err);
}

/* "profile NAME CALLS TOTAL_MS MS_PER_STEP PCT_STEP": 1 when name's row is
 * in text. */
static int profile_row(const char *text, const char *name, long long *calls, double *total) {
    char key[64];
    snprintf(key, sizeof key, "\nprofile %s ", name);
    const char *p = strstr(text, key);
    double per_step = 0.0, pct = 0.0;
    return p != NULL &&
           sscanf(p + strlen(key), "%lld %lf %lf %lf", calls, total, &per_step, &pct) == 4;
}

/* LLAMA_CUDA_PROFILE: malformed values are refused at creation; "1,1"
 * times the second of three micro-steps, and the device's destroy prints
 * the table: each op counted once per call in that micro-step. */
static void test_profile(const llama_dims *d) {
    nn_device *dev = NULL;
    char err[512];
    REQUIRE(nn_cuda_device_create(NULL, NN_BF16, &dev, err, sizeof err) == NN_OK);
    llama_backend *be = NULL;
    setenv("LLAMA_CUDA_PROFILE", "2,", 1);
    const int s = llama_cuda_backend_create(dev, d, d->max_seq, &be, err, sizeof err);
    CHECK_MSG(s == NN_ERR_ARG && be == NULL && strstr(err, "LLAMA_CUDA_PROFILE") != NULL,
              "LLAMA_CUDA_PROFILE=\"2,\": status %d, message \"%s\"", s, err);
    setenv("LLAMA_CUDA_PROFILE", "1,1", 1);
    REQUIRE(llama_cuda_backend_create(dev, d, d->max_seq, &be, err, sizeof err) == NN_OK);
    unsetenv("LLAMA_CUDA_PROFILE");
    const int B = 2, T = 8;
    inputs in;
    make_inputs(d, B * T, 5.0, 1, 51, &in);
    model m;
    model_init(&m, be, B, T, 5);
    model_write(&m, m.params, in.params, (size_t)m.n_params);
    DEV_OK(&m, m.dev->ops->upload(m.dev, m.tokens, in.tokens, sizeof(int) * B * T));
    DEV_OK(&m, m.dev->ops->upload(m.dev, m.targets, in.targets, sizeof(int) * B * T));
    for (int step = 0; step < 3; step++) model_step(&m);
    model_free(&m);
    be->ops->destroy(be);
    FILE *catch = tmpfile();
    REQUIRE(catch != NULL);
    fflush(stderr);
    const int saved = dup(fileno(stderr));
    REQUIRE(saved >= 0 && dup2(fileno(catch), fileno(stderr)) >= 0);
    dev->ops->destroy(dev);
    fflush(stderr);
    REQUIRE(dup2(saved, fileno(stderr)) >= 0);
    close(saved);
    static char text[1 << 16];
    text[0] = '\n';
    rewind(catch);
    const size_t n = fread(text + 1, 1, sizeof text - 2, catch);
    text[n + 1] = '\0';
    fclose(catch);
    printf("LLAMA_CUDA_PROFILE=1,1 printed:%s", text);
    long long calls = 0;
    double total = 0.0, step_total = 0.0;
    CHECK_MSG(strstr(text, "\nllama cuda profile: 1 training micro-steps") != NULL,
              "profile: no header line for 1 micro-step");
    CHECK_MSG(profile_row(text, "step", &calls, &step_total) && calls == 1 && step_total > 0.0,
              "profile: no \"step\" row for 1 step (calls %lld, %.3f ms)", calls, step_total);
    // Two norms per block and model.norm once per head chunk (5 rows of
    // B T = 16: 4 chunks).
    const int chunks = (B * T + 4) / 5;
    CHECK_MSG(profile_row(text, "rmsnorm_fwd", &calls, &total) &&
                  calls == 2 * d->n_layer + chunks,
              "profile: rmsnorm_fwd counted %lld calls in one micro-step of %d blocks and %d "
              "head chunks",
              calls, d->n_layer, chunks);
    CHECK_MSG(profile_row(text, "attn_fwd_qk", &calls, &total) && calls == d->n_layer,
              "profile: attn_fwd_qk counted %lld calls for %d blocks", calls, d->n_layer);
    CHECK_MSG(profile_row(text, "encoder_bwd_wte", &calls, &total) && calls == 1,
              "profile: encoder_bwd_wte counted %lld calls in one micro-step", calls);
    CHECK_MSG(strstr(text, "\nfusion: bias fused ") != NULL,
              "profile: no fusion line after the table");
    free_inputs(&in);
}

/* ---------------------------------------------------------------- main */

static llama_dims tiny(int tied, int qkv_bias, int all_bias) {
    llama_dims d = {.n_layer = 2, .n_head = 4, .n_kv_head = 2, .head_dim = 10, .n_embd = 40,
                    .n_ff = 72, .vocab = 53, .max_seq = 64, .rms_eps = 1e-5,
                    .rope_theta = 10000.0, .init_std = 0.02, .model_type = "llama"};
    d.tied = tied;
    d.qkv_bias = qkv_bias || all_bias;
    d.o_bias = d.mlp_bias = all_bias;
    return d;
}

int main(void) {
    int devices = 0;
    const cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) {
        printf("SKIP: no usable CUDA device: %s\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices");
        return 77;
    }
    nn_device *cpu = nn_cpu_device_create(), *gpu = NULL, *gpu16 = NULL;
    char err[512];
    REQUIRE(cpu != NULL);
    if (nn_cuda_device_create(NULL, NN_F32, &gpu, err, sizeof err) != NN_OK ||
        nn_cuda_device_create(NULL, NN_BF16, &gpu16, err, sizeof err) != NN_OK) {
        fprintf(stderr, "test_llama_cuda: %s\n", err);
        return 1;
    }
    CHECK(strcmp(gpu->ops->name, "cuda") == 0 && gpu->dtype == NN_F32 &&
          gpu16->dtype == NN_BF16);

    // No biases: q, k, v and gate, up are one product each.
    const llama_dims plain = tiny(0, 0, 0);
    // Qwen2: q/k/v biases, the tied head.
    llama_dims qwen = tiny(1, 1, 0);
    snprintf(qwen.model_type, sizeof qwen.model_type, "qwen2");
    qwen.rope_theta = 1e6;
    // Every bias, untied.
    const llama_dims biases = tiny(0, 0, 1);
    // One K/V head for four query heads, llama3 RoPE scaling (its three
    // bands: wavelengths 6.3 ... 9900 against an original context of 64),
    // tied, and positions well past half the sequence.
    llama_dims mqa = tiny(1, 0, 0);
    mqa.n_kv_head = 1;
    mqa.rope_kind = LLAMA_ROPE_LLAMA3;
    mqa.rope_factor = 8.0;
    mqa.rope_low_freq = 1.0;
    mqa.rope_high_freq = 8.0;
    mqa.rope_orig_max = 64;
    // More rows (1536) than the column sums' finish has lanes times partial
    // rows (32 x 32), several head chunks, tokens repeated across the
    // embedding backward's tiles (V = 53 for 1536 rows).
    llama_dims rows = tiny(0, 0, 1);
    rows.n_layer = 1;
    // Widths whose rows and heads are whole 16-byte packs in bf16: the
    // vector paths of every kernel.
    llama_dims wide = {.n_layer = 2, .n_head = 4, .n_kv_head = 2, .head_dim = 16, .n_embd = 64,
                       .n_ff = 128, .vocab = 128, .max_seq = 64, .rms_eps = 1e-6,
                       .rope_theta = 500000.0, .init_std = 0.02, .model_type = "llama"};

    test_fp32("untied", cpu, gpu, &plain, 3, 13, 5, 5.0);
    test_fp32("qwen2 tied", cpu, gpu, &qwen, 3, 13, 5, 5.0);
    test_fp32("every bias", cpu, gpu, &biases, 2, 17, 7, 5.0);
    test_fp32("one K/V head, llama3 RoPE", cpu, gpu, &mqa, 2, 61, 40, 5.0);
    test_fp32("1536 rows", cpu, gpu, &rows, 24, 64, 256, 5.0);
    test_fp32("wide", cpu, gpu, &wide, 2, 32, 24, 5.0);
    test_bf16("untied", cpu, gpu16, &plain, 3, 13, 5, 5.0);
    test_bf16("qwen2 tied", cpu, gpu16, &qwen, 3, 13, 5, 5.0);
    test_bf16("every bias", cpu, gpu16, &biases, 2, 17, 7, 5.0);
    test_bf16("one K/V head, llama3 RoPE", cpu, gpu16, &mqa, 2, 61, 40, 5.0);
    test_bf16("wide", cpu, gpu16, &wide, 2, 32, 24, 5.0);
    test_weight_source("QLoRA: frozen base, adapters on every Linear", cpu, gpu, &plain, 1);
    test_weight_source("every bias, the base's gradients", cpu, gpu, &biases, 0);
    test_head_consistency(gpu, &plain);
    test_head_consistency(gpu16, &biases);
    test_refuses_cpu_device(cpu, &plain);
    test_profile(&plain);
    char line[512];
    CHECK(nn_cuda_device_stats(gpu16, NULL, line, sizeof line) == NN_OK &&
          strncmp(line, "fusion: bias fused ", 19) == 0);
    printf("bf16 device: %s\n", line);
    gpu->ops->destroy(gpu);
    gpu16->ops->destroy(gpu16);
    cpu->ops->destroy(cpu);
    return model_check_finish("test_llama_cuda");
}
