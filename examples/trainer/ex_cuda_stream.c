/* The compute stream of a zeroshard context on the CUDA backend, for a
 * model's CUDA backend (built only with CUDA: zeroshard_cuda.h needs the
 * CUDA headers; ex_cuda_stream_absent.c stands in otherwise). */
#include "ex_cuda_stream.h"

#include "zeroshard_cuda.h"

void *ex_cuda_stream(const zs_ctx *zs) { return (void *)zs_cuda_stream(zs); }
