/* gpt2_cuda_backend_create in a build without CUDA (CMake found no nvcc, or
 * -DZS_CUDA=OFF): the CPU backend still works; this says what to do to get
 * the CUDA one. */
#include <stdio.h>

#include "gpt2_backend.h"

int gpt2_cuda_backend_create(void *cuda_stream, const gpt2_cuda_options *options,
                             gpt2_backend **out, char *err, size_t cap) {
    (void)cuda_stream;
    (void)options;
    if (out != NULL) {
        *out = NULL;
    }
    if (err != NULL && cap > 0) {
        snprintf(err, cap,
                 "gpt2: backend \"cuda\" requested, but this build has no CUDA; rebuild with the "
                 "CUDA toolkit (nvcc on PATH, cmake -DZS_CUDA=ON; see docs/GPU.md) or use the "
                 "cpu backend");
    }
    return NN_ERR_UNAVAILABLE;
}

/* No CUDA backend can exist in this build, so there is nothing to count. */
int gpt2_cuda_backend_stats(const gpt2_backend *be, gpt2_cuda_stats *out, char *line,
                            size_t cap) {
    (void)be;
    (void)out;
    if (line != NULL && cap > 0) line[0] = '\0';
    return NN_ERR_UNAVAILABLE;
}
