// RMSNorm on CUDA (nn_layers.h's rmsnorm ops, the Llama family's norm),
// the CPU's loop (nn_cpu_layers.c) with the same nn_layer_math.h element
// functions: a warp per row (fp32 statistics: the row's mean square a warp
// sum where the CPU adds NN_LANES lanes), 16-byte packs where the rows
// allow; the weight's gradient a column sum in the shared fixed order
// (nn_cuda_rows.cuh).
#include "nn_cuda_ctx.cuh"
#include "nn_cuda_rows.cuh"
#include "nn_layer_math.h"

namespace nncuda {

namespace {

template <typename T, bool VEC>
__global__ void rms_forward_kernel(int rows, int C, float eps, const T *x, const T *w, T *out,
                                   float *rstd) {
    const int lane = threadIdx.x % kWarp;
    const long long r = warp_row();
    if (r >= rows) return;
    const T *xr = x + (size_t)r * C;
    float s = 0.0f;
    for_lane<T, VEC>(xr, C, lane, [&](int, float v) { s += v * v; });
    const float rs = nn_rms_rstd(warp_sum(s) / (float)C, eps);
    map_lane<T, VEC>(xr, out + (size_t)r * C, C, lane,
                     [&](int c, float v) { return nn_rms_out(v, rs, to_f32(w[c])); });
    if (lane == 0) rstd[r] = rs;
}

// dx[r] = dres[r] + RMSNorm's input gradient; dres and dout may alias dx
// (each element is read before it is written, by the same lane).
template <typename T, bool VEC>
__global__ void rms_backward_kernel(int rows, int C, const T *dout, const T *x, const float *rstd,
                                    const T *w, const T *dres, T *dx) {
    const int lane = threadIdx.x % kWarp;
    const long long r = warp_row();
    if (r >= rows) return;
    const size_t off = (size_t)r * C;
    const float rs = rstd[r];
    float sgx = 0.0f;
    for_lane<T, VEC>(dout + off, C, lane, [&](int c, float d) {
        sgx += d * to_f32(w[c]) * (to_f32(x[off + c]) * rs);
    });
    const float mean_gx = warp_sum(sgx) / (float)C;
    map_lane<T, VEC>(dout + off, dx + off, C, lane, [&](int c, float d) {
        const float v = nn_rms_dx(d * to_f32(w[c]), to_f32(x[off + c]) * rs, mean_gx, rs);
        const float base = dres != nullptr ? to_f32(dres[off + c]) : 0.0f;
        return base + v;
    });
}

// The weight gradient's value at (r, c): dout * (x * rstd), as the CPU's.
template <typename T> struct rms_weight_values {
    const T *dout, *x;
    const float *rstd;
    int C;
    __device__ void operator()(int r, int c, float *s) const {
        const size_t k = (size_t)r * C + c;
        s[0] += to_f32(dout[k]) * (to_f32(x[k]) * rstd[r]);
    }
};

} // namespace


int rmsnorm_forward(ctx *cx, int rows, int C, float eps, const void *x, const void *w,
                    void *out, float *rstd) {
    if (rows <= 0) return NN_OK;
    prof_scope scope(cx, prof_op(cx, "rmsnorm_fwd"));
    return with_type(cx->dtype, [&](auto tag) {
        using T = decltype(tag);
        const void *rows_at[2] = {x, out};
        const unsigned grid = blocks_for(rows, kRowWarps);
        if (rows_vectorizable<T>(C, rows_at, 2))
            rms_forward_kernel<T, true><<<grid, kRowWarps * kWarp, 0, cx->stream>>>(
                rows, C, eps, (const T *)x, (const T *)w, (T *)out, rstd);
        else
            rms_forward_kernel<T, false><<<grid, kRowWarps * kWarp, 0, cx->stream>>>(
                rows, C, eps, (const T *)x, (const T *)w, (T *)out, rstd);
        LAUNCHED();
        return (int)NN_OK;
    });
}

int rmsnorm_backward(ctx *cx, int rows, int C, const void *dout, const void *x,
                     const float *rstd, const void *w, const void *dres, void *dx, void *dw) {
    if (rows <= 0) return NN_OK;
    return with_type(cx->dtype, [&](auto tag) {
        using T = decltype(tag);
        if (dw != nullptr) TRY(timed(cx, prof_op(cx, "rmsnorm_bwd_dw"), [&] {
            return column_sums<T, 1>(cx, rows, C,
                                     rms_weight_values<T>{(const T *)dout, (const T *)x, rstd, C},
                                     colsum_out<T, 1>{{(T *)dw}});
        }));
        prof_scope scope(cx, prof_op(cx, "rmsnorm_bwd_dx"));
        const void *rows_at[4] = {dout, x, dres, dx};
        const unsigned grid = blocks_for(rows, kRowWarps);
        if (rows_vectorizable<T>(C, rows_at, 4))
            rms_backward_kernel<T, true><<<grid, kRowWarps * kWarp, 0, cx->stream>>>(
                rows, C, (const T *)dout, (const T *)x, rstd, (const T *)w, (const T *)dres,
                (T *)dx);
        else
            rms_backward_kernel<T, false><<<grid, kRowWarps * kWarp, 0, cx->stream>>>(
                rows, C, (const T *)dout, (const T *)x, rstd, (const T *)w, (const T *)dres,
                (T *)dx);
        LAUNCHED();
        return (int)NN_OK;
    });
}

} // namespace nncuda
