/* The one CUDA-specific call of the trainer, behind a plain C header so that
 * gpt2_train.c needs no CUDA headers and no #ifdef. */
#ifndef GPT2_TRAIN_CUDA_H
#define GPT2_TRAIN_CUDA_H

#include "zeroshard.h"

/* zs_cuda_stream(zs) as a void * (a cudaStream_t), or NULL. */
void *gpt2_train_cuda_stream(const zs_ctx *zs);

#endif
