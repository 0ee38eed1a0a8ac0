// Element-wise and column work of the CUDA backend: GELU (when cuBLASLt's
// epilogue does not do it), the bias gradients' column sums, the sum of the
// losses, and widening to fp32.
//
// Column sums are deterministic: block row y adds rows [y*kColRows,
// (y+1)*kColRows) of a column in order into fp32 partials; a second kernel
// adds a column's partials in kFinishLanes interleaved lanes, each in
// order, then the lanes in a fixed tree, and the gradient once (one
// rounding). The finish used to be one thread per column adding every
// partial in turn: for B*T = 16384 rows, 512 dependent loads and adds per
// thread on a few blocks (768 columns: 3 blocks of a 132-SM GPU); now 16
// per thread on 32 lanes, and a block per 32 columns.
#include "gpt2_cuda_common.cuh"

namespace gpt2cuda {

namespace {

// Stage 1 of a column sum over a: [rows][N]. With GELU, a is first
// multiplied in place by gelu'(pre) (c_fc's gradient through the GELU).
template <typename T, bool GELU>
__global__ void colsum_partial_kernel(int rows, int N, T *a, const T *pre, float *part) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= N) return;
    const int nblocks = (rows + kColRows - 1) / kColRows;
    for (int y = blockIdx.y; y < nblocks; y += gridDim.y) {
        const int r0 = y * kColRows;
        const int r1 = r0 + kColRows < rows ? r0 + kColRows : rows;
        float s = 0.0f;
        for (int r = r0; r < r1; r++) {
            const size_t k = (size_t)r * N + c;
            float v = to_f32(a[k]);
            if constexpr (GELU) {
                v *= gpt2_gelu_grad(to_f32(pre[k]));
                const T rounded = from_f32<T>(v);
                a[k] = rounded;
                // The sum sees what the next GEMM reads: the rounded value.
                v = to_f32(rounded);
            }
            s += v;
        }
        part[(size_t)y * N + c] = s;
    }
}

// Stage 2: out[c] += the sum of part[0..nblocks)[c] (finish_column's
// order), rounded once. blockDim = (kFinishCols, kFinishLanes).
template <typename T>
__global__ void colsum_finish_kernel(int nblocks, int N, const float *part, T *out) {
    __shared__ float shared[kFinishLanes * kFinishCols];
    const int c = blockIdx.x * kFinishCols + threadIdx.x;
    const float s = finish_column(part, nblocks, N, c, shared);
    if (threadIdx.y == 0 && c < N) out[c] = from_f32<T>(to_f32(out[c]) + s);
}

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

template <typename T, bool GELU>
int colsum(gpt2_backend *be, int rows, int N, T *a, const T *pre, T *out) {
    cuda_impl *ci = impl_of(be);
    if (rows <= 0) return GPT2_OK;
    const int nblocks = (rows + kColRows - 1) / kColRows;
    TRY(ensure_work(be, (size_t)nblocks * N * sizeof(float)));
    float *part = (float *)ci->work;
    const dim3 grid(blocks_for(N, kThreads), (unsigned)(nblocks < 65535 ? nblocks : 65535));
    colsum_partial_kernel<T, GELU><<<grid, kThreads, 0, ci->stream>>>(rows, N, a, pre, part);
    LAUNCHED();
    colsum_finish_kernel<T><<<blocks_for(N, kFinishCols), dim3(kFinishCols, kFinishLanes), 0,
                              ci->stream>>>(nblocks, N, part, out);
    LAUNCHED();
    return GPT2_OK;
}

template <typename T> __global__ void gelu_forward_kernel(long long n, const T *pre, T *post) {
    GRID_STRIDE(k, n) { post[k] = from_f32<T>(gpt2_gelu(to_f32(pre[k]))); }
}

// In 16-byte packs: n is a multiple of the pack and both pointers aligned.
template <typename T>
__global__ void gelu_forward_vec_kernel(long long packs, const T *pre, T *post) {
    constexpr int n = pack<T>::n;
    GRID_STRIDE(k, packs) {
        pack<T> p = load_pack(pre + k * n);
#pragma unroll
        for (int i = 0; i < n; i++) p.v[i] = from_f32<T>(gpt2_gelu(to_f32(p.v[i])));
        store_pack(post + k * n, p);
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

int colsum_add(gpt2_backend *be, int rows, int N, const void *a, void *out) {
    prof_scope scope(be, PROF_BIAS_GRAD_SUMS);
    return with_type(impl_of(be)->dtype, [&](auto tag) {
        using T = decltype(tag);
        // The plain sum never writes a.
        return colsum<T, false>(be, rows, N, const_cast<T *>((const T *)a), nullptr, (T *)out);
    });
}

int gelu_backward_colsum(gpt2_backend *be, int rows, int N, void *d, const void *pre, void *out) {
    prof_scope scope(be, PROF_GELU_BWD_FCB_SUM);
    return with_type(impl_of(be)->dtype, [&](auto tag) {
        using T = decltype(tag);
        return colsum<T, true>(be, rows, N, (T *)d, (const T *)pre, (T *)out);
    });
}

int gelu_forward(gpt2_backend *be, long long n, const void *pre, void *post) {
    cuda_impl *ci = impl_of(be);
    prof_scope scope(be, PROF_GELU_FWD);
    return with_type(ci->dtype, [&](auto tag) {
        using T = decltype(tag);
        constexpr int width = pack<T>::n;
        if (n % width == 0 && aligned16(pre) && aligned16(post))
            gelu_forward_vec_kernel<T><<<grid_for(n / width, kThreads), kThreads, 0, ci->stream>>>(
                n / width, (const T *)pre, (T *)post);
        else
            gelu_forward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, ci->stream>>>(
                n, (const T *)pre, (T *)post);
        LAUNCHED();
        return (int)GPT2_OK;
    });
}

int add_bias(gpt2_backend *be, int rows, int N, void *d, int ld, const void *bias) {
    cuda_impl *ci = impl_of(be);
    if (rows <= 0 || N <= 0) return GPT2_OK;
    return with_type(ci->dtype, [&](auto tag) {
        using T = decltype(tag);
        add_bias_kernel<T><<<grid_for((long long)rows * N, kThreads), kThreads, 0, ci->stream>>>(
            rows, N, (T *)d, ld, (const T *)bias);
        LAUNCHED();
        return (int)GPT2_OK;
    });
}

int losses_sum_device(gpt2_backend *be, const float *losses, int n, double *out_dev) {
    prof_scope scope(be, PROF_LOSSES_SUM);
    losses_sum_kernel<<<1, kSumThreads, 0, impl_of(be)->stream>>>(losses, n, out_dev);
    LAUNCHED();
    return GPT2_OK;
}

int to_fp32(gpt2_backend *be, long long n, const void *src, float *dst) {
    cuda_impl *ci = impl_of(be);
    return with_type(ci->dtype, [&](auto tag) {
        using T = decltype(tag);
        to_fp32_kernel<T><<<grid_for(n, kThreads), kThreads, 0, ci->stream>>>(n, (const T *)src,
                                                                             dst);
        LAUNCHED();
        return (int)GPT2_OK;
    });
}

} // namespace gpt2cuda
