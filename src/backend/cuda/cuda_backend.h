/* The CUDA backend (cuda_backend.c): device memory, a compute stream, and the
 * kernels of kernels/cuda_*.cu. Compiled only in CUDA builds. */
#ifndef ZS_BACKEND_CUDA_CUDA_BACKEND_H
#define ZS_BACKEND_CUDA_CUDA_BACKEND_H

#include <stdint.h>

#include "backend/backend.h"

/* The CUDA device ordinal `be` runs on; -1 when `be` is not the CUDA backend.
 * (zs_cuda_device in zeroshard_cuda.h.) */
int zs__cuda_backend_device(const zs__backend *be);

/* Blocking waits of `be` so far: every time it held the host until its
 * compute stream (or one of its events) reached a point, whatever the op
 * (sum_squares_many, download, upload, synchronize, host-tier ops). 0 when
 * `be` is not the CUDA backend. Lets tests count a step's synchronizations. */
uint64_t zs__cuda_backend_waits(const zs__backend *be);

#endif
