// The shapes of kernel every model's norms and element-wise layers are made
// of, written once so that a model adds only its arithmetic (a functor of
// its math header's element functions):
//   - warp-per-row helpers: a lane's elements of a row, in 16-byte packs
//     where the rows allow (GPT-2's LayerNorm, Llama's RMSNorm);
//   - deterministic column sums with NOUT outputs (bias gradients, a norm's
//     weight gradients, GELU's gradient fused with its bias's sum): blocks
//     of kColRows rows in order into fp32 partials, then each column's
//     partials in finish_column's fixed lanes and tree, one rounding into
//     the output;
//   - element-wise maps of one or two inputs in packs where aligned (GELU,
//     SwiGLU).
// Device functors (structs with a __device__ operator()), because host
// lambdas cannot reach a kernel without nvcc's --extended-lambda.
#ifndef NN_CUDA_ROWS_CUH
#define NN_CUDA_ROWS_CUH

#include "nn_cuda_ctx.cuh"

namespace nncuda {

// ------------------------------------------------------- warp per row

// Calls f(c, value) for the lane's elements of a row, in packs when VEC.
template <typename T, bool VEC, typename F>
__device__ __forceinline__ void for_lane(const T *row, int C, int lane, F &&f) {
    if constexpr (VEC) {
        constexpr int n = pack<T>::n;
        for (int c0 = lane * n; c0 < C; c0 += kWarp * n) {
            const pack<T> p = load_pack(row + c0);
#pragma unroll
            for (int k = 0; k < n; k++) f(c0 + k, to_f32(p.v[k]));
        }
    } else {
        for (int c = lane; c < C; c += kWarp) f(c, to_f32(row[c]));
    }
}

// out[c] = f(c, in[c]) for the lane's elements of a row, a pack read and a
// pack written at a time when VEC. in may be out: each element is read
// before the lane writes it.
template <typename T, bool VEC, typename F>
__device__ __forceinline__ void map_lane(const T *in, T *out, int C, int lane, F &&f) {
    if constexpr (VEC) {
        constexpr int n = pack<T>::n;
        for (int c0 = lane * n; c0 < C; c0 += kWarp * n) {
            const pack<T> p = load_pack(in + c0);
            pack<T> q;
#pragma unroll
            for (int k = 0; k < n; k++) q.v[k] = from_f32<T>(f(c0 + k, to_f32(p.v[k])));
            store_pack(out + c0, q);
        }
    } else {
        for (int c = lane; c < C; c += kWarp) out[c] = from_f32<T>(f(c, to_f32(in[c])));
    }
}

// Rows of C elements can go through packs when C is a multiple of the pack
// and every (non-NULL) base pointer is 16-byte aligned: then every row
// starts aligned too.
template <typename T> bool rows_vectorizable(int C, const void *const *ptrs, int n) {
    if (C % pack<T>::n != 0) return false;
    for (int i = 0; i < n; i++)
        if (ptrs[i] != nullptr && !aligned16(ptrs[i])) return false;
    return true;
}

// The row of a warp-per-row kernel's thread (rows beyond the last return).
__device__ __forceinline__ long long warp_row() {
    return blockIdx.x * (long long)kRowWarps + threadIdx.x / kWarp;
}

// -------------------------------------------------------- column sums

// NOUT output vectors of one column sum.
template <typename T, int NOUT> struct colsum_out {
    T *p[NOUT];
};

// Stage 1: block row y adds f(r, c, s) for rows [y*kColRows, (y+1)*kColRows)
// of column c in order (f adds its NOUT values into s[0..NOUT)), into
// part[o][y][c].
template <int NOUT, typename F>
__global__ void colsum_partial_kernel(int rows, int N, F f, float *part) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= N) return;
    const int nblocks = (rows + kColRows - 1) / kColRows;
    for (int y = blockIdx.y; y < nblocks; y += gridDim.y) {
        const int r0 = y * kColRows;
        const int r1 = r0 + kColRows < rows ? r0 + kColRows : rows;
        float s[NOUT];
#pragma unroll
        for (int o = 0; o < NOUT; o++) s[o] = 0.0f;
        for (int r = r0; r < r1; r++) f(r, c, s);
#pragma unroll
        for (int o = 0; o < NOUT; o++) part[((size_t)o * nblocks + y) * N + c] = s[o];
    }
}

// Stage 2: out.p[o][c] += the sum of part[o][0..nblocks)[c] in
// finish_column's order, rounded once. blockDim = (kFinishCols,
// kFinishLanes).
template <typename T, int NOUT>
__global__ void colsum_finish_kernel(int nblocks, int N, const float *part,
                                     colsum_out<T, NOUT> out) {
    __shared__ float shared[kFinishLanes * kFinishCols];
    const int c = blockIdx.x * kFinishCols + threadIdx.x;
#pragma unroll
    for (int o = 0; o < NOUT; o++) {
        const float s = finish_column(part + (size_t)o * nblocks * N, nblocks, N, c, shared);
        if (threadIdx.y == 0 && c < N) out.p[o][c] = from_f32<T>(to_f32(out.p[o][c]) + s);
    }
}

// out.p[o][c] += sum over r < rows of f's o-th value at (r, c), c < N, in
// the fixed order above. Uses the device's internal scratch.
template <typename T, int NOUT, typename F>
int column_sums(ctx *cx, int rows, int N, F f, colsum_out<T, NOUT> out) {
    if (rows <= 0 || N <= 0) return NN_OK;
    const int nblocks = (rows + kColRows - 1) / kColRows;
    TRY(ensure_work(cx, (size_t)NOUT * nblocks * N * sizeof(float)));
    float *part = reinterpret_cast<float *>(cx->work);
    const dim3 grid(blocks_for(N, kThreads),
                    (unsigned)(nblocks < kMaxGridY ? nblocks : kMaxGridY));
    colsum_partial_kernel<NOUT, F><<<grid, kThreads, 0, cx->stream>>>(rows, N, f, part);
    LAUNCHED();
    colsum_finish_kernel<T, NOUT><<<blocks_for(N, kFinishCols), dim3(kFinishCols, kFinishLanes),
                                    0, cx->stream>>>(nblocks, N, part, out);
    LAUNCHED();
    return NN_OK;
}

// ------------------------------------------------------ element-wise

// out[k] = f(a[k]) (one input) or f(a[k], b[k]) (two), k < n, in fp32,
// rounded once; with VEC a thread maps one 16-byte pack (n counts packs).
template <typename T, bool VEC, typename F>
__global__ void map1_kernel(long long n, const T *a, T *out, F f) {
    if constexpr (VEC) {
        constexpr int w = pack<T>::n;
        GRID_STRIDE(k, n) {
            pack<T> p = load_pack(a + k * w);
#pragma unroll
            for (int i = 0; i < w; i++) p.v[i] = from_f32<T>(f(to_f32(p.v[i])));
            store_pack(out + k * w, p);
        }
    } else {
        GRID_STRIDE(k, n) { out[k] = from_f32<T>(f(to_f32(a[k]))); }
    }
}

template <typename T, bool VEC, typename F>
__global__ void map2_kernel(long long n, const T *a, const T *b, T *out, F f) {
    if constexpr (VEC) {
        constexpr int w = pack<T>::n;
        GRID_STRIDE(k, n) {
            const pack<T> p = load_pack(a + k * w), q = load_pack(b + k * w);
            pack<T> o;
#pragma unroll
            for (int i = 0; i < w; i++) o.v[i] = from_f32<T>(f(to_f32(p.v[i]), to_f32(q.v[i])));
            store_pack(out + k * w, o);
        }
    } else {
        GRID_STRIDE(k, n) { out[k] = from_f32<T>(f(to_f32(a[k]), to_f32(b[k]))); }
    }
}

// Launches map1_kernel (NIN 1: b unused) or map2_kernel (NIN 2) over n
// elements, in packs when n is a multiple of the pack and every pointer is
// aligned.
template <int NIN, typename T, typename F>
int map_elements(ctx *cx, long long n, const T *a, const T *b, T *out, F f) {
    static_assert(NIN == 1 || NIN == 2, "one or two inputs");
    if (n <= 0) return NN_OK;
    constexpr int w = pack<T>::n;
    const bool vec = n % w == 0 && aligned16(a) && aligned16(out) && (NIN == 1 || aligned16(b));
    const long long items = vec ? n / w : n;
    const unsigned grid = grid_for(items, kThreads);
    if constexpr (NIN == 1) {
        if (vec)
            map1_kernel<T, true, F><<<grid, kThreads, 0, cx->stream>>>(items, a, out, f);
        else
            map1_kernel<T, false, F><<<grid, kThreads, 0, cx->stream>>>(items, a, out, f);
    } else {
        if (vec)
            map2_kernel<T, true, F><<<grid, kThreads, 0, cx->stream>>>(items, a, b, out, f);
        else
            map2_kernel<T, false, F><<<grid, kThreads, 0, cx->stream>>>(items, a, b, out, f);
    }
    LAUNCHED();
    return NN_OK;
}

} // namespace nncuda

#endif // NN_CUDA_ROWS_CUH
