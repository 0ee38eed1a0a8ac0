/* The one CUDA-specific call of the trainer and the models' families,
 * behind a plain C header so that they need no CUDA headers and no #ifdef. */
#ifndef EX_CUDA_STREAM_H
#define EX_CUDA_STREAM_H

#include "zeroshard.h"

/* zs_cuda_stream(zs) as a void * (a cudaStream_t), or NULL. */
void *ex_cuda_stream(const zs_ctx *zs);

#endif
