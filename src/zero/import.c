/* zs_params_import: initial values from the program (pretrained weights),
 * written where this rank keeps master weights (the store's tier), then
 * rounded into the parameters and gathered where the stage keeps full
 * parameters.
 *
 * Floor (src/floors.txt): Owns nothing; calls the state's moves
 * (state_io.h), the layout, the stage-1/2 gathers and the optimizer pass,
 * all below it.
 */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "zero/agree.h"
#include "zero/full_params.h"
#include "zero/ground.h"
#include "zero/state_io.h"
#include "zero/state_layout.h"
#include "zero/update.h"

/* fp32 values per call of the source: bounded host memory whatever the model. */
#define ZS_IMPORT_CHUNK (1 << 20)

/* Writes the rank's range of every parameter's master weights (the
 * parameters themselves in fp32 without a separate master). On a source
 * failure the reason is left in `why`. */
static zs_status import_local(zs_ctx *zs, zs_param_source source, void *user, float *host,
                              zs__import_which which, char *why, size_t why_cap) {
    for (int i = 0; i < zs->param_count; i++) {
        const zs_param *p = zs->params[i];
        const int is_frozen = (p->flags & ZS_PARAM_FROZEN) != 0;
        if ((which == ZS__IMPORT_FROZEN && !is_frozen) ||
            (which == ZS__IMPORT_TRAINABLE && is_frozen))
            continue;
        int64_t b, e;
        if (!(is_frozen ? zs__param_range(zs, i, &b, &e) : zs__state_range(zs, i, &b, &e)))
            continue;
        for (int64_t first = b; first < e; first += ZS_IMPORT_CHUNK) {
            const int64_t n = e - first < ZS_IMPORT_CHUNK ? e - first : ZS_IMPORT_CHUNK;
            why[0] = '\0';
            if (source(user, p, first, n, host, why, why_cap) != 0) {
                if (!why[0]) snprintf(why, why_cap, "the source reported a failure");
                return zs__fail(ZS_ERR_IO, "zs_params_import: rank %d, parameter '%s', elements "
                                "[%lld, %lld): %s", zs->rank, p->name, (long long)first,
                                (long long)(first + n), why);
            }
            /* Frozen parameters have no master: written rounded, in place. */
            if (is_frozen) ZS_CHECK(zs__frozen_write(zs, i, first, n, host));
            else ZS_CHECK(zs__state_write(zs, ZS_STATE_MASTER, i, first, n, host));
        }
    }
    return zs__store_flush(&zs->store);
}

zs_status zs_params_import(zs_ctx *zs, zs_param_source source, void *user) {
    return zs__params_import_some(zs, source, user, ZS__IMPORT_ALL);
}

zs_status zs_params_import_frozen(zs_ctx *zs, zs_param_source source, void *user) {
    return zs__params_import_some(zs, source, user, ZS__IMPORT_FROZEN);
}

zs_status zs__params_import_some(zs_ctx *zs, zs_param_source source, void *user,
                                 zs__import_which which) {
    if (!zs || !source)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_params_import: context and source are required");
    if (!zs->built) return zs__fail(ZS_ERR_STATE, "zs_params_import: call zs_build first");
    ZS_CHECK(zs__engine_drain(zs->engine));
    /* An offloaded update still running ends first (its failure is this
     * rank's, agreed below). */
    zs_status local = zs__update_finish(zs);
    for (int u = 0; u < zs->unit_count && local == ZS_OK; u++)
        if (zs->units[u]->fetched || zs->units[u]->grad.state != ZS__GRAD_NONE)
            local = zs__fail(ZS_ERR_STATE, "zs_params_import: unit '%s' is in the middle of a "
                             "micro-step; import between optimizer steps", zs->units[u]->name);
    if (local == ZS_OK && zs->micro != 0)
        local = zs__fail(ZS_ERR_STATE, "zs_params_import: inside an accumulation window; import "
                         "between optimizer steps");
    zs__buf host = {0};
    if (local == ZS_OK)
        local = zs__mem_host_alloc(&zs->mem, ZS_MEM_SCRATCH, ZS_IMPORT_CHUNK * sizeof(float),
                                   &host.ptr);
    char why[512];
    if (local == ZS_OK)
        local = import_local(zs, source, user, host.ptr, which, why, sizeof why);
    zs__mem_host_free(&zs->mem, ZS_MEM_SCRATCH, host.ptr, ZS_IMPORT_CHUNK * sizeof(float));
    char message[1024];
    snprintf(message, sizeof message, "%s", local == ZS_OK ? "" : zs_last_error());

    /* All ranks succeed or fail together: a rank that could not read its
     * ranges would otherwise train from other weights than the rest. */
    double failed = local == ZS_OK ? 0.0 : 1.0;
    ZS_CHECK(zs__comm_all_reduce_scalars(zs->comm, &failed, 1, ZS_REDUCE_SUM, "import agreement"));
    if (local != ZS_OK) return zs__fail(local, "%s", message);
    if (failed > 0)
        return zs__fail(ZS_ERR_IO, "zs_params_import: %d rank(s) could not import their "
                        "parameters (this rank could); see their messages", (int)failed);
    /* The compute-dtype parameters from the imported masters (and the
     * stage-1/2 gathers), agreed before anything else happens. */
    ZS_CHECK(zs__agree_status(zs, zs__params_from_master(zs), "zs_params_import"));
    ZS_CHECK(zs__gather_full_params(zs));
    /* Frozen values from elsewhere are no longer the declared base's (the
     * base's own import sets it again, checkpoint/hf_import.c). */
    if (which != ZS__IMPORT_TRAINABLE) zs->base.current = 0;
    ZS_INFO("imported %lld parameters", (long long)zs->plan->numel);
    return ZS_OK;
}
