/* Builds without CUDA: there is no compute stream (a "cuda" context cannot
 * be created in such a build; zs_create says so). */
#include "ex_cuda_stream.h"

void *ex_cuda_stream(const zs_ctx *zs) {
    (void)zs;
    return NULL;
}
