/* Launchers of the CUDA kernels defined in kernels/cuda_*.cu, callable from C
 * (the CUDA backend in src/backend/cuda, and bench/optimizer). This header
 * belongs to the lowest layer: it includes only kernels/ headers, the public
 * zeroshard.h and the CUDA runtime, never src/.
 *
 * Each launcher enqueues its kernels on `launch.stream` and returns the
 * launch's cudaError_t (cudaGetLastError, which also clears a non-sticky
 * error); it does not wait. Counts are elements, >= 0; pointers are device
 * pointers; dtypes are fp32, fp16 or bf16 (the caller checks). The math of
 * every element is a kernels/ headers function, the same one the CPU backend
 * runs, and nvcc builds these files with --fmad=false, so each element gets
 * the CPU's bits.
 *
 * Alignment: the element-wise kernels (convert, accumulate, update) read and
 * write 16 bytes at a time (8 elements: one access per 16-bit array, two per
 * fp32 array) wherever every pointer of the call can be 16-byte aligned by
 * the same number of leading elements; those leading elements, the tail
 * after the last whole vector, and calls whose pointers cannot be aligned
 * together run one element per thread. Any alignment is accepted, and the
 * bits never depend on which path an element took. */
#ifndef ZS_KERNELS_CUDA_LAUNCH_H
#define ZS_KERNELS_CUDA_LAUNCH_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels/init.h"
#include "kernels/optimizer.h"
#include "zeroshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where and how wide to launch: grids are capped at max_blocks blocks (a
 * multiple of the device's SM count, ZS_CUDA_BLOCKS_PER_SM per SM), the
 * loops stride over the rest. */
typedef struct zs__cuda_launch {
    cudaStream_t stream;
    int max_blocks;
} zs__cuda_launch;

/* Grids are capped at this many blocks of ZS_CUDA_THREADS per SM: 8 x 256 =
 * 2048 threads, the most an SM of compute capability 8.0 or 9.0 keeps
 * resident, so a capped grid is one wave and grid-stride loops do the rest.
 * The CUDA backend and the benchmark size their launches with it. */
#define ZS_CUDA_BLOCKS_PER_SM 8

/* The sum-of-squares order, shared with the CPU backend (cpu_reduce.c and
 * cpu_kernels_impl.h): blocks of ZS_CUDA_NORM_BLOCK elements, each summed in
 * ZS_CUDA_NORM_LANES lanes (element i goes to lane i mod LANES, in increasing
 * i) combined by a fixed pairwise tree; the block partials are added in
 * block order, starting from 0.0 (on the host, or on the device by
 * zs__cuda_launch_sum_squares_fold). tests/cuda checks the two backends
 * agree bit for bit. */
#define ZS_CUDA_NORM_BLOCK 4096
#define ZS_CUDA_NORM_LANES 8

/* Segments one fold launch takes (they travel as the kernel's argument,
 * ZS_CUDA_FOLD_MAX x 24 bytes, well inside the 4 KiB every device accepts). */
#define ZS_CUDA_FOLD_MAX 64

/* dst[i] = src[i] converted (kernels/convert.h); dst_dtype != src_dtype. */
cudaError_t zs__cuda_launch_convert(zs__cuda_launch launch, void *dst, zs_dtype dst_dtype,
                                    const void *src, zs_dtype src_dtype, int64_t count);

/* dst[i] = round(float(dst[i]) + float(src[i])); dst and src may be the same
 * array, never partially overlapping. */
cudaError_t zs__cuda_launch_accumulate(zs__cuda_launch launch, void *dst, zs_dtype dst_dtype,
                                       const void *src, zs_dtype src_dtype, int64_t count);

/* partials[b] = the sum of squares of block first_block + b of x[0..count),
 * for b < blocks (the blocks must lie inside x, the last may be short). With
 * x 16-byte aligned the elements are read 16 bytes at a time, each load
 * holding consecutive lanes of one row of LANES elements, so every lane
 * still adds its elements in increasing order: the value is the same either
 * way. */
cudaError_t zs__cuda_launch_sum_squares(zs__cuda_launch launch, double *partials,
                                        const void *x, zs_dtype dtype, int64_t count,
                                        int64_t first_block, int64_t blocks);

/* One run of consecutive block partials of one array: totals[slot] =
 * (cont ? totals[slot] : 0.0) + partials[first] + ... + partials[first +
 * blocks - 1], added one at a time in that order (the host's order, so an
 * array whose partials span several runs, folded in order, gets the
 * host's double). */
typedef struct zs__cuda_fold_segment {
    int64_t first;  /* index of the run's first partial */
    int64_t blocks; /* partials in the run, >= 0 */
    int32_t slot;   /* index into totals */
    int32_t cont;   /* 1: continue the slot's running total; 0: start from 0.0 */
} zs__cuda_fold_segment;

typedef struct zs__cuda_fold {
    int count; /* segments, 0..ZS_CUDA_FOLD_MAX; no two with the same slot */
    zs__cuda_fold_segment seg[ZS_CUDA_FOLD_MAX];
} zs__cuda_fold;

/* Folds every segment of `fold` (one device thread each, in parallel: their
 * slots differ). The struct is copied into the launch, so the caller may
 * reuse it as soon as this returns. */
cudaError_t zs__cuda_launch_sum_squares_fold(zs__cuda_launch launch, double *totals,
                                             const double *partials, const zs__cuda_fold *fold);

/* The fused optimizer pass of backend.h's zs__update_args, unpacked so this
 * header needs nothing from src/backend. param may be NULL; m and v as there. */
cudaError_t zs__cuda_launch_update(zs__cuda_launch launch, zs_k_optim_kind kind, float *master,
                                   void *param, zs_dtype param_dtype, const void *grad,
                                   zs_dtype grad_dtype, float *m, float *v, int64_t count,
                                   zs_k_optim_scalars scalars);

/* Block quantization (kernels/quantize.h; backend.h's quantize op says what
 * each argument holds): scales[b] for every block of `block` (>= 1)
 * elements of src[0..count), then the integers into q (bits 8: a byte
 * each; 4: two per byte, low nibble first). Two kernels: the scales (one
 * warp per block, or one 256-thread block per block of 2048 elements and
 * more), then 8 elements per thread. q any alignment, scales 4-byte
 * aligned; cudaErrorInvalidValue for a bad block or bits. */
cudaError_t zs__cuda_launch_quantize(zs__cuda_launch launch, void *q, float *scales,
                                     const void *src, zs_dtype src_dtype, int64_t count,
                                     int64_t block, int bits);

/* dst[i] = (float)q[i] * scales[i / block] as dst_dtype, or (accumulate !=
 * 0) added to dst[i] in fp32 and rounded once; every NaN written is
 * 0x7fc00000 (zs_k_quant_nan_fixed). 8 elements per thread. */
cudaError_t zs__cuda_launch_dequantize(zs__cuda_launch launch, void *dst, zs_dtype dst_dtype,
                                       int accumulate, const void *q, const float *scales,
                                       int64_t count, int64_t block, int bits);

/* dst[j] = zs_k_init_value(kind, a, b, key, first + j) as fp32, j < count. */
cudaError_t zs__cuda_launch_init_fill(zs__cuda_launch launch, float *dst, int64_t first,
                                      int64_t count, zs_k_init_kind kind, double a, double b,
                                      uint64_t key);

#ifdef __cplusplus
}
#endif
#endif
