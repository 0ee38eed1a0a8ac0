// The token embedding on CUDA, shared by every model, with GPT-2's learned
// positions: the forward's `pos`, and embedding_backward_positions, the B
// rows of each position added in order.
//
// Forward: x[r] = wte[tokens[r]] (+ pos[r % T]), in 16-byte packs where the
// rows allow. A token outside [0, V) makes its row NaN (the CPU backends
// refuse it; here checking would cost a device-to-host wait), so the loss
// shows it.
//
// Backward, deterministic without atomics: the rows are sorted by token
// (CUB's radix sort, stable: rows of one token stay in ascending order) and
// the sorted positions cut into tiles of kEmbedTile. A block per tile adds,
// channel by channel, each run of one token within the tile in ascending
// order; a run that lies wholly in the tile is rounded into wte's gradient
// at once, a run cut by a tile boundary leaves its segment's fp32 sum in
// the tile's first or last slot. A second kernel, a block per tile where
// such a run starts, adds the run's segments (tile by tile, in
// finish_lanes' fixed lanes and tree) and rounds once. So a token
// repeated n times costs n / kEmbedTile additions in a chain and
// n / kEmbedTile / kFinishLanes more per lane, where one block used to add
// all n rows in turn (16384 for a batch of one repeated token).
#include <cub/device/device_radix_sort.cuh>

#include "nn_cuda_ctx.cuh"

namespace nncuda {

namespace {

template <typename E, bool VEC, bool POS>
__global__ void embed_forward_kernel(long long BT, int T, int C, int V, const E *wte,
                                     const E *pos, const int *tokens, E *x) {
    const int w = VEC ? pack<E>::n : 1;
    const long long per_row = C / w;
    GRID_STRIDE(k, BT * per_row) {
        const long long r = k / per_row;
        const int c = (int)(k % per_row) * w;
        const int tok = tokens[r];
        const bool valid = tok >= 0 && tok < V;
        E *out = x + (size_t)r * C + c;
        const E *te = wte + (size_t)(valid ? tok : 0) * C + c;
        const E *pe = POS ? pos + (size_t)(r % T) * C + c : nullptr;
        if constexpr (VEC) {
            const pack<E> a = load_pack(te);
            pack<E> o;
            if constexpr (POS) {
                const pack<E> b = load_pack(pe);
#pragma unroll
                for (int i = 0; i < pack<E>::n; i++)
                    o.v[i] = from_f32<E>(valid ? to_f32(a.v[i]) + to_f32(b.v[i]) : NAN);
            } else {
#pragma unroll
                for (int i = 0; i < pack<E>::n; i++) o.v[i] = valid ? a.v[i] : from_f32<E>(NAN);
            }
            store_pack(out, o);
        } else if constexpr (POS) {
            out[0] = from_f32<E>(valid ? to_f32(te[0]) + to_f32(pe[0]) : NAN);
        } else {
            out[0] = valid ? te[0] : from_f32<E>(NAN);
        }
    }
}

__global__ void iota_kernel(int n, int *out) {
    GRID_STRIDE(k, n) { out[k] = (int)k; }
}

// Sorted positions per tile of the wte gradient: part of the definition
// of its rounding (a run's rows are added in tiles of this many, the
// tiles' sums then in finish_lanes' order), fixed so that results do not
// depend on the launch.
constexpr int kEmbedTile = 32;

// Block (tile, channel block): for the tile's positions [i0, i1) of the
// sorted keys, adds each token's rows of dx (rows[i], ascending) channel
// by channel. A run wholly inside the tile is added to g_wte[token] (one
// rounding); the tile's first and last segments, when their run goes on
// beyond the tile, are stored in first[tile] and last[tile] (fp32, [C]
// each; both, for a run covering the tile). Invalid tokens add nothing.
template <typename E>
__global__ void embed_wte_tiles_kernel(int BT, int C, int V, const int *keys, const int *rows,
                                       const E *dx, E *g_wte, float *first, float *last) {
    const int tile = blockIdx.x;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int i0 = tile * kEmbedTile;
    const int i1 = i0 + kEmbedTile < BT ? i0 + kEmbedTile : BT;
    float sum = 0.0f;
    int seg = i0; // where the current segment starts
    for (int i = i0; i < i1; i++) {
        const int tok = keys[i];
        sum += to_f32(dx[(size_t)rows[i] * C + c]);
        if (i + 1 < i1 && keys[i + 1] == tok) continue;
        // The segment [seg, i] ends here.
        if (tok >= 0 && tok < V) {
            const bool starts = seg == 0 || keys[seg - 1] != tok;
            const bool ends = i + 1 == BT || keys[i + 1] != tok;
            if (starts && ends) {
                E *g = g_wte + (size_t)tok * C + c;
                *g = from_f32<E>(to_f32(*g) + sum);
            } else {
                if (seg == i0) first[(size_t)tile * C + c] = sum;
                if (i + 1 == i1) last[(size_t)tile * C + c] = sum;
            }
        }
        sum = 0.0f;
        seg = i + 1;
    }
}

// Block `tile`: when a run of one valid token starts in this tile and goes
// on beyond it, adds the run's segments, last[tile], first[tile + 1], ...,
// first[t1] (t1: the tile of its last position), and rounds into g_wte
// once; every other block returns at once. The block walks the channels
// kFinishCols at a time. blockDim = (kFinishCols, kFinishLanes).
template <typename E>
__global__ void embed_wte_runs_kernel(int BT, int C, int V, const int *keys, const float *first,
                                      const float *last, E *g_wte) {
    __shared__ float shared[kFinishLanes * kFinishCols];
    const int tile = blockIdx.x;
    const int i0 = tile * kEmbedTile;
    const int i1 = i0 + kEmbedTile < BT ? i0 + kEmbedTile : BT;
    const int tok = keys[i1 - 1];
    // The same test in every thread, so the whole block returns or stays.
    const bool spans = i1 < BT && keys[i1] == tok;
    const bool starts = keys[i0] != tok || i0 == 0 || keys[i0 - 1] != tok;
    if (!spans || !starts || tok < 0 || tok >= V) return;
    // The run's end: the first sorted position past it (keys ascend).
    int lo = i1, hi = BT;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (keys[mid] == tok)
            lo = mid + 1;
        else
            hi = mid;
    }
    const int nparts = (lo - 1) / kEmbedTile - tile + 1;
    for (int c0 = 0; c0 < C; c0 += kFinishCols) {
        const int c = c0 + threadIdx.x;
        const float s = finish_lanes(
            [&](int y) {
                return y == 0 ? last[(size_t)tile * C + c] : first[(size_t)(tile + y) * C + c];
            },
            nparts, c < C, shared);
        if (threadIdx.y == 0 && c < C) {
            E *g = g_wte + (size_t)tok * C + c;
            *g = from_f32<E>(to_f32(*g) + s);
        }
    }
}

// g_pos[t][c] += sum over b (ascending) of dx[b*T + t][c], one rounding.
template <typename E>
__global__ void embed_backward_pos_kernel(int B, int T, int C, const E *dx, E *g_pos) {
    GRID_STRIDE(k, (long long)T * C) {
        float sum = 0.0f;
        for (int b = 0; b < B; b++) sum += to_f32(dx[(size_t)b * T * C + k]);
        g_pos[k] = from_f32<E>(to_f32(g_pos[k]) + sum);
    }
}

} // namespace

int embedding_forward(ctx *cx, long long BT, int T, int C, int V, const void *wte,
                      const void *pos, const int *tokens, void *x) {
    prof_scope scope(cx, PROF_ENCODER_FWD);
    if (BT <= 0) return NN_OK;
    return with_type(cx->dtype, [&](auto tag) {
        using E = decltype(tag);
        const bool vec = C % pack<E>::n == 0 && aligned16(wte) && aligned16(x) &&
                         (pos == nullptr || aligned16(pos));
        const long long work = BT * (vec ? C / pack<E>::n : C);
        const unsigned grid = grid_for(work, kThreads);
        const E *te = (const E *)wte, *pe = (const E *)pos;
        if (pos != nullptr) {
            if (vec)
                embed_forward_kernel<E, true, true><<<grid, kThreads, 0, cx->stream>>>(
                    BT, T, C, V, te, pe, tokens, (E *)x);
            else
                embed_forward_kernel<E, false, true><<<grid, kThreads, 0, cx->stream>>>(
                    BT, T, C, V, te, pe, tokens, (E *)x);
        } else {
            if (vec)
                embed_forward_kernel<E, true, false><<<grid, kThreads, 0, cx->stream>>>(
                    BT, T, C, V, te, pe, tokens, (E *)x);
            else
                embed_forward_kernel<E, false, false><<<grid, kThreads, 0, cx->stream>>>(
                    BT, T, C, V, te, pe, tokens, (E *)x);
        }
        LAUNCHED();
        return (int)NN_OK;
    });
}

int embedding_backward(ctx *cx, int BT, int C, int V, void *g_wte, const int *tokens,
                       const void *dx) {
    if (BT <= 0) return NN_OK;
    const int tiles = (BT + kEmbedTile - 1) / kEmbedTile;
    // The work area: sorted keys, row indices in and out, the tiles' first
    // and last segment sums, then CUB's storage.
    size_t cub_bytes = 0;
    CU_TRY(cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, (const int *)nullptr,
                                           (int *)nullptr, (const int *)nullptr, (int *)nullptr,
                                           BT, 0, 32, cx->stream));
    const size_t ints = round_up((size_t)BT * sizeof(int));
    const size_t segs = round_up((size_t)tiles * C * sizeof(float));
    TRY(ensure_work(cx, 3 * ints + 2 * segs + cub_bytes));
    int *keys = (int *)cx->work;
    int *rows_in = (int *)(cx->work + ints);
    int *rows = (int *)(cx->work + 2 * ints);
    float *first = (float *)(cx->work + 3 * ints);
    float *last = (float *)(cx->work + 3 * ints + segs);
    void *cub_temp = cx->work + 3 * ints + 2 * segs;
    {
        prof_scope scope(cx, PROF_ENCODER_BWD_SORT);
        iota_kernel<<<grid_for(BT, kThreads), kThreads, 0, cx->stream>>>(BT, rows_in);
        LAUNCHED();
        CU_TRY(cub::DeviceRadixSort::SortPairs(cub_temp, cub_bytes, tokens, keys, rows_in, rows,
                                               BT, 0, 32, cx->stream));
    }
    prof_scope scope(cx, PROF_ENCODER_BWD_WTE);
    return with_type(cx->dtype, [&](auto tag) {
        using E = decltype(tag);
        const dim3 grid((unsigned)tiles, blocks_for(C, kThreads));
        embed_wte_tiles_kernel<E><<<grid, kThreads, 0, cx->stream>>>(
            BT, C, V, keys, rows, (const E *)dx, (E *)g_wte, first, last);
        LAUNCHED();
        embed_wte_runs_kernel<E><<<(unsigned)tiles, dim3(kFinishCols, kFinishLanes), 0,
                                   cx->stream>>>(BT, C, V, keys, first, last, (E *)g_wte);
        LAUNCHED();
        return (int)NN_OK;
    });
}

int embedding_backward_positions(ctx *cx, int B, int T, int C, void *g_pos, const void *dx) {
    prof_scope scope(cx, prof_op(cx, "encoder_bwd_wpe"));
    return with_type(cx->dtype, [&](auto tag) {
        using E = decltype(tag);
        embed_backward_pos_kernel<E><<<grid_for((long long)T * C, kThreads), kThreads, 0,
                                       cx->stream>>>(B, T, C, (const E *)dx, (E *)g_pos);
        LAUNCHED();
        return (int)NN_OK;
    });
}

} // namespace nncuda
