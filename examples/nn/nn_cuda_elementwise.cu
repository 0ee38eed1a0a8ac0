// The shared column and element kernels: bias gradients' column sums
// (nn_cuda_rows.cuh's deterministic column sums), the bias epilogue's
// fallback, the sum of the losses, widening to fp32.
#include "nn_cuda_rows.cuh"

namespace nncuda {

namespace {

// The plain column sum's value at (r, c): a[r][c], rows lda apart.
template <typename T> struct column_value {
    const T *a;
    int lda;
    __device__ void operator()(int r, int c, float *s) const {
        s[0] += to_f32(a[(size_t)r * lda + c]);
    }
};

// d[r][c] += bias[c], rows ld elements apart: one rounding of the product's
// (already rounded) element plus the bias, in fp32.
template <typename T>
__global__ void add_bias_kernel(int rows, int N, T *d, int ld, const T *bias) {
    GRID_STRIDE(k, (long long)rows * N) {
        const long long r = k / N;
        const int c = (int)(k % N);
        T *p = d + (size_t)r * ld + c;
        *p = from_f32<T>(to_f32(*p) + to_f32(bias[c]));
    }
}

// One block: thread t adds elements t, t + blockDim, ... in order (double),
// then the threads' sums are added in a fixed tree.
constexpr int kSumThreads = 1024;
__global__ void losses_sum_kernel(const float *losses, int n, double *out) {
    __shared__ double s[kSumThreads];
    double acc = 0.0;
    for (int i = threadIdx.x; i < n; i += kSumThreads) acc += losses[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int half = kSumThreads / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = s[0];
}

template <typename T> __global__ void to_fp32_kernel(long long n, const T *src, float *dst) {
    GRID_STRIDE(k, n) { dst[k] = to_f32(src[k]); }
}

} // namespace

int colsum_add(ctx *cx, int rows, int N, const void *a, int lda, void *out) {
    prof_scope scope(cx, PROF_BIAS_GRAD_SUMS);
    return with_type(cx->dtype, [&](auto tag) {
        using T = decltype(tag);
        return column_sums<T, 1>(cx, rows, N, column_value<T>{(const T *)a, lda},
                                 colsum_out<T, 1>{{(T *)out}});
    });
}

int add_bias(ctx *cx, int rows, int N, void *d, int ld, const void *bias) {
    if (rows <= 0 || N <= 0) return NN_OK;
    return with_type(cx->dtype, [&](auto tag) {
        using T = decltype(tag);
        add_bias_kernel<T><<<grid_for((long long)rows * N, kThreads), kThreads, 0, cx->stream>>>(
            rows, N, (T *)d, ld, (const T *)bias);
        LAUNCHED();
        return (int)NN_OK;
    });
}

int losses_sum_device(ctx *cx, const float *losses, int n, double *out_dev) {
    prof_scope scope(cx, PROF_LOSSES_SUM);
    losses_sum_kernel<<<1, kSumThreads, 0, cx->stream>>>(losses, n, out_dev);
    LAUNCHED();
    return NN_OK;
}

int to_fp32(ctx *cx, long long n, const void *src, float *dst) {
    if (n <= 0) return NN_OK;
    return with_type(cx->dtype, [&](auto tag) {
        using T = decltype(tag);
        to_fp32_kernel<T><<<grid_for(n, kThreads), kThreads, 0, cx->stream>>>(n, (const T *)src,
                                                                             dst);
        LAUNCHED();
        return (int)NN_OK;
    });
}

} // namespace nncuda
