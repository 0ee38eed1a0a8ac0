// GPT-2's element-wise kernels on the shared shapes (nn_cuda_rows.cuh):
// GELU (when cuBLASLt's epilogue does not do it) and its gradient fused
// with the column sum of c_fc's bias gradient. The bias sums, the loss sum
// and the bias epilogue's fallback are the shared ones
// (nn_cuda_elementwise.cu).
#include "gpt2_cuda_common.cuh"
#include "nn_cuda_rows.cuh"

namespace gpt2cuda {

namespace {

struct gelu_op {
    __device__ float operator()(float x) const { return nn_gelu(x); }
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

} // namespace

int gelu_forward(ctx *cx, long long n, const void *pre, void *post) {
    prof_scope scope(cx, PROF_GELU_FWD);
    return with_type(cx->dtype, [&](auto tag) {
        using T = decltype(tag);
        return map_elements<1, T>(cx, n, (const T *)pre, nullptr, (T *)post, gelu_op{});
    });
}

int gelu_backward_colsum(ctx *cx, int rows, int N, void *d, const void *pre, void *out) {
    prof_scope scope(cx, PROF_GELU_BWD_FCB_SUM);
    return with_type(cx->dtype, [&](auto tag) {
        using T = decltype(tag);
        return column_sums<T, 1>(cx, rows, N, gelu_grad_values<T>{(T *)d, (const T *)pre, N},
                                 colsum_out<T, 1>{{(T *)out}});
    });
}

} // namespace gpt2cuda
