/* The chunk size of page-locked registrations (pinned_chunks.h). */
#include "backend/pinned_chunks.h"

#include "core/env.h"
#include "core/error.h"
#include "core/number.h"

zs_status zs__pin_chunk_read(size_t *out) {
    *out = ZS__PIN_CHUNK_DEFAULT;
    const char *text = zs__env_text(ZS_ENV_CUDA_PIN_CHUNK_BYTES);
    if (!text) return ZS_OK;
    int64_t v = 0;
    zs_status st = zs__number_option_size("ZS_CUDA_PIN_CHUNK_BYTES", text, (int64_t)ZS__PIN_PAGE,
                                          (int64_t)1 << 40, &v);
    if (st != ZS_OK) return st;
    if ((v & (v - 1)) != 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "ZS_CUDA_PIN_CHUNK_BYTES=\"%s\" is not a power "
                        "of two; page-locked memory is registered in chunks whose boundaries "
                        "must be computable from addresses (e.g. 65536 or 1GiB)", text);
    *out = (size_t)v;
    return ZS_OK;
}
