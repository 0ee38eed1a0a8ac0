/* ex_gpu_model in CUDA builds. */
#include <cuda_runtime_api.h>
#include <stdio.h>

#include "numerics.h"
#include "zeroshard_cuda.h"

void ex_gpu_model(const zs_ctx *zs, char *out, int capacity) {
    struct cudaDeviceProp prop;
    const int device = zs_cuda_device(zs);
    if (device < 0 || cudaGetDeviceProperties(&prop, device) != cudaSuccess)
        snprintf(out, (size_t)capacity, "%s", "");
    else
        snprintf(out, (size_t)capacity, "%s", prop.name);
}
