/* CUDA sum of squares in the CPU backend's order (cpu_reduce.c,
 * cpu_kernels_impl.h), so norms and overflow checks are the same doubles on
 * both backends and do not depend on the launch shape.
 *
 * The order: element i of a block of ZS_CUDA_NORM_BLOCK goes to lane
 * i % LANES, each lane adds x[i]^2 in double for its elements in increasing
 * i (squares of fp32 values are exact in double, and --fmad=false keeps
 * each square and sum separately rounded), and the lanes are combined in
 * the CPU's tree ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). The
 * block partials are then added in block order, on the host or by the fold
 * kernel below.
 *
 * Two kernels keep that order:
 *   - the vector kernel (x 16-byte aligned): a block is read as rows of
 *     LANES consecutive elements, one 16-byte load per item and row. An fp32
 *     row is 32 bytes, so two items share a block, the first owning lanes
 *     0-3 and the second lanes 4-7; a 16-bit row is 16 bytes, so one item
 *     owns all 8 lanes. Each item keeps one running sum per lane it owns and
 *     walks the rows in increasing order, so every lane sees its elements in
 *     the same order as the CPU; a short last row is read one element at a
 *     time.
 *   - the scalar kernel (any alignment): work item t is lane t % LANES of
 *     block t / LANES and loads one element at a time.
 * In both, the items of a block are consecutive threads of one warp and
 * combine their lanes with the same tree (in registers, then shuffles). */
#include "kernels/cuda_elem.cuh"
#include "kernels/cuda_launch.h"

static_assert(ZS_CUDA_NORM_LANES == 8, "the trees below are written for 8 lanes");
static_assert(ZS_CUDA_NORM_BLOCK % ZS_CUDA_NORM_LANES == 0, "blocks hold whole rows");
static_assert(32 % ZS_CUDA_NORM_LANES == 0 && ZS_CUDA_THREADS % 32 == 0,
              "the lanes of one block must lie in one warp");

/* Rows an item loads before it adds them (in row order): enough 16-byte
 * loads in flight per thread to cover the memory latency. */
#define ZS_CUDA_NORM_UNROLL 8

template <int D>
__global__ void __launch_bounds__(ZS_CUDA_THREADS, ZS_CUDA_ONE_WAVE)
zs__cuda_sum_squares_kernel(double *partials, const void *x, int64_t count, int64_t first_block,
                            int64_t blocks) {
    /* Whole warps iterate together (items are padded to a multiple of 32 and
     * the stride is a multiple of 32), so every shuffle has all 32 lanes. */
    const int64_t items = (blocks * ZS_CUDA_NORM_LANES + 31) / 32 * 32;
    for (int64_t t = zs__cuda_first(); t < items; t += zs__cuda_stride()) {
        const int64_t b = t / ZS_CUDA_NORM_LANES;
        const int lane = (int)(t % ZS_CUDA_NORM_LANES);
        double sum = 0.0;
        if (b < blocks) {
            const int64_t begin = (first_block + b) * ZS_CUDA_NORM_BLOCK;
            const int64_t end =
                count - begin < ZS_CUDA_NORM_BLOCK ? count : begin + ZS_CUDA_NORM_BLOCK;
            for (int64_t i = begin + lane; i < end; i += ZS_CUDA_NORM_LANES) {
                const double v = (double)zs__cuda_load<D>(x, i);
                sum += v * v;
            }
        }
        /* Pairs, then pairs of pairs, then the two halves; the lower lane
         * is always the left operand, as in the CPU's expression. */
        sum = sum + __shfl_down_sync(0xffffffffu, sum, 1);
        sum = sum + __shfl_down_sync(0xffffffffu, sum, 2);
        sum = sum + __shfl_down_sync(0xffffffffu, sum, 4);
        if (lane == 0 && b < blocks) partials[b] = sum;
    }
}

/* Items per block in the vector kernel, and lanes per item. */
template <int D>
struct zs__cuda_norm_shape {
    static constexpr int items = D == ZS_DTYPE_FP32 ? 2 : 1;
    static constexpr int lanes = ZS_CUDA_NORM_LANES / items;
};

/* lane[l] += square of element l of a raw 16-byte load, in double. */
template <int D>
__device__ __forceinline__ void zs__cuda_norm_add(double *lane, const uint4 &q) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
    if constexpr (D == ZS_DTYPE_FP32) {
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const double v = (double)__uint_as_float(w[l]);
            lane[l] += v * v;
        }
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const double lo = (double)zs__cuda_widen<D>(zs__cuda_lo(w[k]));
            lane[2 * k] += lo * lo;
            const double hi = (double)zs__cuda_widen<D>(zs__cuda_hi(w[k]));
            lane[2 * k + 1] += hi * hi;
        }
    }
}

template <int D>
__global__ void __launch_bounds__(ZS_CUDA_THREADS, ZS_CUDA_TWO_WAVES)
zs__cuda_sum_squares_vec_kernel(double *partials, const void *x, int64_t count,
                                int64_t first_block, int64_t blocks) {
    using shape = zs__cuda_norm_shape<D>;
    constexpr int ITEMS = shape::items, OWN = shape::lanes;
    constexpr int64_t ELEM = D == ZS_DTYPE_FP32 ? 4 : 2;
    const unsigned char *bytes = static_cast<const unsigned char *>(x);
    /* Padded to whole warps, as in the scalar kernel, for the shuffle. */
    const int64_t items = (blocks * ITEMS + 31) / 32 * 32;
    for (int64_t t = zs__cuda_first(); t < items; t += zs__cuda_stride()) {
        const int64_t b = t / ITEMS;
        const int part = (int)(t % ITEMS); /* owns lanes part * OWN .. part * OWN + OWN - 1 */
        double lane[OWN];
#pragma unroll
        for (int l = 0; l < OWN; l++) lane[l] = 0.0;
        if (b < blocks) {
            const int64_t begin = (first_block + b) * ZS_CUDA_NORM_BLOCK;
            const int64_t n = count - begin < ZS_CUDA_NORM_BLOCK ? count - begin
                                                                 : ZS_CUDA_NORM_BLOCK;
            const int64_t rows = n / ZS_CUDA_NORM_LANES; /* whole rows */
            /* Row r of this item: 16 bytes at element begin + r * LANES + part * OWN. */
            const uint4 *row0 = reinterpret_cast<const uint4 *>(
                bytes + (begin + (int64_t)part * OWN) * ELEM);
            constexpr int64_t ROW_STRIDE = ZS_CUDA_NORM_LANES * ELEM / 16; /* in uint4 */
            int64_t r = 0;
            for (; r + ZS_CUDA_NORM_UNROLL <= rows; r += ZS_CUDA_NORM_UNROLL) {
                uint4 q[ZS_CUDA_NORM_UNROLL];
#pragma unroll
                for (int u = 0; u < ZS_CUDA_NORM_UNROLL; u++) q[u] = row0[(r + u) * ROW_STRIDE];
#pragma unroll
                for (int u = 0; u < ZS_CUDA_NORM_UNROLL; u++) zs__cuda_norm_add<D>(lane, q[u]);
            }
            for (; r < rows; r++) zs__cuda_norm_add<D>(lane, row0[r * ROW_STRIDE]);
            /* The short last row: its first n % LANES elements, one at a time. */
            const int64_t last = begin + rows * ZS_CUDA_NORM_LANES;
#pragma unroll
            for (int l = 0; l < OWN; l++) {
                const int64_t i = last + (int64_t)part * OWN + l;
                if (i < begin + n) {
                    const double v = (double)zs__cuda_load<D>(x, i);
                    lane[l] += v * v;
                }
            }
        }
        double sum;
        if constexpr (OWN == 8) {
            sum = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                  ((lane[4] + lane[5]) + (lane[6] + lane[7]));
        } else {
            /* Lanes 0-3 here, 4-7 in the next thread: the tree's two halves. */
            sum = (lane[0] + lane[1]) + (lane[2] + lane[3]);
            sum = sum + __shfl_down_sync(0xffffffffu, sum, 1);
        }
        if (part == 0 && b < blocks) partials[b] = sum;
    }
}

extern "C" cudaError_t zs__cuda_launch_sum_squares(zs__cuda_launch launch, double *partials,
                                                   const void *x, zs_dtype dtype, int64_t count,
                                                   int64_t first_block, int64_t blocks) {
    if (blocks <= 0) return cudaSuccess;
    const bool vec = (uintptr_t)x % ZS_CUDA_VEC_BYTES == 0;
    return zs__cuda_with_dtype(dtype, [&](auto d) {
        constexpr int D = decltype(d)::value;
        if (vec) {
            const unsigned grid =
                zs__cuda_blocks(blocks * zs__cuda_norm_shape<D>::items, launch.max_blocks);
            zs__cuda_sum_squares_vec_kernel<D><<<grid, ZS_CUDA_THREADS, 0, launch.stream>>>(
                partials, x, count, first_block, blocks);
        } else {
            const unsigned grid = zs__cuda_blocks(blocks * ZS_CUDA_NORM_LANES, launch.max_blocks);
            zs__cuda_sum_squares_kernel<D><<<grid, ZS_CUDA_THREADS, 0, launch.stream>>>(
                partials, x, count, first_block, blocks);
        }
        return cudaGetLastError();
    });
}

/* One thread per segment, adding its partials one at a time in index
 * order: the host's loop, in double, so the result is the host's bits. */
__global__ void zs__cuda_sum_squares_fold_kernel(double *totals, const double *partials,
                                                 zs__cuda_fold fold) {
    const int s = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (s >= fold.count) return;
    const zs__cuda_fold_segment seg = fold.seg[s];
    double total = seg.cont ? totals[seg.slot] : 0.0;
    /* Unrolled so that several loads are in flight; the additions stay
     * one after the other, in index order. */
#pragma unroll 8
    for (int64_t b = 0; b < seg.blocks; b++) total += partials[seg.first + b];
    totals[seg.slot] = total;
}

extern "C" cudaError_t zs__cuda_launch_sum_squares_fold(zs__cuda_launch launch, double *totals,
                                                        const double *partials,
                                                        const zs__cuda_fold *fold) {
    if (fold->count <= 0) return cudaSuccess;
    if (fold->count > ZS_CUDA_FOLD_MAX) return cudaErrorInvalidValue;
    zs__cuda_sum_squares_fold_kernel<<<1, ZS_CUDA_FOLD_MAX, 0, launch.stream>>>(totals, partials,
                                                                                *fold);
    return cudaGetLastError();
}
