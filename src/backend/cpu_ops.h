/* The CPU backend's kernel operations (the drivers: argument checks, OpenMP
 * over contiguous ranges, dispatch to the kernels of the active instruction-set
 * level in cpu_isa.h). cpu.c puts them in the backend's ops table. */
#ifndef ZS_BACKEND_CPU_OPS_H
#define ZS_BACKEND_CPU_OPS_H

#include "backend/backend.h"
#include "backend/cpu_isa.h"

/* Below this many elements a parallel region costs more than it saves. */
#define ZS_CPU_PARALLEL_MIN 65536

/* The OpenMP loops hand out ranges of this many elements (static schedule, so
 * each thread streams through one contiguous part of the arrays). */
#define ZS_CPU_TASK 32768

zs_status zs__cpu_convert(zs__backend *be, void *dst, zs_dtype dst_dtype, const void *src,
                          zs_dtype src_dtype, int64_t count);
zs_status zs__cpu_accumulate(zs__backend *be, void *dst, zs_dtype dst_dtype, const void *src,
                             zs_dtype src_dtype, int64_t count);
zs_status zs__cpu_sum_squares(zs__backend *be, const void *x, zs_dtype dtype, int64_t count,
                              double *out);
zs_status zs__cpu_sum_squares_many(zs__backend *be, int n, const void *const *ptrs,
                                   const zs_dtype *dtypes, const int64_t *counts, double *out);
zs_status zs__cpu_optimizer_update(zs__backend *be, const zs__update_args *args);
zs_status zs__cpu_quantize(zs__backend *be, void *q, float *scales, const void *src,
                           zs_dtype src_dtype, int64_t count, int64_t block, int bits);
zs_status zs__cpu_dequantize(zs__backend *be, void *dst, zs_dtype dst_dtype, int accumulate,
                             const void *q, const float *scales, int64_t count, int64_t block,
                             int bits);
zs_status zs__cpu_init_fill(zs__backend *be, void *dst, zs_dtype dtype, int64_t first,
                            int64_t count, zs_k_init_kind kind, double a, double b, uint64_t key);
/* The CPU kernels above ignore `be` (the zero layer's host backend, a CPU
 * backend of its own, runs them on offloaded state). */

/* The argument checks of quantize and dequantize, shared with the CUDA
 * backend: dtype fp32, fp16 or bf16, count >= 0, block >= 1, bits 8 or 4,
 * no NULL pointer when count > 0. `backend` and `what` name them in the
 * message. */
zs_status zs__quant_check(const char *backend, const char *what, const void *q,
                          const void *scales, const void *data, zs_dtype dtype, int64_t count,
                          int64_t block, int bits);

/* 1 for fp32, fp16 and bf16. */
int zs__cpu_dtype_valid(zs_dtype dtype);

/* Runs an element-wise kernel over [0, count) split into tasks across the
 * OpenMP threads; element-wise work gives the same bits whatever the split. */
void zs__cpu_elementwise(zs__cpu_elementwise_fn kernel, void *dst, zs_dtype dst_dtype,
                         const void *src, zs_dtype src_dtype, int64_t count);

#endif
