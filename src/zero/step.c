/* zs_step: end a micro-step; at an accumulation boundary agree that every
 * rank is ready, measure the gradient (norm and overflow in one pass),
 * agree on overflow, clip, update this rank's shard with the fused optimizer
 * pass, and gather parameters where the stage keeps them full. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "zero/ctx.h"

/* PyTorch's clip_grad_norm_ adds this to the norm before dividing, so a zero
 * gradient never divides by zero; matching it keeps clipped runs comparable. */
#define ZS_CLIP_EPSILON 1e-6

/* Checks the call order on this rank. A failure is not returned at once: the
 * ranks first agree (one small all-reduce), so that a mistake on one rank
 * fails every rank instead of leaving the others in a collective. */
static zs_status local_readiness(zs_ctx *zs) {
    if (!zs->built) return zs__fail(ZS_ERR_STATE, "zs_step: call zs_build first");
    for (int u = 0; u < zs->unit_count; u++) {
        const zs_unit *unit = zs->units[u];
        if (unit->fetched)
            return zs__fail(ZS_ERR_STATE, "zs_step: unit '%s' is still fetched; release every "
                            "unit before zs_step", unit->name);
        if (!unit->grads_declared)
            return zs__fail(ZS_ERR_STATE, "zs_step: unit '%s' has not called zs_grads_ready in "
                            "this micro-step; every unit must, even without a gradient",
                            unit->name);
    }
    return ZS_OK;
}

/* This rank's owned, reduced gradient of unit u and its dtype: the rank's
 * chunk of the full buffer in stages 0-1, its shard in stages 2-3. Same
 * elements, same order in every stage, so norms agree bitwise across stages. */
static const void *owned_grad(const zs_ctx *zs, int u, zs_dtype *dtype) {
    const zs__plan_unit *pu = &zs->plan->units[u];
    if (zs->settings.zero.stage < 2) {
        *dtype = zs->compute_dtype;
        return zs__buf_at(&zs->grads_full, pu->full_offset + (int64_t)zs->rank * pu->shard_numel);
    }
    *dtype = zs->grad_shard_dtype;
    return zs__buf_at(&zs->grads_shard, pu->shard_offset);
}

static zs_k_optim_kind kernel_kind(zs__optimizer_kind kind) {
    switch (kind) {
    case ZS_OPTIMIZER_SGD: return ZS_K_OPTIM_SGD;
    case ZS_OPTIMIZER_ADAM: return ZS_K_OPTIM_ADAM;
    case ZS_OPTIMIZER_ADAMW: return ZS_K_OPTIM_ADAMW;
    }
    return ZS_K_OPTIM_ADAMW;
}

/* One optimizer pass: the scalars of this step and where updated
 * parameters go. */
typedef struct update_pass {
    zs_ctx *zs;
    zs_k_optim_kind kind;
    zs_k_optim_scalars with_decay, no_decay;
    int mixed;          /* a compute dtype other than fp32 */
    int offload;        /* the state is on the host or NVMe: new parameters are uploaded */
    int params_on_nvme; /* ... except when the master on NVMe is the only copy */
    int64_t chunk;      /* most elements per upload (the staging) */
    int param;          /* NVMe sweep: the first parameter not yet finished */
} update_pass;

/* Elements [first, first + n) of parameter i, given its state there (m and
 * v NULL when the optimizer keeps none; master NULL in fp32 training
 * without offload, where the parameters are the master). */
static zs_status update_piece(update_pass *u, int i, int64_t first, int64_t n, float *master,
                              float *m, float *v) {
    zs_ctx *zs = u->zs;
    const int stage = zs->settings.zero.stage;
    const zs__plan_param *pp = &zs->plan->params[i];
    const zs__plan_unit *pu = &zs->plan->units[pp->unit];
    const size_t elem = zs_dtype_size(zs->compute_dtype);
    void *param = zs__param_at(zs, i, first);
    /* The owned, reduced gradient: the full buffer in stages 0-1, the shard
     * (at the state's index) in stages 2-3. */
    const zs_dtype grad_dtype = stage < 2 ? zs->compute_dtype : zs->grad_shard_dtype;
    const void *grad = stage < 2 ? zs__buf_at(&zs->grads_full, pu->full_offset + pp->offset + first)
                                 : zs__buf_at(&zs->grads_shard, zs__state_index(zs, i, first));
    zs_k_optim_scalars scalars = (zs->params[i]->flags & ZS_PARAM_NO_DECAY) ? u->no_decay
                                                                            : u->with_decay;
    for (int64_t c = 0; c < n; c += u->chunk) {
        const int64_t k = n - c < u->chunk ? n - c : u->chunk;
        float *master_at = (master ? master : (float *)param) + c;
        void *param_at = param ? (char *)param + (size_t)c * elem : NULL;
        zs__update_args args = {
            .kind = u->kind,
            .master = master_at,
            /* Offloaded: bf16/fp16 parameters are written to the staging
             * (then copied), fp32 ones are the master chunk itself. */
            .param = u->mixed && !u->params_on_nvme
                         ? (u->offload ? zs->offload_staging.ptr : param_at) : NULL,
            .param_dtype = zs->compute_dtype,
            .grad = (const char *)grad + (size_t)c * zs_dtype_size(grad_dtype),
            .grad_dtype = grad_dtype,
            .m = m ? m + c : NULL,
            .v = v ? v + c : NULL,
            .count = k,
            .scalars = scalars,
        };
        ZS_CHECK(zs->backend->ops->optimizer_update(zs->backend, &args));
        if (u->offload && !u->params_on_nvme)
            ZS_CHECK(zs->backend->ops->upload(zs->backend, param_at,
                                              u->mixed ? zs->offload_staging.ptr : (void *)master_at,
                                              (size_t)k * elem));
    }
    return ZS_OK;
}

/* The NVMe sweep's visitor: the parameters' pieces inside one chunk of the
 * state index space. Parameters' state ranges increase with their index, so
 * a cursor finds them. */
static zs_status update_chunk(void *ctx, int64_t first, int64_t count, float *const *arrays) {
    update_pass *u = ctx;
    zs_ctx *zs = u->zs;
    const int64_t end = first + count;
    for (; u->param < zs->param_count; u->param++) {
        int64_t b, e;
        if (!zs__state_range(zs, u->param, &b, &e)) continue;
        const int64_t lo_state = zs__state_index(zs, u->param, b);
        const int64_t hi_state = lo_state + (e - b);
        if (lo_state >= end) break;            /* starts in a later chunk */
        const int64_t lo = lo_state > first ? lo_state : first;
        const int64_t hi = hi_state < end ? hi_state : end;
        if (lo < hi) {
            const size_t at = (size_t)(lo - first);
            ZS_CHECK(update_piece(u, u->param, b + (lo - lo_state), hi - lo, arrays[0] + at,
                                  arrays[1] ? arrays[1] + at : NULL,
                                  arrays[2] ? arrays[2] + at : NULL));
        }
        if (hi_state > end) break;             /* continues in the next chunk */
    }
    return ZS_OK;
}

/* The fused pass over every element this rank updates. */
static zs_status update_parameters(zs_ctx *zs, double lr, double grad_div, double clip) {
    const zs__settings *s = &zs->settings;
    const size_t elem = zs_dtype_size(zs->compute_dtype);
    update_pass u = {.zs = zs, .kind = kernel_kind(s->optimizer.kind),
                     .mixed = zs->compute_dtype != ZS_DTYPE_FP32,
                     .offload = zs->offload_staging.ptr != NULL,
                     .params_on_nvme = zs->params_on_nvme};
    /* Offloaded: the pass runs over host state in chunks that fit the
     * staging, and each chunk of new parameters goes to the device. */
    u.chunk = u.offload ? (int64_t)((size_t)zs->offload_staging.count * sizeof(float) / elem)
                        : INT64_MAX;
    const int64_t t = zs->step + 1;
    u.with_decay = zs_k_optim_scalars_for_step(
        u.kind, lr, s->optimizer.beta1, s->optimizer.beta2, s->optimizer.eps,
        s->optimizer.weight_decay, s->optimizer.momentum, s->optimizer.nesterov, t, grad_div, clip);
    u.no_decay = zs_k_optim_scalars_for_step(
        u.kind, lr, s->optimizer.beta1, s->optimizer.beta2, s->optimizer.eps, 0.0,
        s->optimizer.momentum, s->optimizer.nesterov, t, grad_div, clip);
    /* NVMe: the state streams through the swap's buffers, chunk by chunk.
     * The ranks agree before the gathers that follow, so a disk failing on
     * one rank fails every rank with its message instead of leaving the
     * others in a collective. */
    if (zs->nvme)
        return zs__agree_status(zs, zs__nvme_state_sweep(zs->nvme, update_chunk, &u),
                                "optimizer step (offload.optimizer = nvme)");
    for (int i = 0; i < zs->param_count; i++) {
        int64_t b, e;
        if (!zs__state_range(zs, i, &b, &e)) continue;
        ZS_CHECK(update_piece(&u, i, b, e - b, zs__state_ptr(zs, ZS_STATE_MASTER, i, b),
                              zs__state_ptr(zs, ZS_STATE_M, i, b), zs__state_ptr(zs, ZS_STATE_V, i, b)));
    }
    return ZS_OK;
}

zs_status zs__gather_full_params(zs_ctx *zs) {
    const int stage = zs->settings.zero.stage;
    if (stage != 1 && stage != 2) return ZS_OK;
    for (int u = 0; u < zs->unit_count; u++) {
        const zs__plan_unit *pu = &zs->plan->units[u];
        ZS_CHECK(zs__comm_all_gather(zs->comm, zs__buf_at(&zs->params_full, pu->full_offset),
                                     (size_t)pu->shard_numel, zs->compute_dtype,
                                     zs->units[u]->name));
    }
    return ZS_OK;
}

/* Gradients start from zero in the next micro-step (backward adds). */
static zs_status reset_gradients(zs_ctx *zs) {
    zs__buf *grads = zs->settings.zero.stage < 2 ? &zs->grads_full : &zs->grads_shard;
    ZS_CHECK(zs->backend->ops->zero(zs->backend, grads->ptr,
                                    (size_t)grads->count * zs_dtype_size(grads->dtype)));
    return ZS_OK;
}

/* After an overflow the ranks learn where: the lowest rank with a non-finite
 * unit, and its first such unit. Each rank offers -(rank * units + unit), or
 * a large negative number when it saw none; the maximum is the lowest pair.
 * Only runs when an overflow happened. */
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

zs_status zs_step(zs_ctx *zs, zs_step_info *info) {
    if (!zs) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_step: context is NULL");
    zs__trace_enter(zs);
    zs_status local = local_readiness(zs);
    /* Every collective the micro-step queued (reductions, gathers ahead)
     * completes here; the budget gets its held carves back in order. */
    const uint64_t wait_from = zs__trace_clock(zs->trace);
    const uint64_t comm_from = zs__metrics_now();
    if (zs->built) ZS_CHECK(zs__residency_step_end(zs));
    zs__trace_span(zs->trace, ZS_TRACE_COMPUTE, "wait reductions", wait_from,
                   zs__trace_clock(zs->trace), NULL);
    char local_message[1024];
    snprintf(local_message, sizeof local_message, "%s", zs_last_error());
    const int boundary = local == ZS_OK && zs_is_accumulation_boundary(zs);

    /* One all-reduce carries the squared norm of the owned gradient (which
     * is also the overflow check: any non-finite element makes it
     * non-finite) and the number of ranks that are not ready. The units'
     * sums come from one backend call, so a device backend blocks the host
     * once per step for all of them (not once per unit); each unit's value
     * is kept to locate an overflow, and they are added in unit order. */
    double *unit_sums = zs->unit_sums;
    double sums[2] = {0.0, local == ZS_OK ? 0.0 : 1.0};
    if (boundary) {
        for (int u = 0; u < zs->unit_count; u++) {
            zs->norm_ptrs[u] = owned_grad(zs, u, &zs->norm_dtypes[u]);
            zs->norm_counts[u] = zs->plan->units[u].shard_numel;
        }
        ZS_CHECK(zs->backend->ops->sum_squares_many(zs->backend, zs->unit_count, zs->norm_ptrs,
                                                    zs->norm_dtypes, zs->norm_counts, unit_sums));
        for (int u = 0; u < zs->unit_count; u++) sums[0] += unit_sums[u];
    }
    zs_status st = zs__comm_all_reduce_scalars(zs->comm, sums, 2, ZS_REDUCE_SUM, "step agreement");
    zs->metrics.comm_ns += zs__metrics_now() - comm_from;
    if (st != ZS_OK || local != ZS_OK || sums[1] > 0) {
        if (st != ZS_OK) return st;
        if (local != ZS_OK) return zs__fail(local, "%s", local_message);
        return zs__fail(ZS_ERR_STATE, "zs_step: %d rank(s) were not ready for the step (this "
                        "rank was); see their error messages", (int)sums[1]);
    }
    for (int u = 0; u < zs->unit_count; u++) zs->units[u]->grads_declared = 0;
    if (!boundary) {
        /* An inner micro-step: gradients keep accumulating. */
        zs->micro++;
        if (info) {
            memset(info, 0, sizeof *info);
            info->step = zs->step;
            info->skipped_total = zs->skipped_total;
            info->loss_scale = info->next_loss_scale = zs__loss_scaler_scale(&zs->scaler);
            info->grad_norm = 0.0;
            info->clip_coef = 1.0;
            info->overflow_rank = info->overflow_unit = -1;
        }
        return ZS_OK;
    }
    zs->micro = 0;

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
        ZS_WARN("step %lld skipped: non-finite gradient on rank %d in unit '%s' at loss scale %g "
                "(%lld skipped in total)",
                (long long)(zs->step + zs->skipped_total), overflow_rank,
                overflow_unit >= 0 ? zs->units[overflow_unit]->name : "?", scale,
                (long long)zs->skipped_total);
    } else {
        if (s->gradient_clipping > 0 && norm > s->gradient_clipping)
            clip = s->gradient_clipping / (norm + ZS_CLIP_EPSILON);
        const uint64_t update_from = zs__trace_clock(zs->trace);
        const uint64_t optimizer_from = zs__metrics_now();
        ZS_CHECK(update_parameters(zs, lr, grad_div, clip));
        ZS_CHECK(zs__gather_full_params(zs));
        zs->metrics.optimizer_ns += zs__metrics_now() - optimizer_from;
        zs__trace_span(zs->trace, ZS_TRACE_OPTIMIZER, "optimizer step", update_from,
                       zs__trace_clock(zs->trace), NULL);
        zs->step++;
    }
    ZS_CHECK(reset_gradients(zs));
    /* Every rank runs the same update on the same agreed flag, so a
     * ZS_ERR_NUMERIC from the scaler happens on every rank at once. Messages
     * number steps as the loop sees them: optimizer steps attempted, skipped
     * ones included. */
    st = zs__loss_scaler_update(&zs->scaler, overflow, zs->step + zs->skipped_total);
    if (info) {
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
    }
    /* checkpoint.every: a checkpoint after every N applied steps, taken here
     * so that the scaler's update for this step is part of it. */
    const int64_t every = s->checkpoint.every;
    if (st == ZS_OK && !overflow && every > 0 && zs->step % every == 0) {
        const uint64_t saved_from = zs__metrics_now();
        st = zs_save(zs, NULL);
        zs->metrics.checkpoint_ns += zs__metrics_now() - saved_from;
    }
    if (st == ZS_OK) {
        zs_step_info line = {.step = zs->step, .boundary = 1, .lr = lr, .grad_norm = norm,
                             .clip_coef = clip, .skipped = overflow,
                             .skipped_total = zs->skipped_total, .loss_scale = scale};
        st = zs__metrics_step(zs, &line);
    }
    zs__trace_leave(zs);
    return st;
}
