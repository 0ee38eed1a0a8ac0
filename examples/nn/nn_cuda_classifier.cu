// The fused classifier on CUDA, shared by every model's head: after the
// model's own final norm (GPT-2's LayerNorm, Llama's RMSNorm), in chunks of
// rows so that the logits never exist for more than chunk_rows rows: per
// chunk, logits = xn . W^T (one GEMM, rows of the chunk x V in the storage
// dtype); then one block per row computes the softmax cross-entropy and, in
// place, dscale * dloss/dlogits (nn_math.h's nn_xent_loss and
// nn_xent_dlogit); the two GEMMs of the backward (W's gradient, xn's
// gradient) follow. The model then runs its norm's backward on dxn. The
// CPU's nn_cpu_classifier_chunk computes the same per chunk.
//
// Rows of the logits are padded_vocab(V) elements apart, so every row
// starts 16-byte aligned and the kernel reads and writes whole packs; the
// padding columns are never read by the GEMMs (their sizes say V).
#include "nn_cuda_ctx.cuh"

namespace nncuda {

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
    for_row<E, VEC>(z, V, [&](int, float v) { sum += nn_expf(v - m); });
    sum = block_reduce<false>(sum, red);
    // z_target was written before the reductions' barriers; every read of
    // the row above is ordered before the writes below by them.
    if (threadIdx.x == 0) losses[i] = nn_xent_loss(m, sum, z_target);
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
                    p.v[j] = from_f32<E>(nn_xent_dlogit(nn_expf(to_f32(p.v[j]) - m), inv,
                                                        valid && k == target, dscale));
            }
            store_pack(z + k0, p);
        }
    } else {
        for (int k = threadIdx.x; k < V; k += blockDim.x)
            z[k] = from_f32<E>(
                nn_xent_dlogit(nn_expf(to_f32(z[k]) - m), inv, valid && k == target, dscale));
    }
}

// The scratch, carved: the logits of a chunk of R rows [R][ld], then an
// fp32 row for classifier_logits_row.
struct parts {
    void *logits;
    float *row32;
};

parts carve(nn_dtype t, int V, int R, void *scratch) {
    const size_t ld = (size_t)padded_vocab(V);
    unsigned char *p = (unsigned char *)scratch;
    return parts{p, (float *)(p + round_up((size_t)R * ld * nn_dtype_size(t)))};
}

} // namespace

size_t classifier_scratch_bytes(nn_dtype t, int V, int chunk_rows) {
    if (chunk_rows < 1) return 0;
    const size_t ld = (size_t)padded_vocab(V);
    return round_up((size_t)chunk_rows * ld * nn_dtype_size(t)) + round_up(ld * sizeof(float));
}

int classifier(ctx *cx, int rows, int C, int V, const void *xn, const void *W,
               const int *targets, float dloss_scale, float *losses, void *gW, void *dxn,
               int chunk_rows, void *scratch) {
    const nn_dtype t = cx->dtype;
    const int ld = padded_vocab(V);
    const int R = chunk_rows < rows ? chunk_rows : rows;
    const parts h = carve(t, V, R, scratch);
    // The backward runs when either gradient is wanted (gW NULL: a frozen
    // classifier, whose input gradient still flows).
    const int want_grad = gW != nullptr || dxn != nullptr;
    for (int r0 = 0; r0 < rows; r0 += R) {
        const int n = rows - r0 < R ? rows - r0 : R;
        const void *xc = elem_at(xn, t, (size_t)r0 * C);
        // logits: [n][V] (rows ld apart) = xn . W^T
        TRY(timed(cx, PROF_MATMUL_LOGITS, [&] {
            return matmul(cx, false, true, n, V, C, xc, C, W, C, nullptr, h.logits, ld, EPI_NONE,
                          nullptr, nullptr);
        }));
        TRY(timed(cx, PROF_CLASSIFIER_XENT, [&] {
            return with_type(t, [&](auto tag) {
                using E = decltype(tag);
                if (aligned16(h.logits) && ld % pack<E>::n == 0)
                    xent_kernel<E, true><<<(unsigned)n, kXentThreads, 0, cx->stream>>>(
                        V, ld, (E *)h.logits, targets + r0, dloss_scale, want_grad, losses + r0);
                else
                    xent_kernel<E, false><<<(unsigned)n, kXentThreads, 0, cx->stream>>>(
                        V, ld, (E *)h.logits, targets + r0, dloss_scale, want_grad, losses + r0);
                LAUNCHED();
                return (int)NN_OK;
            });
        }));
        if (!want_grad) continue;
        // W's gradient: [V][C] += dlogits^T . xn; then dxn = dlogits . W
        // (the last reader of this chunk's xn comes first: dxn may be xn).
        if (gW != nullptr) TRY(timed(cx, PROF_MATMUL_WTE_DW, [&] {
            return matmul(cx, true, false, V, C, n, h.logits, ld, xc, C, gW, gW, C, EPI_NONE,
                          nullptr, nullptr);
        }));
        if (dxn != nullptr) TRY(timed(cx, PROF_MATMUL_HEAD_DX, [&] {
            return matmul(cx, false, false, n, C, V, h.logits, ld, W, C, nullptr,
                          elem_at(dxn, t, (size_t)r0 * C), C, EPI_NONE, nullptr, nullptr);
        }));
    }
    return NN_OK;
}

int classifier_logits_row(ctx *cx, int C, int V, const void *xn, const void *W,
                          float *host_logits, void *scratch) {
    const parts h = carve(cx->dtype, V, 1, scratch);
    TRY(matmul(cx, false, true, 1, V, C, xn, C, W, C, nullptr, h.logits, V, EPI_NONE, nullptr,
               nullptr));
    TRY(to_fp32(cx, V, h.logits, h.row32));
    CU_TRY(cudaMemcpyAsync(host_logits, h.row32, sizeof(float) * (size_t)V,
                           cudaMemcpyDeviceToHost, cx->stream));
    CU_TRY(cudaStreamSynchronize(cx->stream));
    return NN_OK;
}

} // namespace nncuda
