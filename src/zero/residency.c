/* Where a unit's full parameters and gradients live during a step, and the
 * collectives that move them: fetch/release (stage-3 all-gather into a live
 * slot), the gradient accessors, and grads_ready (the per-unit reduction).
 *
 * The same call sequence is valid in every stage; calls that a stage does not
 * need still check the order, so a loop that works in stage 0 also works in
 * stage 3. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "zero/ctx.h"

static zs_status check_unit(zs_ctx *zs, zs_unit *unit, const char *call) {
    if (!zs || !unit) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: context and unit are required", call);
    if (unit->ctx != zs)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s('%s'): the unit belongs to another context",
                        call, unit->name);
    if (!zs->built)
        return zs__fail(ZS_ERR_STATE, "%s('%s'): call zs_build first", call, unit->name);
    return ZS_OK;
}

static int pool_take(zs__slot_pool *pool, int unit_index) {
    for (int i = 0; i < pool->slots; i++)
        if (pool->owner[i] < 0) {
            pool->owner[i] = unit_index;
            return i;
        }
    return -1;
}

static void *pool_slot(const zs__slot_pool *pool, int slot) {
    return zs__buf_at(&pool->storage, (int64_t)slot * pool->slot_numel);
}

/* "'a', 'b'" — the units holding a pool's slots, for error messages. */
static void pool_owners(const zs_ctx *zs, const zs__slot_pool *pool, char *out, size_t cap) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < pool->slots && used < cap; i++) {
        if (pool->owner[i] < 0) continue;
        int n = snprintf(out + used, cap - used, "%s'%s'", used ? ", " : "",
                         zs->units[pool->owner[i]]->name);
        if (n < 0) break;
        used += (size_t)n;
    }
}

zs_status zs_fetch(zs_ctx *zs, zs_unit *unit) {
    ZS_CHECK(check_unit(zs, unit, "zs_fetch"));
    if (unit->fetched)
        return zs__fail(ZS_ERR_STATE, "zs_fetch('%s'): the unit is already fetched; release it "
                        "first", unit->name);
    if (zs->settings.zero.stage == 3) {
        int slot = pool_take(&zs->live_params, unit->index);
        if (slot < 0) {
            char owners[512];
            pool_owners(zs, &zs->live_params, owners, sizeof owners);
            return zs__fail(ZS_ERR_STATE,
                            "zs_fetch('%s'): zero.max_live_units = %d units are fetched already "
                            "(%s); release one first or raise zero.max_live_units",
                            unit->name, zs->live_params.slots, owners);
        }
        const zs__plan_unit *pu = &zs->plan->units[unit->index];
        void *full = pool_slot(&zs->live_params, slot);
        size_t elem = zs_dtype_size(zs->compute_dtype);
        void *mine = (char *)full + (size_t)(zs->rank * pu->shard_numel) * elem;
        zs_status st = zs->backend->ops->copy(zs->backend, mine,
                                              zs__buf_at(&zs->params_shard, pu->shard_offset),
                                              (size_t)pu->shard_numel * elem);
        if (st == ZS_OK)
            st = zs__comm_all_gather(zs->comm, full, (size_t)pu->shard_numel, zs->compute_dtype,
                                     unit->name);
        if (st != ZS_OK) {
            zs->live_params.owner[slot] = -1;
            return zs__fail_context(st, "zs_fetch('%s')", unit->name);
        }
        unit->live_slot = slot;
        zs->live_units++;
        if (zs->live_units > zs->live_units_peak) zs->live_units_peak = zs->live_units;
    }
    unit->fetched = 1;
    return ZS_OK;
}

zs_status zs_release(zs_ctx *zs, zs_unit *unit) {
    ZS_CHECK(check_unit(zs, unit, "zs_release"));
    if (!unit->fetched)
        return zs__fail(ZS_ERR_STATE, "zs_release('%s'): the unit is not fetched", unit->name);
    if (unit->grad_slot >= 0)
        return zs__fail(ZS_ERR_STATE, "zs_release('%s'): its gradient is still open; call "
                        "zs_grads_ready before zs_release", unit->name);
    if (unit->live_slot >= 0) {
        /* Parameters do not change while fetched, so there is nothing to write
         * back: the slot is simply free again. */
        zs->live_params.owner[unit->live_slot] = -1;
        unit->live_slot = -1;
        zs->live_units--;
    }
    unit->fetched = 0;
    return ZS_OK;
}

void *zs_param_data(const zs_param *p) {
    if (!p) {
        zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_param_data: parameter is NULL");
        return NULL;
    }
    const zs_ctx *zs = p->ctx;
    const zs_unit *unit = p->unit;
    if (!unit->fetched) {
        zs__fail(ZS_ERR_STATE, "zs_param_data('%s'): unit '%s' is not fetched; call zs_fetch "
                 "first", p->name, unit->name);
        return NULL;
    }
    const zs__plan_param *pp = &zs->plan->params[p->index];
    if (unit->live_slot >= 0)
        return (char *)pool_slot(&zs->live_params, unit->live_slot) +
               (size_t)pp->offset * zs_dtype_size(zs->compute_dtype);
    return zs__buf_at(&zs->params_full, zs->plan->units[unit->index].full_offset + pp->offset);
}

void *zs_param_grad(zs_param *p) {
    if (!p) {
        zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_param_grad: parameter is NULL");
        return NULL;
    }
    zs_ctx *zs = p->ctx;
    zs_unit *unit = p->unit;
    const zs__plan_param *pp = &zs->plan->params[p->index];
    if (unit->grads_declared) {
        zs__fail(ZS_ERR_STATE, "zs_param_grad('%s'): unit '%s' already declared its gradient "
                 "ready in this micro-step", p->name, unit->name);
        return NULL;
    }
    if (zs->settings.zero.stage < 2) {
        if (!unit->fetched) {
            zs__fail(ZS_ERR_STATE, "zs_param_grad('%s'): unit '%s' is not fetched; call "
                     "zs_fetch first", p->name, unit->name);
            return NULL;
        }
        return zs__buf_at(&zs->grads_full, zs->plan->units[unit->index].full_offset + pp->offset);
    }
    if (unit->grad_slot < 0) {
        if (!unit->fetched) {
            zs__fail(ZS_ERR_STATE, "zs_param_grad('%s'): unit '%s' is not fetched; call "
                     "zs_fetch first", p->name, unit->name);
            return NULL;
        }
        int slot = pool_take(&zs->live_grads, unit->index);
        if (slot < 0) {
            char owners[512];
            pool_owners(zs, &zs->live_grads, owners, sizeof owners);
            zs__fail(ZS_ERR_STATE,
                     "zs_param_grad('%s'): all zero.max_live_units = %d gradient buffers are in "
                     "use (%s); call zs_grads_ready on one of them first",
                     p->name, zs->live_grads.slots, owners);
            return NULL;
        }
        /* Backward adds into the gradient, so a fresh slot starts at zero. */
        size_t bytes = (size_t)zs->plan->units[unit->index].padded_numel *
                       zs_dtype_size(zs->compute_dtype);
        if (zs->backend->ops->zero(zs->backend, pool_slot(&zs->live_grads, slot), bytes) != ZS_OK) {
            zs->live_grads.owner[slot] = -1;
            return NULL;
        }
        unit->grad_slot = slot;
    }
    return (char *)pool_slot(&zs->live_grads, unit->grad_slot) +
           (size_t)pp->offset * zs_dtype_size(zs->compute_dtype);
}

/* Sums a unit's full gradient (`full`, compute dtype) over ranks, in the
 * configured reduce dtype. all_reduce: every element of `full` ends reduced;
 * otherwise only the owned chunk is meaningful. On return *chunk points at
 * the reduced owned chunk, in *chunk_dtype: inside `full`, or inside the fp32
 * staging buffer when precision.reduce_dtype = "fp32" and the chunk goes on
 * to a shard (to_shard) without being rounded back first. */
static zs_status reduce_unit_grad(zs_ctx *zs, const zs_unit *unit, void *full, int all_reduce,
                                  int to_shard, const void **chunk, zs_dtype *chunk_dtype) {
    const zs__plan_unit *pu = &zs->plan->units[unit->index];
    const zs_dtype dt = zs->compute_dtype;
    zs__backend *be = zs->backend;
    const size_t shard = (size_t)pu->shard_numel;
    const int64_t mine = (int64_t)zs->rank * pu->shard_numel;
    if (zs->reduce_dtype == dt || zs->world_size == 1) {
        if (all_reduce) ZS_CHECK(zs__comm_all_reduce(zs->comm, full, shard, dt, unit->name));
        else ZS_CHECK(zs__comm_reduce_scatter(zs->comm, full, shard, dt, unit->name));
        *chunk = (const char *)full + (size_t)mine * zs_dtype_size(dt);
        *chunk_dtype = dt;
        return ZS_OK;
    }
    /* fp32 reduction of a low-precision gradient: widen, reduce, then round
     * back what the stage keeps in the compute dtype. */
    float *wide = zs->reduce_staging.ptr;
    ZS_CHECK(be->ops->convert(be, wide, ZS_DTYPE_FP32, full, dt, pu->padded_numel));
    if (all_reduce) {
        ZS_CHECK(zs__comm_all_reduce(zs->comm, wide, shard, ZS_DTYPE_FP32, unit->name));
        ZS_CHECK(be->ops->convert(be, full, dt, wide, ZS_DTYPE_FP32, pu->padded_numel));
    } else {
        ZS_CHECK(zs__comm_reduce_scatter(zs->comm, wide, shard, ZS_DTYPE_FP32, unit->name));
        if (!to_shard)
            ZS_CHECK(be->ops->convert(be, (char *)full + (size_t)mine * zs_dtype_size(dt), dt,
                                      wide + mine, ZS_DTYPE_FP32, pu->shard_numel));
    }
    if (to_shard) {
        *chunk = wide + mine;
        *chunk_dtype = ZS_DTYPE_FP32;
    } else {
        *chunk = (const char *)full + (size_t)mine * zs_dtype_size(dt);
        *chunk_dtype = dt;
    }
    return ZS_OK;
}

zs_status zs_grads_ready(zs_ctx *zs, zs_unit *unit) {
    ZS_CHECK(check_unit(zs, unit, "zs_grads_ready"));
    if (unit->grads_declared)
        return zs__fail(ZS_ERR_STATE, "zs_grads_ready('%s'): called twice in one micro-step",
                        unit->name);
    const int stage = zs->settings.zero.stage;
    const zs__plan_unit *pu = &zs->plan->units[unit->index];
    const zs_dtype dt = zs->compute_dtype;
    zs__backend *be = zs->backend;
    zs_status st = ZS_OK;
    const void *chunk = NULL;
    zs_dtype chunk_dtype = dt;
    if (stage < 2) {
        /* Stages 0-1 accumulate micro-steps in the full buffer (backward adds)
         * and reduce once, at the boundary. Stage 0 all-reduces as
         * reduce-scatter + all-gather, so each element is summed in exactly
         * the order the other stages' reduce-scatter uses. */
        if (zs_is_accumulation_boundary(zs))
            st = reduce_unit_grad(zs, unit, zs__buf_at(&zs->grads_full, pu->full_offset),
                                  stage == 0, 0, &chunk, &chunk_dtype);
    } else {
        /* A unit whose backward produced no gradient on this rank still takes
         * part in the reduction, with zeros. */
        if (unit->grad_slot < 0) {
            int slot = pool_take(&zs->live_grads, unit->index);
            if (slot < 0)
                return zs__fail(ZS_ERR_STATE, "zs_grads_ready('%s'): no free gradient buffer; "
                                "raise zero.max_live_units", unit->name);
            unit->grad_slot = slot;
            ZS_CHECK(be->ops->zero(be, pool_slot(&zs->live_grads, slot),
                                   (size_t)pu->padded_numel * zs_dtype_size(dt)));
        }
        void *full = pool_slot(&zs->live_grads, unit->grad_slot);
        st = reduce_unit_grad(zs, unit, full, 0, 1, &chunk, &chunk_dtype);
        if (st == ZS_OK) {
            /* Into the shard: a copy when each step has one micro-step, else a
             * sum across micro-steps (the shard is zeroed after every step). */
            void *dst = zs__buf_at(&zs->grads_shard, pu->shard_offset);
            if (zs->settings.gradient_accumulation_steps == 1)
                st = be->ops->convert(be, dst, zs->grad_shard_dtype, chunk, chunk_dtype,
                                      pu->shard_numel);
            else
                st = be->ops->accumulate(be, dst, zs->grad_shard_dtype, chunk, chunk_dtype,
                                         pu->shard_numel);
        }
        zs->live_grads.owner[unit->grad_slot] = -1;
        unit->grad_slot = -1;
    }
    if (st != ZS_OK) return zs__fail_context(st, "zs_grads_ready('%s')", unit->name);
    unit->grads_declared = 1;
    return ZS_OK;
}
