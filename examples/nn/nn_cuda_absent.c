/* nn_cuda_device_create in a build without CUDA (CMake found no nvcc, or
 * -DZS_CUDA=OFF): the CPU device still works; this says what to do to get
 * the CUDA one. */
#include "nn_cuda.h"
#include "nn_impl.h"

int nn_cuda_device_create(void *cuda_stream, nn_dtype dtype, nn_device **out, char *err,
                          size_t cap) {
    (void)cuda_stream;
    (void)dtype;
    if (out != NULL) {
        *out = NULL;
    }
    return ex_error(err, cap, NN_ERR_UNAVAILABLE,
                     "nn: a \"cuda\" device was requested, but this build has no CUDA; rebuild "
                     "with the CUDA toolkit (nvcc on PATH, cmake -DZS_CUDA=ON; see docs/GPU.md) "
                     "or use the cpu backend");
}

/* No CUDA device can exist in this build, so there is nothing to count. */
int nn_cuda_device_stats(const nn_device *dev, nn_cuda_stats *out, char *line, size_t cap) {
    (void)dev;
    (void)out;
    if (line != NULL && cap > 0) {
        line[0] = '\0';
    }
    return NN_ERR_UNAVAILABLE;
}
