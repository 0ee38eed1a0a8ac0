/* zs_step: end a micro-step; at an accumulation boundary agree that every
 * rank is ready, measure the gradient (norm and overflow in one pass),
 * agree on overflow, clip, update this rank's shard with the fused optimizer
 * pass, and gather parameters where the stage keeps them full.
 *
 * Floor (src/floors.txt): Owns nothing; calls the rooms of a step below it:
 * residency (its end), the optimizer pass, the state's moves, the job's
 * votes, agreement.
 */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "zero/agree.h"
#include "zero/ground.h"
#include "zero/job.h"
#include "zero/residency.h"
#include "zero/schedule.h"
#include "zero/state_io.h"
#include "zero/step.h"
#include "zero/step_fault.h"
#include "zero/update.h"

/* PyTorch's clip_grad_norm_ adds this to the norm before dividing, so a zero
 * gradient never divides by zero; matching it keeps clipped runs comparable. */
#define ZS_CLIP_EPSILON 1e-6

/* Checks the call order on this rank. A failure is not returned at once: the
 * ranks first agree (one small all-reduce), so that a mistake on one rank
 * fails every rank instead of leaving the others in a collective. */
/* The room's state (zs_ctx.norms), from zs_build to zs_destroy: what the
 * one sum_squares_many call of a step reads and writes, allocated once so a
 * step allocates nothing. */
typedef struct zs__step_norms {
    double *unit_sums;           /* [unit_count] squared norms of this rank's owned gradients */
    const void **ptrs;           /* [unit_count] each unit's owned gradient, */
    zs_dtype *dtypes;            /* its dtype */
    int64_t *counts;             /* and its elements */
} zs__step_norms;

zs_status zs__step_create(zs_ctx *zs) {
    zs__step_norms *n = zs__calloc(1, sizeof *n);
    if (!n) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_build: out of host memory");
    zs->norms = n;
    const size_t units = (size_t)(zs->unit_count ? zs->unit_count : 1);
    n->unit_sums = zs__calloc((size_t)zs->unit_count, sizeof *n->unit_sums);
    n->ptrs = zs__calloc(units, sizeof *n->ptrs);
    n->dtypes = zs__calloc(units, sizeof *n->dtypes);
    n->counts = zs__calloc(units, sizeof *n->counts);
    if (!n->unit_sums || !n->ptrs || !n->dtypes || !n->counts)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_build: out of host memory");
    return ZS_OK;
}

void zs__step_destroy(zs_ctx *zs) {
    zs__step_norms *n = zs->norms;
    if (!n) return;
    free(n->unit_sums);
    free(n->ptrs);
    free(n->dtypes);
    free(n->counts);
    free(n);
    zs->norms = NULL;
}

static zs_status local_readiness(zs_ctx *zs) {
    if (!zs->built) return zs__fail(ZS_ERR_STATE, "zs_step: call zs_build first");
    for (int u = 0; u < zs->unit_count; u++) {
        const zs_unit *unit = zs->units[u];
        if (unit->fetched)
            return zs__fail(ZS_ERR_STATE, "zs_step: unit '%s' is still fetched; release every "
                            "unit before zs_step", unit->name);
        if (!zs__grads_declared(unit) && !zs->plan->units[u].frozen)
            return zs__fail(ZS_ERR_STATE, "zs_step: unit '%s' has not called zs_grads_ready in "
                            "this micro-step; every unit must, even without a gradient",
                            unit->name);
    }
    return ZS_OK;
}

/* This rank's owned, reduced gradient of unit u and its dtype: the rank's
 * chunk of the full buffer in stages 0-1, its shard in stages 2-3. Same
 * elements, same order in every stage, so norms agree bitwise across stages.
 * A frozen unit has none: the start of the buffer, for a count of 0. */
static const void *owned_grad(const zs_ctx *zs, int u, zs_dtype *dtype) {
    const zs__plan_unit *pu = &zs->plan->units[u];
    const int64_t chunk = pu->frozen ? 0 : (int64_t)zs->shard_rank * pu->shard_numel;
    const int64_t full_at = pu->frozen ? 0 : pu->grad_full_offset + chunk;
    const int64_t shard_at = pu->frozen ? 0 : pu->grad_shard_offset;
    if (zs->settings.zero.stage < 2) {
        *dtype = zs->compute_dtype;
        /* Offloaded: the host copy, in the state layout (stage 0: the full
         * layout, whose owned chunk is at the same place as in grads_full). */
        if (zs->grads_host.ptr)
            return zs__buf_at(&zs->grads_host, zs->settings.zero.stage == 0 ? full_at : shard_at);
        return zs__buf_at(&zs->grads_full, full_at);
    }
    *dtype = zs->grad_shard_dtype;
    return zs__buf_at(&zs->grads_shard, shard_at);
}

/* The squared norm of every unit's owned gradient, each kept to locate an
 * overflow, with one wait on a device backend (sum_squares_many). A gradient
 * in host memory (offload) was copied there in stream order: the device's
 * queue drains first, then the host backend sums (the CPU and device
 * kernels add in the same order, so the bits are the same). */
static zs_status unit_norms(zs_ctx *zs, double *unit_sums) {
    for (int u = 0; u < zs->unit_count; u++) {
        zs->norms->ptrs[u] = owned_grad(zs, u, &zs->norms->dtypes[u]);
        zs->norms->counts[u] = zs->plan->units[u].frozen ? 0 : zs->plan->units[u].shard_numel;
    }
    const zs__buf *grads = zs->settings.zero.stage >= 2 ? &zs->grads_shard
                           : zs->grads_host.ptr         ? &zs->grads_host
                                                        : &zs->grads_full;
    zs__backend *be = grads->be;
    if (be != zs->backend) ZS_CHECK(zs->backend->ops->synchronize(zs->backend));
    return be->ops->sum_squares_many(be, zs->unit_count, zs->norms->ptrs, zs->norms->dtypes,
                                     zs->norms->counts, unit_sums);
}

/* After an overflow the ranks learn where it was found: the lowest rank
 * whose owned slice of the summed gradient holds a non-finite value, and its
 * first such unit. Each rank offers -(rank * units + unit), or a large
 * negative number when it saw none; the maximum is the lowest pair. Only
 * runs when an overflow happened.
 *
 * That rank is where the value landed, not the rank whose backward produced
 * it: gradients are summed over ranks in place before anything reads them,
 * and an infinity or NaN from any rank's input ends up in the sum's owner.
 * Naming the producer would mean checking every rank's whole input gradient
 * on every step (an extra pass, or a test inside the reduction's hot loop,
 * which NCCL and MPI's own reductions do not offer), so the warning says
 * exactly what is known. */
#define ZS_NO_OVERFLOW_KEY (-1e300)
static zs_status locate_overflow(zs_ctx *zs, const double *unit_sums, int *rank, int *unit) {
    double key = ZS_NO_OVERFLOW_KEY;
    for (int u = 0; u < zs->unit_count; u++)
        if (!isfinite(unit_sums[u])) {
            key = -((double)zs->rank * zs->unit_count + u);
            break;
        }
    ZS_CHECK(zs__comm_all_reduce_scalars(zs->comm, &key, 1, ZS_REDUCE_MAX, "overflow location"));
    *rank = *unit = -1;
    if (key > ZS_NO_OVERFLOW_KEY) {
        long long where = (long long)(-key);
        *rank = (int)(where / zs->unit_count);
        *unit = (int)(where % zs->unit_count);
    }
    return ZS_OK;
}

zs_status zs__step_run(zs_ctx *zs, zs_step_info *info) {
    /* The info as an inner micro-step leaves it (gradients keep
     * accumulating); a boundary fills in the rest below. */
    memset(info, 0, sizeof *info);
    info->step = zs->step;
    info->skipped_total = zs->skipped_total;
    info->loss_scale = info->next_loss_scale = zs__loss_scaler_scale(&zs->scaler);
    info->clip_coef = 1.0;
    info->overflow_rank = info->overflow_unit = -1;
    /* Everything that can fail on this rank alone happens before the
     * agreement and is folded into `local`, so that one rank's failure
     * fails every rank's zs_step with its cause (not, later, a timeout in a
     * collective the failed rank never reaches): the call order, the last
     * step's offloaded update, the micro-step's reductions, the norm. */
    zs_status local = local_readiness(zs);
    if (local == ZS_OK) local = zs__step_fault(zs->rank, zs->step + 1, "ready");
    /* The last step's offloaded update ends first (its stage-1/2 gathers
     * are collectives every rank runs here, ready or not). */
    zs_status finished = zs->built ? zs__update_finish(zs) : ZS_OK;
    if (local == ZS_OK) local = finished;
    /* Every collective the micro-step queued (reductions, gathers ahead)
     * completes here; the budget gets its held carves back in order. */
    const uint64_t wait_from = zs__trace_clock(zs->trace);
    const uint64_t comm_from = zs__clock_ns();
    if (zs->built) {
        zs_status drained = zs__residency_step_end(zs);
        if (local == ZS_OK) local = drained;
    }
    zs__trace_span(zs->trace, ZS_TRACE_COMPUTE, "wait reductions", wait_from,
                   zs__trace_clock(zs->trace), NULL);
    const int boundary = local == ZS_OK && zs_is_accumulation_boundary(zs);

    /* One all-reduce carries the squared norm of the owned gradient (which
     * is also the overflow check: any non-finite element makes it
     * non-finite), the number of ranks that failed, and the job's two
     * votes (zero/job.h): ranks that got a stop signal, ranks whose
     * checkpoint.every_seconds ran out; so a signal that reached one rank
     * stops every rank at the same step without another collective. Each
     * value is summed on its own, so the votes change no bit of the norm.
     * The units' sums come from one backend call, so a device backend
     * blocks the host once per step for all of them; each unit's value is
     * kept to locate an overflow, and they are added in unit order. */
    /* No norms before zs_build: local then says why, and nothing reads them. */
    double *unit_sums = zs->norms ? zs->norms->unit_sums : NULL;
    double sums[4] = {0.0, 0.0, 0.0, 0.0};
    if (boundary) {
        local = unit_norms(zs, unit_sums);
        /* Replicated across nodes, every replica holds the same owned
         * gradient: replica 0's alone counts, so the norm is the model's. */
        for (int u = 0; local == ZS_OK && zs->replica == 0 && u < zs->unit_count; u++)
            sums[0] += unit_sums[u];
    }
    sums[1] = local == ZS_OK ? 0.0 : 1.0;
    zs__job_votes(zs, &sums[2], &sums[3]);
    zs_status st = zs__comm_all_reduce_scalars(zs->comm, sums, 4, ZS_REDUCE_SUM, "step agreement");
    zs->times.comm_ns += zs__clock_ns() - comm_from;
    if (st != ZS_OK) return st;
    if (sums[1] > 0) {
        /* Every rank reports the lowest failing rank's cause. */
        st = zs__agree_status(zs, local, "zs_step");
        return st != ZS_OK ? st
                           : zs__fail(ZS_ERR_INTERNAL, "zs_step: %d rank(s) failed, but none "
                                      "reported a cause", (int)sums[1]);
    }
    zs__grads_new_micro_step(zs);
    if (!boundary) {
        zs->micro++;
        return ZS_OK;
    }
    zs->micro = 0;
    /* What the checkpoint policy (src/api.c) does after this step. */
    zs__job_decide(zs, sums[2], sums[3]);

    const zs__settings *s = &zs->settings;
    const double scale = zs__loss_scaler_scale(&zs->scaler);
    /* The summed gradient is divided by ranks x micro-steps x loss scale. */
    const double grad_div = (double)zs->world_size * (double)s->gradient_accumulation_steps * scale;
    const double norm = sqrt(sums[0]) / grad_div;
    const int overflow = s->precision.check_overflow && !isfinite(sums[0]);
    const double lr = zs__schedule_lr(s, zs->step + 1);
    double clip = 1.0;
    int overflow_rank = -1, overflow_unit = -1;

    if (overflow) {
        ZS_CHECK(locate_overflow(zs, unit_sums, &overflow_rank, &overflow_unit));
        zs->skipped_total++;
        ZS_WARN("step %lld skipped: the gradient of unit '%s', summed over ranks, holds a "
                "non-finite value at loss scale %g (found in the slice rank %d owns; any rank's "
                "backward may have produced it: the sum hides which) (%lld skipped in total)",
                (long long)(zs->step + zs->skipped_total),
                overflow_unit >= 0 ? zs->units[overflow_unit]->name : "?", scale, overflow_rank,
                (long long)zs->skipped_total);
        ZS_CHECK(zs__agree_status(zs, zs__reset_gradients(zs, 1), "zs_step (gradient reset)"));
    } else {
        if (s->gradient_clipping > 0 && norm > s->gradient_clipping)
            clip = s->gradient_clipping / (norm + ZS_CLIP_EPSILON);
        const uint64_t update_from = zs__trace_clock(zs->trace);
        const uint64_t optimizer_from = zs__clock_ns();
        /* The update (on the device; or its hand-over to the host) and the
         * device's gradient reset, agreed before the collectives that follow
         * (the stage-1/2 gathers inside, the next step's). */
        local = zs__update_run(zs, lr, grad_div, clip);
        if (local == ZS_OK) local = zs__reset_gradients(zs, 0);
        ZS_CHECK(zs__agree_status(zs, local, "optimizer step"));
        /* Agreed: the gathers (on the device, at once) or the host pass
         * start. What fails from here on (a gather, the host update) fails
         * on one rank that still runs every collective, and the next
         * zs_step or zs_save reports it on every rank. */
        zs__update_start(zs);
        zs->times.optimizer_ns += zs__clock_ns() - optimizer_from;
        zs__trace_span(zs->trace, ZS_TRACE_COMPUTE, "optimizer step", update_from,
                       zs__trace_clock(zs->trace), NULL);
        zs->step++;
        if (zs->step == 1)
            ZS_INFO("first optimizer step done %.2f s after zs_create began",
                    1e-9 * (double)(zs__clock_ns() - zs->created_ns));
    }
    /* Every rank runs the same update on the same agreed flag, so a
     * ZS_ERR_NUMERIC from the scaler happens on every rank at once. Messages
     * number steps as the loop sees them: optimizer steps attempted, skipped
     * ones included. */
    st = zs__loss_scaler_update(&zs->scaler, overflow, zs->step + zs->skipped_total);
    info->step = zs->step;
    info->boundary = 1;
    info->lr = lr;
    info->grad_norm = norm;
    info->clip_coef = clip;
    info->skipped = overflow;
    info->skipped_total = zs->skipped_total;
    info->loss_scale = scale;
    info->next_loss_scale = zs__loss_scaler_scale(&zs->scaler);
    info->overflow_rank = overflow_rank;
    info->overflow_unit = overflow_unit;
    return st;
}
