// Causal attention with grouped-query heads on CUDA, for every model: the
// CPU's algorithm (nn_cpu_attention.c: per head, raw scores q.k^T, a causal
// softmax row by row, probabilities times v) run as llm.c's non-cuDNN path
// does it, on nn_cpu.h's layout (q, k and v at offsets q_off, k_off, v_off
// in rows of stride ld; NKV K/V heads, query head h reading K/V head
// h / G with G = NH / NKV):
//   qkv rows --permute--> q [B][NH][T][hd], k, v [B][NKV][T][hd]
//   scores [B][NH][T][T] = q k^T        one strided-batched GEMM
//   att = causal softmax of scale * scores, a warp per row (in place)
//   y [B][NH][T][hd] = att v            one strided-batched GEMM
//   y --unpermute--> atty rows [B][T][NH hd] (stride ldy)
// The G query heads of a K/V group are consecutive in q's and att's head
// layout, so each product of the forward is one batch per (sequence, K/V
// head) of G*T rows against that group's one K or V head: no copy of K or
// V per query head, and no sum ever crosses heads (each score is one dot
// product of length hd; each output row sums over key positions). With G =
// 1 (NKV = NH, GPT-2) every batch is one head of T rows: the products llm.c
// and the earlier GPT-2 backend ran.
//
// The backward runs the same steps in reverse. dq, dp and dv's and dk's
// per-head products follow the forward's batching; a K/V head's gradient
// is the sum over its group's query heads, dv_g = sum_j att_{gG+j}^T
// dy_{gG+j} (dk likewise with the score gradients and q), accumulated by G
// batched products with beta = 0 then 1 in ascending j: the CPU's order
// (nn_cpu_attention_backward), fixed, no atomics.
//
// The GEMMs run on tensor cores in bf16/fp16 (fp32 accumulation); the
// softmax widens to fp32 and uses nn_math.h's nn_softmax_exp and
// nn_softmax_grad on every element, with the row's maximum and sums as warp
// reductions.
//
// Memory: the T x T probabilities of every head are kept for the backward
// (att in the block's activations, in the storage dtype), as llm.c does
// without cuDNN; a tiled online-softmax ("flash") kernel that never holds
// them is the way to go below that.
#include "nn_cuda_ctx.cuh"

namespace nncuda {

namespace {

// The position (b, h, t, i) of element idx of a walk over [B][NH][T][hd / w]
// (w elements at a time).
struct head_pos {
    long long b;
    int h, t, i;
};
__device__ head_pos head_pos_of(long long idx, int T, int NH, int hd, int w) {
    const int i = (int)(idx % (hd / w)) * w;
    const long long rest = idx / (hd / w);
    const int t = (int)(rest % T);
    const int h = (int)(rest / T % NH);
    return {rest / ((long long)T * NH), h, t, i};
}

// Offsets of (b, t) head h's element i in [B*T] rows of stride ld from
// column `off`, and in the head layout [B][heads][T][hd].
__device__ __forceinline__ size_t row_at(const head_pos &p, int T, int ld, int off, int head,
                                         int hd) {
    return ((size_t)p.b * T + p.t) * ld + off + (size_t)head * hd + p.i;
}
__device__ __forceinline__ size_t head_at(const head_pos &p, int T, int heads, int head, int hd) {
    return (((size_t)p.b * heads + head) * T + p.t) * hd + p.i;
}

// Moves w elements (one pack when VEC) from src to dst.
template <typename E, bool VEC> __device__ __forceinline__ void move(E *dst, const E *src) {
    if constexpr (VEC)
        store_pack(dst, load_pack(src));
    else
        dst[0] = src[0];
}

// qkv rows -> q [B][NH][T][hd], and k, v [B][NKV][T][hd] (the threads of
// heads h < NKV move k and v too). With VEC each thread moves one pack.
template <typename E, bool VEC>
__global__ void permute_kernel(nn_attn_layout s, const E *qkv, E *q, E *k, E *v) {
    const int w = VEC ? pack<E>::n : 1;
    const int T = s.T, NH = s.n_head, NKV = s.n_kv_head, hd = s.head_dim;
    const long long total = (long long)s.B * NH * T * (hd / w);
    GRID_STRIDE(idx, total) {
        const head_pos p = head_pos_of(idx, T, NH, hd, w);
        move<E, VEC>(q + head_at(p, T, NH, p.h, hd), qkv + row_at(p, T, s.ld, s.q_off, p.h, hd));
        if (p.h < NKV) {
            move<E, VEC>(k + head_at(p, T, NKV, p.h, hd),
                         qkv + row_at(p, T, s.ld, s.k_off, p.h, hd));
            move<E, VEC>(v + head_at(p, T, NKV, p.h, hd),
                         qkv + row_at(p, T, s.ld, s.v_off, p.h, hd));
        }
    }
}

// The inverse for the gradients: dq [B][NH][T][hd], dk, dv [B][NKV][T][hd]
// -> dqkv rows (their q, k and v columns; nothing else is written).
template <typename E, bool VEC>
__global__ void unpermute_kernel(nn_attn_layout s, const E *dq, const E *dk, const E *dv,
                                 E *dqkv) {
    const int w = VEC ? pack<E>::n : 1;
    const int T = s.T, NH = s.n_head, NKV = s.n_kv_head, hd = s.head_dim;
    const long long total = (long long)s.B * NH * T * (hd / w);
    GRID_STRIDE(idx, total) {
        const head_pos p = head_pos_of(idx, T, NH, hd, w);
        move<E, VEC>(dqkv + row_at(p, T, s.ld, s.q_off, p.h, hd), dq + head_at(p, T, NH, p.h, hd));
        if (p.h < NKV) {
            move<E, VEC>(dqkv + row_at(p, T, s.ld, s.k_off, p.h, hd),
                         dk + head_at(p, T, NKV, p.h, hd));
            move<E, VEC>(dqkv + row_at(p, T, s.ld, s.v_off, p.h, hd),
                         dv + head_at(p, T, NKV, p.h, hd));
        }
    }
}

// Between atty rows (NH heads side by side, stride ldy) and the head layout
// [B][NH][T][hd]: to_heads = 1 reads rows and writes heads (the backward's
// d atty), 0 the reverse (the forward's y).
template <typename E, bool VEC>
__global__ void rows_heads_kernel(nn_attn_layout s, const E *in, E *out, int to_heads) {
    const int w = VEC ? pack<E>::n : 1;
    const int T = s.T, NH = s.n_head, hd = s.head_dim;
    const long long total = (long long)s.B * NH * T * (hd / w);
    GRID_STRIDE(idx, total) {
        const head_pos p = head_pos_of(idx, T, NH, hd, w);
        const size_t row = row_at(p, T, s.ldy, 0, p.h, hd), head = head_at(p, T, NH, p.h, hd);
        move<E, VEC>(out + (to_heads ? head : row), in + (to_heads ? row : head));
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
    for (int j = lane; j < n; j += kWarp) sum += nn_softmax_exp(to_f32(row[j]), m, scale);
    const float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < T; j += kWarp)
        row[j] = from_f32<E>(j < n ? nn_softmax_exp(to_f32(row[j]), m, scale) * inv : 0.0f);
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
        dr[j] = from_f32<E>(j <= t ? nn_softmax_grad(to_f32(p[j]), to_f32(dr[j]), dot, scale)
                                   : 0.0f);
}

// The row and head layouts move in packs when every row start and head
// offset is a multiple of the pack and every buffer is 16-byte aligned.
template <typename E>
bool layout_vectorizable(const nn_attn_layout *s, const void *const *ptrs, int n) {
    const int w = pack<E>::n;
    if (s->head_dim % w != 0 || s->ld % w != 0 || s->ldy % w != 0 || s->q_off % w != 0 ||
        s->k_off % w != 0 || s->v_off % w != 0)
        return false;
    for (int i = 0; i < n; i++)
        if (!aligned16(ptrs[i])) return false;
    return true;
}

// The scratch's buffers: q, y, dq [B][NH][T][hd]; k, v, dk, dv
// [B][NKV][T][hd].
struct heads {
    void *q, *y, *dq, *k, *v, *dk, *dv;
};

size_t q_bytes(nn_dtype t, const nn_attn_layout *s) {
    return round_up((size_t)s->B * s->n_head * s->T * s->head_dim * nn_dtype_size(t));
}
size_t kv_bytes(nn_dtype t, const nn_attn_layout *s) {
    return round_up((size_t)s->B * s->n_kv_head * s->T * s->head_dim * nn_dtype_size(t));
}

heads carve_heads(nn_dtype t, const nn_attn_layout *s, void *scratch) {
    const size_t nq = q_bytes(t, s), nkv = kv_bytes(t, s);
    unsigned char *p = (unsigned char *)scratch;
    heads h;
    h.q = p;
    h.y = p + nq;
    h.dq = p + 2 * nq;
    h.k = p + 3 * nq;
    h.v = p + 3 * nq + nkv;
    h.dk = p + 3 * nq + 2 * nkv;
    h.dv = p + 3 * nq + 3 * nkv;
    return h;
}

// The batching every product below shares: one batch per (sequence, K/V
// head), holding its group's G query heads' T rows each.
struct groups {
    int G;            // query heads per K/V head
    int count;        // batches: B * NKV
    int rows;         // G * T: query rows of a batch
    long long sq;     // elements between batches of q, y, dq, dy: G T hd
    long long skv;    // ... of k, v, dk, dv: T hd
    long long satt;   // ... of att, datt: G T T
    long long hq;     // elements between two query heads of a batch: T hd
    long long hatt;   // ... of att: T T
};

groups groups_of(const nn_attn_layout *s) {
    groups g;
    const long long T = s->T, hd = s->head_dim;
    g.G = s->n_head / s->n_kv_head;
    g.count = s->B * s->n_kv_head;
    g.rows = g.G * s->T;
    g.sq = g.G * T * hd;
    g.skv = T * hd;
    g.satt = g.G * T * T;
    g.hq = T * hd;
    g.hatt = T * T;
    return g;
}

} // namespace

size_t attention_scratch_bytes(nn_dtype t, const nn_attn_layout *s) {
    return 3 * q_bytes(t, s) + 4 * kv_bytes(t, s);
}

int attention_forward(ctx *cx, const nn_attn_layout *s, const void *qkv, void *att, void *atty,
                      void *scratch) {
    const int T = s->T, hd = s->head_dim;
    const float scale = 1.0f / sqrtf((float)hd);
    const heads h = carve_heads(cx->dtype, s, scratch);
    const groups g = groups_of(s);
    return with_type(cx->dtype, [&](auto tag) {
        using E = decltype(tag);
        const void *bufs[6] = {qkv, atty, h.q, h.k, h.v, h.y};
        const bool vec = layout_vectorizable<E>(s, bufs, 6);
        const long long moves = (long long)s->B * s->n_head * T * (vec ? hd / pack<E>::n : hd);
        const unsigned grid = grid_for(moves, kThreads);
        {
            prof_scope scope(cx, PROF_ATTN_FWD_PERMUTE);
            if (vec)
                permute_kernel<E, true><<<grid, kThreads, 0, cx->stream>>>(
                    *s, (const E *)qkv, (E *)h.q, (E *)h.k, (E *)h.v);
            else
                permute_kernel<E, false><<<grid, kThreads, 0, cx->stream>>>(
                    *s, (const E *)qkv, (E *)h.q, (E *)h.k, (E *)h.v);
            LAUNCHED();
        }
        // scores = q k^T per group (raw; the scale goes into the softmax).
        TRY(timed(cx, PROF_ATTN_FWD_QK, [&] {
            return matmul_batched(cx, false, true, g.rows, T, hd, h.q, hd, g.sq, h.k, hd, g.skv,
                                  0.0f, att, T, g.satt, g.count);
        }));
        const long long rows = (long long)s->B * s->n_head * T;
        {
            prof_scope scope(cx, PROF_ATTN_FWD_SOFTMAX);
            softmax_forward_kernel<E><<<blocks_for(rows, kRowWarps), kRowWarps * kWarp, 0,
                                        cx->stream>>>(rows, T, scale, (E *)att,
                                                      cx->fault != FAULT_SOFTMAX_NO_MASK);
            LAUNCHED();
        }
        // y = att v per group; att is 0 above the diagonal: the causal mask.
        TRY(timed(cx, PROF_ATTN_FWD_AV, [&] {
            return matmul_batched(cx, false, false, g.rows, hd, T, att, T, g.satt, h.v, hd,
                                  g.skv, 0.0f, h.y, hd, g.sq, g.count);
        }));
        prof_scope scope_unpermute(cx, PROF_ATTN_FWD_UNPERMUTE);
        if (vec)
            rows_heads_kernel<E, true><<<grid, kThreads, 0, cx->stream>>>(*s, (const E *)h.y,
                                                                          (E *)atty, 0);
        else
            rows_heads_kernel<E, false><<<grid, kThreads, 0, cx->stream>>>(*s, (const E *)h.y,
                                                                           (E *)atty, 0);
        LAUNCHED();
        return (int)NN_OK;
    });
}

int attention_backward(ctx *cx, const nn_attn_layout *s, const void *qkv, const void *att,
                       const void *datty, void *dqkv, void *datt, void *scratch) {
    const int T = s->T, hd = s->head_dim;
    const float scale = 1.0f / sqrtf((float)hd);
    const heads h = carve_heads(cx->dtype, s, scratch);
    const groups g = groups_of(s);
    const nn_dtype t = cx->dtype;
    void *dy = h.y; // the forward's y slot holds d atty in head layout here
    return with_type(t, [&](auto tag) {
        using E = decltype(tag);
        const void *bufs[10] = {qkv, datty, dqkv, h.q, h.k, h.v, dy, h.dq, h.dk, h.dv};
        const bool vec = layout_vectorizable<E>(s, bufs, 10);
        const long long moves = (long long)s->B * s->n_head * T * (vec ? hd / pack<E>::n : hd);
        const unsigned grid = grid_for(moves, kThreads);
        {
            prof_scope scope(cx, PROF_ATTN_BWD_PERMUTE);
            if (vec) {
                permute_kernel<E, true><<<grid, kThreads, 0, cx->stream>>>(
                    *s, (const E *)qkv, (E *)h.q, (E *)h.k, (E *)h.v);
                rows_heads_kernel<E, true><<<grid, kThreads, 0, cx->stream>>>(
                    *s, (const E *)datty, (E *)dy, 1);
            } else {
                permute_kernel<E, false><<<grid, kThreads, 0, cx->stream>>>(
                    *s, (const E *)qkv, (E *)h.q, (E *)h.k, (E *)h.v);
                rows_heads_kernel<E, false><<<grid, kThreads, 0, cx->stream>>>(
                    *s, (const E *)datty, (E *)dy, 1);
            }
            LAUNCHED();
        }
        // dp = dy v^T per group; dv_g = sum_j att_j^T dy_j over the group's
        // query heads j, in ascending j.
        TRY(timed(cx, PROF_ATTN_BWD_DP_DV, [&] {
            TRY(matmul_batched(cx, false, true, g.rows, T, hd, dy, hd, g.sq, h.v, hd, g.skv, 0.0f,
                               datt, T, g.satt, g.count));
            for (int j = 0; j < g.G; j++)
                TRY(matmul_batched(cx, true, false, T, hd, T, elem_at(att, t, j * g.hatt), T,
                                   g.satt, elem_at(dy, t, j * g.hq), hd, g.sq, j == 0 ? 0.0f : 1.0f,
                                   h.dv, hd, g.skv, g.count));
            return (int)NN_OK;
        }));
        const long long rows = (long long)s->B * s->n_head * T;
        {
            prof_scope scope(cx, PROF_ATTN_BWD_SOFTMAX);
            softmax_backward_kernel<E><<<blocks_for(rows, kRowWarps), kRowWarps * kWarp, 0,
                                         cx->stream>>>(rows, T, scale, (const E *)att, (E *)datt);
            LAUNCHED();
        }
        // dq = ds k per group; dk_g = sum_j ds_j^T q_j in ascending j (ds: the
        // raw scores' gradient, scale included).
        TRY(timed(cx, PROF_ATTN_BWD_DQ_DK, [&] {
            TRY(matmul_batched(cx, false, false, g.rows, hd, T, datt, T, g.satt, h.k, hd, g.skv,
                               0.0f, h.dq, hd, g.sq, g.count));
            for (int j = 0; j < g.G; j++)
                TRY(matmul_batched(cx, true, false, T, hd, T, elem_at(datt, t, j * g.hatt), T,
                                   g.satt, elem_at(h.q, t, j * g.hq), hd, g.sq,
                                   j == 0 ? 0.0f : 1.0f, h.dk, hd, g.skv, g.count));
            return (int)NN_OK;
        }));
        prof_scope scope_unpermute(cx, PROF_ATTN_BWD_UNPERMUTE);
        if (vec)
            unpermute_kernel<E, true><<<grid, kThreads, 0, cx->stream>>>(
                *s, (const E *)h.dq, (const E *)h.dk, (const E *)h.dv, (E *)dqkv);
        else
            unpermute_kernel<E, false><<<grid, kThreads, 0, cx->stream>>>(
                *s, (const E *)h.dq, (const E *)h.dk, (const E *)h.dv, (E *)dqkv);
        LAUNCHED();
        return (int)NN_OK;
    });
}

} // namespace nncuda
