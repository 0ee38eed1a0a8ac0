// The token and position embeddings on CUDA.
//
// Forward: x[r] = wte[tokens[r]] + wpe[r % T], in 16-byte packs where the
// rows allow. A token outside [0, V) makes its row NaN (the CPU backend
// refuses it; here checking would cost a device-to-host wait), so the loss
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
// all n rows in turn (16384 for a batch of one repeated token). wpe's
// gradient adds the B rows of each position in order.
#include <cub/device/device_radix_sort.cuh>

#include "gpt2_cuda_common.cuh"

namespace gpt2cuda {

namespace {

template <typename E, bool VEC>
__global__ void embed_forward_kernel(long long BT, int T, int C, int V, const E *wte,
                                     const E *wpe, const int *tokens, E *x) {
    const int w = VEC ? pack<E>::n : 1;
    const long long per_row = C / w;
    GRID_STRIDE(k, BT * per_row) {
        const long long r = k / per_row;
        const int c = (int)(k % per_row) * w;
        const int tok = tokens[r];
        const bool valid = tok >= 0 && tok < V;
        E *out = x + (size_t)r * C + c;
        const E *te = wte + (size_t)(valid ? tok : 0) * C + c;
        const E *pe = wpe + (size_t)(r % T) * C + c;
        if constexpr (VEC) {
            const pack<E> a = load_pack(te), b = load_pack(pe);
            pack<E> o;
#pragma unroll
            for (int i = 0; i < pack<E>::n; i++)
                o.v[i] = from_f32<E>(valid ? to_f32(a.v[i]) + to_f32(b.v[i]) : NAN);
            store_pack(out, o);
        } else {
            out[0] = from_f32<E>(valid ? to_f32(te[0]) + to_f32(pe[0]) : NAN);
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

// g_wpe[t][c] += sum over b (ascending) of dx[b*T + t][c], one rounding.
template <typename E>
__global__ void embed_backward_wpe_kernel(int B, int T, int C, const E *dx, E *g_wpe) {
    GRID_STRIDE(k, (long long)T * C) {
        float sum = 0.0f;
        for (int b = 0; b < B; b++) sum += to_f32(dx[(size_t)b * T * C + k]);
        g_wpe[k] = from_f32<E>(to_f32(g_wpe[k]) + sum);
    }
}

} // namespace

int encoder_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T, const gpt2_embed_w *w,
                    const int *tokens, void *x) {
    cuda_impl *ci = impl_of(be);
    prof_scope scope(be, PROF_ENCODER_FWD);
    const long long BT = (long long)B * T;
    const int C = d->n_embd;
    return with_type(ci->dtype, [&](auto tag) {
        using E = decltype(tag);
        const bool vec = C % pack<E>::n == 0 && aligned16(w->wte) && aligned16(w->wpe) &&
                         aligned16(x);
        const long long work = BT * (vec ? C / pack<E>::n : C);
        if (vec)
            embed_forward_kernel<E, true><<<grid_for(work, kThreads), kThreads, 0, ci->stream>>>(
                BT, T, C, d->vocab, (const E *)w->wte, (const E *)w->wpe, tokens, (E *)x);
        else
            embed_forward_kernel<E, false><<<grid_for(work, kThreads), kThreads, 0, ci->stream>>>(
                BT, T, C, d->vocab, (const E *)w->wte, (const E *)w->wpe, tokens, (E *)x);
        LAUNCHED();
        return (int)GPT2_OK;
    });
}

int encoder_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T, gpt2_embed_w *g,
                     const int *tokens, const void *dx) {
    cuda_impl *ci = impl_of(be);
    const int BT = B * T, C = d->n_embd;
    const int tiles = (BT + kEmbedTile - 1) / kEmbedTile;
    // The work area: sorted keys, row indices in and out, the tiles' first
    // and last segment sums, then CUB's storage.
    size_t cub_bytes = 0;
    CU_TRY(cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, (const int *)nullptr,
                                           (int *)nullptr, (const int *)nullptr, (int *)nullptr,
                                           BT, 0, 32, ci->stream));
    const size_t ints = round_up((size_t)BT * sizeof(int));
    const size_t segs = round_up((size_t)tiles * C * sizeof(float));
    TRY(ensure_work(be, 3 * ints + 2 * segs + cub_bytes));
    int *keys = (int *)ci->work;
    int *rows_in = (int *)(ci->work + ints);
    int *rows = (int *)(ci->work + 2 * ints);
    float *first = (float *)(ci->work + 3 * ints);
    float *last = (float *)(ci->work + 3 * ints + segs);
    void *cub_temp = ci->work + 3 * ints + 2 * segs;
    {
        prof_scope scope(be, PROF_ENCODER_BWD_SORT);
        iota_kernel<<<grid_for(BT, kThreads), kThreads, 0, ci->stream>>>(BT, rows_in);
        LAUNCHED();
        CU_TRY(cub::DeviceRadixSort::SortPairs(cub_temp, cub_bytes, tokens, keys, rows_in, rows,
                                               BT, 0, 32, ci->stream));
    }
    return with_type(ci->dtype, [&](auto tag) {
        using E = decltype(tag);
        {
            prof_scope scope(be, PROF_ENCODER_BWD_WTE);
            const dim3 grid((unsigned)tiles, blocks_for(C, kThreads));
            embed_wte_tiles_kernel<E><<<grid, kThreads, 0, ci->stream>>>(
                BT, C, d->vocab, keys, rows, (const E *)dx, (E *)g->wte, first, last);
            LAUNCHED();
            embed_wte_runs_kernel<E><<<(unsigned)tiles, dim3(kFinishCols, kFinishLanes), 0,
                                       ci->stream>>>(BT, C, d->vocab, keys, first, last,
                                                     (E *)g->wte);
            LAUNCHED();
        }
        prof_scope scope(be, PROF_ENCODER_BWD_WPE);
        embed_backward_wpe_kernel<E><<<grid_for((long long)T * C, kThreads), kThreads, 0,
                                       ci->stream>>>(B, T, C, (const E *)dx, (E *)g->wpe);
        LAUNCHED();
        return (int)GPT2_OK;
    });
}

} // namespace gpt2cuda
