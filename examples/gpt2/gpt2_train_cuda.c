/* The compute stream of a zeroshard context on the CUDA backend, for the
 * model's CUDA backend (built only with CUDA: zeroshard_cuda.h needs the CUDA
 * headers; gpt2_train_cuda_absent.c stands in otherwise). */
#include "gpt2_train_cuda.h"

#include "zeroshard_cuda.h"

void *gpt2_train_cuda_stream(const zs_ctx *zs) { return (void *)zs_cuda_stream(zs); }
