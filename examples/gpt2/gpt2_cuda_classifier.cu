// The head on CUDA (gpt2_backend.h's head ops), fused and in chunks of rows
// so that the logits never exist for more than chunk_rows rows: per chunk,
// ln_f; logits = ln_f(x) . wte^T (one GEMM, rows chunk_rows x V in the
// storage dtype); then one kernel per row computes the softmax
// cross-entropy and, in place, dscale * dloss/dlogits (gpt2_math.h's
// gpt2_xent_loss and gpt2_xent_dlogit); the two GEMMs of the backward
// (wte's gradient, ln_f's input gradient) and ln_f's backward follow.
//
// Rows of the logits are padded_vocab(V) elements apart, so every row
// starts 16-byte aligned and the kernel reads and writes whole packs; the
// padding columns are never read by the GEMMs (their sizes say V).
#include "gpt2_cuda_common.cuh"

namespace gpt2cuda {

namespace {

constexpr int kXentThreads = 256;

// A block-wide sum or maximum in a fixed order: warps first, then warp 0
// over the warps' results; every thread gets the result.
template <bool MAX> __device__ float block_reduce(float v, float *shared) {
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    v = MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    const int warps = blockDim.x / kWarp;
    float r = lane < warps ? shared[lane] : (MAX ? -INFINITY : 0.0f);
    r = MAX ? warp_max(r) : warp_sum(r);
    __syncthreads(); // shared may be reused by the next reduction
    return r;
}

// Calls f(k, value) for the thread's elements k < V of a row, in packs when
// VEC (the row is padded and aligned).
template <typename E, bool VEC, typename F>
__device__ __forceinline__ void for_row(const E *z, int V, F &&f) {
    if constexpr (VEC) {
        constexpr int n = pack<E>::n;
        for (int k0 = threadIdx.x * n; k0 < V; k0 += blockDim.x * n) {
            const pack<E> p = load_pack(z + k0);
#pragma unroll
            for (int i = 0; i < n; i++)
                if (k0 + i < V) f(k0 + i, to_f32(p.v[i]));
        }
    } else {
        for (int k = threadIdx.x; k < V; k += blockDim.x) f(k, to_f32(z[k]));
    }
}

// One block per row of logits [n][ld]: losses[i] = the row's cross-entropy;
// with want_grad the row becomes dscale * dloss/dlogits. A target outside
// [0, V) gives a NaN loss and no one-hot term.
template <typename E, bool VEC>
__global__ void xent_kernel(int V, int ld, E *logits, const int *targets, float dscale,
                            int want_grad, float *losses) {
    __shared__ float red[kXentThreads / kWarp];
    __shared__ float z_target;
    const int i = blockIdx.x;
    E *z = logits + (size_t)i * ld;
    const int target = targets[i];
    const bool valid = target >= 0 && target < V;
    if (threadIdx.x == 0) z_target = valid ? to_f32(z[target]) : NAN;
    float m = -INFINITY;
    for_row<E, VEC>(z, V, [&](int, float v) { m = v > m ? v : m; });
    m = block_reduce<true>(m, red);
    float sum = 0.0f;
    for_row<E, VEC>(z, V, [&](int, float v) { sum += gpt2_expf(v - m); });
    sum = block_reduce<false>(sum, red);
    // z_target was written before the reductions' barriers; every read of
    // the row above is ordered before the writes below by them.
    if (threadIdx.x == 0) losses[i] = gpt2_xent_loss(m, sum, z_target);
    if (!want_grad) return;
    const float inv = 1.0f / sum;
    if constexpr (VEC) {
        constexpr int n = pack<E>::n;
        for (int k0 = threadIdx.x * n; k0 < V; k0 += blockDim.x * n) {
            pack<E> p = load_pack(z + k0);
#pragma unroll
            for (int j = 0; j < n; j++) {
                const int k = k0 + j;
                if (k < V)
                    p.v[j] = from_f32<E>(gpt2_xent_dlogit(gpt2_expf(to_f32(p.v[j]) - m), inv,
                                                          valid && k == target, dscale));
            }
            store_pack(z + k0, p);
        }
    } else {
        for (int k = threadIdx.x; k < V; k += blockDim.x)
            z[k] = from_f32<E>(
                gpt2_xent_dlogit(gpt2_expf(to_f32(z[k]) - m), inv, valid && k == target, dscale));
    }
}

// The head scratch, carved: per chunk of R rows ln_f's output xn [R][C],
// mean and rstd [R], the logits [R][ld] and their input gradient dxn
// [R][C]; and an fp32 row of logits for head_logits.
struct head_parts {
    void *xn, *logits, *dxn;
    float *mean, *rstd, *row32;
};

head_parts carve_head(const gpt2_backend *be, const gpt2_dims *d, int R, void *scratch) {
    const size_t e = gpt2_dtype_size(be->dtype), C = (size_t)d->n_embd;
    const size_t ld = (size_t)padded_vocab(d->vocab);
    unsigned char *p = (unsigned char *)scratch;
    head_parts h;
    h.xn = p;
    p += round_up((size_t)R * C * e);
    h.mean = (float *)p;
    p += round_up((size_t)R * sizeof(float));
    h.rstd = (float *)p;
    p += round_up((size_t)R * sizeof(float));
    h.logits = p;
    p += round_up((size_t)R * ld * e);
    h.dxn = p;
    p += round_up((size_t)R * C * e);
    h.row32 = (float *)p;
    return h;
}

} // namespace

size_t head_scratch_bytes(const gpt2_backend *be, const gpt2_dims *d, int chunk_rows) {
    if (chunk_rows < 1) return 0;
    const size_t e = gpt2_dtype_size(be->dtype), C = (size_t)d->n_embd;
    const size_t R = (size_t)chunk_rows, ld = (size_t)padded_vocab(d->vocab);
    return round_up(R * C * e) + 2 * round_up(R * sizeof(float)) + round_up(R * ld * e) +
           round_up(R * C * e) + round_up(ld * sizeof(float));
}

int head_run(gpt2_backend *be, const gpt2_dims *d, int BT, const gpt2_embed_w *w,
             gpt2_embed_w *g, const void *x, const int *targets, float dloss_scale, void *dx,
             float *losses, int chunk_rows, void *scratch) {
    cuda_impl *ci = impl_of(be);
    const int C = d->n_embd, V = d->vocab, ld = padded_vocab(V);
    const int R = chunk_rows < BT ? chunk_rows : BT;
    const size_t e = gpt2_dtype_size(ci->dtype);
    const head_parts h = carve_head(be, d, R, scratch);
    const int want_grad = g != nullptr;
    for (int r0 = 0; r0 < BT; r0 += R) {
        const int n = BT - r0 < R ? BT - r0 : R;
        const void *xc = (const unsigned char *)x + (size_t)r0 * C * e;
        TRY(layernorm_forward(be, n, C, xc, w->lnfw, w->lnfb, h.xn, h.mean, h.rstd));
        // logits: [n][V] (rows ld apart) = xn . wte^T
        TRY(timed(be, PROF_MATMUL_LOGITS, [&] {
            return matmul(be, false, true, n, V, C, h.xn, C, w->wte, C, nullptr, h.logits, ld,
                          EPI_NONE, nullptr, nullptr);
        }));
        TRY(timed(be, PROF_CLASSIFIER_XENT, [&] {
            return with_type(ci->dtype, [&](auto tag) {
                using E = decltype(tag);
                if (aligned16(h.logits) && ld % pack<E>::n == 0)
                    xent_kernel<E, true><<<(unsigned)n, kXentThreads, 0, ci->stream>>>(
                        V, ld, (E *)h.logits, targets + r0, dloss_scale, want_grad, losses + r0);
                else
                    xent_kernel<E, false><<<(unsigned)n, kXentThreads, 0, ci->stream>>>(
                        V, ld, (E *)h.logits, targets + r0, dloss_scale, want_grad, losses + r0);
                LAUNCHED();
                return (int)GPT2_OK;
            });
        }));
        if (!want_grad) continue;
        // wte's gradient: [V][C] += dlogits^T . xn; dxn = dlogits . wte.
        TRY(timed(be, PROF_MATMUL_WTE_DW, [&] {
            return matmul(be, true, false, V, C, n, h.logits, ld, h.xn, C, g->wte, g->wte, C,
                          EPI_NONE, nullptr, nullptr);
        }));
        TRY(timed(be, PROF_MATMUL_HEAD_DX, [&] {
            return matmul(be, false, false, n, C, V, h.logits, ld, w->wte, C, nullptr, h.dxn, C,
                          EPI_NONE, nullptr, nullptr);
        }));
        TRY(layernorm_backward(be, n, C, h.dxn, xc, h.mean, h.rstd, w->lnfw, nullptr,
                               (unsigned char *)dx + (size_t)r0 * C * e, g->lnfw, g->lnfb));
    }
    return GPT2_OK;
}

int head_logits_row(gpt2_backend *be, const gpt2_dims *d, const gpt2_embed_w *w, const void *x,
                    int row, float *host_logits, void *scratch) {
    cuda_impl *ci = impl_of(be);
    const int C = d->n_embd, V = d->vocab;
    const head_parts h = carve_head(be, d, 1, scratch);
    const void *xr = (const unsigned char *)x + (size_t)row * C * gpt2_dtype_size(ci->dtype);
    TRY(layernorm_forward(be, 1, C, xr, w->lnfw, w->lnfb, h.xn, h.mean, h.rstd));
    TRY(matmul(be, false, true, 1, V, C, h.xn, C, w->wte, C, nullptr, h.logits, V, EPI_NONE,
               nullptr, nullptr));
    TRY(to_fp32(be, V, h.logits, h.row32));
    CU_TRY(cudaMemcpyAsync(host_logits, h.row32, sizeof(float) * (size_t)V,
                           cudaMemcpyDeviceToHost, ci->stream));
    CU_TRY(cudaStreamSynchronize(ci->stream));
    return GPT2_OK;
}

} // namespace gpt2cuda
