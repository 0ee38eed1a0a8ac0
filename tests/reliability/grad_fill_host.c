/* grad_fill.h in builds without CUDA: only host gradients exist. */
#include <string.h>

#include "grad_fill.h"

zs_status grad_fill_add(zs_ctx *zs, float *grad, int64_t numel, float value) {
    if (strcmp(zs_backend_name(zs), "cpu") != 0) return ZS_ERR_UNSUPPORTED;
    for (int64_t i = 0; i < numel; i++) grad[i] += value;
    return ZS_OK;
}
