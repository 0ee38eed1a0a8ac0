/*
 * The backend of llama_backend.h on any device: the Llama family's
 * orchestration over the layers of its device (nn_layers.h). On the CPU
 * every layer runs at once on host pointers; on the simulated device
 * (nn_sim.h) every layer is a kernel on zeroshard's sim stream that runs the
 * CPU's layer on device addresses, so both give the same bits; on CUDA
 * (llama_cuda.cu adds the profile) every layer is launched on zeroshard's
 * stream in the device's dtype. This file touches no tensor: it checks
 * arguments, carves scratch (in the device's dtype and alignment) and calls
 * layers: q, k and v written side by side into one qkv row (one product on
 * CUDA when the three weights lie one after the other), biases and
 * residuals riding in the products, grouped-query causal attention on the
 * strided qkv rows, RMSNorm, RoPE (its angle table made here and uploaded
 * to the device), SwiGLU with d gate and d up side by side (so that xn2's
 * gradient can be one product), and the fused classifier.
 *
 * Determinism is the layers': a row's math in one thread, every sum over
 * rows in a fixed order, a K/V head adding its query heads in ascending
 * order.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_blas.h"
#include "llama_backend.h"
#include "llama_backend_impl.h"
#include "nn_layers.h"

typedef struct layers_impl {
    char err[NN_ERR_CAP];
    /* The rotary angles of positions 0 .. max_T - 1 (llama_rope_table):
     * [max_T][hd / 2] fp32 each, in the device's memory. */
    float *rope_cos, *rope_sin;
} layers_impl;

static char *be_err(llama_backend *be) { return ((layers_impl *)be->impl)->err; }

#define BE_ERR(be) be_err(be), NN_ERR_CAP

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* Where the attention finds q, k and v in a qkv row: NH q heads, then NKV k
 * heads, then NKV v heads; atty holds the NH heads' outputs side by side. */
static nn_attn_layout attn_layout(const llama__sizes *s, int B, int T) {
    const nn_attn_layout a = {.B = B, .T = T, .n_head = s->NH, .n_kv_head = s->NKV,
                              .head_dim = s->hd, .ld = s->W, .q_off = 0, .k_off = s->Q,
                              .v_off = s->Q + s->KV, .ldy = s->Q};
    return a;
}

/* block_backward's scratch: big [BT][max(2F, W)] (d gate | d up side by
 * side, then d qkv), mid [BT][max(C, NH hd)] (d xn2, d atty, d xn1 in
 * turn), with LoRA its t and dt [BT][r] (forward too), and the attention's
 * (its score gradients; on CUDA also the head-layout buffers, which
 * block_forward uses too). */
typedef struct block_parts {
    void *big, *mid, *t, *dt, *xd, *dxd, *attn;
} block_parts;

/* With dropout, the adapters' dropped input and its gradient: [BT][the
 * widest adapted input] each (lora_forward). */
static size_t dropout_bytes(const llama_backend *be, size_t BT, size_t e) {
    int widest = 0;
    for (int t = 0; be->lora.r > 0 && be->lora.dropout > 0.0f && t < LLAMA_LORA_TARGETS; t++) {
        int in, out;
        llama_lora_target_shape(&be->dims, t, &in, &out);
        widest = in > widest ? in : widest;
    }
    return BT * (size_t)widest * e;
}

static size_t block_sizes(const llama_backend *be, int B, int T, block_parts *p, void *scratch) {
    const nn_device *dev = be->dev;
    const llama__sizes s = llama__sizes_of(&be->dims);
    const size_t e = nn_dtype_size(dev->dtype), BT = (size_t)B * (size_t)T;
    const size_t big = BT * max_size(2 * (size_t)s.F, (size_t)s.W) * e;
    const size_t mid = BT * max_size((size_t)s.C, (size_t)s.Q) * e;
    const size_t lora = BT * (size_t)be->lora.r * e, drop = dropout_bytes(be, BT, e);
    const nn_attn_layout attn = attn_layout(&s, B, T);
    unsigned char *cur = scratch;
    const size_t total = nn_scratch_round(dev, big) + nn_scratch_round(dev, mid) +
                         (lora > 0 ? 2 * nn_scratch_round(dev, lora) : 0) +
                         (drop > 0 ? 2 * nn_scratch_round(dev, drop) : 0) +
                         dev->layers->attention_scratch_bytes(dev, &attn);
    if (p != NULL) {
        p->big = nn_scratch_take(dev, &cur, big);
        p->mid = nn_scratch_take(dev, &cur, mid);
        p->t = lora > 0 ? nn_scratch_take(dev, &cur, lora) : NULL;
        p->dt = lora > 0 ? nn_scratch_take(dev, &cur, lora) : NULL;
        p->xd = drop > 0 ? nn_scratch_take(dev, &cur, drop) : NULL;
        p->dxd = drop > 0 ? nn_scratch_take(dev, &cur, drop) : NULL;
        p->attn = cur;
    }
    return total;
}

static size_t layers_block_scratch_bytes(const llama_backend *be, int B, int T) {
    if (B < 1 || T < 1 || T > be->max_T) {
        return 0;
    }
    return block_sizes(be, B, T, NULL, NULL);
}

/* The head's, per chunk of R rows: model.norm's output [R][C], its rstd
 * [R] (fp32), its input gradient [R][C], and the classifier's (the
 * logits). */
typedef struct head_parts {
    void *xn, *dxn, *cls;
    float *rstd;
} head_parts;

static size_t head_sizes(const llama_backend *be, int R, head_parts *h, void *scratch) {
    const nn_device *dev = be->dev;
    const size_t xn = (size_t)R * (size_t)be->dims.n_embd * nn_dtype_size(dev->dtype);
    const size_t stat = (size_t)R * sizeof(float);
    unsigned char *cur = scratch;
    const size_t total = 2 * nn_scratch_round(dev, xn) + nn_scratch_round(dev, stat) +
                         dev->layers->classifier_scratch_bytes(dev, be->dims.n_embd,
                                                               be->dims.vocab, R);
    if (h != NULL) {
        h->xn = nn_scratch_take(dev, &cur, xn);
        h->rstd = nn_scratch_take(dev, &cur, stat);
        h->dxn = nn_scratch_take(dev, &cur, xn);
        h->cls = cur;
    }
    return total;
}

static size_t layers_head_scratch_bytes(const llama_backend *be, int B, int T, int chunk_rows) {
    if (B < 1 || T < 1 || chunk_rows < 1) {
        return 0;
    }
    const long long BT = (long long)B * T;
    return head_sizes(be, (int)(chunk_rows < BT ? chunk_rows : BT), NULL, NULL);
}

static const char *layers_last_error(const llama_backend *be) {
    return ((const layers_impl *)be->impl)->err;
}

/* Return a layer's failure, with its device's message. */
#define LAYER(call) NN_LAYER_TRY(be->dev, "llama", be_err(be), NN_ERR_CAP, call)

/* Rotates (backward: by the transpose) every q and k head of the B T rows
 * of a qkv buffer (row width W: q heads, then k heads), row r at position
 * r % T. */
static int rope(llama_backend *be, const llama__sizes *s, int BT, int T, void *qkv,
                int backward) {
    const layers_impl *impl = be->impl;
    // The k heads follow the q heads directly (k_off = NH hd).
    LAYER(be->dev->layers->rope(be->dev, BT, T, s->NH + s->NKV, s->hd, s->W, impl->rope_cos,
                                impl->rope_sin, qkv, backward));
    return NN_OK;
}

/* ------------------------------------------------------------ embedding */

static int check_tokens(llama_backend *be, const char *op, const char *what, const int *tokens,
                        long long n) {
    return be->dev->layers->check_tokens(be->dev, "llama", op, what, "vocab_size", tokens, n,
                                         be->dims.vocab, BE_ERR(be));
}

static int layers_embed_forward(llama_backend *be, int B, int T, const llama_embed_w *w,
                                const int *tokens, void *x) {
    const char *op = "embed_forward";
    NN_TRY(llama__check_shape(op, be, B, T, BE_ERR(be)));
    NN_TRY(llama__check_embed_w(op, "w", w, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "tokens", tokens, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "x", x, BE_ERR(be)));
    const int BT = B * T, C = be->dims.n_embd;
    NN_TRY(check_tokens(be, op, "tokens", tokens, BT));
    LAYER(be->dev->layers->embed_forward(be->dev, BT, T, C, be->dims.vocab, w->wte, NULL, tokens,
                                         x));
    return NN_OK;
}

static int layers_embed_backward(llama_backend *be, int B, int T, llama_embed_w *g,
                                 const int *tokens, const void *dx) {
    const char *op = "embed_backward";
    NN_TRY(llama__check_shape(op, be, B, T, BE_ERR(be)));
    NN_TRY(llama__check_embed_w(op, "g", g, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "tokens", tokens, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "dx", dx, BE_ERR(be)));
    const int BT = B * T, C = be->dims.n_embd;
    NN_TRY(check_tokens(be, op, "tokens", tokens, BT));
    LAYER(be->dev->layers->embed_backward(be->dev, BT, T, C, be->dims.vocab, g->wte, NULL, tokens,
                                          dx));
    return NN_OK;
}

/* -------------------------------------------------------------- blocks */

/* Matrix `slot` (a llama_block_param) of the block: the struct's pointer,
 * or, stored quantized (QLoRA), the weight source's full-precision copy,
 * made now and valid until the next one. */
static int matrix(llama_backend *be, const void *stored, int slot, const void **out) {
    if (stored != NULL) {
        *out = stored;
        return NN_OK;
    }
    if (be->weights.get == NULL)
        return ex_error(BE_ERR(be), NN_ERR_ARG, "llama: the block's matrix %d is NULL", slot);
    return be->weights.get(be->weights.user, slot, out, BE_ERR(be));
}

/* The adapter of `target`, when the block has one: y += scale (x A^T) B^T
 * (rows of y ldy apart), and its backward, which adds into dx. */
static int lora_forward(llama_backend *be, const llama_block_w *w, int target, int BT,
                        const void *x, int ldx, void *y, int ldy, const block_parts *p) {
    if (w->lora_A[target] == NULL) return NN_OK;
    int in, out;
    llama_lora_target_shape(&be->dims, target, &in, &out);
    nn_lora_dropout drop;
    LAYER(be->dev->layers->lora_forward(
        be->dev, llama_lora_target_name(target), BT, in, out, be->lora.r, be->lora.scale, x, ldx,
        w->lora_A[target], w->lora_B[target], p->t,
        nn_lora_dropout_of(&drop, &be->lora, target, p->xd, p->dxd), y, ldy));
    return NN_OK;
}

static int lora_backward(llama_backend *be, const llama_block_w *w, llama_block_w *g,
                         int target, int BT, const void *x, int ldx, const void *dy, int lddy,
                         void *dx, int lddx, const block_parts *p) {
    if (w->lora_A[target] == NULL) return NN_OK;
    int in, out;
    llama_lora_target_shape(&be->dims, target, &in, &out);
    nn_lora_dropout drop;
    LAYER(be->dev->layers->lora_backward(be->dev, llama_lora_target_name(target), BT, in, out,
                                         be->lora.r, be->lora.scale, x, ldx, w->lora_A[target],
                                         w->lora_B[target], dy, lddy, g->lora_A[target],
                                         g->lora_B[target], dx, lddx, p->t, p->dt,
                                         nn_lora_dropout_of(&drop, &be->lora, target, p->xd,
                                                            p->dxd)));
    return NN_OK;
}

static int layers_block_forward(llama_backend *be, int B, int T, const llama_block_w *w,
                                const void *x, llama_block_acts *a, void *y, void *scratch) {
    const nn_layer_ops *L = be->dev->layers;
    nn_device *dev = be->dev;
    const char *op = "block_forward";
    const llama_dims *d = &be->dims;
    NN_TRY(llama__check_shape(op, be, B, T, BE_ERR(be)));
    NN_TRY(llama__check_block_w(op, "w", d, w, be->weights.get != NULL, BE_ERR(be)));
    NN_TRY(llama__check_acts(op, a, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "x", x, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "y", y, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "scratch", scratch, BE_ERR(be)));
    const llama__sizes s = llama__sizes_of(d);
    const int BT = B * T, C = s.C, F = s.F;
    const float eps = (float)d->rms_eps;
    block_parts p;
    block_sizes(be, B, T, &p, scratch);
    const void *bo = d->o_bias ? w->bo : NULL, *bdown = d->mlp_bias ? w->bdown : NULL;

    // Attention half: res1 = x + o_proj(attn(rope(q), rope(k), v)) of
    // input_layernorm(x).
    LAYER(L->rmsnorm_forward(dev, BT, C, x, w->attn_norm, eps, a->xn1, a->rstd1));
    {
        const int outs[3] = {s.Q, s.KV, s.KV};
        const void *const W[3] = {w->wq, w->wk, w->wv};
        const void *const b[3] = {w->bq, w->bk, w->bv};
        if (W[0] && W[1] && W[2]) {
            LAYER(L->linears_forward(dev, "qkv", 3, outs, BT, C, a->xn1, C, W,
                                     d->qkv_bias ? b : NULL, a->qkv, s.W));
        } else { /* quantized: one matrix at a time, side by side in qkv */
            const int slots[3] = {LLAMA_P_WQ, LLAMA_P_WK, LLAMA_P_WV};
            for (int j = 0, col = 0; j < 3; col += outs[j], j++) {
                const void *Wj = NULL;
                NN_TRY(matrix(be, W[j], slots[j], &Wj));
                LAYER(L->linear_forward(dev, "qkv", BT, C, outs[j], a->xn1, C, Wj,
                                        d->qkv_bias ? b[j] : NULL, NULL, 0,
                                        nn_at(dev, a->qkv, (size_t)col), s.W));
            }
        }
    }
    NN_TRY(lora_forward(be, w, LLAMA_LORA_Q, BT, a->xn1, C, a->qkv, s.W, &p));
    NN_TRY(lora_forward(be, w, LLAMA_LORA_K, BT, a->xn1, C, nn_at(dev, a->qkv, (size_t)s.Q), s.W,
                        &p));
    NN_TRY(lora_forward(be, w, LLAMA_LORA_V, BT, a->xn1, C,
                        nn_at(dev, a->qkv, (size_t)(s.Q + s.KV)), s.W, &p));
    NN_TRY(rope(be, &s, BT, T, a->qkv, 0));
    const nn_attn_layout attn = attn_layout(&s, B, T);
    LAYER(L->attention_forward(dev, &attn, a->qkv, a->att, a->atty, p.attn));
    const void *wo = NULL, *wgate = NULL, *wup = NULL, *wdown = NULL;
    NN_TRY(matrix(be, w->wo, LLAMA_P_WO, &wo));
    LAYER(L->linear_forward(dev, "o", BT, s.Q, C, a->atty, s.Q, wo, bo, x, C, a->res1, C));
    NN_TRY(lora_forward(be, w, LLAMA_LORA_O, BT, a->atty, s.Q, a->res1, C, &p));

    // MLP half: y = res1 + down_proj(silu(gate_proj(m)) * up_proj(m)), m =
    // post_attention_layernorm(res1).
    LAYER(L->rmsnorm_forward(dev, BT, C, a->res1, w->mlp_norm, eps, a->xn2, a->rstd2));
    NN_TRY(matrix(be, w->wgate, LLAMA_P_WGATE, &wgate));
    LAYER(L->linear_forward(dev, "gate_up", BT, C, F, a->xn2, C, wgate,
                            d->mlp_bias ? w->bgate : NULL, NULL, 0, a->gate, F));
    NN_TRY(matrix(be, w->wup, LLAMA_P_WUP, &wup));
    LAYER(L->linear_forward(dev, "gate_up", BT, C, F, a->xn2, C, wup,
                            d->mlp_bias ? w->bup : NULL, NULL, 0, a->up, F));
    NN_TRY(lora_forward(be, w, LLAMA_LORA_GATE, BT, a->xn2, C, a->gate, F, &p));
    NN_TRY(lora_forward(be, w, LLAMA_LORA_UP, BT, a->xn2, C, a->up, F, &p));
    LAYER(L->swiglu_forward(dev, (long long)BT * F, a->gate, a->up, a->h));
    NN_TRY(matrix(be, w->wdown, LLAMA_P_WDOWN, &wdown));
    LAYER(L->linear_forward(dev, "down", BT, F, C, a->h, F, wdown, bdown, a->res1, C, y, C));
    NN_TRY(lora_forward(be, w, LLAMA_LORA_DOWN, BT, a->h, F, y, C, &p));
    return NN_OK;
}

static int layers_block_backward(llama_backend *be, int B, int T, const llama_block_w *w,
                                 llama_block_w *g, const void *x, const llama_block_acts *a,
                                 const void *dy, void *dx, void *scratch) {
    const nn_layer_ops *L = be->dev->layers;
    nn_device *dev = be->dev;
    const char *op = "block_backward";
    const llama_dims *d = &be->dims;
    NN_TRY(llama__check_shape(op, be, B, T, BE_ERR(be)));
    NN_TRY(llama__check_block_w(op, "w", d, w, be->weights.get != NULL, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "g", g, BE_ERR(be)));
    /* A frozen base (LoRA) has no gradients: every base tensor of g NULL. */
    const int frozen = g->wq == NULL;
    if (!frozen) NN_TRY(llama__check_block_w(op, "g", d, g, 0, BE_ERR(be)));
    NN_TRY(llama__check_acts(op, a, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "x", x, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "dy", dy, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "dx", dx, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "scratch", scratch, BE_ERR(be)));
    const llama__sizes s = llama__sizes_of(d);
    const int BT = B * T, C = s.C, F = s.F;
    block_parts p;
    block_sizes(be, B, T, &p, scratch);
    void *dgu = p.big; // [BT][2F]: d gate | d up side by side, then d qkv [BT][W]

    // MLP half. dy reaches res1 directly (residual) and through the MLP.
    if (d->mlp_bias && !frozen) {
        LAYER(L->colsum_add(dev, BT, C, dy, C, g->bdown));
    }
    // dh = dy Wdown (+ the adapter's), into d gate's columns.
    const void *M = NULL; /* the matrix of the product at hand */
    NN_TRY(matrix(be, w->wdown, LLAMA_P_WDOWN, &M));
    LAYER(L->linear_backward(dev, "down", BT, F, C, a->h, F, M, dy, C, g->wdown, dgu, 2 * F,
                             0.0f));
    NN_TRY(lora_backward(be, w, g, LLAMA_LORA_DOWN, BT, a->h, F, dy, C, dgu, 2 * F, &p));
    LAYER(L->swiglu_backward(dev, BT, F, a->gate, a->up, dgu));
    if (d->mlp_bias && !frozen) {
        LAYER(L->colsum_add(dev, BT, F, dgu, 2 * F, g->bgate));
        LAYER(L->colsum_add(dev, BT, F, nn_at(dev, dgu, (size_t)F), 2 * F, g->bup));
    }
    // d xn2 = d gate . Wgate + d up . Wup.
    {
        const int outs[2] = {F, F};
        const void *const W[2] = {w->wgate, w->wup};
        void *const gW[2] = {g->wgate, g->wup};
        if (W[0] && W[1]) {
            LAYER(L->linears_backward(dev, "gate_up", 2, outs, BT, C, a->xn2, C, W, dgu, 2 * F,
                                      gW, p.mid, C));
        } else { /* quantized: one matrix at a time, dx summed in the same order */
            const int slots[2] = {LLAMA_P_WGATE, LLAMA_P_WUP};
            for (int j = 0; j < 2; j++) {
                NN_TRY(matrix(be, W[j], slots[j], &M));
                LAYER(L->linear_backward(dev, "gate_up", BT, C, F, a->xn2, C, M,
                                         nn_at(dev, dgu, (size_t)j * (size_t)F), 2 * F, gW[j],
                                         p.mid, C, j == 0 ? 0.0f : 1.0f));
            }
        }
    }
    NN_TRY(lora_backward(be, w, g, LLAMA_LORA_GATE, BT, a->xn2, C, dgu, 2 * F, p.mid, C, &p));
    NN_TRY(lora_backward(be, w, g, LLAMA_LORA_UP, BT, a->xn2, C, nn_at(dev, dgu, (size_t)F), 2 * F,
                         p.mid, C, &p));
    // dx holds d res1 = dy + post_attention_layernorm's input gradient from
    // here on.
    LAYER(L->rmsnorm_backward(dev, BT, C, p.mid, a->res1, a->rstd2, w->mlp_norm, dy, dx,
                              g->mlp_norm));

    // Attention half, the same way with d res1.
    if (d->o_bias && !frozen) {
        LAYER(L->colsum_add(dev, BT, C, dx, C, g->bo));
    }
    NN_TRY(matrix(be, w->wo, LLAMA_P_WO, &M));
    LAYER(L->linear_backward(dev, "o", BT, s.Q, C, a->atty, s.Q, M, dx, C, g->wo, p.mid, s.Q,
                             0.0f));
    NN_TRY(lora_backward(be, w, g, LLAMA_LORA_O, BT, a->atty, s.Q, dx, C, p.mid, s.Q, &p));
    const nn_attn_layout attn = attn_layout(&s, B, T);
    void *dqkv = p.big;
    LAYER(L->attention_backward(dev, &attn, a->qkv, a->att, p.mid, dqkv, p.attn));
    // Back through the rotation: the gradients of q and k as projected.
    NN_TRY(rope(be, &s, BT, T, dqkv, 1));
    if (d->qkv_bias && !frozen) {
        LAYER(L->colsum_add(dev, BT, s.Q, dqkv, s.W, g->bq));
        LAYER(L->colsum_add(dev, BT, s.KV, nn_at(dev, dqkv, (size_t)s.Q), s.W, g->bk));
        LAYER(L->colsum_add(dev, BT, s.KV, nn_at(dev, dqkv, (size_t)(s.Q + s.KV)), s.W, g->bv));
    }
    // d xn1 = dq . Wq + dk . Wk + dv . Wv.
    {
        const int outs[3] = {s.Q, s.KV, s.KV};
        const void *const W[3] = {w->wq, w->wk, w->wv};
        void *const gW[3] = {g->wq, g->wk, g->wv};
        if (W[0] && W[1] && W[2]) {
            LAYER(L->linears_backward(dev, "qkv", 3, outs, BT, C, a->xn1, C, W, dqkv, s.W, gW,
                                      p.mid, C));
        } else { /* quantized: one matrix at a time, dx summed in the same order */
            const int slots[3] = {LLAMA_P_WQ, LLAMA_P_WK, LLAMA_P_WV};
            for (int j = 0, col = 0; j < 3; col += outs[j], j++) {
                NN_TRY(matrix(be, W[j], slots[j], &M));
                LAYER(L->linear_backward(dev, "qkv", BT, C, outs[j], a->xn1, C, M,
                                         nn_at(dev, dqkv, (size_t)col), s.W, gW[j], p.mid, C,
                                         j == 0 ? 0.0f : 1.0f));
            }
        }
    }
    NN_TRY(lora_backward(be, w, g, LLAMA_LORA_Q, BT, a->xn1, C, dqkv, s.W, p.mid, C, &p));
    NN_TRY(lora_backward(be, w, g, LLAMA_LORA_K, BT, a->xn1, C, nn_at(dev, dqkv, (size_t)s.Q), s.W,
                         p.mid, C, &p));
    NN_TRY(lora_backward(be, w, g, LLAMA_LORA_V, BT, a->xn1, C,
                         nn_at(dev, dqkv, (size_t)(s.Q + s.KV)), s.W, p.mid, C, &p));
    LAYER(L->rmsnorm_backward(dev, BT, C, p.mid, x, a->rstd1, w->attn_norm, dx, dx,
                              g->attn_norm));
    return NN_OK;
}

/* --------------------------------------------------------------- head */

static int check_head(llama_backend *be, const char *op, int B, int T, const llama_head_w *w,
                      const void *x, const int *targets, float *losses, int chunk_rows,
                      const void *scratch) {
    NN_TRY(llama__check_shape(op, be, B, T, BE_ERR(be)));
    NN_TRY(llama__check_head_w(op, "w", w, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "x", x, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "scratch", scratch, BE_ERR(be)));
    NN_TRY(llama__check_chunk(op, chunk_rows, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "targets", targets, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "losses", losses, BE_ERR(be)));
    return check_tokens(be, op, "targets", targets, (long long)B * T);
}

/* The head over chunks of rows: model.norm, the shared classifier, and
 * (when g is not NULL) model.norm's backward, so that the logits never
 * exist for more than chunk_rows rows. */
static int head_run(llama_backend *be, int BT, const llama_head_w *w, llama_head_w *g,
                    const void *x, const int *targets, float dloss_scale, void *dx,
                    float *losses, int chunk_rows, void *scratch) {
    const nn_layer_ops *L = be->dev->layers;
    nn_device *dev = be->dev;
    const int C = be->dims.n_embd, V = be->dims.vocab;
    const float eps = (float)be->dims.rms_eps;
    const int R = chunk_rows < BT ? chunk_rows : BT;
    head_parts h;
    head_sizes(be, R, &h, scratch);
    for (int r0 = 0; r0 < BT; r0 += R) {
        const int n = BT - r0 < R ? BT - r0 : R;
        const void *xc = nn_at_const(dev, x, (size_t)r0 * C);
        LAYER(L->rmsnorm_forward(dev, n, C, xc, w->norm, eps, h.xn, h.rstd));
        LAYER(L->classifier_chunk(dev, n, C, V, h.xn, w->wout, targets + r0, dloss_scale,
                                  losses + r0, g != NULL ? g->wout : NULL,
                                  g != NULL ? h.dxn : NULL, h.cls));
        if (g != NULL) {
            LAYER(L->rmsnorm_backward(dev, n, C, h.dxn, xc, h.rstd, w->norm, NULL,
                                      nn_at(dev, dx, (size_t)r0 * C), g->norm));
        }
    }
    return NN_OK;
}

static int layers_head_forward_backward(llama_backend *be, int B, int T, const llama_head_w *w,
                                        llama_head_w *g, const void *x, const int *targets,
                                        float dloss_scale, void *dx, float *losses,
                                        int chunk_rows, void *scratch) {
    const char *op = "head_forward_backward";
    NN_TRY(check_head(be, op, B, T, w, x, targets, losses, chunk_rows, scratch));
    NN_TRY(llama__check_ptr(op, "g", g, BE_ERR(be)));
    /* A frozen head (LoRA) has no gradients: g's tensors NULL. */
    if (g->wout != NULL) NN_TRY(llama__check_head_w(op, "g", g, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "dx", dx, BE_ERR(be)));
    return head_run(be, B * T, w, g, x, targets, dloss_scale, dx, losses, chunk_rows, scratch);
}

static int layers_head_forward(llama_backend *be, int B, int T, const llama_head_w *w,
                               const void *x, const int *targets, float *losses, int chunk_rows,
                               void *scratch) {
    NN_TRY(check_head(be, "head_forward", B, T, w, x, targets, losses, chunk_rows, scratch));
    return head_run(be, B * T, w, NULL, x, targets, 0.0f, NULL, losses, chunk_rows, scratch);
}

static int layers_head_logits(llama_backend *be, int B, int T, const llama_head_w *w,
                              const void *x, int row, float *host_logits, void *scratch) {
    const char *op = "head_logits";
    NN_TRY(llama__check_shape(op, be, B, T, BE_ERR(be)));
    NN_TRY(llama__check_head_w(op, "w", w, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "x", x, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "scratch", scratch, BE_ERR(be)));
    NN_TRY(llama__check_ptr(op, "host_logits", host_logits, BE_ERR(be)));
    if (row < 0 || (long long)row >= (long long)B * T) {
        return ex_error(BE_ERR(be), NN_ERR_ARG, "llama %s: row %d is outside [0, B * T = %lld)",
                        op, row, (long long)B * T);
    }
    const nn_layer_ops *L = be->dev->layers;
    nn_device *dev = be->dev;
    const int C = be->dims.n_embd;
    head_parts h; // the head's scratch serves one row too
    head_sizes(be, 1, &h, scratch);
    LAYER(L->rmsnorm_forward(dev, 1, C, nn_at_const(dev, x, (size_t)row * C), w->norm,
                             (float)be->dims.rms_eps, h.xn, h.rstd));
    LAYER(L->classifier_logits_row(dev, C, be->dims.vocab, h.xn, w->wout, h.cls, host_logits));
    return NN_OK;
}

static void layers_destroy(llama_backend *be) {
    if (be == NULL) {
        return;
    }
    layers_impl *impl = be->impl;
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
        .name = device_name, .block_scratch_bytes = layers_block_scratch_bytes,               \
        .head_scratch_bytes = layers_head_scratch_bytes,                                      \
        .embed_forward = layers_embed_forward, .embed_backward = layers_embed_backward,       \
        .block_forward = layers_block_forward, .block_backward = layers_block_backward,       \
        .head_forward_backward = layers_head_forward_backward,                                \
        .head_forward = layers_head_forward, .head_logits = layers_head_logits,               \
        .last_error = layers_last_error, .destroy = layers_destroy,                           \
    }
static const llama_backend_ops cpu_ops = LLAMA_LAYERS_OPS("cpu");
static const llama_backend_ops sim_ops = LLAMA_LAYERS_OPS("sim");
static const llama_backend_ops cuda_ops = LLAMA_LAYERS_OPS("cuda");

/* The RoPE table into the device's memory: computed on the host, uploaded. */
static int upload_rope_table(nn_device *dev, const llama_dims *dims, int max_T,
                             layers_impl *impl, char *err, size_t cap) {
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

/* The backend on dev, its messages starting with `who`. */
static int layers_create(nn_device *dev, const llama_dims *dims, int max_T, llama_backend **out,
                         const char *who, char *err, size_t cap) {
    char why[512];
    if (dims == NULL || llama_dims_check(dims, why, sizeof why) != 0) {
        return ex_error(err, cap, NN_ERR_ARG, "%s: %s", who, dims == NULL ? "dims is NULL" : why);
    }
    if (max_T < 1 || max_T > dims->max_seq) {
        return ex_error(err, cap, NN_ERR_ARG,
                        "%s: max_T = %d; need 1 <= max_T <= max_position_embeddings (%d)", who,
                        max_T, dims->max_seq);
    }
    llama_backend *be = calloc(1, sizeof(*be));
    layers_impl *impl = calloc(1, sizeof(*impl));
    if (be == NULL || impl == NULL) {
        free(impl);
        free(be);
        return ex_error(err, cap, NN_ERR_NOMEM, "%s: out of host memory", who);
    }
    be->dev = dev;
    be->impl = impl;
    const int st = upload_rope_table(dev, dims, max_T, impl, err, cap);
    if (st != NN_OK) {
        layers_destroy(be);
        return st;
    }
    const char *name = dev->ops->name;
    if (strcmp(name, "cuda") != 0) {
        ex_blas_init();
    }
    be->ops = strcmp(name, "sim") == 0 ? &sim_ops : strcmp(name, "cuda") == 0 ? &cuda_ops : &cpu_ops;
    be->dims = *dims;
    be->max_T = max_T;
    *out = be;
    return NN_OK;
}

int llama_layers_backend_create(nn_device *dev, const llama_dims *dims, int max_T,
                                llama_backend **out, char *err, size_t cap) {
    if (out == NULL) {
        return ex_error(err, cap, NN_ERR_ARG, "llama backend: out is NULL");
    }
    *out = NULL;
    if (dev == NULL || dev->layers == NULL) {
        return ex_error(err, cap, NN_ERR_ARG, "llama backend: the device has no layers "
                                              "(nn_layers.h)");
    }
    return layers_create(dev, dims, max_T, out, "llama backend", err, cap);
}

int llama_cpu_backend_create(nn_device *dev, const llama_dims *dims, int max_T,
                             llama_backend **out, char *err, size_t cap) {
    if (out == NULL) {
        return ex_error(err, cap, NN_ERR_ARG, "llama cpu backend: out is NULL");
    }
    *out = NULL;
    if (dev == NULL || dev->layers == NULL || dev->dtype != NN_F32 ||
        strcmp(dev->ops->name, "cuda") == 0) {
        return ex_error(err, cap, NN_ERR_ARG,
                        "llama cpu backend: the device must have host layers and fp32 "
                        "tensors (nn_cpu_device_create, or nn_sim_device_create)");
    }
    return layers_create(dev, dims, max_T, out, "llama cpu backend", err, cap);
}

int llama_backend_set_lora(llama_backend *be, int r, double alpha, double dropout, char *err,
                          size_t cap) {
    if (be == NULL) return ex_error(err, cap, NN_ERR_ARG, "llama backend: no backend");
    return nn_lora_set(&be->lora, "llama backend", r, alpha, dropout, err, cap);
}
