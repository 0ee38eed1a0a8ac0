/* CUDA sum of squares in the CPU backend's order (cpu_reduce.c,
 * cpu_kernels_impl.h), so norms and overflow checks are the same doubles on
 * both backends and do not depend on the launch shape.
 *
 * Work item t handles lane t % LANES of block t / LANES: it adds x[i]^2 in
 * double for the block's elements i = lane, lane + LANES, ... in increasing
 * i, as the CPU's lane loop does (squares of fp32 values are exact in
 * double, and --fmad=false keeps each square and sum separately rounded).
 * The LANES items of a block are consecutive threads of one warp; the
 * shuffles below combine them in the CPU's tree
 * ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). The host adds the block
 * partials in block order. */
#include "backend/cuda/cuda_elem.cuh"
#include "backend/cuda/cuda_kernels.h"

static_assert(ZS_CUDA_NORM_LANES == 8, "the shuffle tree below is written for 8 lanes");
static_assert(32 % ZS_CUDA_NORM_LANES == 0 && ZS_CUDA_THREADS % 32 == 0,
              "the lanes of one block must lie in one warp");

template <int D>
__global__ void zs__cuda_sum_squares_kernel(double *partials, const void *x, int64_t count,
                                            int64_t first_block, int64_t blocks) {
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

extern "C" cudaError_t zs__cuda_launch_sum_squares(zs__cuda_launch launch, double *partials,
                                                   const void *x, zs_dtype dtype, int64_t count,
                                                   int64_t first_block, int64_t blocks) {
    if (blocks <= 0) return cudaSuccess;
    const unsigned grid = zs__cuda_blocks(blocks * ZS_CUDA_NORM_LANES, launch.max_blocks);
    return zs__cuda_with_dtype(dtype, [&](auto d) {
        zs__cuda_sum_squares_kernel<decltype(d)::value>
            <<<grid, ZS_CUDA_THREADS, 0, launch.stream>>>(partials, x, count, first_block,
                                                          blocks);
        return cudaGetLastError();
    });
}
