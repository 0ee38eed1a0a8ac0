// Causal multi-head attention on CUDA, the CPU's algorithm (gpt2_cpu.c:
// per head, raw scores q.k^T, a causal softmax row by row, probabilities
// times v) run as llm.c's non-cuDNN path does it:
//   qkv [B][T][3][NH][hs] --permute--> q, k, v [B][NH][T][hs]
//   scores [B*NH][T][T] = q k^T         one strided-batched GEMM for all heads
//   att = causal softmax of scale * scores, a warp per row (in place)
//   y [B][NH][T][hs] = att v            one strided-batched GEMM
//   y --unpermute--> atty [B][T][NH][hs]
// The backward runs the same steps in reverse. The GEMMs run on tensor cores
// in bf16/fp16 (fp32 accumulation); the softmax widens to fp32 and uses
// gpt2_math.h's gpt2_softmax_exp and gpt2_softmax_grad on every element, with
// the row's maximum and sums as warp reductions.
//
// Memory: the T x T probabilities of every head are kept for the backward
// (att in the block's activations, in the storage dtype), as llm.c does
// without cuDNN; a tiled online-softmax ("flash") kernel that never holds
// them is the way to go below that.
#include "gpt2_cuda_common.cuh"

namespace gpt2cuda {

namespace {

// Element idx of a walk over [B][NH][T][hs / w] (w elements at a time):
// its offset in [B][T][row_width] rows, at head h's columns, and in the
// per-head layout [B][NH][T][hs].
struct head_offsets {
    size_t row, head;
};
__device__ head_offsets head_offsets_of(long long idx, int T, int NH, int hs, int w,
                                        int row_width) {
    const int i = (int)(idx % (hs / w)) * w;
    const long long rest = idx / (hs / w);
    const int t = (int)(rest % T);
    const int h = (int)(rest / T % NH);
    const long long b = rest / ((long long)T * NH);
    return {((size_t)b * T + t) * row_width + (size_t)h * hs + i,
            (((size_t)b * NH + h) * T + t) * hs + i};
}

// qkv rows -> q, k, v [B][NH][T][hs]: element (b, h, t, i) of each. With
// VEC each thread moves one pack of i (hs is a multiple of the pack).
template <typename E, bool VEC>
__global__ void permute_kernel(int B, int T, int NH, int hs, const E *qkv, E *q, E *k, E *v) {
    const int w = VEC ? pack<E>::n : 1;
    const long long total = (long long)B * NH * T * (hs / w);
    const int C = NH * hs;
    GRID_STRIDE(idx, total) {
        const head_offsets o = head_offsets_of(idx, T, NH, hs, w, 3 * C);
        const E *src = qkv + o.row;
        const size_t dst = o.head;
        if constexpr (VEC) {
            store_pack(q + dst, load_pack(src));
            store_pack(k + dst, load_pack(src + C));
            store_pack(v + dst, load_pack(src + 2 * C));
        } else {
            q[dst] = src[0];
            k[dst] = src[C];
            v[dst] = src[2 * C];
        }
    }
}

// The inverse for the gradients: dq, dk, dv [B][NH][T][hs] -> dqkv rows.
template <typename E, bool VEC>
__global__ void unpermute3_kernel(int B, int T, int NH, int hs, const E *dq, const E *dk,
                                  const E *dv, E *dqkv) {
    const int w = VEC ? pack<E>::n : 1;
    const long long total = (long long)B * NH * T * (hs / w);
    const int C = NH * hs;
    GRID_STRIDE(idx, total) {
        const head_offsets o = head_offsets_of(idx, T, NH, hs, w, 3 * C);
        E *dst = dqkv + o.row;
        const size_t src = o.head;
        if constexpr (VEC) {
            store_pack(dst, load_pack(dq + src));
            store_pack(dst + C, load_pack(dk + src));
            store_pack(dst + 2 * C, load_pack(dv + src));
        } else {
            dst[0] = dq[src];
            dst[C] = dk[src];
            dst[2 * C] = dv[src];
        }
    }
}

// Between [B][T][NH][hs] rows (atty) and [B][NH][T][hs] heads: to_heads = 1
// reads rows and writes heads (the backward's d atty), 0 the reverse (the
// forward's y).
template <typename E, bool VEC>
__global__ void rows_heads_kernel(int B, int T, int NH, int hs, const E *in, E *out,
                                  int to_heads) {
    const int w = VEC ? pack<E>::n : 1;
    const long long total = (long long)B * NH * T * (hs / w);
    const int C = NH * hs;
    GRID_STRIDE(idx, total) {
        const head_offsets o = head_offsets_of(idx, T, NH, hs, w, C);
        const size_t from = to_heads ? o.row : o.head, to = to_heads ? o.head : o.row;
        if constexpr (VEC)
            store_pack(out + to, load_pack(in + from));
        else
            out[to] = in[from];
    }
}

// One warp per row r of scores [B*NH*T][T] (query position t = r % T):
// probabilities of scale * score over j <= t, exactly 0 above the diagonal.
// `mask` = 0 is the fault hook's wrong kernel (every position attended).
template <typename E>
__global__ void softmax_forward_kernel(long long rows, int T, float scale, E *att, int mask) {
    const int lane = threadIdx.x % kWarp;
    const long long r = blockIdx.x * (long long)kRowWarps + threadIdx.x / kWarp;
    if (r >= rows) return;
    const int t = (int)(r % T);
    const int n = mask ? t + 1 : T;
    E *row = att + (size_t)r * T;
    float m = -INFINITY;
    for (int j = lane; j < n; j += kWarp) {
        const float s = to_f32(row[j]);
        m = s > m ? s : m;
    }
    m = warp_max(m);
    float sum = 0.0f;
    for (int j = lane; j < n; j += kWarp) sum += gpt2_softmax_exp(to_f32(row[j]), m, scale);
    const float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < T; j += kWarp)
        row[j] = from_f32<E>(j < n ? gpt2_softmax_exp(to_f32(row[j]), m, scale) * inv : 0.0f);
}

// Its backward, one warp per row: d holds dLoss/dp on entry and dLoss/d(raw
// score) on return, 0 above the diagonal.
template <typename E>
__global__ void softmax_backward_kernel(long long rows, int T, float scale, const E *att, E *d) {
    const int lane = threadIdx.x % kWarp;
    const long long r = blockIdx.x * (long long)kRowWarps + threadIdx.x / kWarp;
    if (r >= rows) return;
    const int t = (int)(r % T);
    const E *p = att + (size_t)r * T;
    E *dr = d + (size_t)r * T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += kWarp) dot += to_f32(p[j]) * to_f32(dr[j]);
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += kWarp)
        dr[j] = from_f32<E>(j <= t ? gpt2_softmax_grad(to_f32(p[j]), to_f32(dr[j]), dot, scale)
                                   : 0.0f);
}

// The [B][NH][T][hs] layouts move in packs when hs is a multiple of the pack
// and every buffer is 16-byte aligned.
template <typename E> bool heads_vectorizable(int hs, const void *const *ptrs, int n) {
    if (hs % pack<E>::n != 0) return false;
    for (int i = 0; i < n; i++)
        if (!aligned16(ptrs[i])) return false;
    return true;
}

// The scratch's four or seven [B][NH][T][hs] buffers.
struct heads {
    void *q, *k, *v, *y, *dq, *dk, *dv;
};

heads carve_heads(const gpt2_backend *be, int B, int T, int C, void *scratch) {
    const size_t one = round_up((size_t)B * T * C * gpt2_dtype_size(be->dtype));
    unsigned char *p = (unsigned char *)scratch;
    heads h;
    void **slots[7] = {&h.q, &h.k, &h.v, &h.y, &h.dq, &h.dk, &h.dv};
    for (int i = 0; i < 7; i++) *slots[i] = p + (size_t)i * one;
    return h;
}

} // namespace

size_t attention_scratch_bytes(const gpt2_backend *be, const gpt2_dims *d, int B, int T) {
    return 7 * round_up((size_t)B * T * d->n_embd * gpt2_dtype_size(be->dtype));
}

int attention_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T, const void *qkv,
                      void *att, void *atty, void *scratch) {
    cuda_impl *ci = impl_of(be);
    const int C = d->n_embd, NH = d->n_head, hs = C / NH;
    const long long TT = (long long)T * T, Ths = (long long)T * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    const heads h = carve_heads(be, B, T, C, scratch);
    return with_type(ci->dtype, [&](auto tag) {
        using T_ = decltype(tag);
        const void *bufs[5] = {qkv, atty, h.q, h.k, h.v};
        const bool vec = heads_vectorizable<T_>(hs, bufs, 5) && aligned16(h.y);
        const long long moves = (long long)B * NH * T * (vec ? hs / pack<T_>::n : hs);
        {
            prof_scope scope(be, PROF_ATTN_FWD_PERMUTE);
            if (vec)
                permute_kernel<T_, true><<<grid_for(moves, kThreads), kThreads, 0, ci->stream>>>(
                    B, T, NH, hs, (const T_ *)qkv, (T_ *)h.q, (T_ *)h.k, (T_ *)h.v);
            else
                permute_kernel<T_, false><<<grid_for(moves, kThreads), kThreads, 0,
                                            ci->stream>>>(B, T, NH, hs, (const T_ *)qkv,
                                                          (T_ *)h.q, (T_ *)h.k, (T_ *)h.v);
            LAUNCHED();
        }
        // scores_bh = q_bh k_bh^T (raw; the scale goes into the softmax).
        TRY(timed(be, PROF_ATTN_FWD_QK, [&] {
            return matmul_batched(be, false, true, T, T, hs, h.q, hs, Ths, h.k, hs, Ths, att, T,
                                  TT, B * NH);
        }));
        const long long rows = (long long)B * NH * T;
        {
            prof_scope scope(be, PROF_ATTN_FWD_SOFTMAX);
            softmax_forward_kernel<T_><<<blocks_for(rows, kRowWarps), kRowWarps * kWarp, 0,
                                         ci->stream>>>(rows, T, scale, (T_ *)att,
                                                       ci->fault != FAULT_SOFTMAX_NO_MASK);
            LAUNCHED();
        }
        // y_bh = att_bh v_bh; att is 0 above the diagonal: the causal mask.
        TRY(timed(be, PROF_ATTN_FWD_AV, [&] {
            return matmul_batched(be, false, false, T, hs, T, att, T, TT, h.v, hs, Ths, h.y, hs,
                                  Ths, B * NH);
        }));
        prof_scope scope_unpermute(be, PROF_ATTN_FWD_UNPERMUTE);
        if (vec)
            rows_heads_kernel<T_, true><<<grid_for(moves, kThreads), kThreads, 0, ci->stream>>>(
                B, T, NH, hs, (const T_ *)h.y, (T_ *)atty, 0);
        else
            rows_heads_kernel<T_, false><<<grid_for(moves, kThreads), kThreads, 0, ci->stream>>>(
                B, T, NH, hs, (const T_ *)h.y, (T_ *)atty, 0);
        LAUNCHED();
        return (int)GPT2_OK;
    });
}

int attention_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T, const void *qkv,
                       const void *att, const void *datty, void *dqkv, void *datt,
                       void *scratch) {
    cuda_impl *ci = impl_of(be);
    const int C = d->n_embd, NH = d->n_head, hs = C / NH;
    const long long TT = (long long)T * T, Ths = (long long)T * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    const heads h = carve_heads(be, B, T, C, scratch);
    void *dy = h.y; // the forward's y slot holds d atty in head layout here
    return with_type(ci->dtype, [&](auto tag) {
        using T_ = decltype(tag);
        const void *bufs[9] = {qkv, datty, dqkv, h.q, h.k, h.v, dy, h.dq, h.dk};
        const bool vec = heads_vectorizable<T_>(hs, bufs, 9) && aligned16(h.dv);
        const long long moves = (long long)B * NH * T * (vec ? hs / pack<T_>::n : hs);
        const unsigned grid = grid_for(moves, kThreads);
        {
            prof_scope scope(be, PROF_ATTN_BWD_PERMUTE);
            if (vec) {
                permute_kernel<T_, true><<<grid, kThreads, 0, ci->stream>>>(
                    B, T, NH, hs, (const T_ *)qkv, (T_ *)h.q, (T_ *)h.k, (T_ *)h.v);
                rows_heads_kernel<T_, true><<<grid, kThreads, 0, ci->stream>>>(
                    B, T, NH, hs, (const T_ *)datty, (T_ *)dy, 1);
            } else {
                permute_kernel<T_, false><<<grid, kThreads, 0, ci->stream>>>(
                    B, T, NH, hs, (const T_ *)qkv, (T_ *)h.q, (T_ *)h.k, (T_ *)h.v);
                rows_heads_kernel<T_, false><<<grid, kThreads, 0, ci->stream>>>(
                    B, T, NH, hs, (const T_ *)datty, (T_ *)dy, 1);
            }
            LAUNCHED();
        }
        // dp_bh = dy_bh v_bh^T; dv_bh = att_bh^T dy_bh.
        TRY(timed(be, PROF_ATTN_BWD_DP_DV, [&] {
            TRY(matmul_batched(be, false, true, T, T, hs, dy, hs, Ths, h.v, hs, Ths, datt, T, TT,
                               B * NH));
            return matmul_batched(be, true, false, T, hs, T, att, T, TT, dy, hs, Ths, h.dv, hs,
                                  Ths, B * NH);
        }));
        const long long rows = (long long)B * NH * T;
        {
            prof_scope scope(be, PROF_ATTN_BWD_SOFTMAX);
            softmax_backward_kernel<T_><<<blocks_for(rows, kRowWarps), kRowWarps * kWarp, 0,
                                          ci->stream>>>(rows, T, scale, (const T_ *)att,
                                                        (T_ *)datt);
            LAUNCHED();
        }
        // dq_bh = ds_bh k_bh; dk_bh = ds_bh^T q_bh (ds: the scores' gradient).
        TRY(timed(be, PROF_ATTN_BWD_DQ_DK, [&] {
            TRY(matmul_batched(be, false, false, T, hs, T, datt, T, TT, h.k, hs, Ths, h.dq, hs,
                               Ths, B * NH));
            return matmul_batched(be, true, false, T, hs, T, datt, T, TT, h.q, hs, Ths, h.dk, hs,
                                  Ths, B * NH);
        }));
        prof_scope scope_unpermute(be, PROF_ATTN_BWD_UNPERMUTE);
        if (vec)
            unpermute3_kernel<T_, true><<<grid, kThreads, 0, ci->stream>>>(
                B, T, NH, hs, (const T_ *)h.dq, (const T_ *)h.dk, (const T_ *)h.dv, (T_ *)dqkv);
        else
            unpermute3_kernel<T_, false><<<grid, kThreads, 0, ci->stream>>>(
                B, T, NH, hs, (const T_ *)h.dq, (const T_ *)h.dk, (const T_ *)h.dv, (T_ *)dqkv);
        LAUNCHED();
        return (int)GPT2_OK;
    });
}

} // namespace gpt2cuda
