/* What decides the examples' bits, said once and compared across ranks:
 * the BLAS kernel on the cpu backend (each OpenBLAS core type sums in its
 * own way), the GPU model on cuda (cuBLAS picks its kernels by model), the
 * runtime's SIMD level and the threading. docs/MULTIHOST.md says which
 * environment variables must travel with mpirun -x so that every host picks
 * the same. */
#ifndef EX_NUMERICS_H
#define EX_NUMERICS_H

#include "zeroshard.h"

/* Collective. Rank 0 prints "numerics: ..." to stdout; the ranks compare
 * their kernel (zs_agree_kernels): a difference is a warning naming the
 * ranks and kernels, or with `require` (app.require_same_kernels) an error
 * on every rank, returned. */
zs_status ex_numerics_check(zs_ctx *zs, int require);

/* The name of this rank's GPU ("NVIDIA H100 80GB HBM3"); "" without CUDA.
 * gpu_model_cuda.c / gpu_model_absent.c. */
void ex_gpu_model(const zs_ctx *zs, char *out, int capacity);

#endif
