/* Launchers of the CUDA kernels defined in kernels/cuda_*.cu, callable from C.
 *
 * Each enqueues one grid-stride kernel on `launch.stream` and returns the
 * launch's cudaError_t (cudaGetLastError, which also clears a non-sticky
 * error); it does not wait. Counts are elements, >= 0; pointers are device
 * pointers; dtypes are fp32, fp16 or bf16 (the caller checks). The math of
 * every element is a kernels/ headers function, the same one the CPU backend runs,
 * and nvcc builds these files with --fmad=false, so each element gets the
 * CPU's bits. */
#ifndef ZS_BACKEND_CUDA_CUDA_KERNELS_H
#define ZS_BACKEND_CUDA_CUDA_KERNELS_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels/init.h"
#include "kernels/optimizer.h"
#include "zeroshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where and how wide to launch: grids are capped at max_blocks blocks (a
 * multiple of the device's SM count), the loops stride over the rest. */
typedef struct zs__cuda_launch {
    cudaStream_t stream;
    int max_blocks;
} zs__cuda_launch;

/* The sum-of-squares order, shared with the CPU backend (cpu_reduce.c and
 * cpu_kernels_impl.h): blocks of ZS_CUDA_NORM_BLOCK elements, each summed in
 * ZS_CUDA_NORM_LANES lanes (element i goes to lane i mod LANES, in increasing
 * i) combined by a fixed pairwise tree; the host adds the block partials in
 * block order. tests/cuda checks the two backends agree bit for bit. */
#define ZS_CUDA_NORM_BLOCK 4096
#define ZS_CUDA_NORM_LANES 8

/* dst[i] = src[i] converted (kernels/convert.h); dst_dtype != src_dtype. */
cudaError_t zs__cuda_launch_convert(zs__cuda_launch launch, void *dst, zs_dtype dst_dtype,
                                    const void *src, zs_dtype src_dtype, int64_t count);

/* dst[i] = round(float(dst[i]) + float(src[i])); dst and src may be the same
 * array, never partially overlapping. */
cudaError_t zs__cuda_launch_accumulate(zs__cuda_launch launch, void *dst, zs_dtype dst_dtype,
                                       const void *src, zs_dtype src_dtype, int64_t count);

/* partials[b] = the sum of squares of block first_block + b of x[0..count),
 * for b < blocks (the blocks must lie inside x, the last may be short). */
cudaError_t zs__cuda_launch_sum_squares(zs__cuda_launch launch, double *partials,
                                        const void *x, zs_dtype dtype, int64_t count,
                                        int64_t first_block, int64_t blocks);

/* The fused optimizer pass of backend.h's zs__update_args, unpacked so this
 * header needs nothing from src/backend. param may be NULL; m and v as there. */
cudaError_t zs__cuda_launch_update(zs__cuda_launch launch, zs_k_optim_kind kind, float *master,
                                   void *param, zs_dtype param_dtype, const void *grad,
                                   zs_dtype grad_dtype, float *m, float *v, int64_t count,
                                   zs_k_optim_scalars scalars);

/* dst[j] = zs_k_init_value(kind, a, b, key, first + j) as fp32, j < count. */
cudaError_t zs__cuda_launch_init_fill(zs__cuda_launch launch, float *dst, int64_t first,
                                      int64_t count, zs_k_init_kind kind, double a, double b,
                                      uint64_t key);

#ifdef __cplusplus
}
#endif
#endif
