// The token and position embeddings on CUDA.
//
// Forward: x[r] = wte[tokens[r]] + wpe[r % T], in 16-byte packs where the
// rows allow. A token outside [0, V) makes its row NaN (the CPU backend
// refuses it; here checking would cost a device-to-host wait), so the loss
// shows it.
//
// Backward, deterministic without atomics: the rows are sorted by token
// (CUB's radix sort, stable: rows of one token stay in ascending order),
// then one block per distinct token adds that token's rows of dx, in
// ascending row order, channel by channel, and rounds into wte's gradient
// once; wpe's gradient adds the B rows of each position in order. Every
// thread reads only the rows of its token (the previous kernel had every
// thread scan all B*T tokens).
#include <cub/device/device_radix_sort.cuh>

#include "gpt2_cuda_common.cuh"

namespace gpt2cuda {

namespace {

template <typename E, bool VEC>
__global__ void embed_forward_kernel(long long BT, int T, int C, int V, const E *wte,
                                     const E *wpe, const int *tokens, E *x) {
    const int w = VEC ? pack<E>::n : 1;
    const long long per_row = C / w;
    GRID_STRIDE(k, BT * per_row) {
        const long long r = k / per_row;
        const int c = (int)(k % per_row) * w;
        const int tok = tokens[r];
        const bool valid = tok >= 0 && tok < V;
        E *out = x + (size_t)r * C + c;
        const E *te = wte + (size_t)(valid ? tok : 0) * C + c;
        const E *pe = wpe + (size_t)(r % T) * C + c;
        if constexpr (VEC) {
            const pack<E> a = load_pack(te), b = load_pack(pe);
            pack<E> o;
#pragma unroll
            for (int i = 0; i < pack<E>::n; i++)
                o.v[i] = from_f32<E>(valid ? to_f32(a.v[i]) + to_f32(b.v[i]) : NAN);
            store_pack(out, o);
        } else {
            out[0] = from_f32<E>(valid ? to_f32(te[0]) + to_f32(pe[0]) : NAN);
        }
    }
}

__global__ void iota_kernel(int n, int *out) {
    GRID_STRIDE(k, n) { out[k] = (int)k; }
}

// Block i (a position in token order) owns token keys[i] when it is the
// first position of that token: it adds dx of the token's rows (rows[i..j),
// ascending) into g_wte[token], one rounding per element.
template <typename E>
__global__ void embed_backward_wte_kernel(int BT, int C, int V, const int *keys,
                                          const int *rows, const E *dx, E *g_wte) {
    const int i = blockIdx.x;
    const int tok = keys[i];
    if ((i > 0 && keys[i - 1] == tok) || tok < 0 || tok >= V) return;
    int end = i + 1;
    while (end < BT && keys[end] == tok) end++;
    E *g = g_wte + (size_t)tok * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sum = 0.0f;
        for (int j = i; j < end; j++) sum += to_f32(dx[(size_t)rows[j] * C + c]);
        g[c] = from_f32<E>(to_f32(g[c]) + sum);
    }
}

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

int encoder_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T, const gpt2_embed_w *w,
                    const int *tokens, void *x) {
    cuda_impl *ci = impl_of(be);
    const long long BT = (long long)B * T;
    const int C = d->n_embd;
    return with_type(ci->dtype, [&](auto tag) {
        using E = decltype(tag);
        const bool vec = C % pack<E>::n == 0 && aligned16(w->wte) && aligned16(w->wpe) &&
                         aligned16(x);
        const long long work = BT * (vec ? C / pack<E>::n : C);
        if (vec)
            embed_forward_kernel<E, true><<<grid_for(work, kThreads), kThreads, 0, ci->stream>>>(
                BT, T, C, d->vocab, (const E *)w->wte, (const E *)w->wpe, tokens, (E *)x);
        else
            embed_forward_kernel<E, false><<<grid_for(work, kThreads), kThreads, 0, ci->stream>>>(
                BT, T, C, d->vocab, (const E *)w->wte, (const E *)w->wpe, tokens, (E *)x);
        LAUNCHED();
        return (int)GPT2_OK;
    });
}

int encoder_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T, gpt2_embed_w *g,
                     const int *tokens, const void *dx) {
    cuda_impl *ci = impl_of(be);
    const int BT = B * T, C = d->n_embd;
    // The work area: sorted keys, row indices in and out, then CUB's storage.
    size_t cub_bytes = 0;
    CU_TRY(cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, (const int *)nullptr,
                                           (int *)nullptr, (const int *)nullptr, (int *)nullptr,
                                           BT, 0, 32, ci->stream));
    const size_t ints = round_up((size_t)BT * sizeof(int));
    TRY(ensure_work(be, 3 * ints + cub_bytes));
    int *keys = (int *)ci->work;
    int *rows_in = (int *)(ci->work + ints);
    int *rows = (int *)(ci->work + 2 * ints);
    void *cub_temp = ci->work + 3 * ints;
    iota_kernel<<<grid_for(BT, kThreads), kThreads, 0, ci->stream>>>(BT, rows_in);
    LAUNCHED();
    CU_TRY(cub::DeviceRadixSort::SortPairs(cub_temp, cub_bytes, tokens, keys, rows_in, rows, BT,
                                           0, 32, ci->stream));
    return with_type(ci->dtype, [&](auto tag) {
        using E = decltype(tag);
        embed_backward_wte_kernel<E><<<(unsigned)BT, kThreads, 0, ci->stream>>>(
            BT, C, d->vocab, keys, rows, (const E *)dx, (E *)g->wte);
        LAUNCHED();
        embed_backward_wpe_kernel<E><<<grid_for((long long)T * C, kThreads), kThreads, 0,
                                       ci->stream>>>(B, T, C, (const E *)dx, (E *)g->wpe);
        LAUNCHED();
        return (int)GPT2_OK;
    });
}

} // namespace gpt2cuda
