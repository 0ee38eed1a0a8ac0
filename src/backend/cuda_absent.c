/* The CUDA backend's entry point in builds without CUDA (CMake compiles this
 * file only when ZS_CUDA is off or no nvcc was found), so that a
 * configuration asking for backend = "cuda" fails with a clear message
 * instead of a link error. */
#include "backend/backend.h"
#include "core/error.h"

zs_status zs__cuda_backend_create(const zs__settings *settings, zs__mem *mem, int local_rank,
                                  zs__backend **out) {
    (void)settings;
    (void)mem;
    (void)local_rank;
    (void)out;
    return zs__fail(ZS_ERR_UNSUPPORTED,
                    "backend = \"cuda\": this build of zeroshard has no CUDA backend (it was "
                    "configured with -DZS_CUDA=OFF or without nvcc on PATH); rebuild with the "
                    "CUDA toolkit, or use backend = \"cpu\"");
}
