/* The collectives of one unit as comm-engine ops (comm/engine.h): the
 * stage-3 gather of its parameters and the reduction of its gradient. Their
 * run functions execute on the communication thread (or inline in
 * synchronous mode); they touch only the buffers their op names and
 * allocate nothing, so the rest of the runtime stays single-threaded.
 *
 * Floor (src/floors.txt): owns its staging (struct zs__unit_staging,
 * created at zs_build: the NVMe gather's halves and fences, the fp32
 * reduction's buffer); calls ZeRO++'s gather and reduce, hpZ and the
 * optimizer pass's readiness (update.h), all below it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "zero/frozen_store.h"
#include "zero/ground.h"
#include "zero/memory_plan.h"
#include "zero/unit_ops.h"
#include "zero/update.h"
#include "zero/zeropp.h"

/* The room's state (zs_ctx.staging), from zs_build to zs_destroy. */
typedef struct zs__unit_staging {
    /* offload.params = "nvme" (stage 3): a gather reads the unit's shard of
     * master weights into this fp32 staging (the largest unit's shard, tag
     * offload_staging) and rounds it into place (rounded: [2 x largest unit
     * shard] compute dtype, host; none in fp32). The copy into place reads
     * one of two halves of the staging (fp32) or the rounding; gathers
     * alternate halves (next, touched only by the thread running the
     * engine's ops), and a half is rewritten only after its fence, recorded
     * behind the copy that read it, has passed. */
    zs__buf gather, rounded;
    int64_t half_numel;
    void *fence[2];
    int next;
    /* precision.reduce_dtype = "fp32" with a lower compute dtype: a unit's
     * gradient widened into this buffer ([largest unit] fp32, tag comm),
     * reduced, and rounded back. */
    zs__buf reduce;
} zs__unit_staging;

zs_status zs__unit_ops_create(zs_ctx *zs, const zs__memory_plan *mp) {
    zs__unit_staging *st = zs__calloc(1, sizeof *st);
    if (!st)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_build: out of host memory for the units' "
                        "collectives (%zu bytes)", sizeof *st);
    zs->staging = st;
    if (mp->params_on_nvme) {
        ZS_CHECK(zs__plan_buf(zs, &st->gather, ZS_MEM_OFFLOAD_STAGING, ZS_DTYPE_FP32,
                              mp->gather_staging_numel));
        ZS_CHECK(zs__plan_buf(zs, &st->rounded, ZS_MEM_OFFLOAD_STAGING, zs->compute_dtype,
                              mp->gather_rounded_numel));
        st->half_numel = mp->gather_half_numel;
        for (int h = 0; h < 2; h++) ZS_CHECK(zs__fence_create(zs->backend, &st->fence[h]));
    }
    if (mp->reduce_staging_numel > 0)
        ZS_CHECK(zs__buf_alloc(zs->backend, &st->reduce, ZS_MEM_COMM, ZS_DTYPE_FP32,
                               mp->reduce_staging_numel));
    return ZS_OK;
}

void zs__unit_ops_destroy(zs_ctx *zs) {
    zs__unit_staging *st = zs->staging;
    if (!st) return;
    zs__buf_free(&st->gather);
    zs__buf_free(&st->rounded);
    zs__buf_free(&st->reduce);
    for (int h = 0; h < 2; h++)
        if (zs->backend) zs__fence_destroy(zs->backend, st->fence[h]);
    free(st);
    zs->staging = NULL;
}

/* The reduce-scatter of a unit-sized buffer over the shard group, then,
 * where the model is replicated across nodes (zero.shard_group = "node"),
 * the all-reduce of the owned chunk between the replicas (the ranks owning
 * the same slice on every node), so every rank ends with the sum over all
 * ranks. Each replica's chunk is the same sum in the same order, so the
 * all-reduce gives every replica the same bits. */
zs_status zs__shard_reduce_scatter(zs_ctx *zs, void *buf, size_t chunk, zs_dtype dtype,
                                   const char *label) {
    ZS_CHECK(zs__comm_reduce_scatter(zs->shard_comm, buf, chunk, dtype, label));
    return zs__replica_all_reduce(zs, (char *)buf + (size_t)zs->shard_rank * chunk *
                                                        zs_dtype_size(dtype),
                                  chunk, dtype, label);
}

zs_status zs__replica_all_reduce(zs_ctx *zs, void *slice, size_t count, zs_dtype dtype,
                                 const char *label) {
    if (!zs->replica_comm) return ZS_OK;
    /* The plan pads every unit's slice to a multiple of the replicas. */
    return zs__comm_all_reduce(zs->replica_comm, slice, count / (size_t)zs->replicas, dtype,
                               label);
}

/* Sums a unit's full gradient (`full`, compute dtype) over ranks, in the
 * configured reduce dtype. all_reduce: every element of `full` ends reduced;
 * otherwise only the owned chunk is meaningful. On return *chunk points at
 * the reduced owned chunk, in *chunk_dtype: inside `full`, or inside the fp32
 * staging buffer when precision.reduce_dtype = "fp32" and the chunk goes on
 * to a shard (to_shard) without being rounded back first. Stage 0
 * (all_reduce) shards nothing: its collective is the world's. */
static zs_status reduce_unit_grad(zs_ctx *zs, const zs_unit *unit, void *full, int all_reduce,
                                  int to_shard, const void **chunk, zs_dtype *chunk_dtype) {
    const zs__plan_unit *pu = &zs->plan->units[unit->index];
    const zs_dtype dt = zs->compute_dtype;
    zs__backend *be = zs->backend;
    const size_t shard = (size_t)pu->shard_numel;
    const int64_t mine = (int64_t)zs->shard_rank * pu->shard_numel;
    if (zs__zeropp_quantizes_grads(zs) && !all_reduce) {
        /* qgZ (quantized_reduce.c): the owned chunk comes back in fp32, as
         * with reduce_dtype = "fp32", and goes on the same way. */
        float *owned = NULL;
        ZS_CHECK(zs__quantized_reduce_scatter(zs, unit->index, full, &owned));
        *chunk = owned;
        *chunk_dtype = ZS_DTYPE_FP32;
        if (to_shard) return ZS_OK;
        char *into = (char *)full + (size_t)mine * zs_dtype_size(dt); /* stage 1 keeps it here */
        *chunk = into;
        *chunk_dtype = dt;
        return be->ops->convert(be, into, dt, owned, ZS_DTYPE_FP32, pu->shard_numel);
    }
    if (zs->reduce_dtype == dt || zs->world_size == 1) {
        if (all_reduce) ZS_CHECK(zs__comm_all_reduce(zs->comm, full, shard, dt, unit->name));
        else ZS_CHECK(zs__shard_reduce_scatter(zs, full, shard, dt, unit->name));
        *chunk = (const char *)full + (size_t)mine * zs_dtype_size(dt);
        *chunk_dtype = dt;
        return ZS_OK;
    }
    /* fp32 reduction of a low-precision gradient: widen, reduce, then round
     * back what the stage keeps in the compute dtype. */
    float *wide = zs->staging->reduce.ptr;
    ZS_CHECK(be->ops->convert(be, wide, ZS_DTYPE_FP32, full, dt, pu->padded_numel));
    if (all_reduce) {
        ZS_CHECK(zs__comm_all_reduce(zs->comm, wide, shard, ZS_DTYPE_FP32, unit->name));
        ZS_CHECK(be->ops->convert(be, full, dt, wide, ZS_DTYPE_FP32, pu->padded_numel));
    } else {
        ZS_CHECK(zs__shard_reduce_scatter(zs, wide, shard, ZS_DTYPE_FP32, unit->name));
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

/* The reduced owned chunk of unit u (`chunk`, device memory, chunk_dtype)
 * into the gradient the optimizer reads:
 *   - stages 2-3 (to_shard): the shard, converted (one micro-step per step)
 *     or added (accumulation). A shard in host memory (offload) is reached
 *     by an explicit copy: as is, or after a conversion on the device into
 *     `scratch` (device memory of the compute dtype with room for the
 *     chunk); with accumulation the chunk lands in grads_landing and the
 *     host backend adds it once the device's queue has drained.
 *   - stages 0-1 offloaded: a copy into grads_host (the owned gradient in the
 *     state layout, for the host update); the device keeps the full buffer.
 * Shared by a unit's own reduction and by buckets. */
zs_status zs__grad_into_owned(zs_ctx *zs, int u, const void *full, const void *chunk,
                              zs_dtype chunk_dtype, void *scratch, int to_shard) {
    zs__backend *be = zs->backend;
    const zs__plan_unit *pu = &zs->plan->units[u];
    const int64_t n = pu->shard_numel;
    if (!to_shard) {
        if (!zs->grads_host.ptr) return ZS_OK;
        /* Stage 0 updates the whole unit on every rank: all of it. */
        if (zs->settings.zero.stage == 0)
            return be->ops->copy(be, zs__buf_at(&zs->grads_host, pu->grad_full_offset), full,
                                 (size_t)pu->padded_numel * zs_dtype_size(zs->compute_dtype));
        return be->ops->copy(be, zs__buf_at(&zs->grads_host, pu->grad_shard_offset), chunk,
                             (size_t)n * zs_dtype_size(chunk_dtype));
    }
    zs__buf *shard = &zs->grads_shard;
    void *dst = zs__buf_at(shard, pu->grad_shard_offset);
    const int accumulate = zs->settings.gradient_accumulation_steps > 1;
    if (shard->be == be) {
        if (accumulate) return be->ops->accumulate(be, dst, shard->dtype, chunk, chunk_dtype, n);
        return be->ops->convert(be, dst, shard->dtype, chunk, chunk_dtype, n);
    }
    if (!accumulate) {
        if (chunk_dtype != shard->dtype) {
            ZS_CHECK(be->ops->convert(be, scratch, shard->dtype, chunk, chunk_dtype, n));
            chunk = scratch;
        }
        return be->ops->copy(be, dst, chunk, (size_t)n * zs_dtype_size(shard->dtype));
    }
    zs__buf *landing = &zs->grads_landing;
    ZS_CHECK(be->ops->copy(be, landing->ptr, chunk, (size_t)n * zs_dtype_size(chunk_dtype)));
    ZS_CHECK(be->ops->synchronize(be));
    return shard->be->ops->accumulate(shard->be, dst, shard->dtype, landing->ptr, chunk_dtype, n);
}

/* Copies this rank's slice of the unit into its place in the gathered
 * buffer, then all-gathers the others'. */
static zs_status run_gather(zs__engine_op *op) {
    zs__unit_op *u = (zs__unit_op *)op;
    zs_ctx *zs = u->zs;
    /* hpZ: parameters unchanged since the unit's last gather over every
     * rank are gathered inside the node (secondary.c). */
    if (zs__gather_from_secondary(zs, u->unit->index))
        return zs__secondary_gather(zs, u->unit->index, u->buf);
    zs__backend *be = zs->backend;
    const zs__plan_unit *pu = &zs->plan->units[u->unit->index];
    /* A quantized frozen unit moves its records as they are stored. */
    if (pu->quantized) return zs__frozen_store_gather(zs, u->unit->index, u->buf);
    const size_t elem = zs_dtype_size(zs->compute_dtype);
    void *mine = (char *)u->buf + (size_t)(zs->shard_rank * pu->shard_numel) * elem;
    if (zs->params_on_nvme) {
        /* The shard's fp32 master weights from the swap file, rounded on the
         * host (the bits the optimizer would have written to a parameter
         * copy), then copied into place. That copy is asynchronous on CUDA
         * (a DMA queued behind whatever the device has still to run), so
         * the half it reads is filled again only two gathers later, after
         * the fence recorded behind it: a wait in the rare case that the
         * device lags that far, never one per gather, which would end
         * prefetching (and the one host wait per step). */
        zs__unit_staging *sg = zs->staging;
        const int h = sg->next;
        sg->next ^= 1;
        const int64_t at = (int64_t)h * sg->half_numel;
        ZS_CHECK(zs__fence_wait(be, sg->fence[h]));
        float *master = sg->rounded.ptr ? (float *)sg->gather.ptr
                                        : (float *)zs__buf_at(&sg->gather, at);
        void *rounded = sg->rounded.ptr ? zs__buf_at(&sg->rounded, at) : (void *)master;
        /* The host writes the half now (for the stream-order check: after
         * the fence, the queued copy that read it is done). */
        ZS_CHECK(zs__buf_host_access(&sg->gather, sg->rounded.ptr ? 0 : at, pu->shard_numel, 1,
                                     "NVMe gather staging"));
        if (sg->rounded.ptr)
            ZS_CHECK(zs__buf_host_access(&sg->rounded, at, pu->shard_numel, 1,
                                         "NVMe gather staging (rounded)"));
        /* (frozen units have no master: memory_plan.c refuses nvme parameters with them) */
        ZS_CHECK(zs__store_read(&zs->store, ZS_STATE_MASTER, pu->grad_shard_offset, pu->shard_numel,
                                master));
        if (rounded != (void *)master)
            ZS_CHECK(zs_convert(rounded, zs->compute_dtype, master, ZS_DTYPE_FP32,
                                pu->shard_numel));
        ZS_CHECK(be->ops->copy(be, mine, rounded, (size_t)pu->shard_numel * elem));
        ZS_CHECK(zs__fence_record(be, sg->fence[h]));
    } else {
        ZS_CHECK(be->ops->copy(be, mine, zs__buf_at(&zs->params_shard, pu->shard_offset),
                               (size_t)pu->shard_numel * elem));
    }
    /* Plain or quantized (qwZ); hpZ keeps this rank's node slice. */
    return zs__gather_wide(zs, u->unit->index, u->buf);
}

/* Reduces the unit's gradient; the owned chunk then goes where the
 * optimizer reads it (zs__grad_into_owned). */
static zs_status run_reduce(zs__engine_op *op) {
    zs__unit_op *u = (zs__unit_op *)op;
    zs_ctx *zs = u->zs;
    const void *chunk = NULL;
    zs_dtype chunk_dtype = zs->compute_dtype;
    zs_status st = reduce_unit_grad(zs, u->unit, u->buf, u->all_reduce, u->to_shard, &chunk,
                                    &chunk_dtype);
    if (st == ZS_OK) {
        /* The unit's own chunk of its full buffer is free for a conversion. */
        const zs__plan_unit *pu = &zs->plan->units[u->unit->index];
        void *scratch = (char *)u->buf + (size_t)zs->shard_rank * (size_t)pu->shard_numel *
                                             zs_dtype_size(zs->compute_dtype);
        st = zs__grad_into_owned(zs, u->unit->index, u->buf, chunk, chunk_dtype, scratch,
                                 u->to_shard);
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
    u->op.group = zs__comm_group_name(zs->shard_comm);
    u->zs = zs;
    u->unit = unit;
    u->buf = buf;
}

void zs__unit_gather_submit(zs_ctx *zs, zs_unit *unit) {
    /* The shard it reads holds the last offloaded update's values first. */
    zs__update_unit_ready(zs, unit->index);
    zs__unit_op *u = &unit->gather;
    prepare(u, zs, unit, unit->live_params, "all_gather", run_gather);
    zs__gather_plan(zs, unit, &u->op); /* hpZ's node slice or every rank; qwZ's bytes */
    zs__engine_submit(zs->engine, &u->op);
}

void zs__unit_reduce_submit(zs_ctx *zs, zs_unit *unit, void *full, int all_reduce, int to_shard) {
    zs__unit_op *u = &unit->reduce;
    prepare(u, zs, unit, full, all_reduce ? "all_reduce" : "reduce_scatter", run_reduce);
    u->all_reduce = all_reduce;
    u->to_shard = to_shard;
    zs__reduce_plan(zs, unit, &u->op); /* qgZ's payload */
    unit->grad.full = full;
    unit->grad.state = ZS__GRAD_IN_FLIGHT;
    unit->grad.reduced_by = &u->op;
    zs__engine_submit(zs->engine, &u->op);
}
