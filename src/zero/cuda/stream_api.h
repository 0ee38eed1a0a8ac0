/* Internals of the CUDA side of a context (stream_api.c) that tests use but
 * programs do not: kept out of the public zeroshard_cuda.h. Compiled only in
 * CUDA builds. */
#ifndef ZS_ZERO_CUDA_STREAM_API_H
#define ZS_ZERO_CUDA_STREAM_API_H

#include <stdint.h>

#include "zeroshard.h"

/* Times the context's CUDA backend has blocked the host so far (its
 * wait_event calls: zs__cuda_backend_waits); 0 for a context whose backend
 * is not "cuda". The difference across a call is that call's host
 * synchronizations: zs_step without offload has one per optimizer step. */
uint64_t zs__cuda_blocking_waits(const zs_ctx *zs);

#endif
