/*
 * The host-math backend of llama_backend.h: the Llama family's
 * orchestration over the layers of its device (nn_layers.h). On the CPU
 * device every layer runs at once on host pointers; on the simulated device
 * (nn_sim.h) every layer is a kernel on zeroshard's sim stream that runs the
 * CPU's layer on device addresses, so both give the same bits. This file
 * touches no tensor: it checks arguments, carves scratch and calls layers:
 * q, k and v written side by side into one qkv row, biases and residuals
 * riding on the GEMMs' beta = 1, grouped-query causal attention on the
 * strided qkv rows, RMSNorm, RoPE (its angle table made here and uploaded
 * to the device), SwiGLU and the fused classifier.
 *
 * Determinism is the layers' (nn_cpu_layers.c): a row's math in one thread,
 * every sum over rows split by columns, rows ascending, and a K/V head adding
 * its query heads in ascending order.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_blas.h"
#include "llama_backend.h"
#include "llama_backend_impl.h"
#include "nn_layers.h"

typedef struct cpu_impl {
    char err[NN_ERR_CAP];
    /* The rotary angles of positions 0 .. max_T - 1 (llama_rope_table):
     * [max_T][hd / 2] each, in the device's memory. */
    float *rope_cos, *rope_sin;
} cpu_impl;

static char *cpu__err(llama_backend *be) { return ((cpu_impl *)be->impl)->err; }

#define CPU_ERR(be) cpu__err(be), NN_ERR_CAP

/* Sizes a block's loops need, from the dims. */
static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* block_backward's scratch: [BT][max(2F, W)] (gate's and up's gradients,
 * then qkv's), [BT][max(C, NH hd)] (d xn2, d atty, d xn1 in turn) and one
 * sequence's attention-score gradients [NH][T][T]; block_forward needs
 * none. */
static size_t cpu_block_scratch_bytes(const llama_backend *be, int B, int T) {
    if (B < 1 || T < 1 || T > be->max_T) {
        return 0;
    }
    const llama__sizes s = llama__sizes_of(&be->dims);
    const size_t BT = (size_t)B * (size_t)T;
    return sizeof(float) * (BT * max_size(2 * (size_t)s.F, (size_t)s.W) +
                            BT * max_size((size_t)s.C, (size_t)s.Q) + (size_t)s.NH * T * T);
}

/* The head's: per chunk of R = min(chunk_rows, B T) rows model.norm's
 * output [R][C], its rstd [R], the logits [R][V] and the norm's input
 * gradient [R][C]. */
static size_t cpu_head_scratch_bytes(const llama_backend *be, int B, int T, int chunk_rows) {
    if (B < 1 || T < 1 || chunk_rows < 1) {
        return 0;
    }
    const long long BT = (long long)B * T;
    const size_t R = (size_t)(chunk_rows < BT ? chunk_rows : BT);
    const size_t C = (size_t)be->dims.n_embd, V = (size_t)be->dims.vocab;
    return sizeof(float) * R * (V + 2 * C + 1);
}

static const char *cpu_last_error(const llama_backend *be) {
    return ((const cpu_impl *)be->impl)->err;
}

/* Return a layer's failure, with its device's message. */
#define LAYER(call) NN_LAYER_TRY(be->dev, "llama", cpu__err(be), NN_ERR_CAP, call)

/* Rotates (backward: by the transpose) every q and k head of the B T rows
 * of a qkv buffer (row width W: q heads, then k heads), row r at position
 * r % T. */
static int cpu_rope(llama_backend *be, const llama__sizes *s, int BT, int T, float *qkv,
                    int backward) {
    const cpu_impl *impl = be->impl;
    // The k heads follow the q heads directly (k_off = NH hd).
    LAYER(be->dev->layers->rope(be->dev, BT, T, s->NH + s->NKV, s->hd, s->W, impl->rope_cos,
                                impl->rope_sin, qkv, backward));
    return NN_OK;
}

/* ------------------------------------------------------------ attention */

/* Where the attention finds q, k and v in a qkv row: NH q heads, then NKV k
 * heads, then NKV v heads; atty holds the NH heads' outputs side by side. */
static nn_attn_layout cpu_attn_layout(const llama__sizes *s, int B, int T) {
    const nn_attn_layout a = {.B = B, .T = T, .n_head = s->NH, .n_kv_head = s->NKV,
                              .head_dim = s->hd, .ld = s->W, .q_off = 0, .k_off = s->Q,
                              .v_off = s->Q + s->KV, .ldy = s->Q};
    return a;
}

/* ------------------------------------------------------------ embedding */

static int cpu_check_tokens(llama_backend *be, const char *op, const char *what,
                            const int *tokens, long long n) {
    return be->dev->layers->check_tokens(be->dev, "llama", op, what, "vocab_size", tokens, n,
                                         be->dims.vocab, CPU_ERR(be));
}

static int cpu_embed_forward(llama_backend *be, int B, int T, const llama_embed_w *w,
                             const int *tokens, void *x_out) {
    const char *op = "embed_forward";
    NN_TRY(llama__check_shape(op, be, B, T, CPU_ERR(be)));
    NN_TRY(llama__check_embed_w(op, "w", w, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "tokens", tokens, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "x", x_out, CPU_ERR(be)));
    const int BT = B * T, C = be->dims.n_embd;
    NN_TRY(cpu_check_tokens(be, op, "tokens", tokens, BT));
    LAYER(be->dev->layers->embed_forward(be->dev, BT, T, C, w->wte, NULL, tokens, x_out));
    return NN_OK;
}

static int cpu_embed_backward(llama_backend *be, int B, int T, llama_embed_w *g,
                              const int *tokens, const void *dx) {
    const char *op = "embed_backward";
    NN_TRY(llama__check_shape(op, be, B, T, CPU_ERR(be)));
    NN_TRY(llama__check_embed_w(op, "g", g, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "tokens", tokens, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "dx", dx, CPU_ERR(be)));
    const int BT = B * T, C = be->dims.n_embd;
    NN_TRY(cpu_check_tokens(be, op, "tokens", tokens, BT));
    LAYER(be->dev->layers->embed_backward(be->dev, BT, T, C, g->wte, NULL, tokens, dx));
    return NN_OK;
}

/* -------------------------------------------------------------- blocks */

static int cpu_block_forward(llama_backend *be, int B, int T, const llama_block_w *w,
                             const void *x_in, llama_block_acts *a, void *y_out, void *scratch) {
    const nn_layer_ops *L = be->dev->layers;
    nn_device *dev = be->dev;
    (void)scratch; /* the CPU's forward keeps everything in acts */
    const char *op = "block_forward";
    const llama_dims *d = &be->dims;
    NN_TRY(llama__check_shape(op, be, B, T, CPU_ERR(be)));
    NN_TRY(llama__check_block_w(op, "w", d, w, CPU_ERR(be)));
    NN_TRY(llama__check_acts(op, a, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "x", x_in, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "y", y_out, CPU_ERR(be)));
    const llama__sizes s = llama__sizes_of(d);
    const int BT = B * T, C = s.C, F = s.F;
    const float eps = (float)d->rms_eps;
    const float *x = x_in;
    float *y = y_out, *qkv = a->qkv;
    const float *bq = d->qkv_bias ? w->bq : NULL, *bk = d->qkv_bias ? w->bk : NULL,
                *bv = d->qkv_bias ? w->bv : NULL, *bo = d->o_bias ? w->bo : NULL;
    const float *bgate = d->mlp_bias ? w->bgate : NULL, *bup = d->mlp_bias ? w->bup : NULL,
                *bdown = d->mlp_bias ? w->bdown : NULL;

    // Attention half: res1 = x + o_proj(attn(rope(q), rope(k), v)) of
    // input_layernorm(x).
    LAYER(L->rmsnorm_forward(dev, BT, C, x, w->attn_norm, eps, a->xn1, a->rstd1));
    LAYER(L->linear_forward(dev, BT, C, s.Q, a->xn1, C, w->wq, bq, NULL, 0, qkv, s.W));
    LAYER(L->linear_forward(dev, BT, C, s.KV, a->xn1, C, w->wk, bk, NULL, 0, qkv + s.Q, s.W));
    LAYER(L->linear_forward(dev, BT, C, s.KV, a->xn1, C, w->wv, bv, NULL, 0, qkv + s.Q + s.KV,
                            s.W));
    NN_TRY(cpu_rope(be, &s, BT, T, qkv, 0));
    const nn_attn_layout attn = cpu_attn_layout(&s, B, T);
    LAYER(L->attention_forward(dev, &attn, qkv, a->att, a->atty));
    LAYER(L->linear_forward(dev, BT, s.Q, C, a->atty, s.Q, w->wo, bo, x, C, a->res1, C));

    // MLP half: y = res1 + down_proj(silu(gate_proj(m)) * up_proj(m)), m =
    // post_attention_layernorm(res1).
    LAYER(L->rmsnorm_forward(dev, BT, C, a->res1, w->mlp_norm, eps, a->xn2, a->rstd2));
    LAYER(L->linear_forward(dev, BT, C, F, a->xn2, C, w->wgate, bgate, NULL, 0, a->gate, F));
    LAYER(L->linear_forward(dev, BT, C, F, a->xn2, C, w->wup, bup, NULL, 0, a->up, F));
    LAYER(L->swiglu_forward(dev, (long long)BT * F, a->gate, a->up, a->h));
    LAYER(L->linear_forward(dev, BT, F, C, a->h, F, w->wdown, bdown, a->res1, C, y, C));
    return NN_OK;
}

static int cpu_block_backward(llama_backend *be, int B, int T, const llama_block_w *w,
                              llama_block_w *g, const void *x, const llama_block_acts *a,
                              const void *dy_in, void *dx_out, void *scratch) {
    const nn_layer_ops *L = be->dev->layers;
    nn_device *dev = be->dev;
    const char *op = "block_backward";
    const llama_dims *d = &be->dims;
    NN_TRY(llama__check_shape(op, be, B, T, CPU_ERR(be)));
    NN_TRY(llama__check_block_w(op, "w", d, w, CPU_ERR(be)));
    NN_TRY(llama__check_block_w(op, "g", d, g, CPU_ERR(be)));
    NN_TRY(llama__check_acts(op, a, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "x", x, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "dy", dy_in, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "dx", dx_out, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "scratch", scratch, CPU_ERR(be)));
    const llama__sizes s = llama__sizes_of(d);
    const int BT = B * T, C = s.C, F = s.F;
    const float *dy = dy_in;
    float *dx = dx_out;
    float *big = scratch;                                              // d gate | d up, then d qkv
    float *mid = big + (size_t)BT * max_size(2 * (size_t)F, (size_t)s.W); // d xn2, d atty, d xn1
    float *datt = mid + (size_t)BT * max_size((size_t)C, (size_t)s.Q);    // [NH][T][T]
    float *dgate = big, *dup = big + (size_t)BT * F;

    // MLP half. dy reaches res1 directly (residual) and through the MLP.
    if (d->mlp_bias) {
        LAYER(L->colsum_add(dev, BT, C, dy, C, g->bdown));
    }
    LAYER(L->linear_backward(dev, BT, F, C, a->h, F, w->wdown, dy, C, g->wdown, dgate, F, 0.0f));
    LAYER(L->swiglu_backward(dev, (long long)BT * F, a->gate, a->up, dgate, dup));
    if (d->mlp_bias) {
        LAYER(L->colsum_add(dev, BT, F, dgate, F, g->bgate));
        LAYER(L->colsum_add(dev, BT, F, dup, F, g->bup));
    }
    // d xn2 = d gate . Wgate + d up . Wup.
    LAYER(L->linear_backward(dev, BT, C, F, a->xn2, C, w->wgate, dgate, F, g->wgate, mid, C, 0.0f));
    LAYER(L->linear_backward(dev, BT, C, F, a->xn2, C, w->wup, dup, F, g->wup, mid, C, 1.0f));
    // dx holds d res1 = dy + post_attention_layernorm's input gradient from
    // here on.
    LAYER(L->rmsnorm_backward(dev, BT, C, mid, a->res1, a->rstd2, w->mlp_norm, dy, dx,
                              g->mlp_norm));

    // Attention half, the same way with d res1.
    if (d->o_bias) {
        LAYER(L->colsum_add(dev, BT, C, dx, C, g->bo));
    }
    LAYER(L->linear_backward(dev, BT, s.Q, C, a->atty, s.Q, w->wo, dx, C, g->wo, mid, s.Q, 0.0f));
    const nn_attn_layout attn = cpu_attn_layout(&s, B, T);
    float *dqkv = big;
    LAYER(L->attention_backward(dev, &attn, a->qkv, a->att, mid, dqkv, datt));
    // Back through the rotation: the gradients of q and k as projected.
    NN_TRY(cpu_rope(be, &s, BT, T, dqkv, 1));
    if (d->qkv_bias) {
        LAYER(L->colsum_add(dev, BT, s.Q, dqkv, s.W, g->bq));
        LAYER(L->colsum_add(dev, BT, s.KV, dqkv + s.Q, s.W, g->bk));
        LAYER(L->colsum_add(dev, BT, s.KV, dqkv + s.Q + s.KV, s.W, g->bv));
    }
    // d xn1 = dq . Wq + dk . Wk + dv . Wv.
    LAYER(L->linear_backward(dev, BT, C, s.Q, a->xn1, C, w->wq, dqkv, s.W, g->wq, mid, C, 0.0f));
    LAYER(L->linear_backward(dev, BT, C, s.KV, a->xn1, C, w->wk, dqkv + s.Q, s.W, g->wk, mid, C,
                             1.0f));
    LAYER(L->linear_backward(dev, BT, C, s.KV, a->xn1, C, w->wv, dqkv + s.Q + s.KV, s.W, g->wv,
                             mid, C, 1.0f));
    LAYER(L->rmsnorm_backward(dev, BT, C, mid, x, a->rstd1, w->attn_norm, dx, dx, g->attn_norm));
    return NN_OK;
}

/* --------------------------------------------------------------- head */

static int cpu_check_head(llama_backend *be, const char *op, int B, int T, const llama_head_w *w,
                          const void *x, const int *targets, float *losses, int chunk_rows,
                          const void *scratch) {
    NN_TRY(llama__check_shape(op, be, B, T, CPU_ERR(be)));
    NN_TRY(llama__check_head_w(op, "w", w, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "x", x, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "scratch", scratch, CPU_ERR(be)));
    NN_TRY(llama__check_chunk(op, chunk_rows, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "targets", targets, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "losses", losses, CPU_ERR(be)));
    return cpu_check_tokens(be, op, "targets", targets, (long long)B * T);
}

/* The head over chunks of rows: model.norm, the shared classifier, and
 * (when g is not NULL) model.norm's backward. */
static int cpu_head_run(llama_backend *be, int BT, const llama_head_w *w, llama_head_w *g,
                        const float *x, const int *targets, float dloss_scale, float *dx,
                        float *losses, int chunk_rows, float *scratch) {
    const nn_layer_ops *L = be->dev->layers;
    nn_device *dev = be->dev;
    const int C = be->dims.n_embd, V = be->dims.vocab;
    const float eps = (float)be->dims.rms_eps;
    const int R = chunk_rows < BT ? chunk_rows : BT;
    float *xn = scratch;                 // [R][C]  model.norm's output
    float *rstd = xn + (size_t)R * C;    // [R]
    float *logits = rstd + R;            // [R][V]  then d logits
    float *dxn = logits + (size_t)R * V; // [R][C]
    for (int r0 = 0; r0 < BT; r0 += R) {
        const int n = BT - r0 < R ? BT - r0 : R;
        const float *xc = x + (size_t)r0 * C;
        LAYER(L->rmsnorm_forward(dev, n, C, xc, w->norm, eps, xn, rstd));
        LAYER(L->classifier_chunk(dev, n, C, V, xn, w->wout, targets + r0, dloss_scale, losses + r0,
                                logits, g != NULL ? g->wout : NULL, dxn));
        if (g != NULL) {
            LAYER(L->rmsnorm_backward(dev, n, C, dxn, xc, rstd, w->norm, NULL, dx + (size_t)r0 * C,
                                 g->norm));
        }
    }
    return NN_OK;
}

static int cpu_head_forward_backward(llama_backend *be, int B, int T, const llama_head_w *w,
                                     llama_head_w *g, const void *x, const int *targets,
                                     float dloss_scale, void *dx, float *losses, int chunk_rows,
                                     void *scratch) {
    const char *op = "head_forward_backward";
    NN_TRY(cpu_check_head(be, op, B, T, w, x, targets, losses, chunk_rows, scratch));
    NN_TRY(llama__check_head_w(op, "g", g, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "dx", dx, CPU_ERR(be)));
    return cpu_head_run(be, B * T, w, g, x, targets, dloss_scale, dx, losses, chunk_rows,
                        scratch);
}

static int cpu_head_forward(llama_backend *be, int B, int T, const llama_head_w *w,
                            const void *x, const int *targets, float *losses, int chunk_rows,
                            void *scratch) {
    NN_TRY(cpu_check_head(be, "head_forward", B, T, w, x, targets, losses, chunk_rows, scratch));
    return cpu_head_run(be, B * T, w, NULL, x, targets, 0.0f, NULL, losses, chunk_rows,
                        scratch);
}

static int cpu_head_logits(llama_backend *be, int B, int T, const llama_head_w *w,
                           const void *x_in, int row, float *host_logits, void *scratch) {
    const char *op = "head_logits";
    NN_TRY(llama__check_shape(op, be, B, T, CPU_ERR(be)));
    NN_TRY(llama__check_head_w(op, "w", w, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "x", x_in, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "scratch", scratch, CPU_ERR(be)));
    NN_TRY(llama__check_ptr(op, "host_logits", host_logits, CPU_ERR(be)));
    if (row < 0 || (long long)row >= (long long)B * T) {
        return ex_error(CPU_ERR(be), NN_ERR_ARG, "llama %s: row %d is outside [0, B * T = %lld)",
                         op, row, (long long)B * T);
    }
    const nn_layer_ops *L = be->dev->layers;
    nn_device *dev = be->dev;
    const int C = be->dims.n_embd, V = be->dims.vocab;
    const float *x = x_in;
    float *xn = scratch;        // [C], then rstd
    float *logits = xn + C + 1; // [V]: the head's scratch holds a chunk's logits
    LAYER(L->rmsnorm_forward(dev, 1, C, x + (size_t)row * C, w->norm, (float)be->dims.rms_eps,
                             xn, &xn[C]));
    LAYER(L->classifier_logits_row(dev, C, V, xn, w->wout, logits));
    LAYER(dev->ops->download(dev, host_logits, logits, sizeof(float) * (size_t)V));
    return NN_OK;
}

static void cpu_destroy(llama_backend *be) {
    if (be == NULL) {
        return;
    }
    cpu_impl *impl = be->impl;
    if (impl != NULL) {
        be->dev->ops->free(be->dev, impl->rope_cos);
        be->dev->ops->free(be->dev, impl->rope_sin);
    }
    free(impl);
    free(be);
}

/* The same ops under the name of the device they run on. */
#define LLAMA_LAYERS_OPS(device_name)                                                         \
    {                                                                                         \
        .name = device_name, .block_scratch_bytes = cpu_block_scratch_bytes,                  \
        .head_scratch_bytes = cpu_head_scratch_bytes, .embed_forward = cpu_embed_forward,     \
        .embed_backward = cpu_embed_backward, .block_forward = cpu_block_forward,             \
        .block_backward = cpu_block_backward,                                                 \
        .head_forward_backward = cpu_head_forward_backward,                                   \
        .head_forward = cpu_head_forward, .head_logits = cpu_head_logits,                     \
        .last_error = cpu_last_error, .destroy = cpu_destroy,                                 \
    }
static const llama_backend_ops cpu_ops = LLAMA_LAYERS_OPS("cpu");
static const llama_backend_ops sim_ops = LLAMA_LAYERS_OPS("sim");

/* The RoPE table into the device's memory: computed on the host, uploaded. */
static int upload_rope_table(nn_device *dev, const llama_dims *dims, int max_T, cpu_impl *impl,
                             char *err, size_t cap) {
    const size_t bytes = sizeof(float) * (size_t)max_T * (size_t)(dims->head_dim / 2);
    float *cos_t = malloc(bytes), *sin_t = malloc(bytes);
    if (cos_t == NULL || sin_t == NULL) {
        free(cos_t);
        free(sin_t);
        return ex_error(err, cap, NN_ERR_NOMEM,
                        "llama backend: out of host memory for the RoPE table of %d positions",
                        max_T);
    }
    llama_rope_table(dims, max_T, cos_t, sin_t);
    int st = dev->ops->alloc(dev, bytes, (void **)&impl->rope_cos);
    if (st == NN_OK) st = dev->ops->alloc(dev, bytes, (void **)&impl->rope_sin);
    if (st == NN_OK) st = dev->ops->upload(dev, impl->rope_cos, cos_t, bytes);
    if (st == NN_OK) st = dev->ops->upload(dev, impl->rope_sin, sin_t, bytes);
    free(cos_t);
    free(sin_t);
    if (st != NN_OK) {
        return ex_error(err, cap, st, "llama backend: the RoPE table of %d positions: %s", max_T,
                        dev->ops->last_error(dev));
    }
    return NN_OK;
}

int llama_cpu_backend_create(nn_device *dev, const llama_dims *dims, int max_T,
                             llama_backend **out, char *err, size_t cap) {
    if (out == NULL) {
        return ex_error(err, cap, NN_ERR_ARG, "llama cpu backend: out is NULL");
    }
    *out = NULL;
    if (dev == NULL || dev->layers == NULL || dev->dtype != NN_F32) {
        return ex_error(err, cap, NN_ERR_ARG,
                         "llama cpu backend: the device must have host layers and fp32 "
                         "tensors (nn_cpu_device_create, or nn_sim_device_create)");
    }
    char why[512];
    if (dims == NULL || llama_dims_check(dims, why, sizeof why) != 0) {
        return ex_error(err, cap, NN_ERR_ARG, "llama cpu backend: %s",
                         dims == NULL ? "dims is NULL" : why);
    }
    if (max_T < 1 || max_T > dims->max_seq) {
        return ex_error(err, cap, NN_ERR_ARG,
                         "llama cpu backend: max_T = %d; need 1 <= max_T <= "
                         "max_position_embeddings (%d)",
                         max_T, dims->max_seq);
    }
    llama_backend *be = calloc(1, sizeof(*be));
    cpu_impl *impl = calloc(1, sizeof(*impl));
    if (be == NULL || impl == NULL) {
        free(impl);
        free(be);
        return ex_error(err, cap, NN_ERR_NOMEM, "llama cpu backend: out of host memory");
    }
    be->dev = dev;
    be->impl = impl;
    const int st = upload_rope_table(dev, dims, max_T, impl, err, cap);
    if (st != NN_OK) {
        cpu_destroy(be);
        return st;
    }
    ex_blas_init();
    be->ops = strcmp(dev->ops->name, "sim") == 0 ? &sim_ops : &cpu_ops;
    be->dims = *dims;
    be->max_T = max_T;
    *out = be;
    return NN_OK;
}
