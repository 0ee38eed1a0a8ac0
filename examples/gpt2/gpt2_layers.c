/*
 * The backend of gpt2_backend.h on any device: GPT-2's orchestration over
 * the layers of its device (nn_layers.h). On the CPU every layer runs at
 * once on host pointers; on the simulated device (nn_sim.h) every layer is
 * a kernel on zeroshard's sim stream that runs the CPU's layer on device
 * addresses, so both give the same bits; on CUDA (gpt2_cuda.cu creates the
 * device with GPT-2's options) every layer is launched on zeroshard's
 * stream in the storage dtype, c_fc's GELU and its gradient in cuBLASLt's
 * epilogues when the device fuses them. This file touches no tensor: it
 * checks arguments, carves scratch (in the device's dtype and alignment)
 * and calls layers.
 *
 * A block, forward: ln_1; qkv = ln_1 . W^T + b; attention; res1 = x +
 * atty . W^T + b (the residual rides in the product); ln_2; fch = ln_2 .
 * W^T + b and fch_gelu = gelu(fch); y = res1 + fch_gelu . W^T + b.
 * Backward: the same in reverse, weight gradients accumulated into the
 * gradients, bias gradients by deterministic column sums, the GELU's
 * gradient fused with c_fc's bias sum.
 *
 * LoRA (gpt2_backend_set_lora): each adapted Linear's adapter adds its
 * output to the Linear's (before GELU for c_fc, so c_fc and its GELU run
 * apart there) and its backward, from the same output gradient, adds into
 * the same input gradient (so mlp.c_proj's input gradient takes GELU's
 * derivative after both). Without adapters the calls are the ones above.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_blas.h"
#include "gpt2_backend.h"
#include "gpt2_backend_impl.h"
#include "nn_layers.h"

typedef struct layers_impl {
    char err[NN_ERR_CAP];
} layers_impl;

static char *be_err(gpt2_backend *be) {
    return ((layers_impl *)be->impl)->err;
}

#define BE_ERR(be) be_err(be), NN_ERR_CAP

/* Where GPT-2's attention finds q, k and v: qkv rows of 3C, heads of C/NH
 * side by side, as many K/V heads as query heads. */
static nn_attn_layout attn_layout(const gpt2_dims *d, int B, int T) {
    const int C = d->n_embd;
    const nn_attn_layout s = {.B = B, .T = T, .n_head = d->n_head, .n_kv_head = d->n_head,
                              .head_dim = C / d->n_head, .ld = 3 * C, .q_off = 0, .k_off = C,
                              .v_off = 2 * C, .ldy = C};
    return s;
}

/* block_backward's scratch: big [BT][4C] (c_fc's gradient, then qkv's),
 * mid [BT][C] (d ln2, d atty, d ln1 in turn), with LoRA its t and dt
 * [BT][r] (forward too) and dfcb [4C], where a frozen c_fc's bias gradient
 * goes (gelu_backward_colsum always sums one; nobody reads it), and the
 * attention's (its score gradients; on CUDA also the head-layout buffers,
 * which block_forward uses too). */
typedef struct block_parts {
    void *big, *mid, *t, *dt, *dfcb, *xd, *dxd, *attn;
} block_parts;

static size_t block_sizes(const gpt2_backend *be, const gpt2_dims *d, int B, int T,
                          block_parts *p, void *scratch) {
    const nn_device *dev = be->dev;
    const size_t e = nn_dtype_size(dev->dtype), BT = (size_t)B * (size_t)T;
    const size_t C = (size_t)d->n_embd;
    const size_t lora = BT * (size_t)be->lora.r * e, dfcb = lora > 0 ? 4 * C * e : 0;
    /* With dropout, the adapters' dropped input and its gradient, [BT][4 C]
     * (mlp.c_proj's input, the widest). */
    const size_t drop = lora > 0 && be->lora.dropout > 0.0f ? BT * 4 * C * e : 0;
    const nn_attn_layout attn = attn_layout(d, B, T);
    unsigned char *cur = scratch;
    const size_t total = nn_scratch_round(dev, BT * 4 * C * e) + nn_scratch_round(dev, BT * C * e) +
                         (lora > 0 ? 2 * nn_scratch_round(dev, lora) : 0) +
                         nn_scratch_round(dev, dfcb) + 2 * nn_scratch_round(dev, drop) +
                         dev->layers->attention_scratch_bytes(dev, &attn);
    if (p != NULL) {
        p->big = nn_scratch_take(dev, &cur, BT * 4 * C * e);
        p->mid = nn_scratch_take(dev, &cur, BT * C * e);
        p->t = lora > 0 ? nn_scratch_take(dev, &cur, lora) : NULL;
        p->dt = lora > 0 ? nn_scratch_take(dev, &cur, lora) : NULL;
        p->dfcb = dfcb > 0 ? nn_scratch_take(dev, &cur, dfcb) : NULL;
        p->xd = drop > 0 ? nn_scratch_take(dev, &cur, drop) : NULL;
        p->dxd = drop > 0 ? nn_scratch_take(dev, &cur, drop) : NULL;
        p->attn = cur;
    }
    return total;
}

static size_t layers_block_scratch_bytes(const gpt2_backend *be, const gpt2_dims *d, int B,
                                         int T) {
    if (d == NULL || B < 1 || T < 1 || d->n_head < 1) {
        return 0;
    }
    return block_sizes(be, d, B, T, NULL, NULL);
}

/* The head's, per chunk of R rows: ln_f's output [R][C], mean and rstd [R]
 * (fp32), its input gradient [R][C], and the classifier's (the logits). */
typedef struct head_parts {
    void *xn, *dxn, *cls;
    float *mean, *rstd;
} head_parts;

static size_t head_sizes(const gpt2_backend *be, const gpt2_dims *d, int R, head_parts *h,
                         void *scratch) {
    const nn_device *dev = be->dev;
    const size_t xn = (size_t)R * (size_t)d->n_embd * nn_dtype_size(dev->dtype);
    const size_t stat = (size_t)R * sizeof(float);
    unsigned char *cur = scratch;
    const size_t total = 2 * nn_scratch_round(dev, xn) + 2 * nn_scratch_round(dev, stat) +
                         dev->layers->classifier_scratch_bytes(dev, d->n_embd, d->vocab, R);
    if (h != NULL) {
        h->xn = nn_scratch_take(dev, &cur, xn);
        h->mean = nn_scratch_take(dev, &cur, stat);
        h->rstd = nn_scratch_take(dev, &cur, stat);
        h->dxn = nn_scratch_take(dev, &cur, xn);
        h->cls = cur;
    }
    return total;
}

static size_t layers_head_scratch_bytes(const gpt2_backend *be, const gpt2_dims *d,
                                        int chunk_rows) {
    if (d == NULL || chunk_rows < 1) {
        return 0;
    }
    return head_sizes(be, d, chunk_rows, NULL, NULL);
}

static const char *layers_last_error(const gpt2_backend *be) {
    return ((const layers_impl *)be->impl)->err;
}

/* Return a layer's failure, with its device's message. */
#define LAYER(call) NN_LAYER_TRY(be->dev, "gpt2", be_err(be), NN_ERR_CAP, call)

/* ---------------------------------------------------------- the model */

/* The tokens' check, on the device that holds them. */
static int check_tokens(gpt2_backend *be, const char *op, const char *what, const int *tokens,
                        long long n, int V) {
    return be->dev->layers->check_tokens(be->dev, "gpt2", op, what, "vocab", tokens, n, V,
                                         BE_ERR(be));
}

static int layers_embed_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                                const gpt2_embed_w *w, const int *tokens, void *x) {
    const nn_layer_ops *L = be->dev->layers;
    NN_TRY(gpt2__check_shape("embed_forward", d, B, T, BE_ERR(be)));
    NN_TRY(gpt2__check_embed_w("embed_forward", "w", w, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr("embed_forward", "tokens", tokens, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr("embed_forward", "x", x, BE_ERR(be)));
    const int BT = B * T, C = d->n_embd;
    NN_TRY(check_tokens(be, "embed_forward", "tokens", tokens, BT, d->vocab));
    LAYER(L->embed_forward(be->dev, BT, T, C, d->vocab, w->wte, w->wpe, tokens, x));
    return NN_OK;
}

static int layers_embed_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                                 gpt2_embed_w *g, const int *tokens, const void *dx) {
    const nn_layer_ops *L = be->dev->layers;
    NN_TRY(gpt2__check_shape("embed_backward", d, B, T, BE_ERR(be)));
    NN_TRY(gpt2__check_embed_w("embed_backward", "g", g, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr("embed_backward", "tokens", tokens, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr("embed_backward", "dx", dx, BE_ERR(be)));
    const int BT = B * T, C = d->n_embd;
    NN_TRY(check_tokens(be, "embed_backward", "tokens", tokens, BT, d->vocab));
    LAYER(L->embed_backward(be->dev, BT, T, C, d->vocab, g->wte, g->wpe, tokens, dx));
    return NN_OK;
}

/* The adapter of `target`, when the block has one: y += scale (x A^T) B^T
 * (rows of y ldy apart), and its backward from the Linear's output gradient
 * dy, which adds into dx. */
static int lora_forward(gpt2_backend *be, const gpt2_dims *d, const gpt2_block_w *w,
                        int target, int BT, const void *x, int ldx, void *y, int ldy,
                        const block_parts *p) {
    if (w->lora_A[target] == NULL) {
        return NN_OK;
    }
    int in, out;
    gpt2_lora_target_shape(d, target, &in, &out);
    nn_lora_dropout drop;
    LAYER(be->dev->layers->lora_forward(
        be->dev, gpt2_lora_target_name(target), BT, in, out, be->lora.r, be->lora.scale, x, ldx,
        w->lora_A[target], w->lora_B[target], p->t,
        nn_lora_dropout_of(&drop, &be->lora, target, p->xd, p->dxd), y, ldy));
    return NN_OK;
}

static int lora_backward(gpt2_backend *be, const gpt2_dims *d, const gpt2_block_w *w,
                         gpt2_block_w *g, int target, int BT, const void *x, int ldx,
                         const void *dy, int lddy, void *dx, int lddx, const block_parts *p) {
    if (w->lora_A[target] == NULL) {
        return NN_OK;
    }
    int in, out;
    gpt2_lora_target_shape(d, target, &in, &out);
    nn_lora_dropout drop;
    LAYER(be->dev->layers->lora_backward(be->dev, gpt2_lora_target_name(target), BT, in, out,
                                         be->lora.r, be->lora.scale, x, ldx, w->lora_A[target],
                                         w->lora_B[target], dy, lddy, g->lora_A[target],
                                         g->lora_B[target], dx, lddx, p->t, p->dt,
                                         nn_lora_dropout_of(&drop, &be->lora, target, p->xd,
                                                            p->dxd)));
    return NN_OK;
}

/* Adapters in w need the backend's rank (gpt2_backend_set_lora), and
 * their gradients in g (backward) where w has them. */
static int check_lora(gpt2_backend *be, const char *op, const gpt2_block_w *w,
                      const gpt2_block_w *g) {
    for (int t = 0; t < GPT2_LORA_TARGETS; t++) {
        if (w->lora_A[t] == NULL) {
            continue;
        }
        if (be->lora.r < 1 || w->lora_B[t] == NULL ||
            (g != NULL && (g->lora_A[t] == NULL || g->lora_B[t] == NULL))) {
            return ex_error(BE_ERR(be), NN_ERR_ARG,
                            "gpt2 %s: %s's adapter needs A and B%s and the backend's LoRA rank "
                            "(gpt2_backend_set_lora: %d)",
                            op, gpt2_lora_target_name(t), g != NULL ? " with gradients" : "",
                            be->lora.r);
        }
    }
    return NN_OK;
}

static int layers_block_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                                const gpt2_block_w *w, const void *x, gpt2_block_acts *a,
                                void *y, void *scratch) {
    const nn_layer_ops *L = be->dev->layers;
    nn_device *dev = be->dev;
    NN_TRY(gpt2__check_shape("block_forward", d, B, T, BE_ERR(be)));
    NN_TRY(gpt2__check_block_w("block_forward", "w", w, BE_ERR(be)));
    NN_TRY(check_lora(be, "block_forward", w, NULL));
    NN_TRY(gpt2__check_acts("block_forward", a, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr("block_forward", "x", x, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr("block_forward", "y", y, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr("block_forward", "scratch", scratch, BE_ERR(be)));
    const int BT = B * T, C = d->n_embd;
    block_parts p;
    block_sizes(be, d, B, T, &p, scratch);
    // Attention half: res1 = x + c_proj(attn(ln_1(x))).
    LAYER(L->layernorm_forward(dev, BT, C, x, w->ln1w, w->ln1b, a->ln1, a->ln1_mean,
                               a->ln1_rstd));
    LAYER(L->linear_forward(dev, "qkv", BT, C, 3 * C, a->ln1, C, w->qkvw, w->qkvb, NULL, 0, a->qkv,
                            3 * C));
    NN_TRY(lora_forward(be, d, w, GPT2_LORA_C_ATTN, BT, a->ln1, C, a->qkv, 3 * C, &p));
    const nn_attn_layout attn = attn_layout(d, B, T);
    LAYER(L->attention_forward(dev, &attn, a->qkv, a->att, a->atty, p.attn));
    LAYER(L->linear_forward(dev, "attproj", BT, C, C, a->atty, C, w->attprojw, w->attprojb, x, C,
                            a->res1, C));
    NN_TRY(lora_forward(be, d, w, GPT2_LORA_ATTN_PROJ, BT, a->atty, C, a->res1, C, &p));
    // MLP half: y = res1 + c_proj(gelu(c_fc(ln_2(res1)))).
    LAYER(L->layernorm_forward(dev, BT, C, a->res1, w->ln2w, w->ln2b, a->ln2, a->ln2_mean,
                               a->ln2_rstd));
    if (w->lora_A[GPT2_LORA_C_FC] == NULL) {
        LAYER(L->linear_gelu_forward(dev, "fc", BT, C, 4 * C, a->ln2, C, w->fcw, w->fcb, a->fch,
                                     a->fch_gelu));
    } else {
        // The adapter adds into GELU's input: c_fc, its adapter, then GELU.
        LAYER(L->linear_forward(dev, "fc", BT, C, 4 * C, a->ln2, C, w->fcw, w->fcb, NULL, 0,
                                a->fch, 4 * C));
        NN_TRY(lora_forward(be, d, w, GPT2_LORA_C_FC, BT, a->ln2, C, a->fch, 4 * C, &p));
        LAYER(L->gelu_forward(dev, (long long)BT * 4 * C, a->fch, a->fch_gelu));
    }
    LAYER(L->linear_forward(dev, "fcproj", BT, 4 * C, C, a->fch_gelu, 4 * C, w->fcprojw,
                            w->fcprojb, a->res1, C, y, C));
    NN_TRY(lora_forward(be, d, w, GPT2_LORA_MLP_PROJ, BT, a->fch_gelu, 4 * C, y, C, &p));
    return NN_OK;
}

static int layers_block_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                                 const gpt2_block_w *w, gpt2_block_w *g, const void *x,
                                 const gpt2_block_acts *a, const void *dy, void *dx,
                                 void *scratch) {
    const nn_layer_ops *L = be->dev->layers;
    nn_device *dev = be->dev;
    NN_TRY(gpt2__check_shape("block_backward", d, B, T, BE_ERR(be)));
    NN_TRY(gpt2__check_block_w("block_backward", "w", w, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr("block_backward", "g", g, BE_ERR(be)));
    // A frozen base (LoRA) has no gradients: every base tensor of g NULL.
    const int frozen = g->qkvw == NULL;
    if (!frozen) {
        NN_TRY(gpt2__check_block_w("block_backward", "g", g, BE_ERR(be)));
    }
    NN_TRY(check_lora(be, "block_backward", w, g));
    NN_TRY(gpt2__check_acts("block_backward", a, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr("block_backward", "x", x, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr("block_backward", "dy", dy, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr("block_backward", "dx", dx, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr("block_backward", "scratch", scratch, BE_ERR(be)));
    const int BT = B * T, C = d->n_embd;
    block_parts p;
    block_sizes(be, d, B, T, &p, scratch);
    if (frozen && p.dfcb == NULL) {
        return ex_error(BE_ERR(be), NN_ERR_ARG,
                        "gpt2 block_backward: g's base tensors are NULL (a frozen base), which "
                        "only LoRA trains: call gpt2_backend_set_lora with r > 0 first");
    }

    // MLP half. dy reaches res1 directly (residual) and through the MLP.
    if (!frozen) {
        LAYER(L->colsum_add(dev, BT, C, dy, C, g->fcprojb));
    }
    void *dfcb = frozen ? p.dfcb : g->fcb;
    if (w->lora_A[GPT2_LORA_MLP_PROJ] == NULL) {
        LAYER(L->linear_dgelu_backward(dev, "fcproj", BT, 4 * C, C, a->fch_gelu, 4 * C,
                                       w->fcprojw, dy, C, g->fcprojw, a->fch, p.big, dfcb));
    } else {
        // GELU's derivative applies to the sum of the Linear's and its
        // adapter's input gradients: the three apart.
        LAYER(L->linear_backward(dev, "fcproj", BT, 4 * C, C, a->fch_gelu, 4 * C, w->fcprojw, dy,
                                 C, g->fcprojw, p.big, 4 * C, 0.0f));
        NN_TRY(lora_backward(be, d, w, g, GPT2_LORA_MLP_PROJ, BT, a->fch_gelu, 4 * C, dy, C,
                             p.big, 4 * C, &p));
        LAYER(L->gelu_backward_colsum(dev, BT, 4 * C, p.big, a->fch, dfcb));
    }
    LAYER(L->linear_backward(dev, "fc", BT, C, 4 * C, a->ln2, C, w->fcw, p.big, 4 * C, g->fcw,
                             p.mid, C, 0.0f));
    NN_TRY(lora_backward(be, d, w, g, GPT2_LORA_C_FC, BT, a->ln2, C, p.big, 4 * C, p.mid, C, &p));
    // dx holds d res1 = dy + ln_2's input gradient from here on.
    LAYER(L->layernorm_backward(dev, BT, C, p.mid, a->res1, a->ln2_mean, a->ln2_rstd, w->ln2w,
                                dy, dx, g->ln2w, g->ln2b));

    // Attention half, the same way with d res1.
    if (!frozen) {
        LAYER(L->colsum_add(dev, BT, C, dx, C, g->attprojb));
    }
    LAYER(L->linear_backward(dev, "attproj", BT, C, C, a->atty, C, w->attprojw, dx, C,
                             g->attprojw, p.mid, C, 0.0f));
    NN_TRY(lora_backward(be, d, w, g, GPT2_LORA_ATTN_PROJ, BT, a->atty, C, dx, C, p.mid, C, &p));
    const nn_attn_layout attn = attn_layout(d, B, T);
    LAYER(L->attention_backward(dev, &attn, a->qkv, a->att, p.mid, p.big, p.attn));
    if (!frozen) {
        LAYER(L->colsum_add(dev, BT, 3 * C, p.big, 3 * C, g->qkvb));
    }
    LAYER(L->linear_backward(dev, "qkv", BT, C, 3 * C, a->ln1, C, w->qkvw, p.big, 3 * C, g->qkvw,
                             p.mid, C, 0.0f));
    NN_TRY(lora_backward(be, d, w, g, GPT2_LORA_C_ATTN, BT, a->ln1, C, p.big, 3 * C, p.mid, C,
                         &p));
    LAYER(L->layernorm_backward(dev, BT, C, p.mid, x, a->ln1_mean, a->ln1_rstd, w->ln1w, dx, dx,
                                g->ln1w, g->ln1b));
    return NN_OK;
}

/* --------------------------------------------------------------- head */

static int check_head(gpt2_backend *be, const char *op, const gpt2_dims *d, int B, int T,
                      const gpt2_embed_w *w, const void *x, int chunk_rows,
                      const void *scratch) {
    NN_TRY(gpt2__check_shape(op, d, B, T, BE_ERR(be)));
    NN_TRY(gpt2__check_embed_w(op, "w", w, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr(op, "x", x, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr(op, "scratch", scratch, BE_ERR(be)));
    if (chunk_rows < 1) {
        return ex_error(BE_ERR(be), NN_ERR_ARG,
                        "gpt2 %s: chunk_rows = %d; need >= 1 (default "
                        "GPT2_HEAD_CHUNK_ROWS_DEFAULT, or _GPU on CUDA)",
                        op, chunk_rows);
    }
    return NN_OK;
}

/* The head over chunks of rows (ln_f, the classifier against the tied
 * wte, ln_f's backward), so that the logits never exist for more than
 * chunk_rows rows; gradients only when g is not NULL. */
static int head_run(gpt2_backend *be, const gpt2_dims *d, int BT, const gpt2_embed_w *w,
                    gpt2_embed_w *g, const void *x, const int *targets, float dloss_scale,
                    void *dx, float *losses, int chunk_rows, void *scratch) {
    const nn_layer_ops *L = be->dev->layers;
    nn_device *dev = be->dev;
    const int C = d->n_embd, V = d->vocab;
    const int R = chunk_rows < BT ? chunk_rows : BT;
    head_parts h;
    head_sizes(be, d, R, &h, scratch);
    for (int r0 = 0; r0 < BT; r0 += R) {
        const int n = BT - r0 < R ? BT - r0 : R;
        const void *xc = nn_at_const(dev, x, (size_t)r0 * C);
        LAYER(L->layernorm_forward(dev, n, C, xc, w->lnfw, w->lnfb, h.xn, h.mean, h.rstd));
        // losses and (training) g->wte += dlogits^T . xn, dxn = dlogits .
        // wte, through the tied embedding.
        LAYER(L->classifier_chunk(dev, n, C, V, h.xn, w->wte, targets + r0, dloss_scale,
                                  losses + r0, g != NULL ? g->wte : NULL,
                                  g != NULL ? h.dxn : NULL, h.cls));
        if (g == NULL) {
            continue;
        }
        LAYER(L->layernorm_backward(dev, n, C, h.dxn, xc, h.mean, h.rstd, w->lnfw, NULL,
                                    nn_at(dev, dx, (size_t)r0 * C), g->lnfw, g->lnfb));
    }
    return NN_OK;
}

static int layers_head_forward_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                                        const gpt2_embed_w *w, gpt2_embed_w *g, const void *x,
                                        const int *targets, float dloss_scale, void *dx,
                                        float *losses, int chunk_rows, void *scratch) {
    const char *op = "head_forward_backward";
    NN_TRY(check_head(be, op, d, B, T, w, x, chunk_rows, scratch));
    NN_TRY(gpt2__check_ptr(op, "g", g, BE_ERR(be)));
    // A frozen head (LoRA) has no gradients: g's tensors NULL, and the
    // classifier and ln_f give the input gradient alone.
    if (g->wte != NULL) {
        NN_TRY(gpt2__check_embed_w(op, "g", g, BE_ERR(be)));
    }
    NN_TRY(gpt2__check_ptr(op, "targets", targets, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr(op, "dx", dx, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr(op, "losses", losses, BE_ERR(be)));
    NN_TRY(check_tokens(be, op, "targets", targets, (long long)B * T, d->vocab));
    return head_run(be, d, B * T, w, g, x, targets, dloss_scale, dx, losses, chunk_rows,
                    scratch);
}

static int layers_head_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                               const gpt2_embed_w *w, const void *x, const int *targets,
                               float *losses, int chunk_rows, void *scratch) {
    const char *op = "head_forward";
    NN_TRY(check_head(be, op, d, B, T, w, x, chunk_rows, scratch));
    NN_TRY(gpt2__check_ptr(op, "targets", targets, BE_ERR(be)));
    NN_TRY(gpt2__check_ptr(op, "losses", losses, BE_ERR(be)));
    NN_TRY(check_tokens(be, op, "targets", targets, (long long)B * T, d->vocab));
    return head_run(be, d, B * T, w, NULL, x, targets, 0.0f, NULL, losses, chunk_rows,
                    scratch);
}

static int layers_head_logits(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                              const gpt2_embed_w *w, const void *x, int row, float *host_logits,
                              void *scratch) {
    const nn_layer_ops *L = be->dev->layers;
    nn_device *dev = be->dev;
    const char *op = "head_logits";
    NN_TRY(check_head(be, op, d, B, T, w, x, 1, scratch));
    NN_TRY(gpt2__check_ptr(op, "host_logits", host_logits, BE_ERR(be)));
    if (row < 0 || (long long)row >= (long long)B * T) {
        return ex_error(BE_ERR(be), NN_ERR_ARG, "gpt2 %s: row %d is outside [0, B * T = %lld)",
                        op, row, (long long)B * T);
    }
    const int C = d->n_embd;
    head_parts h; // the head's scratch serves one row too
    head_sizes(be, d, 1, &h, scratch);
    LAYER(L->layernorm_forward(dev, 1, C, nn_at_const(dev, x, (size_t)row * C), w->lnfw, w->lnfb,
                               h.xn, h.mean, h.rstd));
    // logits: [V] = wte . xn, on the host.
    LAYER(L->classifier_logits_row(dev, C, d->vocab, h.xn, w->wte, h.cls, host_logits));
    return NN_OK;
}

static void layers_destroy(gpt2_backend *be) {
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
        .name = device_name, .last_error = layers_last_error,                                 \
        .block_scratch_bytes = layers_block_scratch_bytes,                                    \
        .head_scratch_bytes = layers_head_scratch_bytes,                                      \
        .embed_forward = layers_embed_forward, .embed_backward = layers_embed_backward,       \
        .block_forward = layers_block_forward, .block_backward = layers_block_backward,       \
        .head_forward_backward = layers_head_forward_backward,                                \
        .head_forward = layers_head_forward, .head_logits = layers_head_logits,               \
        .destroy = layers_destroy,                                                            \
    }
static const gpt2_backend_ops cpu_ops = GPT2_LAYERS_OPS("cpu");
static const gpt2_backend_ops sim_ops = GPT2_LAYERS_OPS("sim");
static const gpt2_backend_ops cuda_ops = GPT2_LAYERS_OPS("cuda");

int gpt2_layers_backend_create(nn_device *dev, gpt2_backend **out, char *err, size_t cap) {
    *out = NULL;
    if (dev == NULL || dev->layers == NULL) {
        if (dev) {
            dev->ops->destroy(dev);
        }
        return ex_error(err, cap, NN_ERR_ARG, "gpt2: the device has no layers (nn_layers.h)");
    }
    gpt2_backend *be = calloc(1, sizeof(*be));
    layers_impl *impl = calloc(1, sizeof(*impl));
    if (be == NULL || impl == NULL) {
        free(be);
        free(impl);
        dev->ops->destroy(dev);
        return ex_error(err, cap, NN_ERR_NOMEM, "gpt2: out of host memory");
    }
    const char *name = dev->ops->name;
    if (strcmp(name, "cuda") != 0) {
        ex_blas_init();
    }
    be->ops = strcmp(name, "sim") == 0 ? &sim_ops : strcmp(name, "cuda") == 0 ? &cuda_ops : &cpu_ops;
    be->dtype = dev->dtype;
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

int gpt2_backend_set_lora(gpt2_backend *be, int r, double alpha, double dropout, char *err,
                          size_t cap) {
    if (be == NULL) return ex_error(err, cap, NN_ERR_ARG, "gpt2 backend: no backend");
    return nn_lora_set(&be->lora, "gpt2 backend", r, alpha, dropout, err, cap);
}
