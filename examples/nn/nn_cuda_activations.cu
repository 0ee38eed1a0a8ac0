// The activations of nn_layers.h on CUDA, element-wise on the shared
// shapes (nn_cuda_rows.cuh) with nn_layer_math.h's element functions:
//   GELU    (when cuBLASLt's epilogue does not do it) and its gradient
//           fused with the column sum of the bias of the Linear before it;
//   SwiGLU  silu(gate) * up, and its gradient into d gate | d up side by
//           side, in 16-byte packs where aligned.
// The bias sums, the loss sum and the bias epilogue's fallback are
// nn_cuda_elementwise.cu's.
#include "nn_cuda_ctx.cuh"
#include "nn_cuda_rows.cuh"
#include "nn_layer_math.h"

namespace nncuda {

namespace {

struct gelu_op {
    __device__ float operator()(float x) const { return nn_gelu(x); }
};

struct scale_op {
    float s;
    __device__ float operator()(float x) const { return x * s; }
};

// The column sum's value at (r, c) of d * gelu'(pre): d is multiplied in
// place, and the sum sees what the next GEMM reads, the rounded value.
template <typename T> struct gelu_grad_values {
    T *d;
    const T *pre;
    int N;
    __device__ void operator()(int r, int c, float *s) const {
        const size_t k = (size_t)r * N + c;
        const T rounded = from_f32<T>(to_f32(d[k]) * nn_gelu_grad(to_f32(pre[k])));
        d[k] = rounded;
        s[0] += to_f32(rounded);
    }
};

struct swiglu_op {
    __device__ float operator()(float gate, float up) const { return nn_swiglu(gate, up); }
};

// d: [rows][2F] (dh in, d gate and d up out), gate, up: [rows][F]; with VEC
// a thread handles one 16-byte pack of a row's F columns.
template <typename T, bool VEC>
__global__ void swiglu_backward_kernel(long long rows, int F, const T *gate, const T *up, T *d) {
    constexpr int w = VEC ? pack<T>::n : 1;
    const long long per_row = F / w;
    GRID_STRIDE(k, rows * per_row) {
        const long long r = k / per_row;
        const int c = (int)(k % per_row) * w;
        const T *g = gate + (size_t)r * F + c, *u = up + (size_t)r * F + c;
        T *dg = d + (size_t)r * 2 * F + c, *du = dg + F;
        if constexpr (VEC) {
            const pack<T> pg = load_pack(g), pu = load_pack(u);
            pack<T> pd = load_pack(dg), pe;
#pragma unroll
            for (int j = 0; j < w; j++) {
                float a, b;
                nn_swiglu_backward(to_f32(pg.v[j]), to_f32(pu.v[j]), to_f32(pd.v[j]), &a, &b);
                pd.v[j] = from_f32<T>(a);
                pe.v[j] = from_f32<T>(b);
            }
            store_pack(dg, pd);
            store_pack(du, pe);
        } else {
            float a, b;
            nn_swiglu_backward(to_f32(g[0]), to_f32(u[0]), to_f32(dg[0]), &a, &b);
            dg[0] = from_f32<T>(a);
            du[0] = from_f32<T>(b);
        }
    }
}

// LoRA's dropout: element (r, c) times nn_dropout_factor (the CPU's mask,
// integer hashing only), written or added; the product rounded once to T.
template <typename T>
__global__ void dropout_kernel(int rows, int cols, uint32_t threshold, float keep,
                               uint64_t seed, const T *src, int lds, T *dst, int ldd, int add) {
    GRID_STRIDE(k, (long long)rows * cols) {
        const int r = (int)(k / cols), c = (int)(k % cols);
        const float v = to_f32(src[(size_t)r * lds + c]) *
                        nn_dropout_factor(seed, (uint64_t)k, threshold, keep);
        T *o = &dst[(size_t)r * ldd + c];
        *o = from_f32<T>(add ? to_f32(*o) + v : v);
    }
}

} // namespace

int dropout_elements(ctx *cx, int rows, int cols, float p, uint64_t seed, const void *src,
                     int lds, void *dst, int ldd, int add) {
    if (rows <= 0 || cols <= 0) return NN_OK;
    prof_scope scope(cx, prof_op(cx, "dropout"));
    return with_type(cx->dtype, [&](auto tag) {
        using T = decltype(tag);
        dropout_kernel<T><<<grid_for((long long)rows * cols, kThreads), kThreads, 0, cx->stream>>>(
            rows, cols, nn_dropout_threshold(p), 1.0f / (1.0f - p), seed, (const T *)src, lds,
            (T *)dst, ldd, add);
        LAUNCHED();
        return (int)NN_OK;
    });
}

int scale_elements(ctx *cx, long long n, float s, void *x) {
    if (n <= 0) return NN_OK;
    prof_scope scope(cx, prof_op(cx, "scale"));
    return with_type(cx->dtype, [&](auto tag) {
        using T = decltype(tag);
        return map_elements<1, T>(cx, n, (const T *)x, nullptr, (T *)x, scale_op{s});
    });
}

int gelu_forward(ctx *cx, long long n, const void *pre, void *post) {
    prof_scope scope(cx, prof_op(cx, "gelu_fwd"));
    return with_type(cx->dtype, [&](auto tag) {
        using T = decltype(tag);
        return map_elements<1, T>(cx, n, (const T *)pre, nullptr, (T *)post, gelu_op{});
    });
}

int gelu_backward_colsum(ctx *cx, int rows, int N, void *d, const void *pre, void *out) {
    prof_scope scope(cx, prof_op(cx, "gelu_bwd_bias_sum"));
    return with_type(cx->dtype, [&](auto tag) {
        using T = decltype(tag);
        return column_sums<T, 1>(cx, rows, N, gelu_grad_values<T>{(T *)d, (const T *)pre, N},
                                 colsum_out<T, 1>{{(T *)out}});
    });
}

int swiglu_forward(ctx *cx, long long n, const void *gate, const void *up, void *h) {
    prof_scope scope(cx, prof_op(cx, "swiglu_fwd"));
    return with_type(cx->dtype, [&](auto tag) {
        using T = decltype(tag);
        return map_elements<2, T>(cx, n, (const T *)gate, (const T *)up, (T *)h, swiglu_op{});
    });
}

int swiglu_backward(ctx *cx, int rows, int F, const void *gate, const void *up, void *d) {
    if (rows <= 0 || F <= 0) return NN_OK;
    prof_scope scope(cx, prof_op(cx, "swiglu_bwd"));
    return with_type(cx->dtype, [&](auto tag) {
        using T = decltype(tag);
        const bool vec = F % pack<T>::n == 0 && aligned16(gate) && aligned16(up) && aligned16(d);
        const long long items = (long long)rows * (vec ? F / pack<T>::n : F);
        const unsigned grid = grid_for(items, kThreads);
        if (vec)
            swiglu_backward_kernel<T, true><<<grid, kThreads, 0, cx->stream>>>(
                rows, F, (const T *)gate, (const T *)up, (T *)d);
        else
            swiglu_backward_kernel<T, false><<<grid, kThreads, 0, cx->stream>>>(
                rows, F, (const T *)gate, (const T *)up, (T *)d);
        LAUNCHED();
        return (int)NN_OK;
    });
}

} // namespace nncuda
