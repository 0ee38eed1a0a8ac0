/* zeroshard_cuda.h: the compute stream and device of a context on the CUDA
 * backend. Compiled only in CUDA builds (CMake picks the cuda/ folders).
 *
 * Floor (src/floors.txt): Public, over the ground's backend; calls nothing
 * of zero/.
 */
#include "zeroshard_cuda.h"

#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "zero/cuda/stream_api.h"
#include "zero/ground.h"

static int is_cuda(const zs_ctx *zs) {
    return zs && zs->backend && strcmp(zs->backend->ops->name, "cuda") == 0;
}

zs_status zs_cuda_set_stream(zs_ctx *zs, cudaStream_t stream) {
    if (!is_cuda(zs))
        return zs__fail(ZS_ERR_UNSUPPORTED, "zs_cuda_set_stream: the context's backend is '%s', "
                        "not \"cuda\"; set backend = \"cuda\" in the configuration",
                        zs && zs->backend ? zs->backend->ops->name : "none");
    return zs->backend->ops->set_stream(zs->backend, (void *)stream);
}

cudaStream_t zs_cuda_stream(const zs_ctx *zs) {
    if (!is_cuda(zs)) return NULL;
    return (cudaStream_t)zs->backend->ops->get_stream(zs->backend);
}

int zs_cuda_device(const zs_ctx *zs) {
    if (!is_cuda(zs)) return -1;
    return zs__cuda_backend_device(zs__backend_unwrapped(zs->backend));
}

uint64_t zs__cuda_blocking_waits(const zs_ctx *zs) {
    return is_cuda(zs) ? zs__cuda_backend_waits(zs__backend_unwrapped(zs->backend)) : 0;
}
