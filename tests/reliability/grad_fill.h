/* Adding a constant to a gradient wherever the context keeps it: host memory
 * on the cpu backend, device memory on cuda (grad_fill_cuda.c, built with
 * CUDA; grad_fill_host.c otherwise, which refuses device contexts). */
#ifndef ZS_TESTS_GRAD_FILL_H
#define ZS_TESTS_GRAD_FILL_H

#include <stdint.h>

#include "zeroshard.h"

/* grad[i] += value for i < numel; ZS_OK or a status with zs_last_error's
 * message unchanged (the caller reports). Ordered like a backward kernel. */
zs_status grad_fill_add(zs_ctx *zs, float *grad, int64_t numel, float value);

#endif
