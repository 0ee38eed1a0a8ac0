/* grad_fill.h in CUDA builds: a device gradient is read, added to on the
 * host and written back on the compute stream, where a backward kernel
 * would write it. */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "grad_fill.h"
#include "zeroshard_cuda.h"

zs_status grad_fill_add(zs_ctx *zs, float *grad, int64_t numel, float value) {
    if (strcmp(zs_backend_name(zs), "cuda") != 0) {
        for (int64_t i = 0; i < numel; i++) grad[i] += value;
        return ZS_OK;
    }
    const size_t bytes = (size_t)numel * sizeof(float);
    float *host = malloc(bytes ? bytes : 1);
    if (!host) return ZS_ERR_OUT_OF_MEMORY;
    cudaStream_t stream = zs_cuda_stream(zs);
    cudaError_t rc = cudaMemcpyAsync(host, grad, bytes, cudaMemcpyDeviceToHost, stream);
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream);
    for (int64_t i = 0; rc == cudaSuccess && i < numel; i++) host[i] += value;
    if (rc == cudaSuccess) rc = cudaMemcpyAsync(grad, host, bytes, cudaMemcpyHostToDevice, stream);
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream);
    free(host);
    return rc == cudaSuccess ? ZS_OK : ZS_ERR_INTERNAL;
}
