/* Stages 1-2 keep full parameters that each rank updates only in its owned
 * slices (full_params.h): the gathers that make them whole again, on the
 * shard group. Calls only the comm layer. */
#include "zero/full_params.h"

#include "core/error.h"
#include "zero/frozen_store.h"
#include "zero/ground.h"

zs_status zs__gather_unit_params(zs_ctx *zs, int u) {
    const int stage = zs->settings.zero.stage;
    if (stage != 1 && stage != 2) return ZS_OK;
    const zs__plan_unit *pu = &zs->plan->units[u];
    if (pu->quantized) return ZS_OK; /* zs__frozen_store_gather_full's */
    return zs__comm_all_gather(zs->shard_comm, zs__buf_at(&zs->params_full, pu->full_offset),
                               (size_t)pu->shard_numel, zs->compute_dtype, zs->units[u]->name);
}

zs_status zs__gather_full_params(zs_ctx *zs) {
    /* Quantized frozen units: written values quantized, records gathered. */
    ZS_CHECK(zs__frozen_store_gather_full(zs));
    for (int u = 0; u < zs->unit_count; u++) ZS_CHECK(zs__gather_unit_params(zs, u));
    return ZS_OK;
}
