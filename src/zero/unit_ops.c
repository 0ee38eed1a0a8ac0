/* The collectives of one unit as comm-engine ops (comm/engine.h): the
 * stage-3 gather of its parameters and the reduction of its gradient. Their
 * run functions execute on the communication thread (or inline in
 * synchronous mode); they touch only the buffers their op names and
 * allocate nothing, so the rest of the runtime stays single-threaded. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "zero/ctx.h"

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

/* Copies this rank's slice of the unit into its place in the gathered
 * buffer, then all-gathers the others'. */
static zs_status run_gather(zs__engine_op *op) {
    zs__unit_op *u = (zs__unit_op *)op;
    zs_ctx *zs = u->zs;
    const zs__plan_unit *pu = &zs->plan->units[u->unit->index];
    const size_t elem = zs_dtype_size(zs->compute_dtype);
    void *mine = (char *)u->buf + (size_t)(zs->rank * pu->shard_numel) * elem;
    if (zs->params_on_nvme) {
        /* The shard's fp32 master weights from the swap file, rounded: the
         * same bits the optimizer would have written to a parameter copy. */
        ZS_CHECK(zs__nvme_state_get(zs->nvme, 0, pu->shard_offset, pu->shard_numel,
                                    zs->gather_staging.ptr));
        ZS_CHECK(zs->backend->ops->convert(zs->backend, mine, zs->compute_dtype,
                                           zs->gather_staging.ptr, ZS_DTYPE_FP32, pu->shard_numel));
    } else {
        ZS_CHECK(zs->backend->ops->copy(zs->backend, mine,
                                        zs__buf_at(&zs->params_shard, pu->shard_offset),
                                        (size_t)pu->shard_numel * elem));
    }
    ZS_CHECK(zs__comm_all_gather(zs->comm, u->buf, (size_t)pu->shard_numel, zs->compute_dtype,
                                 u->unit->name));
    return ZS_OK;
}

/* Reduces the unit's gradient; in stages 2-3 the owned chunk then goes into
 * the gradient shard: a copy when each step has one micro-step, else a sum
 * across micro-steps (the shard is zeroed after every step). */
static zs_status run_reduce(zs__engine_op *op) {
    zs__unit_op *u = (zs__unit_op *)op;
    zs_ctx *zs = u->zs;
    zs__backend *be = zs->backend;
    const void *chunk = NULL;
    zs_dtype chunk_dtype = zs->compute_dtype;
    zs_status st = reduce_unit_grad(zs, u->unit, u->buf, u->all_reduce, u->to_shard, &chunk,
                                    &chunk_dtype);
    if (st == ZS_OK && u->to_shard) {
        const zs__plan_unit *pu = &zs->plan->units[u->unit->index];
        void *dst = zs__buf_at(&zs->grads_shard, pu->shard_offset);
        if (zs->settings.gradient_accumulation_steps == 1)
            st = be->ops->convert(be, dst, zs->grad_shard_dtype, chunk, chunk_dtype, pu->shard_numel);
        else
            st = be->ops->accumulate(be, dst, zs->grad_shard_dtype, chunk, chunk_dtype,
                                     pu->shard_numel);
    }
    if (st != ZS_OK) return zs__fail_context(st, "gradient reduction of '%s'", u->unit->name);
    return ZS_OK;
}

static void prepare(zs__unit_op *u, zs_ctx *zs, zs_unit *unit, void *buf, const char *name,
                    zs_status (*run)(zs__engine_op *)) {
    memset(&u->op, 0, sizeof u->op);
    u->op.run = run;
    u->op.name = name;
    u->op.label = unit->name;
    u->op.bytes = zs__unit_bytes(zs, unit);
    u->zs = zs;
    u->unit = unit;
    u->buf = buf;
}

void zs__unit_gather_submit(zs_ctx *zs, zs_unit *unit) {
    zs__unit_op *u = &unit->gather;
    prepare(u, zs, unit, unit->live_params, "all_gather", run_gather);
    zs__engine_submit(zs->engine, &u->op);
}

void zs__unit_reduce_submit(zs_ctx *zs, zs_unit *unit, void *full, int all_reduce, int to_shard) {
    zs__unit_op *u = &unit->reduce;
    prepare(u, zs, unit, full, all_reduce ? "all_reduce" : "reduce_scatter", run_reduce);
    u->all_reduce = all_reduce;
    u->to_shard = to_shard;
    unit->reduced_by = &u->op;
    zs__engine_submit(zs->engine, &u->op);
}
