// GPT-2's embeddings on CUDA: the shared token embedding
// (nn_cuda_embedding.cu) with GPT-2's learned positions. Forward: x[r] =
// wte[tokens[r]] + wpe[r % T] in one kernel (the shared forward's position
// table). Backward: wte's gradient by the shared sorted, tiled and
// deterministic token path; wpe's here, the B rows of each position added
// in order.
#include "gpt2_cuda_common.cuh"

namespace gpt2cuda {

namespace {

// g_wpe[t][c] += sum over b (ascending) of dx[b*T + t][c], one rounding.
template <typename E>
__global__ void embed_backward_wpe_kernel(int B, int T, int C, const E *dx, E *g_wpe) {
    GRID_STRIDE(k, (long long)T * C) {
        float sum = 0.0f;
        for (int b = 0; b < B; b++) sum += to_f32(dx[(size_t)b * T * C + k]);
        g_wpe[k] = from_f32<E>(to_f32(g_wpe[k]) + sum);
    }
}

} // namespace

int encoder_forward(ctx *cx, const gpt2_dims *d, int B, int T, const gpt2_embed_w *w,
                    const int *tokens, void *x) {
    return embedding_forward(cx, (long long)B * T, T, d->n_embd, d->vocab, w->wte, w->wpe, tokens,
                             x);
}

int encoder_backward(ctx *cx, const gpt2_dims *d, int B, int T, gpt2_embed_w *g,
                     const int *tokens, const void *dx) {
    const int C = d->n_embd;
    TRY(embedding_backward(cx, B * T, C, d->vocab, g->wte, tokens, dx));
    prof_scope scope(cx, PROF_ENCODER_BWD_WPE);
    return with_type(cx->dtype, [&](auto tag) {
        using E = decltype(tag);
        embed_backward_wpe_kernel<E><<<grid_for((long long)T * C, kThreads), kThreads, 0,
                                       cx->stream>>>(B, T, C, (const E *)dx, (E *)g->wpe);
        LAUNCHED();
        return (int)NN_OK;
    });
}

} // namespace gpt2cuda
