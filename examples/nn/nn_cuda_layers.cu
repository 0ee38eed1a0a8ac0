// The CUDA device's nn_layers.h table: every layer a model calls, launched
// on the device's stream in its dtype, over the kernels of nn_cuda_*.cu.
// This is where the CUDA path differs from the CPU's, and only here:
//   - a Linear is one cuBLASLt product: its bias in the epilogue (or the
//     shared add_bias fallback), a residual as the GEMM's C input, weight
//     gradients accumulated with beta = 1;
//   - several Linears over one input (q, k, v; gate, up) run as one product
//     when their weights (and gradients) lie one after the other;
//   - c_fc's GELU runs in cuBLASLt's GELU_AUX_BIAS epilogue and c_proj's
//     input gradient in the DGELU one when the device's gelu_fusion asks
//     for it and cuBLASLt takes the shape (counted in the device's stats,
//     fused or fallback);
//   - scratch pieces are NN_ALIGN-aligned, and the attention takes its
//     head-layout buffers and the score gradients of the whole batch;
//   - tokens are not checked (a wait for the device each micro-step): the
//     embedding makes a bad token's row NaN;
//   - LoRA is the composite of its products and a scale kernel
//     (nn_layers_composed.c), as on the other devices;
//   - the profile (GPT2_CUDA_PROFILE, LLAMA_CUDA_PROFILE) times each layer
//     under its name ("matmul_<Linear>_fwd", "layernorm_fwd", ...), a
//     training micro-step from embed_forward to embed_backward.
// The test hook FAULT_QKV_TRANSPOSED (GPT2_CUDA_FAULT) reads the Linear
// named "qkv"'s weight as [in][out] in the forward.
#include <cstring>

#include "nn_cuda_ctx.cuh"
#include "nn_layers.h"

namespace nncuda {

namespace {

// ------------------------------------------------------ input, output

int cuda_check_tokens(nn_device *, const char *, const char *, const char *, const char *,
                      const int *, long long, int, char *, size_t) {
    return NN_OK; // the embedding's NaN rows say it (nn_layers.h)
}

int cuda_embed_forward(nn_device *dev, int BT, int T, int C, int V, const void *wte,
                       const void *wpe, const int *tokens, void *x) {
    ctx *cx = ctx_of(dev);
    prof_step_begin(cx);
    return embedding_forward(cx, BT, T, C, V, wte, wpe, tokens, x);
}

int cuda_embed_backward(nn_device *dev, int BT, int T, int C, int V, void *g_wte, void *g_wpe,
                        const int *tokens, const void *dx) {
    ctx *cx = ctx_of(dev);
    TRY(embedding_backward(cx, BT, C, V, g_wte, tokens, dx));
    if (g_wpe != nullptr) {
        if (T < 1 || BT % T != 0)
            return fail(cx, NN_ERR_ARG,
                        "nn cuda embed_backward: BT = %d rows are not whole sequences of T = %d",
                        BT, T);
        TRY(embedding_backward_positions(cx, BT / T, T, C, g_wpe, dx));
    }
    prof_step_end(cx); // a training micro-step ends here
    return NN_OK;
}

size_t cuda_classifier_scratch_bytes(const nn_device *dev, int C, int V, int rows) {
    (void)C;
    return classifier_scratch_bytes(dev->dtype, V, rows);
}

int cuda_classifier_chunk(nn_device *dev, int n, int C, int V, const void *xn, const void *W,
                          const int *targets, float dloss_scale, float *losses, void *gW,
                          void *dxn, void *scratch) {
    return classifier(ctx_of(dev), n, C, V, xn, W, targets, dloss_scale, losses, gW, dxn, n,
                      scratch);
}

int cuda_classifier_logits_row(nn_device *dev, int C, int V, const void *xn, const void *W,
                               void *scratch, float *host_logits) {
    return classifier_logits_row(ctx_of(dev), C, V, xn, W, host_logits, scratch);
}

// -------------------------------------------------------------- Linears

// 1 when b starts right after the n elements of a: two tensors one GEMM
// can treat as one matrix (rows of a, then rows of b).
bool follows(const void *a, size_t n, const void *b, nn_dtype t) {
    return a != nullptr && b != nullptr && elem_at(a, t, n) == b;
}

// y[:, 0..out) (row stride ldy) = x W^T (+ b) (+ res, rows ldy apart).
int product_forward(ctx *cx, const char *name, int rows, int in, int out, const void *x,
                    int ldx, const void *W, const void *b, const void *res, void *y, int ldy) {
    const bool transposed = cx->fault == FAULT_QKV_TRANSPOSED && name != nullptr &&
                            std::strcmp(name, "qkv") == 0;
    return matmul(cx, false, !transposed, rows, out, in, x, ldx, W, transposed ? out : in, res, y,
                  ldy, b != nullptr ? EPI_BIAS : EPI_NONE, b, nullptr);
}

int cuda_linear_forward(nn_device *dev, const char *name, int rows, int in, int out,
                        const void *x, int ldx, const void *W, const void *b, const void *res,
                        int ldres, void *y, int ldy) {
    ctx *cx = ctx_of(dev);
    if (res != nullptr && ldres != ldy)
        return fail(cx, NN_ERR_ARG,
                    "nn cuda linear_forward %s: the residual's row stride %d differs from the "
                    "output's %d (the GEMM's C and D share one)",
                    name != nullptr ? name : "", ldres, ldy);
    return timed(cx, prof_op(cx, "matmul_", name, "_fwd"), [&] {
        return product_forward(cx, name, rows, in, out, x, ldx, W, b, res, y, ldy);
    });
}

// dW += dy^T x, timed as the Linear's _dw; nothing for a frozen weight
// (dW NULL).
int weight_grad(ctx *cx, const char *name, int rows, int in, int out, const void *x, int ldx,
                const void *dy, int lddy, void *dW) {
    if (dW == nullptr) return NN_OK;
    return timed(cx, prof_op(cx, "matmul_", name, "_dw"), [&] {
        return matmul(cx, true, false, out, in, rows, dy, lddy, x, ldx, dW, dW, in, EPI_NONE,
                      nullptr, nullptr);
    });
}

int cuda_linear_backward(nn_device *dev, const char *name, int rows, int in, int out,
                         const void *x, int ldx, const void *W, const void *dy, int lddy,
                         void *dW, void *dx, int lddx, float dx_beta) {
    ctx *cx = ctx_of(dev);
    if (dx_beta != 0.0f && dx_beta != 1.0f)
        return fail(cx, NN_ERR_ARG, "nn cuda linear_backward %s: dx_beta = %g; 0 or 1 only",
                    name != nullptr ? name : "", (double)dx_beta);
    TRY(weight_grad(cx, name, rows, in, out, x, ldx, dy, lddy, dW));
    if (dx == nullptr) return NN_OK;
    return timed(cx, prof_op(cx, "matmul_", name, "_dx"), [&] {
        return matmul(cx, false, false, rows, in, out, dy, lddy, W, in,
                      dx_beta != 0.0f ? dx : nullptr, dx, lddx, EPI_NONE, nullptr, nullptr);
    });
}

int cuda_linears_forward(nn_device *dev, const char *name, int n, const int *outs, int rows,
                         int in, const void *x, int ldx, const void *const *W,
                         const void *const *b, void *y, int ldy) {
    ctx *cx = ctx_of(dev);
    const nn_dtype t = cx->dtype;
    bool one = true;
    int total = 0;
    for (int i = 0; i < n; i++) {
        if (b != nullptr && b[i] != nullptr) one = false;
        if (i > 0) one = one && follows(W[i - 1], (size_t)outs[i - 1] * in, W[i], t);
        total += outs[i];
    }
    return timed(cx, prof_op(cx, "matmul_", name, "_fwd"), [&] {
        if (one)
            return product_forward(cx, name, rows, in, total, x, ldx, W[0], nullptr, nullptr, y,
                                   ldy);
        size_t col = 0;
        for (int i = 0; i < n; i++) {
            TRY(product_forward(cx, name, rows, in, outs[i], x, ldx, W[i],
                                b != nullptr ? b[i] : nullptr, nullptr, elem_at(y, t, col), ldy));
            col += (size_t)outs[i];
        }
        return (int)NN_OK;
    });
}

int cuda_linears_backward(nn_device *dev, const char *name, int n, const int *outs, int rows,
                          int in, const void *x, int ldx, const void *const *W, const void *dy,
                          int lddy, void *const *gW, void *dx, int lddx) {
    ctx *cx = ctx_of(dev);
    const nn_dtype t = cx->dtype;
    bool w_one = true, g_one = gW != nullptr && gW[0] != nullptr, any_g = false;
    int total = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0) {
            w_one = w_one && follows(W[i - 1], (size_t)outs[i - 1] * in, W[i], t);
            g_one = g_one && follows(gW[i - 1], (size_t)outs[i - 1] * in, gW[i], t);
        }
        any_g = any_g || (gW != nullptr && gW[i] != nullptr);
        total += outs[i];
    }
    // Frozen weights (gW NULL, or a NULL gW[i]) get no gradient.
    if (any_g) TRY(timed(cx, prof_op(cx, "matmul_", name, "_dw"), [&] {
        if (g_one)
            return matmul(cx, true, false, total, in, rows, dy, lddy, x, ldx, gW[0], gW[0], in,
                          EPI_NONE, nullptr, nullptr);
        size_t col = 0;
        for (int i = 0; i < n; i++) {
            if (gW[i] != nullptr)
                TRY(matmul(cx, true, false, outs[i], in, rows, elem_at(dy, t, col), lddy, x, ldx,
                           gW[i], gW[i], in, EPI_NONE, nullptr, nullptr));
            col += (size_t)outs[i];
        }
        return (int)NN_OK;
    }));
    return timed(cx, prof_op(cx, "matmul_", name, "_dx"), [&] {
        if (w_one)
            return matmul(cx, false, false, rows, in, total, dy, lddy, W[0], in, nullptr, dx,
                          lddx, EPI_NONE, nullptr, nullptr);
        size_t col = 0;
        for (int i = 0; i < n; i++) {
            TRY(matmul(cx, false, false, rows, in, outs[i], elem_at(dy, t, col), lddy, W[i], in,
                       i == 0 ? nullptr : dx, dx, lddx, EPI_NONE, nullptr, nullptr));
            col += (size_t)outs[i];
        }
        return (int)NN_OK;
    });
}

// Whether cuBLASLt's GELU epilogues can take this shape at all: the aux
// (pre) has a leading dimension of `ld`, which they need divisible by 8,
// and buffers of the 16-byte class (align_class: the decision must not
// depend on alignment beyond the class, or stages could differ). Anything
// else they refuse is found by matmul (NN_ERR_UNAVAILABLE, remembered per
// shape and class) and falls back the same way.
bool gelu_fusable(int ld, const void *aux, const void *out) {
    return ld % 8 == 0 && align_class(aux) == kMaxAlignClass &&
           align_class(out) == kMaxAlignClass;
}

int cuda_linear_gelu_forward(nn_device *dev, const char *name, int rows, int in, int out,
                             const void *x, int ldx, const void *W, const void *b, void *pre,
                             void *post) {
    ctx *cx = ctx_of(dev);
    const int op = prof_op(cx, "matmul_", name, "_fwd");
    if (cx->gelu_fusion >= 1) {
        if (gelu_fusable(out, pre, post)) {
            const int s = timed(cx, op, [&] {
                return matmul(cx, false, true, rows, out, in, x, ldx, W, in, nullptr, post, out,
                              EPI_GELU_AUX, b, pre);
            });
            if (s == NN_OK) cx->stats.gelu_fused++;
            if (s != NN_ERR_UNAVAILABLE) return s;
        }
        cx->stats.gelu_fallback++;
    }
    TRY(timed(cx, op, [&] {
        return matmul(cx, false, true, rows, out, in, x, ldx, W, in, nullptr, pre, out,
                      b != nullptr ? EPI_BIAS : EPI_NONE, b, nullptr);
    }));
    return gelu_forward(cx, (long long)rows * out, pre, post);
}

int cuda_linear_dgelu_backward(nn_device *dev, const char *name, int rows, int in, int out,
                               const void *x, int ldx, const void *W, const void *dy, int lddy,
                               void *dW, const void *pre, void *dx, void *db) {
    ctx *cx = ctx_of(dev);
    TRY(weight_grad(cx, name, rows, in, out, x, ldx, dy, lddy, dW));
    const int op = prof_op(cx, "matmul_", name, "_dx");
    if (cx->gelu_fusion >= 2) {
        if (gelu_fusable(in, pre, dx)) {
            const int s = timed(cx, op, [&] {
                return matmul(cx, false, false, rows, in, out, dy, lddy, W, in, nullptr, dx, in,
                              EPI_DGELU, nullptr, const_cast<void *>(pre));
            });
            if (s == NN_OK) {
                cx->stats.dgelu_fused++;
                return colsum_add(cx, rows, in, dx, in, db);
            }
            if (s != NN_ERR_UNAVAILABLE) return s;
        }
        cx->stats.dgelu_fallback++;
    }
    TRY(timed(cx, op, [&] {
        return matmul(cx, false, false, rows, in, out, dy, lddy, W, in, nullptr, dx, in,
                      EPI_NONE, nullptr, nullptr);
    }));
    return gelu_backward_colsum(cx, rows, in, dx, pre, db);
}

int cuda_colsum_add(nn_device *dev, int rows, int N, const void *a, int lda, void *out) {
    return colsum_add(ctx_of(dev), rows, N, a, lda, out);
}

int cuda_scale(nn_device *dev, long long n, float s, void *x) {
    return scale_elements(ctx_of(dev), n, s, x);
}

int cuda_dropout(nn_device *dev, int rows, int cols, float p, uint64_t seed, const void *src,
                 int lds, void *dst, int ldd, int add) {
    return dropout_elements(ctx_of(dev), rows, cols, p, seed, src, lds, dst, ldd, add);
}

// ------------------------------------------------------------ attention

// The score gradients of the whole batch [B][NH][T][T], then the
// attention's head-layout buffers.
size_t score_grad_bytes(nn_dtype t, const nn_attn_layout *s) {
    return round_up((size_t)s->B * s->n_head * s->T * s->T * nn_dtype_size(t));
}

size_t cuda_attention_scratch_bytes(const nn_device *dev, const nn_attn_layout *s) {
    return score_grad_bytes(dev->dtype, s) + attention_scratch_bytes(dev->dtype, s);
}

int cuda_attention_forward(nn_device *dev, const nn_attn_layout *s, const void *qkv, void *att,
                           void *atty, void *scratch) {
    return attention_forward(ctx_of(dev), s, qkv, att, atty,
                             (unsigned char *)scratch + score_grad_bytes(dev->dtype, s));
}

int cuda_attention_backward(nn_device *dev, const nn_attn_layout *s, const void *qkv,
                            const void *att, const void *datty, void *dqkv, void *scratch) {
    return attention_backward(ctx_of(dev), s, qkv, att, datty, dqkv, scratch,
                              (unsigned char *)scratch + score_grad_bytes(dev->dtype, s));
}

int cuda_rope(nn_device *dev, int BT, int T, int heads, int hd, int ld, const float *cos_t,
              const float *sin_t, void *qkv, int backward) {
    return rope(ctx_of(dev), backward != 0, BT, T, heads, hd, ld, qkv, cos_t, sin_t);
}

// ---------------------------------------------------------------- norms

int cuda_layernorm_forward(nn_device *dev, int rows, int C, const void *x, const void *w,
                           const void *b, void *out, float *mean, float *rstd) {
    return layernorm_forward(ctx_of(dev), rows, C, x, w, b, out, mean, rstd);
}

int cuda_layernorm_backward(nn_device *dev, int rows, int C, const void *dout, const void *x,
                            const float *mean, const float *rstd, const void *w,
                            const void *dres, void *dx, void *dw, void *db) {
    return layernorm_backward(ctx_of(dev), rows, C, dout, x, mean, rstd, w, dres, dx, dw, db);
}

int cuda_rmsnorm_forward(nn_device *dev, int rows, int C, const void *x, const void *w,
                         float eps, void *out, float *rstd) {
    return rmsnorm_forward(ctx_of(dev), rows, C, eps, x, w, out, rstd);
}

int cuda_rmsnorm_backward(nn_device *dev, int rows, int C, const void *dout, const void *x,
                          const float *rstd, const void *w, const void *dres, void *dx,
                          void *dw) {
    return rmsnorm_backward(ctx_of(dev), rows, C, dout, x, rstd, w, dres, dx, dw);
}

// ---------------------------------------------------------- activations

int cuda_gelu_forward(nn_device *dev, long long n, const void *pre, void *post) {
    return gelu_forward(ctx_of(dev), n, pre, post);
}

int cuda_gelu_backward_colsum(nn_device *dev, int rows, int N, void *d, const void *pre,
                              void *db) {
    return gelu_backward_colsum(ctx_of(dev), rows, N, d, pre, db);
}

int cuda_swiglu_forward(nn_device *dev, long long n, const void *gate, const void *up, void *h) {
    return swiglu_forward(ctx_of(dev), n, gate, up, h);
}

int cuda_swiglu_backward(nn_device *dev, int rows, int F, const void *gate, const void *up,
                         void *d) {
    return swiglu_backward(ctx_of(dev), rows, F, gate, up, d);
}

nn_layer_ops make_layer_ops() {
    nn_layer_ops o;
    std::memset(&o, 0, sizeof o);
    o.align = NN_ALIGN;
    o.check_tokens = cuda_check_tokens;
    o.embed_forward = cuda_embed_forward;
    o.embed_backward = cuda_embed_backward;
    o.classifier_scratch_bytes = cuda_classifier_scratch_bytes;
    o.classifier_chunk = cuda_classifier_chunk;
    o.classifier_logits_row = cuda_classifier_logits_row;
    o.linear_forward = cuda_linear_forward;
    o.linear_backward = cuda_linear_backward;
    o.linears_forward = cuda_linears_forward;
    o.linears_backward = cuda_linears_backward;
    o.linear_gelu_forward = cuda_linear_gelu_forward;
    o.linear_dgelu_backward = cuda_linear_dgelu_backward;
    o.colsum_add = cuda_colsum_add;
    o.scale = cuda_scale;
    o.dropout = cuda_dropout;
    o.lora_forward = nn_lora_forward_composed;
    o.lora_backward = nn_lora_backward_composed;
    o.attention_scratch_bytes = cuda_attention_scratch_bytes;
    o.attention_forward = cuda_attention_forward;
    o.attention_backward = cuda_attention_backward;
    o.rope = cuda_rope;
    o.layernorm_forward = cuda_layernorm_forward;
    o.layernorm_backward = cuda_layernorm_backward;
    o.rmsnorm_forward = cuda_rmsnorm_forward;
    o.rmsnorm_backward = cuda_rmsnorm_backward;
    o.gelu_forward = cuda_gelu_forward;
    o.gelu_backward_colsum = cuda_gelu_backward_colsum;
    o.swiglu_forward = cuda_swiglu_forward;
    o.swiglu_backward = cuda_swiglu_backward;
    return o;
}

} // namespace

const nn_layer_ops cuda_layer_ops = make_layer_ops();

} // namespace nncuda
