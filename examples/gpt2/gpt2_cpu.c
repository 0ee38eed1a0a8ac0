/*
 * The host-math backend of gpt2_backend.h: GPT-2's orchestration over the
 * layers of its device (nn_layers.h). On the CPU device every layer runs at
 * once on host pointers; on the simulated device (nn_sim.h) every layer is
 * a kernel on zeroshard's sim stream that runs the CPU's layer on device
 * addresses, so both give the same bits. This file touches no tensor: it
 * checks arguments, carves scratch and calls layers.
 *
 * Determinism and speed are the layers' (nn_cpu_layers.c): a row's math in
 * one thread, every sum over rows split by columns, rows ascending; bias
 * initialization rides in the GEMMs' beta = 1, the GELU backward is fused
 * with c_fc's bias gradient, and the attention runs on the strided qkv
 * layout (lda = 3C) with no copies.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_blas.h"
#include "gpt2_backend.h"
#include "gpt2_backend_impl.h"
#include "nn_layers.h"

typedef struct cpu_impl {
    char err[NN_ERR_CAP];
} cpu_impl;

static char *cpu__err(gpt2_backend *be) {
    return ((cpu_impl *)be->impl)->err;
}

#define CPU_ERR(be) cpu__err(be), NN_ERR_CAP

/* block_backward's scratch: [BT][4C] (c_fc's gradient, then qkv's),
 * [BT][C], and one sequence's attention-score gradients [NH][T][T];
 * block_forward needs none. */
static size_t cpu_block_scratch_bytes(const gpt2_backend *be, const gpt2_dims *d, int B, int T) {
    (void)be;
    if (B < 1 || T < 1) {
        return 0;
    }
    const size_t BT = (size_t)B * (size_t)T;
    return sizeof(float) * (BT * 5 * (size_t)d->n_embd + (size_t)d->n_head * T * T);
}

/* The head's: per chunk ln_f's output [R][C], mean and rstd [R] each, the
 * logits [R][V] and their input gradient [R][C]. */
static size_t cpu_head_scratch_bytes(const gpt2_backend *be, const gpt2_dims *d,
                                     int chunk_rows) {
    (void)be;
    if (chunk_rows < 1) {
        return 0;
    }
    return sizeof(float) * (size_t)chunk_rows * ((size_t)d->vocab + 2 * (size_t)d->n_embd + 2);
}

static const char *cpu_last_error(const gpt2_backend *be) {
    return ((const cpu_impl *)be->impl)->err;
}

/* Return a layer's failure, with its device's message. */
#define LAYER(call) NN_LAYER_TRY(be->dev, "gpt2", cpu__err(be), NN_ERR_CAP, call)

/* Where GPT-2's attention finds q, k and v: qkv rows of 3C, heads of C/NH
 * side by side, as many K/V heads as query heads. */
static nn_attn_layout cpu_attn_layout(const gpt2_dims *d, int B, int T) {
    const int C = d->n_embd;
    const nn_attn_layout s = {.B = B, .T = T, .n_head = d->n_head, .n_kv_head = d->n_head,
                              .head_dim = C / d->n_head, .ld = 3 * C, .q_off = 0, .k_off = C,
                              .v_off = 2 * C, .ldy = C};
    return s;
}

/* ---------------------------------------------------------- the model */

/* The tokens' check, on the device that holds them. */
static int cpu_check_tokens(gpt2_backend *be, const char *op, const char *what,
                            const int *tokens, long long n, int V) {
    return be->dev->layers->check_tokens(be->dev, "gpt2", op, what, "vocab", tokens, n, V,
                                         CPU_ERR(be));
}

static int cpu_embed_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                             const gpt2_embed_w *w, const int *tokens, void *x) {
    const nn_layer_ops *L = be->dev->layers;
    NN_TRY(gpt2__check_shape("embed_forward", d, B, T, CPU_ERR(be)));
    NN_TRY(gpt2__check_embed_w("embed_forward", "w", w, CPU_ERR(be)));
    NN_TRY(gpt2__check_ptr("embed_forward", "tokens", tokens, CPU_ERR(be)));
    NN_TRY(gpt2__check_ptr("embed_forward", "x", x, CPU_ERR(be)));
    const int BT = B * T, C = d->n_embd;
    NN_TRY(cpu_check_tokens(be, "embed_forward", "tokens", tokens, BT, d->vocab));
    LAYER(L->embed_forward(be->dev, BT, T, C, w->wte, w->wpe, tokens, x));
    return NN_OK;
}

static int cpu_embed_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                              gpt2_embed_w *g, const int *tokens, const void *dx) {
    const nn_layer_ops *L = be->dev->layers;
    NN_TRY(gpt2__check_shape("embed_backward", d, B, T, CPU_ERR(be)));
    NN_TRY(gpt2__check_embed_w("embed_backward", "g", g, CPU_ERR(be)));
    NN_TRY(gpt2__check_ptr("embed_backward", "tokens", tokens, CPU_ERR(be)));
    NN_TRY(gpt2__check_ptr("embed_backward", "dx", dx, CPU_ERR(be)));
    const int BT = B * T, C = d->n_embd;
    NN_TRY(cpu_check_tokens(be, "embed_backward", "tokens", tokens, BT, d->vocab));
    LAYER(L->embed_backward(be->dev, BT, T, C, g->wte, g->wpe, tokens, dx));
    return NN_OK;
}

static int cpu_block_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                             const gpt2_block_w *w, const void *x, gpt2_block_acts *a, void *y,
                             void *scratch) {
    (void)scratch; /* the forward keeps everything in acts */
    const nn_layer_ops *L = be->dev->layers;
    nn_device *dev = be->dev;
    NN_TRY(gpt2__check_shape("block_forward", d, B, T, CPU_ERR(be)));
    NN_TRY(gpt2__check_block_w("block_forward", "w", w, CPU_ERR(be)));
    NN_TRY(gpt2__check_acts("block_forward", a, CPU_ERR(be)));
    NN_TRY(gpt2__check_ptr("block_forward", "x", x, CPU_ERR(be)));
    NN_TRY(gpt2__check_ptr("block_forward", "y", y, CPU_ERR(be)));
    const int BT = B * T, C = d->n_embd;
    // Attention half: res1 = x + c_proj(attn(ln_1(x))).
    LAYER(L->layernorm_forward(dev, BT, C, x, w->ln1w, w->ln1b, a->ln1, a->ln1_mean,
                               a->ln1_rstd));
    LAYER(L->linear_forward(dev, BT, C, 3 * C, a->ln1, C, w->qkvw, w->qkvb, NULL, 0, a->qkv,
                            3 * C));
    const nn_attn_layout attn = cpu_attn_layout(d, B, T);
    LAYER(L->attention_forward(dev, &attn, a->qkv, a->att, a->atty));
    LAYER(L->linear_forward(dev, BT, C, C, a->atty, C, w->attprojw, w->attprojb, x, C, a->res1,
                            C));
    // MLP half: y = res1 + c_proj(gelu(c_fc(ln_2(res1)))).
    LAYER(L->layernorm_forward(dev, BT, C, a->res1, w->ln2w, w->ln2b, a->ln2, a->ln2_mean,
                               a->ln2_rstd));
    LAYER(L->linear_forward(dev, BT, C, 4 * C, a->ln2, C, w->fcw, w->fcb, NULL, 0, a->fch,
                            4 * C));
    LAYER(L->gelu_forward(dev, (long long)BT * 4 * C, a->fch, a->fch_gelu));
    LAYER(L->linear_forward(dev, BT, 4 * C, C, a->fch_gelu, 4 * C, w->fcprojw, w->fcprojb,
                            a->res1, C, y, C));
    return NN_OK;
}

static int cpu_block_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                              const gpt2_block_w *w, gpt2_block_w *g, const void *x,
                              const gpt2_block_acts *a, const void *dy, void *dx, void *scratch) {
    const nn_layer_ops *L = be->dev->layers;
    nn_device *dev = be->dev;
    NN_TRY(gpt2__check_shape("block_backward", d, B, T, CPU_ERR(be)));
    NN_TRY(gpt2__check_block_w("block_backward", "w", w, CPU_ERR(be)));
    NN_TRY(gpt2__check_block_w("block_backward", "g", g, CPU_ERR(be)));
    NN_TRY(gpt2__check_acts("block_backward", a, CPU_ERR(be)));
    NN_TRY(gpt2__check_ptr("block_backward", "x", x, CPU_ERR(be)));
    NN_TRY(gpt2__check_ptr("block_backward", "dy", dy, CPU_ERR(be)));
    NN_TRY(gpt2__check_ptr("block_backward", "dx", dx, CPU_ERR(be)));
    NN_TRY(gpt2__check_ptr("block_backward", "scratch", scratch, CPU_ERR(be)));
    const int BT = B * T, C = d->n_embd;
    float *dbig = scratch;                       // [BT][4C]: d fch, later d qkv ([BT][3C])
    float *dmid = dbig + (size_t)BT * 4 * C;     // [BT][C]: d ln2, d atty, d ln1 in turn
    float *datt = dmid + (size_t)BT * C;         // [NH][T][T]

    // MLP half. dy reaches res1 directly (residual) and through the MLP.
    LAYER(L->colsum_add(dev, BT, C, dy, C, g->fcprojb));
    LAYER(L->linear_backward(dev, BT, 4 * C, C, a->fch_gelu, 4 * C, w->fcprojw, dy, C,
                             g->fcprojw, dbig, 4 * C, 0.0f));
    LAYER(L->gelu_backward_colsum(dev, BT, 4 * C, dbig, a->fch, g->fcb));
    LAYER(L->linear_backward(dev, BT, C, 4 * C, a->ln2, C, w->fcw, dbig, 4 * C, g->fcw, dmid, C,
                             0.0f));
    // dx holds d res1 = dy + ln_2's input gradient from here on.
    LAYER(L->layernorm_backward(dev, BT, C, dmid, a->res1, a->ln2_mean, a->ln2_rstd, w->ln2w, dy,
                                dx, g->ln2w, g->ln2b));

    // Attention half, the same way with d res1.
    LAYER(L->colsum_add(dev, BT, C, dx, C, g->attprojb));
    LAYER(L->linear_backward(dev, BT, C, C, a->atty, C, w->attprojw, dx, C, g->attprojw, dmid, C,
                             0.0f));
    const nn_attn_layout attn = cpu_attn_layout(d, B, T);
    LAYER(L->attention_backward(dev, &attn, a->qkv, a->att, dmid, dbig, datt));
    LAYER(L->colsum_add(dev, BT, 3 * C, dbig, 3 * C, g->qkvb));
    LAYER(L->linear_backward(dev, BT, C, 3 * C, a->ln1, C, w->qkvw, dbig, 3 * C, g->qkvw, dmid,
                             C, 0.0f));
    LAYER(L->layernorm_backward(dev, BT, C, dmid, x, a->ln1_mean, a->ln1_rstd, w->ln1w, dx, dx,
                                g->ln1w, g->ln1b));
    return NN_OK;
}

/* --------------------------------------------------------------- head */

static int cpu_check_head(gpt2_backend *be, const char *op, const gpt2_dims *d, int B, int T,
                          const gpt2_embed_w *w, const void *x, int chunk_rows,
                          const void *scratch) {
    NN_TRY(gpt2__check_shape(op, d, B, T, CPU_ERR(be)));
    NN_TRY(gpt2__check_embed_w(op, "w", w, CPU_ERR(be)));
    NN_TRY(gpt2__check_ptr(op, "x", x, CPU_ERR(be)));
    NN_TRY(gpt2__check_ptr(op, "scratch", scratch, CPU_ERR(be)));
    if (chunk_rows < 1) {
        return ex_error(CPU_ERR(be), NN_ERR_ARG,
                           "gpt2 %s: chunk_rows = %d; need >= 1 (default "
                           "GPT2_HEAD_CHUNK_ROWS_DEFAULT)",
                           op, chunk_rows);
    }
    return NN_OK;
}

/* The head over chunks of rows; gradients only when g is not NULL. */
static int cpu_head_run(gpt2_backend *be, const gpt2_dims *d, int BT, const gpt2_embed_w *w,
                        gpt2_embed_w *g, const float *x, const int *targets, float dloss_scale,
                        float *dx, float *losses, int chunk_rows, float *scratch) {
    const nn_layer_ops *L = be->dev->layers;
    nn_device *dev = be->dev;
    const float *wte = w->wte;
    const int C = d->n_embd, V = d->vocab;
    const int R = chunk_rows < BT ? chunk_rows : BT;
    float *xn = scratch;                      // [R][C]  ln_f output
    float *mean = xn + (size_t)R * C;         // [R]
    float *rstd = mean + R;                   // [R]
    float *logits = rstd + R;                 // [R][V]  then d logits
    float *dxn = logits + (size_t)R * V;      // [R][C]
    const int want_grad = g != NULL;
    for (int r0 = 0; r0 < BT; r0 += R) {
        const int n = BT - r0 < R ? BT - r0 : R;
        const float *xc = x + (size_t)r0 * C;
        LAYER(L->layernorm_forward(dev, n, C, xc, w->lnfw, w->lnfb, xn, mean, rstd));
        // logits, losses and (training) g->wte += dlogits^T . xn, dxn =
        // dlogits . wte, through the tied embedding.
        LAYER(L->classifier_chunk(dev, n, C, V, xn, wte, targets + r0, dloss_scale, losses + r0,
                                  logits, want_grad ? g->wte : NULL, dxn));
        if (!want_grad) {
            continue;
        }
        LAYER(L->layernorm_backward(dev, n, C, dxn, xc, mean, rstd, w->lnfw, NULL,
                                    dx + (size_t)r0 * C, g->lnfw, g->lnfb));
    }
    return NN_OK;
}

static int cpu_head_forward_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                                     const gpt2_embed_w *w, gpt2_embed_w *g, const void *x,
                                     const int *targets, float dloss_scale, void *dx,
                                     float *losses, int chunk_rows, void *scratch) {
    const char *op = "head_forward_backward";
    NN_TRY(cpu_check_head(be, op, d, B, T, w, x, chunk_rows, scratch));
    NN_TRY(gpt2__check_embed_w(op, "g", g, CPU_ERR(be)));
    NN_TRY(gpt2__check_ptr(op, "targets", targets, CPU_ERR(be)));
    NN_TRY(gpt2__check_ptr(op, "dx", dx, CPU_ERR(be)));
    NN_TRY(gpt2__check_ptr(op, "losses", losses, CPU_ERR(be)));
    NN_TRY(cpu_check_tokens(be, op, "targets", targets, (long long)B * T, d->vocab));
    return cpu_head_run(be, d, B * T, w, g, x, targets, dloss_scale, dx, losses, chunk_rows,
                        scratch);
}

static int cpu_head_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                            const gpt2_embed_w *w, const void *x, const int *targets,
                            float *losses, int chunk_rows, void *scratch) {
    const char *op = "head_forward";
    NN_TRY(cpu_check_head(be, op, d, B, T, w, x, chunk_rows, scratch));
    NN_TRY(gpt2__check_ptr(op, "targets", targets, CPU_ERR(be)));
    NN_TRY(gpt2__check_ptr(op, "losses", losses, CPU_ERR(be)));
    NN_TRY(cpu_check_tokens(be, op, "targets", targets, (long long)B * T, d->vocab));
    return cpu_head_run(be, d, B * T, w, NULL, x, targets, 0.0f, NULL, losses, chunk_rows,
                        scratch);
}

static int cpu_head_logits(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                           const gpt2_embed_w *w, const void *x_in, int row, float *host_logits,
                           void *scratch) {
    const nn_layer_ops *L = be->dev->layers;
    nn_device *dev = be->dev;
    const float *x = x_in;
    const char *op = "head_logits";
    NN_TRY(cpu_check_head(be, op, d, B, T, w, x, 1, scratch));
    NN_TRY(gpt2__check_ptr(op, "host_logits", host_logits, CPU_ERR(be)));
    if (row < 0 || (long long)row >= (long long)B * T) {
        return ex_error(CPU_ERR(be), NN_ERR_ARG,
                           "gpt2 %s: row %d is outside [0, B * T = %lld)", op, row,
                           (long long)B * T);
    }
    const int C = d->n_embd, V = d->vocab;
    float *xn = scratch;          // [C], then mean and rstd
    float *logits = xn + C + 2;   // [V]: the head's scratch holds a chunk's logits
    LAYER(L->layernorm_forward(dev, 1, C, x + (size_t)row * C, w->lnfw, w->lnfb, xn, &xn[C],
                               &xn[C + 1]));
    // logits: [V] = wte . xn, then to the host.
    LAYER(L->classifier_logits_row(dev, C, V, xn, w->wte, logits));
    LAYER(dev->ops->download(dev, host_logits, logits, sizeof(float) * (size_t)V));
    return NN_OK;
}

static void cpu_destroy(gpt2_backend *be) {
    if (be == NULL) {
        return;
    }
    if (be->dev) {
        be->dev->ops->destroy(be->dev);
    }
    free(be->impl);
    free(be);
}

/* The same ops under the name of the device they run on. */
#define GPT2_LAYERS_OPS(device_name)                                                          \
    {                                                                                         \
        .name = device_name, .last_error = cpu_last_error,                                    \
        .block_scratch_bytes = cpu_block_scratch_bytes,                                       \
        .head_scratch_bytes = cpu_head_scratch_bytes, .embed_forward = cpu_embed_forward,     \
        .embed_backward = cpu_embed_backward, .block_forward = cpu_block_forward,             \
        .block_backward = cpu_block_backward,                                                 \
        .head_forward_backward = cpu_head_forward_backward,                                   \
        .head_forward = cpu_head_forward, .head_logits = cpu_head_logits,                     \
        .destroy = cpu_destroy,                                                               \
    }
static const gpt2_backend_ops cpu_ops = GPT2_LAYERS_OPS("cpu");
static const gpt2_backend_ops sim_ops = GPT2_LAYERS_OPS("sim");

int gpt2_layers_backend_create(nn_device *dev, gpt2_backend **out, char *err, size_t cap) {
    *out = NULL;
    if (dev == NULL || dev->layers == NULL) {
        if (dev) {
            dev->ops->destroy(dev);
        }
        return ex_error(err, cap, NN_ERR_ARG,
                        "gpt2: the device has no host layers (nn_layers.h): the CPU and the "
                        "simulated device have them; CUDA has its own backend");
    }
    gpt2_backend *be = calloc(1, sizeof(*be));
    cpu_impl *impl = calloc(1, sizeof(*impl));
    if (be == NULL || impl == NULL) {
        free(be);
        free(impl);
        dev->ops->destroy(dev);
        return ex_error(err, cap, NN_ERR_NOMEM, "gpt2: out of host memory");
    }
    ex_blas_init();
    be->ops = strcmp(dev->ops->name, "sim") == 0 ? &sim_ops : &cpu_ops;
    be->dtype = NN_F32;
    be->dev = dev;
    be->impl = impl;
    *out = be;
    return NN_OK;
}

gpt2_backend *gpt2_cpu_backend_create(void) {
    nn_device *dev = nn_cpu_device_create();
    gpt2_backend *be = NULL;
    char err[NN_ERR_CAP];
    if (dev == NULL || gpt2_layers_backend_create(dev, &be, err, sizeof err) != NN_OK) {
        return NULL;
    }
    return be;
}
