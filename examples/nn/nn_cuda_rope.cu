// RoPE on CUDA (nn_layers.h's rope): a thread per rotated pair, in place,
// from the device copy of the host's angle table (llama_rope_table), so
// that CUDA rotates by the CPU's cos and sin bits through the same
// nn_layer_math.h rotation.
#include "nn_cuda_ctx.cuh"
#include "nn_cuda_rows.cuh"
#include "nn_layer_math.h"

namespace nncuda {

namespace {

// Thread k: the pair (i, i + hd/2) of head h of row r, k = (r heads + h)
// half + i.
template <typename E, bool BACKWARD>
__global__ void rope_kernel(long long BT, int T, int heads, int hd, int ld, E *qkv,
                            const float *cos, const float *sin) {
    const int half = hd / 2;
    GRID_STRIDE(k, BT * heads * half) {
        const int i = (int)(k % half);
        const long long rest = k / half;
        const int h = (int)(rest % heads);
        const long long r = rest / heads;
        const size_t t = (size_t)(r % T) * half + i;
        E *v = qkv + (size_t)r * ld + (size_t)h * hd + i;
        float pair[2] = {to_f32(v[0]), to_f32(v[half])};
        // The pair as a head of size 2: nn_layer_math.h's rotation of one pair.
        if constexpr (BACKWARD)
            nn_rope_backward(2, pair, cos + t, sin + t);
        else
            nn_rope_forward(2, pair, cos + t, sin + t);
        v[0] = from_f32<E>(pair[0]);
        v[half] = from_f32<E>(pair[1]);
    }
}

} // namespace

int rope(ctx *cx, bool backward, long long BT, int T, int heads, int hd, int ld, void *qkv,
         const float *cos, const float *sin) {
    const long long n = BT * heads * (hd / 2);
    if (n <= 0) return NN_OK;
    prof_scope scope(cx, prof_op(cx, backward ? "rope_bwd" : "rope_fwd"));
    return with_type(cx->dtype, [&](auto tag) {
        using E = decltype(tag);
        const unsigned grid = grid_for(n, kThreads);
        if (backward)
            rope_kernel<E, true><<<grid, kThreads, 0, cx->stream>>>(BT, T, heads, hd, ld,
                                                                    (E *)qkv, cos, sin);
        else
            rope_kernel<E, false><<<grid, kThreads, 0, cx->stream>>>(BT, T, heads, hd, ld,
                                                                     (E *)qkv, cos, sin);
        LAUNCHED();
        return (int)NN_OK;
    });
}

} // namespace nncuda
