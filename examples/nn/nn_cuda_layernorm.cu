// LayerNorm on CUDA (nn_layers.h's layernorm ops, GPT-2's norm): a warp per row for the forward and the input gradient
// (the row's statistics are warp sums in fp32, the elements nn_layer_math.h's
// nn_layernorm_out and nn_layernorm_dx), and a deterministic column sum
// for the weight and bias gradients (nn_cuda_rows.cuh's: blocks of
// kColRows rows in order, then the blocks' partials in finish_column's
// fixed lanes and tree, one rounding into the gradient).
//
// Loads and stores: with C a multiple of the 16-byte pack and every row
// 16-byte aligned, each lane reads and writes whole packs of a row (128-bit
// accesses); otherwise single elements. The arithmetic is the same either
// way, lane by lane.
#include "nn_cuda_ctx.cuh"
#include "nn_cuda_rows.cuh"
#include "nn_layer_math.h"

namespace nncuda {

namespace {

template <typename T, bool VEC>
__global__ void ln_forward_kernel(int rows, int C, const T *x, const T *w, const T *b, T *out,
                                  float *mean, float *rstd) {
    const int lane = threadIdx.x % kWarp;
    const long long r = warp_row();
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
    const float rs = nn_layernorm_rstd(warp_sum(q) / (float)C);
    map_lane<T, VEC>(xr, out + (size_t)r * C, C, lane, [&](int c, float v) {
        return nn_layernorm_out(v, m, rs, to_f32(w[c]), to_f32(b[c]));
    });
    if (lane == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

// dx[r] = dres[r] + LayerNorm's input gradient; dres and dout may alias dx
// (each element is read before it is written, by the same lane).
template <typename T, bool VEC>
__global__ void ln_backward_kernel(int rows, int C, const T *dout, const T *x, const float *mean,
                                   const float *rstd, const T *w, const T *dres, T *dx) {
    const int lane = threadIdx.x % kWarp;
    const long long r = warp_row();
    if (r >= rows) return;
    const size_t off = (size_t)r * C;
    const float m = mean[r], rs = rstd[r];
    float sg = 0.0f, sgx = 0.0f;
    for_lane<T, VEC>(dout + off, C, lane, [&](int c, float d) {
        const float g = d * to_f32(w[c]);
        sg += g;
        sgx += g * nn_layernorm_xhat(to_f32(x[off + c]), m, rs);
    });
    const float mean_g = warp_sum(sg) / (float)C, mean_gx = warp_sum(sgx) / (float)C;
    map_lane<T, VEC>(dout + off, dx + off, C, lane, [&](int c, float d) {
        const float g = d * to_f32(w[c]);
        const float v = nn_layernorm_dx(g, nn_layernorm_xhat(to_f32(x[off + c]), m, rs),
                                          mean_g, mean_gx, rs);
        const float base = dres != nullptr ? to_f32(dres[off + c]) : 0.0f;
        return base + v;
    });
}

// The parameter gradients' values at (r, c): dout * xhat (w) and dout (b).
template <typename T> struct ln_param_values {
    const T *dout, *x;
    const float *mean, *rstd;
    int C;
    __device__ void operator()(int r, int c, float *s) const {
        const size_t k = (size_t)r * C + c;
        const float d = to_f32(dout[k]);
        s[0] += d * nn_layernorm_xhat(to_f32(x[k]), mean[r], rstd[r]);
        s[1] += d;
    }
};

} // namespace

int layernorm_forward(ctx *cx, int rows, int C, const void *x, const void *w, const void *b,
                      void *out, float *mean, float *rstd) {
    if (rows <= 0) return NN_OK;
    prof_scope scope(cx, prof_op(cx, "layernorm_fwd"));
    return with_type(cx->dtype, [&](auto tag) {
        using T = decltype(tag);
        const void *rows_at[2] = {x, out};
        const unsigned grid = blocks_for(rows, kRowWarps);
        if (rows_vectorizable<T>(C, rows_at, 2))
            ln_forward_kernel<T, true><<<grid, kRowWarps * kWarp, 0, cx->stream>>>(
                rows, C, (const T *)x, (const T *)w, (const T *)b, (T *)out, mean, rstd);
        else
            ln_forward_kernel<T, false><<<grid, kRowWarps * kWarp, 0, cx->stream>>>(
                rows, C, (const T *)x, (const T *)w, (const T *)b, (T *)out, mean, rstd);
        LAUNCHED();
        return (int)NN_OK;
    });
}

int layernorm_backward(ctx *cx, int rows, int C, const void *dout, const void *x,
                       const float *mean, const float *rstd, const void *w, const void *dres,
                       void *dx, void *dw, void *db) {
    if (rows <= 0) return NN_OK;
    return with_type(cx->dtype, [&](auto tag) {
        using T = decltype(tag);
        // The parameter gradients first: they read dout, which dx may be
        // (none for a frozen norm: dw and db NULL).
        if (dw != nullptr) TRY(timed(cx, prof_op(cx, "layernorm_bwd_dwdb"), [&] {
            return column_sums<T, 2>(
                cx, rows, C, ln_param_values<T>{(const T *)dout, (const T *)x, mean, rstd, C},
                colsum_out<T, 2>{{(T *)dw, (T *)db}});
        }));
        prof_scope scope(cx, prof_op(cx, "layernorm_bwd_dx"));
        const void *rows_at[4] = {dout, x, dres, dx};
        const unsigned rgrid = blocks_for(rows, kRowWarps);
        if (rows_vectorizable<T>(C, rows_at, 4))
            ln_backward_kernel<T, true><<<rgrid, kRowWarps * kWarp, 0, cx->stream>>>(
                rows, C, (const T *)dout, (const T *)x, mean, rstd, (const T *)w,
                (const T *)dres, (T *)dx);
        else
            ln_backward_kernel<T, false><<<rgrid, kRowWarps * kWarp, 0, cx->stream>>>(
                rows, C, (const T *)dout, (const T *)x, mean, rstd, (const T *)w,
                (const T *)dres, (T *)dx);
        LAUNCHED();
        return (int)NN_OK;
    });
}

} // namespace nncuda
