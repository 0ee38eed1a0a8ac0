// The CUDA backend of llama_backend.h: the CPU backend's algorithm
// (llama_cpu.c) in the device's dtype (fp32 exact, no TF32; bf16/fp16 on
// tensor cores with fp32 accumulation and fp32 statistics), on the stream
// of the nn_cuda device it is given. The layers the family shares with
// GPT-2 are examples/nn's, on that device (nn_cuda_ctx.cuh): every Linear
// one cuBLASLt product (biases in the epilogue, residuals as its C input,
// q, k and v written side by side into one qkv row through the leading
// dimension), grouped-query causal attention, the fused classifier, the
// token embedding and its sorted deterministic backward, the column sums
// of bias gradients. The family's own kernels (RMSNorm, RoPE, SwiGLU) are
// llama_cuda_kernels.cu's.
//
// A block, forward: xn1 = RMSNorm(x); qkv = xn1 [Wq; Wk; Wv]^T (+ biases):
// one GEMM when the three weights lie one after the other (no q/k/v biases
// between them in the unit's layout), else three into the row's columns;
// RoPE on q's and k's heads in place; attention; res1 = x + atty Wo^T
// (+ bo); xn2 = RMSNorm(res1); gate, up = xn2 Wgate^T, xn2 Wup^T (+ biases);
// h = silu(gate) up; y = res1 + h Wdown^T (+ bdown).
// Backward: the same in reverse, weight gradients accumulated by GEMMs with
// beta = 1, bias gradients by the shared column sums, d gate and d up side
// by side in one [BT][2F] row so that xn2's gradient is one GEMM when gate
// and up lie one after the other (and q, k, v's likewise).
//
// LLAMA_CUDA_PROFILE=STEPS[,WARMUP], read at creation, times the device's
// ops as GPT2_CUDA_PROFILE does GPT-2's (gpt2_backend.h says how); the
// device prints the table when it is destroyed.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "llama_cuda.cuh"

namespace llamacuda {

namespace {

const char *const kLlamaOpNames[] = {
    "rmsnorm_fwd",       "rmsnorm_bwd_dw",    "rmsnorm_bwd_dx",     "matmul_qkv_fwd",
    "rope_fwd",          "matmul_o_fwd",      "matmul_gate_up_fwd", "swiglu_fwd",
    "matmul_down_fwd",   "matmul_down_dw",    "matmul_down_dx",     "swiglu_bwd",
    "matmul_gate_up_dw", "matmul_gate_up_dx", "matmul_o_dw",        "matmul_o_dx",
    "rope_bwd",          "matmul_qkv_dw",     "matmul_qkv_dx"};
constexpr int kLlamaOps = (int)(sizeof kLlamaOpNames / sizeof kLlamaOpNames[0]);
static_assert(kLlamaOps == LLAMA_PROF_END - kProfModelBase, "one name per llama_prof_op");

struct impl {
    ctx *cx;
    // The rotary angles of positions 0 .. max_T - 1 (llama_rope_table, made
    // on the host as the CPU backend's), on the device: [max_T][hd / 2].
    float *rope_cos, *rope_sin;
};

impl *impl_of(llama_backend *be) { return static_cast<impl *>(be->impl); }
const impl *impl_of(const llama_backend *be) { return static_cast<const impl *>(be->impl); }

#define ERR_ARGS(cx) (cx)->err, NN_ERR_CAP

using sizes = llama__sizes;

nn_attn_layout attn_layout(const sizes &s, int B, int T) {
    nn_attn_layout a;
    a.B = B;
    a.T = T;
    a.n_head = s.NH;
    a.n_kv_head = s.NKV;
    a.head_dim = s.hd;
    a.ld = s.W;
    a.q_off = 0;
    a.k_off = s.Q;
    a.v_off = s.Q + s.KV;
    a.ldy = s.Q;
    return a;
}

size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

// 1 when b starts right after the n elements of a: two tensors of a unit
// that one GEMM can treat as one matrix (rows of a, then rows of b).
bool follows(const void *a, size_t n, const void *b, nn_dtype t) {
    return a != nullptr && b != nullptr && elem_at(a, t, n) == b;
}

// ------------------------------------------------------------- scratch

// block_backward's scratch (block_forward uses the attention's part):
// big [BT][max(2F, W)] (d gate | d up side by side, then d qkv), mid
// [BT][max(C, NH hd)] (d xn2, d atty, d xn1 in turn), the score gradients
// [B][NH][T][T], and the attention's head-layout buffers.
struct block_parts {
    void *big, *mid, *datt, *attn;
};

block_parts carve_block(nn_dtype t, const sizes &s, int B, int T, void *scratch) {
    const size_t e = nn_dtype_size(t), BT = (size_t)B * T;
    unsigned char *p = (unsigned char *)scratch;
    block_parts b;
    b.big = p;
    p += round_up(BT * max_size(2 * (size_t)s.F, (size_t)s.W) * e);
    b.mid = p;
    p += round_up(BT * max_size((size_t)s.C, (size_t)s.Q) * e);
    b.datt = p;
    p += round_up((size_t)B * s.NH * T * T * e);
    b.attn = p;
    return b;
}

size_t cuda_block_scratch_bytes(const llama_backend *be, int B, int T) {
    if (B < 1 || T < 1 || T > be->max_T) return 0;
    const nn_dtype t = be->dev->dtype;
    const sizes s = llama__sizes_of(&be->dims);
    const size_t e = nn_dtype_size(t), BT = (size_t)B * T;
    const nn_attn_layout a = attn_layout(s, B, T);
    return round_up(BT * max_size(2 * (size_t)s.F, (size_t)s.W) * e) +
           round_up(BT * max_size((size_t)s.C, (size_t)s.Q) * e) +
           round_up((size_t)B * s.NH * T * T * e) + attention_scratch_bytes(t, &a);
}

// The head's: model.norm's output for every row [BT][C] (then its
// gradient, in place), rstd [BT], and the classifier's scratch for chunks
// of R = min(chunk_rows, BT) rows.
struct head_parts {
    void *xn, *cls;
    float *rstd;
};

head_parts carve_head(nn_dtype t, int C, long long BT, void *scratch) {
    unsigned char *p = (unsigned char *)scratch;
    head_parts h;
    h.xn = p;
    p += round_up((size_t)BT * C * nn_dtype_size(t));
    h.rstd = (float *)p;
    p += round_up((size_t)BT * sizeof(float));
    h.cls = p;
    return h;
}

size_t cuda_head_scratch_bytes(const llama_backend *be, int B, int T, int chunk_rows) {
    if (B < 1 || T < 1 || chunk_rows < 1) return 0;
    const nn_dtype t = be->dev->dtype;
    const long long BT = (long long)B * T;
    const int R = chunk_rows < BT ? chunk_rows : (int)BT;
    return round_up((size_t)BT * be->dims.n_embd * nn_dtype_size(t)) +
           round_up((size_t)BT * sizeof(float)) + classifier_scratch_bytes(t, be->dims.vocab, R);
}

const char *cuda_last_error(const llama_backend *be) { return impl_of(be)->cx->err; }

// ------------------------------------------------------------ embedding

int cuda_embed_forward(llama_backend *be, int B, int T, const llama_embed_w *w, const int *tokens,
                       void *x) {
    ctx *cx = impl_of(be)->cx;
    const char *op = "embed_forward";
    TRY(llama__check_shape(op, be, B, T, ERR_ARGS(cx)));
    TRY(llama__check_embed_w(op, "w", w, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "tokens", tokens, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "x", x, ERR_ARGS(cx)));
    prof_step_begin(cx);
    return embedding_forward(cx, (long long)B * T, T, be->dims.n_embd, be->dims.vocab, w->wte,
                             nullptr, tokens, x);
}

int cuda_embed_backward(llama_backend *be, int B, int T, llama_embed_w *g, const int *tokens,
                        const void *dx) {
    ctx *cx = impl_of(be)->cx;
    const char *op = "embed_backward";
    TRY(llama__check_shape(op, be, B, T, ERR_ARGS(cx)));
    TRY(llama__check_embed_w(op, "g", g, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "tokens", tokens, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "dx", dx, ERR_ARGS(cx)));
    TRY(embedding_backward(cx, B * T, be->dims.n_embd, be->dims.vocab, g->wte, tokens, dx));
    prof_step_end(cx); // a training micro-step ends here
    return NN_OK;
}

// -------------------------------------------------------------- blocks

// A Linear's product timed as `op`: y[:, 0..N) (row stride ldy) = x W^T
// (+ b) (+ res, rows ldy apart, may be y).
int linear(ctx *cx, int op, int rows, int N, int K, const void *x, int ldx, const void *W,
           const void *b, const void *res, void *y, int ldy) {
    return timed(cx, op, [&] {
        return matmul(cx, false, true, rows, N, K, x, ldx, W, K, res, y, ldy,
                      b != nullptr ? EPI_BIAS : EPI_NONE, b, nullptr);
    });
}

// The backward of y = x W^T for several Linears that read the same x and
// write side by side into one dy row (q, k, v; gate, up), n of them, the
// i-th with outs[i] outputs, weights W[i] and gradients gW[i]: gW[i] +=
// dy_i^T x (one GEMM over all of them when the gradients lie one after the
// other) and dx = sum_i dy_i W_i (one GEMM when the weights do; else
// accumulated in order of i). dy: [rows][sum outs] (stride lddy).
int linears_backward(ctx *cx, int op_dw, int op_dx, int rows, int K, const void *x,
                     const void *dy, int lddy, int n, const int *outs, const void *const *W,
                     void *const *gW, void *dx) {
    const nn_dtype t = cx->dtype;
    bool w_one = true, g_one = true;
    int total = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0) {
            w_one = w_one && follows(W[i - 1], (size_t)outs[i - 1] * K, W[i], t);
            g_one = g_one && follows(gW[i - 1], (size_t)outs[i - 1] * K, gW[i], t);
        }
        total += outs[i];
    }
    TRY(timed(cx, op_dw, [&] {
        if (g_one)
            return matmul(cx, true, false, total, K, rows, dy, lddy, x, K, gW[0], gW[0], K,
                          EPI_NONE, nullptr, nullptr);
        int col = 0;
        for (int i = 0; i < n; i++) {
            TRY(matmul(cx, true, false, outs[i], K, rows, elem_at(dy, t, col), lddy, x, K, gW[i],
                       gW[i], K, EPI_NONE, nullptr, nullptr));
            col += outs[i];
        }
        return (int)NN_OK;
    }));
    return timed(cx, op_dx, [&] {
        if (w_one)
            return matmul(cx, false, false, rows, K, total, dy, lddy, W[0], K, nullptr, dx, K,
                          EPI_NONE, nullptr, nullptr);
        int col = 0;
        for (int i = 0; i < n; i++) {
            TRY(matmul(cx, false, false, rows, K, outs[i], elem_at(dy, t, col), lddy, W[i], K,
                       i == 0 ? nullptr : dx, dx, K, EPI_NONE, nullptr, nullptr));
            col += outs[i];
        }
        return (int)NN_OK;
    });
}

int cuda_block_forward(llama_backend *be, int B, int T, const llama_block_w *w, const void *x,
                       llama_block_acts *a, void *y, void *scratch) {
    const impl *im = impl_of(be);
    ctx *cx = im->cx;
    const llama_dims *d = &be->dims;
    const char *op = "block_forward";
    TRY(llama__check_shape(op, be, B, T, ERR_ARGS(cx)));
    TRY(llama__check_block_w(op, "w", d, w, ERR_ARGS(cx)));
    TRY(llama__check_acts(op, a, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "x", x, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "y", y, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "scratch", scratch, ERR_ARGS(cx)));
    const nn_dtype t = cx->dtype;
    const sizes s = llama__sizes_of(d);
    const int BT = B * T, C = s.C, F = s.F;
    const float eps = (float)d->rms_eps;
    const block_parts p = carve_block(t, s, B, T, scratch);
    const void *bq = d->qkv_bias ? w->bq : nullptr, *bk = d->qkv_bias ? w->bk : nullptr,
               *bv = d->qkv_bias ? w->bv : nullptr, *bo = d->o_bias ? w->bo : nullptr;
    const void *bgate = d->mlp_bias ? w->bgate : nullptr, *bup = d->mlp_bias ? w->bup : nullptr,
               *bdown = d->mlp_bias ? w->bdown : nullptr;

    // Attention half: res1 = x + o_proj(attn(rope(q), rope(k), v)) of
    // input_layernorm(x).
    TRY(rmsnorm_forward(cx, BT, C, eps, x, w->attn_norm, a->xn1, a->rstd1));
    if (!d->qkv_bias && follows(w->wq, (size_t)s.Q * C, w->wk, t) &&
        follows(w->wk, (size_t)s.KV * C, w->wv, t)) {
        TRY(linear(cx, PROF_MATMUL_QKV_FWD, BT, s.W, C, a->xn1, C, w->wq, nullptr, nullptr,
                   a->qkv, s.W));
    } else {
        TRY(linear(cx, PROF_MATMUL_QKV_FWD, BT, s.Q, C, a->xn1, C, w->wq, bq, nullptr, a->qkv,
                   s.W));
        TRY(linear(cx, PROF_MATMUL_QKV_FWD, BT, s.KV, C, a->xn1, C, w->wk, bk, nullptr,
                   elem_at(a->qkv, t, s.Q), s.W));
        TRY(linear(cx, PROF_MATMUL_QKV_FWD, BT, s.KV, C, a->xn1, C, w->wv, bv, nullptr,
                   elem_at(a->qkv, t, s.Q + s.KV), s.W));
    }
    // q's and k's heads follow each other from column 0: rotate NH + NKV.
    TRY(rope(cx, false, BT, T, s.NH + s.NKV, s.hd, s.W, a->qkv, im->rope_cos, im->rope_sin));
    const nn_attn_layout attn = attn_layout(s, B, T);
    TRY(attention_forward(cx, &attn, a->qkv, a->att, a->atty, p.attn));
    TRY(linear(cx, PROF_MATMUL_O_FWD, BT, C, s.Q, a->atty, s.Q, w->wo, bo, x, a->res1, C));

    // MLP half: y = res1 + down_proj(silu(gate_proj(m)) * up_proj(m)), m =
    // post_attention_layernorm(res1).
    TRY(rmsnorm_forward(cx, BT, C, eps, a->res1, w->mlp_norm, a->xn2, a->rstd2));
    TRY(linear(cx, PROF_MATMUL_GATE_UP_FWD, BT, F, C, a->xn2, C, w->wgate, bgate, nullptr,
               a->gate, F));
    TRY(linear(cx, PROF_MATMUL_GATE_UP_FWD, BT, F, C, a->xn2, C, w->wup, bup, nullptr, a->up, F));
    TRY(swiglu_forward(cx, (long long)BT * F, a->gate, a->up, a->h));
    return linear(cx, PROF_MATMUL_DOWN_FWD, BT, C, F, a->h, F, w->wdown, bdown, a->res1, y, C);
}

int cuda_block_backward(llama_backend *be, int B, int T, const llama_block_w *w, llama_block_w *g,
                        const void *x, const llama_block_acts *a, const void *dy, void *dx,
                        void *scratch) {
    const impl *im = impl_of(be);
    ctx *cx = im->cx;
    const llama_dims *d = &be->dims;
    const char *op = "block_backward";
    TRY(llama__check_shape(op, be, B, T, ERR_ARGS(cx)));
    TRY(llama__check_block_w(op, "w", d, w, ERR_ARGS(cx)));
    TRY(llama__check_block_w(op, "g", d, g, ERR_ARGS(cx)));
    TRY(llama__check_acts(op, a, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "x", x, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "dy", dy, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "dx", dx, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "scratch", scratch, ERR_ARGS(cx)));
    const nn_dtype t = cx->dtype;
    const sizes s = llama__sizes_of(d);
    const int BT = B * T, C = s.C, F = s.F;
    const block_parts p = carve_block(t, s, B, T, scratch);
    void *dgu = p.big; // [BT][2F]: d gate | d up side by side, then d qkv [BT][W]

    // MLP half. dy reaches res1 directly (residual) and through the MLP.
    if (d->mlp_bias) TRY(colsum_add(cx, BT, C, dy, C, g->bdown));
    TRY(timed(cx, PROF_MATMUL_DOWN_DW, [&] {
        return matmul(cx, true, false, C, F, BT, dy, C, a->h, F, g->wdown, g->wdown, F, EPI_NONE,
                      nullptr, nullptr);
    }));
    // dh = dy Wdown, into d gate's columns.
    TRY(timed(cx, PROF_MATMUL_DOWN_DX, [&] {
        return matmul(cx, false, false, BT, F, C, dy, C, w->wdown, F, nullptr, dgu, 2 * F,
                      EPI_NONE, nullptr, nullptr);
    }));
    TRY(swiglu_backward(cx, BT, F, a->gate, a->up, dgu));
    if (d->mlp_bias) {
        TRY(colsum_add(cx, BT, F, dgu, 2 * F, g->bgate));
        TRY(colsum_add(cx, BT, F, elem_at(dgu, t, F), 2 * F, g->bup));
    }
    // d xn2 = d gate . Wgate + d up . Wup.
    {
        const int outs[2] = {F, F};
        const void *const W[2] = {w->wgate, w->wup};
        void *const gW[2] = {g->wgate, g->wup};
        TRY(linears_backward(cx, PROF_MATMUL_GATE_UP_DW, PROF_MATMUL_GATE_UP_DX, BT, C, a->xn2,
                             dgu, 2 * F, 2, outs, W, gW, p.mid));
    }
    // dx holds d res1 = dy + post_attention_layernorm's input gradient from
    // here on.
    TRY(rmsnorm_backward(cx, BT, C, p.mid, a->res1, a->rstd2, w->mlp_norm, dy, dx, g->mlp_norm));

    // Attention half, the same way with d res1.
    if (d->o_bias) TRY(colsum_add(cx, BT, C, dx, C, g->bo));
    TRY(timed(cx, PROF_MATMUL_O_DW, [&] {
        return matmul(cx, true, false, C, s.Q, BT, dx, C, a->atty, s.Q, g->wo, g->wo, s.Q,
                      EPI_NONE, nullptr, nullptr);
    }));
    TRY(timed(cx, PROF_MATMUL_O_DX, [&] {
        return matmul(cx, false, false, BT, s.Q, C, dx, C, w->wo, s.Q, nullptr, p.mid, s.Q,
                      EPI_NONE, nullptr, nullptr);
    }));
    const nn_attn_layout attn = attn_layout(s, B, T);
    void *dqkv = p.big;
    TRY(attention_backward(cx, &attn, a->qkv, a->att, p.mid, dqkv, p.datt, p.attn));
    // Back through the rotation: the gradients of q and k as projected.
    TRY(rope(cx, true, BT, T, s.NH + s.NKV, s.hd, s.W, dqkv, im->rope_cos, im->rope_sin));
    if (d->qkv_bias) {
        TRY(colsum_add(cx, BT, s.Q, dqkv, s.W, g->bq));
        TRY(colsum_add(cx, BT, s.KV, elem_at(dqkv, t, s.Q), s.W, g->bk));
        TRY(colsum_add(cx, BT, s.KV, elem_at(dqkv, t, s.Q + s.KV), s.W, g->bv));
    }
    // d xn1 = dq . Wq + dk . Wk + dv . Wv.
    {
        const int outs[3] = {s.Q, s.KV, s.KV};
        const void *const W[3] = {w->wq, w->wk, w->wv};
        void *const gW[3] = {g->wq, g->wk, g->wv};
        TRY(linears_backward(cx, PROF_MATMUL_QKV_DW, PROF_MATMUL_QKV_DX, BT, C, a->xn1, dqkv, s.W,
                             3, outs, W, gW, p.mid));
    }
    return rmsnorm_backward(cx, BT, C, p.mid, x, a->rstd1, w->attn_norm, dx, dx, g->attn_norm);
}

// ---------------------------------------------------------------- head

int check_head(llama_backend *be, ctx *cx, const char *op, int B, int T, const llama_head_w *w,
               const void *x, const int *targets, float *losses, int chunk_rows,
               const void *scratch) {
    TRY(llama__check_shape(op, be, B, T, ERR_ARGS(cx)));
    TRY(llama__check_head_w(op, "w", w, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "x", x, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "scratch", scratch, ERR_ARGS(cx)));
    TRY(llama__check_chunk(op, chunk_rows, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "targets", targets, ERR_ARGS(cx)));
    return llama__check_ptr(op, "losses", losses, ERR_ARGS(cx));
}

// model.norm over every row, the shared classifier in chunks, and (with g)
// model.norm's backward over every row from the classifier's dxn, which
// replaces the norm's output in place.
int head_run(llama_backend *be, int BT, const llama_head_w *w, llama_head_w *g, const void *x,
             const int *targets, float dloss_scale, void *dx, float *losses, int chunk_rows,
             void *scratch) {
    ctx *cx = impl_of(be)->cx;
    const int C = be->dims.n_embd, V = be->dims.vocab;
    const head_parts h = carve_head(cx->dtype, C, BT, scratch);
    TRY(rmsnorm_forward(cx, BT, C, (float)be->dims.rms_eps, x, w->norm, h.xn, h.rstd));
    TRY(classifier(cx, BT, C, V, h.xn, w->wout, targets, dloss_scale, losses,
                   g != nullptr ? g->wout : nullptr, h.xn, chunk_rows, h.cls));
    if (g == nullptr) return NN_OK;
    return rmsnorm_backward(cx, BT, C, h.xn, x, h.rstd, w->norm, nullptr, dx, g->norm);
}

int cuda_head_forward_backward(llama_backend *be, int B, int T, const llama_head_w *w,
                               llama_head_w *g, const void *x, const int *targets,
                               float dloss_scale, void *dx, float *losses, int chunk_rows,
                               void *scratch) {
    ctx *cx = impl_of(be)->cx;
    const char *op = "head_forward_backward";
    TRY(check_head(be, cx, op, B, T, w, x, targets, losses, chunk_rows, scratch));
    TRY(llama__check_head_w(op, "g", g, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "dx", dx, ERR_ARGS(cx)));
    return head_run(be, B * T, w, g, x, targets, dloss_scale, dx, losses, chunk_rows, scratch);
}

int cuda_head_forward(llama_backend *be, int B, int T, const llama_head_w *w, const void *x,
                      const int *targets, float *losses, int chunk_rows, void *scratch) {
    ctx *cx = impl_of(be)->cx;
    TRY(check_head(be, cx, "head_forward", B, T, w, x, targets, losses, chunk_rows, scratch));
    return head_run(be, B * T, w, nullptr, x, targets, 0.0f, nullptr, losses, chunk_rows,
                    scratch);
}

int cuda_head_logits(llama_backend *be, int B, int T, const llama_head_w *w, const void *x,
                     int row, float *host_logits, void *scratch) {
    ctx *cx = impl_of(be)->cx;
    const char *op = "head_logits";
    TRY(llama__check_shape(op, be, B, T, ERR_ARGS(cx)));
    TRY(llama__check_head_w(op, "w", w, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "x", x, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "scratch", scratch, ERR_ARGS(cx)));
    TRY(llama__check_ptr(op, "host_logits", host_logits, ERR_ARGS(cx)));
    if (row < 0 || (long long)row >= (long long)B * T) {
        return fail(cx, NN_ERR_ARG, "llama %s: row %d is outside [0, B * T = %lld)", op, row,
                    (long long)B * T);
    }
    const int C = be->dims.n_embd;
    const head_parts h = carve_head(cx->dtype, C, (long long)B * T, scratch);
    TRY(rmsnorm_forward(cx, 1, C, (float)be->dims.rms_eps, elem_at(x, cx->dtype, (size_t)row * C),
                        w->norm, h.xn, h.rstd));
    return classifier_logits_row(cx, C, be->dims.vocab, h.xn, w->wout, host_logits, h.cls);
}

// ------------------------------------------------------------ lifetime

// Frees the backend's own memory (the RoPE tables); the device, with any
// profile it holds, stays the caller's.
void cuda_destroy(llama_backend *be) {
    if (be == nullptr) return;
    impl *im = impl_of(be);
    if (im != nullptr) {
        be->dev->ops->free(be->dev, im->rope_cos);
        be->dev->ops->free(be->dev, im->rope_sin);
    }
    std::free(im);
    std::free(be);
}

llama_backend_ops make_ops() {
    llama_backend_ops o;
    std::memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.block_scratch_bytes = cuda_block_scratch_bytes;
    o.head_scratch_bytes = cuda_head_scratch_bytes;
    o.embed_forward = cuda_embed_forward;
    o.embed_backward = cuda_embed_backward;
    o.block_forward = cuda_block_forward;
    o.block_backward = cuda_block_backward;
    o.head_forward_backward = cuda_head_forward_backward;
    o.head_forward = cuda_head_forward;
    o.head_logits = cuda_head_logits;
    o.last_error = cuda_last_error;
    o.destroy = cuda_destroy;
    return o;
}

const llama_backend_ops cuda_ops = make_ops();

// The RoPE table of max_T positions, made on the host and copied to the
// device (synchronous: creation may wait).
int upload_rope(llama_backend *be, impl *im, char *err, size_t cap) {
    nn_device *dev = be->dev;
    const size_t n = (size_t)be->max_T * (size_t)(be->dims.head_dim / 2);
    float *host = static_cast<float *>(std::malloc(2 * n * sizeof(float) + 1));
    if (host == nullptr)
        return ex_error(err, cap, NN_ERR_NOMEM,
                         "llama cuda backend: out of host memory (RoPE table of %d positions)",
                         be->max_T);
    llama_rope_table(&be->dims, be->max_T, host, host + n);
    int s = dev->ops->alloc(dev, n * sizeof(float), reinterpret_cast<void **>(&im->rope_cos));
    if (s == NN_OK)
        s = dev->ops->alloc(dev, n * sizeof(float), reinterpret_cast<void **>(&im->rope_sin));
    if (s == NN_OK) s = dev->ops->upload(dev, im->rope_cos, host, n * sizeof(float));
    if (s == NN_OK) s = dev->ops->upload(dev, im->rope_sin, host + n, n * sizeof(float));
    std::free(host);
    if (s != NN_OK)
        return ex_error(err, cap, s, "llama cuda backend: the RoPE table: %s",
                         dev->ops->last_error(dev));
    return NN_OK;
}

} // namespace

} // namespace llamacuda

using namespace llamacuda;

extern "C" int llama_cuda_backend_create(nn_device *dev, const llama_dims *dims, int max_T,
                                         llama_backend **out, char *err, size_t cap) {
    if (out == nullptr) return ex_error(err, cap, NN_ERR_ARG, "llama cuda backend: out is NULL");
    *out = nullptr;
    ctx *cx = ctx_of(dev);
    if (cx == nullptr)
        return ex_error(err, cap, NN_ERR_ARG,
                         "llama cuda backend: the device must come from nn_cuda_device_create");
    char why[512];
    if (dims == nullptr || llama_dims_check(dims, why, sizeof why) != 0)
        return ex_error(err, cap, NN_ERR_ARG, "llama cuda backend: %s",
                         dims == nullptr ? "dims is NULL" : why);
    if (max_T < 1 || max_T > dims->max_seq)
        return ex_error(err, cap, NN_ERR_ARG,
                         "llama cuda backend: max_T = %d; need 1 <= max_T <= "
                         "max_position_embeddings (%d)",
                         max_T, dims->max_seq);
    int steps = 0, warmup = 0;
    const char *spec = std::getenv("LLAMA_CUDA_PROFILE");
    if (spec != nullptr && *spec != '\0' && !profile_spec_parse(spec, &steps, &warmup))
        return ex_error(err, cap, NN_ERR_ARG,
                         "llama cuda: LLAMA_CUDA_PROFILE=\"%s\"; use STEPS or STEPS,WARMUP "
                         "(training micro-steps to time, 1..100000, after WARMUP ones, "
                         "0..100000, default 2), or unset it",
                         spec);
    auto *be = static_cast<llama_backend *>(std::calloc(1, sizeof(llama_backend)));
    auto *im = static_cast<impl *>(std::calloc(1, sizeof(impl)));
    if (be == nullptr || im == nullptr) {
        std::free(be);
        std::free(im);
        return ex_error(err, cap, NN_ERR_NOMEM, "llama cuda backend: out of host memory");
    }
    be->ops = &cuda_ops;
    be->dev = dev;
    be->dims = *dims;
    be->max_T = max_T;
    be->impl = im;
    im->cx = cx;
    int s = upload_rope(be, im, err, cap);
    if (s == NN_OK && steps > 0)
        s = profiler_create(cx, "llama", "LLAMA_CUDA_PROFILE", steps, warmup, kLlamaOpNames,
                            kLlamaOps, err, cap);
    if (s != NN_OK) {
        cuda_destroy(be);
        return s;
    }
    *out = be;
    return NN_OK;
}
