// LayerNorm on CUDA: a warp per row for the forward and the input gradient
// (the row's statistics are warp sums in fp32, the elements gpt2_math.h's
// gpt2_layernorm_out and gpt2_layernorm_dx), and a deterministic column sum
// for the weight and bias gradients (blocks of kColRows rows in order, then
// the blocks' partials in finish_column's fixed lanes and tree, one
// rounding into the gradient).
//
// Loads and stores: with C a multiple of the 16-byte pack and every row
// 16-byte aligned, each lane reads and writes whole packs of a row (128-bit
// accesses); otherwise single elements. The arithmetic is the same either
// way, lane by lane.
#include "gpt2_cuda_common.cuh"

namespace gpt2cuda {

namespace {

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

template <typename T, bool VEC>
__global__ void ln_forward_kernel(int rows, int C, const T *x, const T *w, const T *b, T *out,
                                  float *mean, float *rstd) {
    const int lane = threadIdx.x % kWarp;
    const int r = blockIdx.x * kRowWarps + threadIdx.x / kWarp;
    if (r >= rows) return;
    const T *xr = x + (size_t)r * C;
    float s = 0.0f;
    for_lane<T, VEC>(xr, C, lane, [&](int, float v) { s += v; });
    const float m = warp_sum(s) / (float)C;
    float q = 0.0f;
    for_lane<T, VEC>(xr, C, lane, [&](int, float v) {
        const float dev = v - m;
        q += dev * dev;
    });
    const float rs = gpt2_layernorm_rstd(warp_sum(q) / (float)C);
    map_lane<T, VEC>(xr, out + (size_t)r * C, C, lane, [&](int c, float v) {
        return gpt2_layernorm_out(v, m, rs, to_f32(w[c]), to_f32(b[c]));
    });
    if (lane == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

// dx[r] = dres[r] + LayerNorm's input gradient; dres may alias dx (each
// element is read before it is written, by the same lane).
template <typename T, bool VEC>
__global__ void ln_backward_kernel(int rows, int C, const T *dout, const T *x, const float *mean,
                                   const float *rstd, const T *w, const T *dres, T *dx) {
    const int lane = threadIdx.x % kWarp;
    const int r = blockIdx.x * kRowWarps + threadIdx.x / kWarp;
    if (r >= rows) return;
    const size_t off = (size_t)r * C;
    const float m = mean[r], rs = rstd[r];
    float sg = 0.0f, sgx = 0.0f;
    for_lane<T, VEC>(dout + off, C, lane, [&](int c, float d) {
        const float g = d * to_f32(w[c]);
        sg += g;
        sgx += g * gpt2_layernorm_xhat(to_f32(x[off + c]), m, rs);
    });
    const float mean_g = warp_sum(sg) / (float)C, mean_gx = warp_sum(sgx) / (float)C;
    map_lane<T, VEC>(dout + off, dx + off, C, lane, [&](int c, float d) {
        const float g = d * to_f32(w[c]);
        const float v = gpt2_layernorm_dx(g, gpt2_layernorm_xhat(to_f32(x[off + c]), m, rs),
                                          mean_g, mean_gx, rs);
        const float base = dres != nullptr ? to_f32(dres[off + c]) : 0.0f;
        return base + v;
    });
}

// Stage 1 of the parameter gradients: block row y sums rows [y*kColRows,
// (y+1)*kColRows) of column c in order: pw[y][c] = sum dout * xhat, pb[y][c]
// = sum dout.
template <typename T>
__global__ void ln_param_partial_kernel(int rows, int C, const T *dout, const T *x,
                                        const float *mean, const float *rstd, float *pw,
                                        float *pb) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int nblocks = (rows + kColRows - 1) / kColRows;
    for (int y = blockIdx.y; y < nblocks; y += gridDim.y) {
        const int r0 = y * kColRows;
        const int r1 = r0 + kColRows < rows ? r0 + kColRows : rows;
        float sw = 0.0f, sb = 0.0f;
        for (int r = r0; r < r1; r++) {
            const size_t k = (size_t)r * C + c;
            const float d = to_f32(dout[k]);
            sw += d * gpt2_layernorm_xhat(to_f32(x[k]), mean[r], rstd[r]);
            sb += d;
        }
        pw[(size_t)y * C + c] = sw;
        pb[(size_t)y * C + c] = sb;
    }
}

// Stage 2: dw[c] += the sum of pw[0..nblocks)[c] in finish_column's order
// (lanes, then a tree; it was one thread per column adding every partial
// in turn), rounded once; the same for db. blockDim = (kFinishCols,
// kFinishLanes).
template <typename T>
__global__ void ln_param_finish_kernel(int nblocks, int C, const float *pw, const float *pb,
                                       T *dw, T *db) {
    __shared__ float shared[kFinishLanes * kFinishCols];
    const int c = blockIdx.x * kFinishCols + threadIdx.x;
    const float sw = finish_column(pw, nblocks, C, c, shared);
    const float sb = finish_column(pb, nblocks, C, c, shared);
    if (threadIdx.y == 0 && c < C) {
        dw[c] = from_f32<T>(to_f32(dw[c]) + sw);
        db[c] = from_f32<T>(to_f32(db[c]) + sb);
    }
}

// Rows can go through packs when they all start 16-byte aligned.
template <typename T> bool rows_vectorizable(int C, const void *const *ptrs, int n) {
    if (C % pack<T>::n != 0) return false;
    for (int i = 0; i < n; i++)
        if (ptrs[i] != nullptr && !aligned16(ptrs[i])) return false;
    return true;
}

} // namespace

int layernorm_forward(gpt2_backend *be, int rows, int C, const void *x, const void *w,
                      const void *b, void *out, float *mean, float *rstd) {
    cuda_impl *ci = impl_of(be);
    if (rows <= 0) return GPT2_OK;
    prof_scope scope(be, PROF_LAYERNORM_FWD);
    return with_type(ci->dtype, [&](auto tag) {
        using T = decltype(tag);
        const void *rows_at[2] = {x, out};
        const unsigned grid = blocks_for(rows, kRowWarps);
        if (rows_vectorizable<T>(C, rows_at, 2))
            ln_forward_kernel<T, true><<<grid, kRowWarps * kWarp, 0, ci->stream>>>(
                rows, C, (const T *)x, (const T *)w, (const T *)b, (T *)out, mean, rstd);
        else
            ln_forward_kernel<T, false><<<grid, kRowWarps * kWarp, 0, ci->stream>>>(
                rows, C, (const T *)x, (const T *)w, (const T *)b, (T *)out, mean, rstd);
        LAUNCHED();
        return (int)GPT2_OK;
    });
}

int layernorm_backward(gpt2_backend *be, int rows, int C, const void *dout, const void *x,
                       const float *mean, const float *rstd, const void *w, const void *dres,
                       void *dx, void *dw, void *db) {
    cuda_impl *ci = impl_of(be);
    if (rows <= 0) return GPT2_OK;
    const int nblocks = (rows + kColRows - 1) / kColRows;
    const size_t part = round_up((size_t)nblocks * C * sizeof(float));
    TRY(ensure_work(be, 2 * part));
    float *pw = (float *)ci->work, *pb = (float *)(ci->work + part);
    return with_type(ci->dtype, [&](auto tag) {
        using T = decltype(tag);
        // The parameter gradients first: they read dout, which dx may be
        // (the head's ln_f backward writes dx elsewhere, but a caller may
        // pass dres == dout == dx).
        {
            prof_scope scope(be, PROF_LAYERNORM_BWD_DWDB);
            const dim3 grid(blocks_for(C, kThreads),
                            (unsigned)(nblocks < 65535 ? nblocks : 65535));
            ln_param_partial_kernel<T><<<grid, kThreads, 0, ci->stream>>>(
                rows, C, (const T *)dout, (const T *)x, mean, rstd, pw, pb);
            LAUNCHED();
            ln_param_finish_kernel<T><<<blocks_for(C, kFinishCols),
                                        dim3(kFinishCols, kFinishLanes), 0, ci->stream>>>(
                nblocks, C, pw, pb, (T *)dw, (T *)db);
            LAUNCHED();
        }
        prof_scope scope(be, PROF_LAYERNORM_BWD_DX);
        const void *rows_at[4] = {dout, x, dres, dx};
        const unsigned rgrid = blocks_for(rows, kRowWarps);
        if (rows_vectorizable<T>(C, rows_at, 4))
            ln_backward_kernel<T, true><<<rgrid, kRowWarps * kWarp, 0, ci->stream>>>(
                rows, C, (const T *)dout, (const T *)x, mean, rstd, (const T *)w,
                (const T *)dres, (T *)dx);
        else
            ln_backward_kernel<T, false><<<rgrid, kRowWarps * kWarp, 0, ci->stream>>>(
                rows, C, (const T *)dout, (const T *)x, mean, rstd, (const T *)w,
                (const T *)dres, (T *)dx);
        LAUNCHED();
        return (int)GPT2_OK;
    });
}

} // namespace gpt2cuda
