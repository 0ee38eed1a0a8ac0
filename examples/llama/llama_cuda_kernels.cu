// The Llama family's own kernels on CUDA, each the CPU's loop (llama_cpu.c)
// with the same nn_layer_math.h element functions, spread over the device:
//   RMSNorm   a warp per row (fp32 statistics: the row's mean square a warp
//             sum where the CPU adds NN_LANES lanes), 16-byte packs where
//             the rows allow; the weight's gradient a column sum in the
//             shared fixed order (nn_cuda_rows.cuh);
//   RoPE      a thread per rotated pair, in place, from the device copy of
//             llama_rope_table's angles, so both backends rotate by the
//             same cos and sin bits;
//   SwiGLU    element-wise, in packs where aligned.
#include "llama_cuda.cuh"
#include "nn_cuda_rows.cuh"

namespace llamacuda {

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

} // namespace

int rmsnorm_forward(ctx *cx, int rows, int C, float eps, const void *x, const void *w,
                    void *out, float *rstd) {
    if (rows <= 0) return NN_OK;
    prof_scope scope(cx, PROF_RMSNORM_FWD);
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
        TRY(timed(cx, PROF_RMSNORM_BWD_DW, [&] {
            return column_sums<T, 1>(cx, rows, C,
                                     rms_weight_values<T>{(const T *)dout, (const T *)x, rstd, C},
                                     colsum_out<T, 1>{{(T *)dw}});
        }));
        prof_scope scope(cx, PROF_RMSNORM_BWD_DX);
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

int rope(ctx *cx, bool backward, long long BT, int T, int heads, int hd, int ld, void *qkv,
         const float *cos, const float *sin) {
    const long long n = BT * heads * (hd / 2);
    if (n <= 0) return NN_OK;
    prof_scope scope(cx, backward ? PROF_ROPE_BWD : PROF_ROPE_FWD);
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

int swiglu_forward(ctx *cx, long long n, const void *gate, const void *up, void *h) {
    prof_scope scope(cx, PROF_SWIGLU_FWD);
    return with_type(cx->dtype, [&](auto tag) {
        using T = decltype(tag);
        return map_elements<2, T>(cx, n, (const T *)gate, (const T *)up, (T *)h, swiglu_op{});
    });
}

int swiglu_backward(ctx *cx, int rows, int F, const void *gate, const void *up, void *d) {
    if (rows <= 0 || F <= 0) return NN_OK;
    prof_scope scope(cx, PROF_SWIGLU_BWD);
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

} // namespace llamacuda
