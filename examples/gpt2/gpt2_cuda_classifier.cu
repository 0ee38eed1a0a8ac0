// GPT-2's head on CUDA (gpt2_backend.h's head ops): per chunk of rows,
// ln_f, the shared fused classifier (nn_cuda_classifier.cu: logits against
// the tied wte, cross-entropy, dlogits, wte's gradient and ln_f's output
// gradient), then ln_f's backward, so that the logits never exist for more
// than chunk_rows rows.
//
// Why ln_f runs per chunk here and over all rows in the Llama head: GPT-2's
// head scratch is sized by chunk_rows alone (gpt2_backend.h's
// head_scratch_bytes has no B and T), so ln_f's output can be held for one
// chunk only. The sums are those of the earlier fused head, so the losses
// and gradients are its bits.
#include "gpt2_cuda_common.cuh"

namespace gpt2cuda {

namespace {

// The head scratch, carved: per chunk of R rows ln_f's output xn [R][C]
// (then its gradient, in place), mean and rstd [R], and the classifier's
// scratch.
struct head_parts {
    void *xn, *cls;
    float *mean, *rstd;
};

head_parts carve_head(nn_dtype t, const gpt2_dims *d, int R, void *scratch) {
    unsigned char *p = (unsigned char *)scratch;
    head_parts h;
    h.xn = p;
    p += round_up((size_t)R * d->n_embd * nn_dtype_size(t));
    h.mean = (float *)p;
    p += round_up((size_t)R * sizeof(float));
    h.rstd = (float *)p;
    p += round_up((size_t)R * sizeof(float));
    h.cls = p;
    return h;
}

} // namespace

size_t head_scratch_bytes(nn_dtype t, const gpt2_dims *d, int chunk_rows) {
    if (chunk_rows < 1) return 0;
    const size_t R = (size_t)chunk_rows;
    return round_up(R * d->n_embd * nn_dtype_size(t)) + 2 * round_up(R * sizeof(float)) +
           classifier_scratch_bytes(t, d->vocab, chunk_rows);
}

int head_run(ctx *cx, const gpt2_dims *d, int BT, const gpt2_embed_w *w, gpt2_embed_w *g,
             const void *x, const int *targets, float dloss_scale, void *dx, float *losses,
             int chunk_rows, void *scratch) {
    const nn_dtype t = cx->dtype;
    const int C = d->n_embd;
    const int R = chunk_rows < BT ? chunk_rows : BT;
    const head_parts h = carve_head(t, d, R, scratch);
    for (int r0 = 0; r0 < BT; r0 += R) {
        const int n = BT - r0 < R ? BT - r0 : R;
        const void *xc = elem_at(x, t, (size_t)r0 * C);
        TRY(layernorm_forward(cx, n, C, xc, w->lnfw, w->lnfb, h.xn, h.mean, h.rstd));
        TRY(classifier(cx, n, C, d->vocab, h.xn, w->wte, targets + r0, dloss_scale, losses + r0,
                       g != nullptr ? g->wte : nullptr, h.xn, n, h.cls));
        if (g == nullptr) continue;
        // h.xn holds d ln_f(x) of the chunk now.
        TRY(layernorm_backward(cx, n, C, h.xn, xc, h.mean, h.rstd, w->lnfw, nullptr,
                               elem_at(dx, t, (size_t)r0 * C), g->lnfw, g->lnfb));
    }
    return NN_OK;
}

int head_logits_row(ctx *cx, const gpt2_dims *d, const gpt2_embed_w *w, const void *x, int row,
                    float *host_logits, void *scratch) {
    const head_parts h = carve_head(cx->dtype, d, 1, scratch);
    const void *xr = elem_at(x, cx->dtype, (size_t)row * d->n_embd);
    TRY(layernorm_forward(cx, 1, d->n_embd, xr, w->lnfw, w->lnfb, h.xn, h.mean, h.rstd));
    return classifier_logits_row(cx, d->n_embd, d->vocab, h.xn, w->wte, host_logits, h.cls);
}

} // namespace gpt2cuda
