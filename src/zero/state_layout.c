/* Where each parameter's optimizer state and compute-dtype copy live
 * (state_layout.h): index arithmetic over the plan and the ground's
 * buffers. Calls only the plan. */
#include "zero/state_layout.h"

#include "zero/ground.h"
#include "zero/plan.h"

/* The state index space is the trainable units' (plan.h's grad offsets);
 * the parameter buffers keep every unit. Without frozen units they agree. */
int64_t zs__state_index(const zs_ctx *zs, int param, int64_t element) {
    const zs__plan_param *pp = &zs->plan->params[param];
    const zs__plan_unit *pu = &zs->plan->units[pp->unit];
    if (zs->settings.zero.stage == 0) return pu->grad_full_offset + pp->offset + element;
    return pu->grad_shard_offset + pp->offset + element - (int64_t)zs->shard_rank * pu->shard_numel;
}

void zs__unit_state_range(const zs_ctx *zs, int unit, int64_t *first, int64_t *end) {
    const zs__plan_unit *pu = &zs->plan->units[unit];
    if (pu->frozen) { /* no state */
        *first = *end = 0;
    } else if (zs->settings.zero.stage == 0) {
        *first = pu->grad_full_offset;
        *end = pu->grad_full_offset + pu->padded_numel;
    } else {
        *first = pu->grad_shard_offset;
        *end = pu->grad_shard_offset + pu->shard_numel;
    }
}

void *zs__param_at(const zs_ctx *zs, int param, int64_t element) {
    const zs__plan_param *pp = &zs->plan->params[param];
    const zs__plan_unit *pu = &zs->plan->units[pp->unit];
    if (zs->settings.zero.stage < 3)
        return zs__buf_at(&zs->params_full, pu->full_offset + pp->offset + element);
    if (!zs->params_shard.ptr) return NULL; /* offload.params = "nvme": no shard is kept */
    return zs__buf_at(&zs->params_shard, pu->shard_offset + pp->offset + element -
                                             (int64_t)zs->shard_rank * pu->shard_numel);
}

zs__buf *zs__unit_owned_params(zs_ctx *zs, int u, int64_t *at) {
    const zs__plan_unit *pu = &zs->plan->units[u];
    const int stage = zs->settings.zero.stage;
    if (stage == 3) {
        *at = pu->shard_offset;
        return zs->params_shard.ptr ? &zs->params_shard : NULL;
    }
    *at = stage == 0 ? pu->full_offset : pu->full_offset + (int64_t)zs->shard_rank * pu->shard_numel;
    return &zs->params_full;
}

int zs__state_range(const zs_ctx *zs, int param, int64_t *first, int64_t *end) {
    if (zs->plan->units[zs->plan->params[param].unit].frozen) {
        *first = *end = 0;
        return 0;
    }
    return zs__param_range(zs, param, first, end);
}

int zs__param_range(const zs_ctx *zs, int param, int64_t *first, int64_t *end) {
    if (zs->settings.zero.stage == 0) {
        *first = 0;
        *end = zs->params[param]->numel;
        return 1;
    }
    return zs__plan_owned_range(zs->plan, param, zs->shard_rank, first, end);
}
