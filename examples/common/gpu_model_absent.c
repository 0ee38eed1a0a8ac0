/* ex_gpu_model in builds without CUDA: there is no GPU to name. */
#include <stdio.h>

#include "numerics.h"

void ex_gpu_model(const zs_ctx *zs, char *out, int capacity) {
    (void)zs;
    snprintf(out, (size_t)capacity, "%s", "");
}
