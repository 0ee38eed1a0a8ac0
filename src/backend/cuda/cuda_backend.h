/* The CUDA backend (cuda_backend.c): device memory, a compute stream, and the
 * kernels of kernels/cuda_*.cu. Compiled only in CUDA builds. */
#ifndef ZS_BACKEND_CUDA_CUDA_BACKEND_H
#define ZS_BACKEND_CUDA_CUDA_BACKEND_H

#include "backend/backend.h"

/* The CUDA device ordinal `be` runs on; -1 when `be` is not the CUDA backend.
 * (zs_cuda_device in zeroshard_cuda.h.) */
int zs__cuda_backend_device(const zs__backend *be);

#endif
