/* The backend a configuration asks for: the top floor of backend/, the one
 * file that names every backend (and wraps CUDA in the stream-order check
 * with ZS_STREAM_CHECK=1), so that no backend names another. */
#include <string.h>

#include "backend/backend.h"
#include "backend/stream_check.h"
#include "core/env.h"
#include "core/error.h"

zs_status zs__backend_create(const zs__settings *settings, zs__mem *mem, int local_rank,
                             zs__backend **out) {
    switch (settings->backend) {
    case ZS_BACKEND_CPU:
        return zs__cpu_backend_create(mem, out);
    case ZS_BACKEND_CUDA: {
        ZS_CHECK(zs__cuda_backend_create(settings, mem, local_rank, out));
        /* ZS_STREAM_CHECK=1: the stream-order check around it (metadata). */
        const char *check = zs__env_text(ZS_ENV_STREAM_CHECK);
        if (!check || strcmp(check, "1") != 0) return ZS_OK;
        const zs__stream_check_options opt = {ZS__STREAM_CHECK_ABORT, NULL, NULL, 1};
        zs__backend *inner = *out;
        zs_status st = zs__backend_checked_create(inner, &opt, out);
        if (st != ZS_OK) {
            zs__backend_destroy(inner);
            *out = NULL;
        }
        return st;
    }
    case ZS_BACKEND_SIM:
        return zs__sim_backend_create(settings, mem, out);
    }
    return zs__fail(ZS_ERR_INVALID_ARGUMENT, "unknown backend %d", (int)settings->backend);
}
