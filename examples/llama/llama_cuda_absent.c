/* llama_cuda_backend_create in a build without CUDA (CMake found no nvcc,
 * or -DZS_CUDA=OFF): the CPU backend still works; this says what to do to
 * get the CUDA one (no CUDA device can exist in such a build either:
 * nn_cuda_absent.c). */
#include "llama_backend.h"
#include "nn_impl.h"

int llama_cuda_backend_create(nn_device *dev, const llama_dims *dims, int max_T,
                              llama_backend **out, char *err, size_t cap) {
    (void)dev;
    (void)dims;
    (void)max_T;
    if (out != NULL) {
        *out = NULL;
    }
    return ex_error(err, cap, NN_ERR_UNAVAILABLE,
                     "llama: backend \"cuda\" requested, but this build has no CUDA; rebuild "
                     "with the CUDA toolkit (nvcc on PATH, cmake -DZS_CUDA=ON; see docs/GPU.md) "
                     "or use the cpu backend");
}
