/* zs_step: agree that every rank is ready, measure the gradient norm, update
 * this rank's shard with the optimizer, and gather parameters where the stage
 * keeps them full. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "zero/ctx.h"

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
                            "this step; every unit must, even without a gradient", unit->name);
    }
    return ZS_OK;
}

/* This rank's owned, reduced gradient of unit u: the rank's chunk of the full
 * buffer in stages 0-1, its shard in stages 2-3. Same elements, same order in
 * every stage, so the norm is bitwise the same across stages. */
static const void *owned_grad(const zs_ctx *zs, int u) {
    const zs__plan_unit *pu = &zs->plan->units[u];
    if (zs->settings.zero.stage < 2)
        return zs__buf_at(&zs->grads_full, pu->full_offset + (int64_t)zs->rank * pu->shard_numel);
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

static float *state_at(const zs__buf *buf, int64_t index) {
    return buf->ptr ? (float *)zs__buf_at(buf, index) : NULL;
}

/* Runs the optimizer over every element this rank updates: its owned slice of
 * each parameter (stages 1-3), or every element (stage 0, where each rank
 * holds full state and identical reduced gradients). */
static zs_status update_parameters(zs_ctx *zs, double lr) {
    const zs__settings *s = &zs->settings;
    const zs__plan *plan = zs->plan;
    const int stage = s->zero.stage;
    const int64_t t = zs->step + 1;
    zs_k_optim_kind kind = kernel_kind(s->optimizer.kind);
    zs_k_optim_scalars with_decay = zs_k_optim_scalars_for_step(
        kind, lr, s->optimizer.beta1, s->optimizer.beta2, s->optimizer.eps,
        s->optimizer.weight_decay, s->optimizer.momentum, s->optimizer.nesterov, t,
        (double)zs->world_size, 1.0);
    zs_k_optim_scalars no_decay = zs_k_optim_scalars_for_step(
        kind, lr, s->optimizer.beta1, s->optimizer.beta2, s->optimizer.eps, 0.0,
        s->optimizer.momentum, s->optimizer.nesterov, t, (double)zs->world_size, 1.0);

    for (int i = 0; i < zs->param_count; i++) {
        const zs_param *p = zs->params[i];
        const zs__plan_param *pp = &plan->params[i];
        const zs__plan_unit *pu = &plan->units[pp->unit];
        int64_t b, e;
        if (stage == 0) {
            b = 0;
            e = p->numel;
        } else if (!zs__plan_owned_range(plan, i, zs->rank, &b, &e)) {
            continue;
        }
        /* Element b of the parameter, located in each buffer. */
        int64_t full_index = pu->full_offset + pp->offset + b;
        int64_t shard_index = pu->shard_offset + pp->offset + b - (int64_t)zs->rank * pu->shard_numel;
        int64_t state_index = stage == 0 ? full_index : shard_index;
        zs__update_args args = {
            .kind = kind,
            .master = stage < 3 ? zs__buf_at(&zs->params_full, full_index)
                                : zs__buf_at(&zs->params_shard, shard_index),
            .param = NULL,
            .param_dtype = zs->compute_dtype,
            .grad = stage < 2 ? zs__buf_at(&zs->grads_full, full_index)
                              : zs__buf_at(&zs->grads_shard, shard_index),
            .grad_dtype = zs->compute_dtype,
            .m = state_at(&zs->optim_m, state_index),
            .v = state_at(&zs->optim_v, state_index),
            .count = e - b,
            .scalars = (p->flags & ZS_PARAM_NO_DECAY) ? no_decay : with_decay,
        };
        ZS_CHECK(zs->backend->ops->optimizer_update(zs->backend, &args));
    }
    return ZS_OK;
}

zs_status zs_step(zs_ctx *zs, zs_step_info *info) {
    if (!zs) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_step: context is NULL");
    zs_status local = local_readiness(zs);
    char local_message[1024];
    snprintf(local_message, sizeof local_message, "%s", zs_last_error());

    /* One all-reduce carries both the squared norm of the owned gradient and
     * the number of ranks that are not ready. */
    double sums[2] = {0.0, local == ZS_OK ? 0.0 : 1.0};
    if (local == ZS_OK) {
        for (int u = 0; u < zs->unit_count; u++) {
            double part = 0.0;
            ZS_CHECK(zs->backend->ops->sum_squares(zs->backend, owned_grad(zs, u),
                                                   zs->compute_dtype,
                                                   zs->plan->units[u].shard_numel, &part));
            sums[0] += part;
        }
    }
    ZS_CHECK(zs__comm_all_reduce_scalars(zs->comm, sums, 2, ZS_REDUCE_SUM, "step agreement"));
    if (local != ZS_OK)
        return zs__fail(local, "%s", local_message);
    if (sums[1] > 0)
        return zs__fail(ZS_ERR_STATE, "zs_step: %d rank(s) were not ready for the step (this "
                        "rank was); see their error messages", (int)sums[1]);

    const int stage = zs->settings.zero.stage;
    const double lr = zs__schedule_lr(&zs->settings, zs->step + 1);
    ZS_CHECK(update_parameters(zs, lr));

    /* Stages 1-2 keep full parameters: every rank gathers the updated slices. */
    if (stage == 1 || stage == 2) {
        for (int u = 0; u < zs->unit_count; u++) {
            const zs__plan_unit *pu = &zs->plan->units[u];
            ZS_CHECK(zs__comm_all_gather(zs->comm, zs__buf_at(&zs->params_full, pu->full_offset),
                                         (size_t)pu->shard_numel, zs->compute_dtype,
                                         zs->units[u]->name));
        }
    }

    /* The next step's backward adds into zeroed gradients. */
    zs__buf *grads = stage < 2 ? &zs->grads_full : &zs->grads_shard;
    ZS_CHECK(zs->backend->ops->zero(zs->backend, grads->ptr,
                                    (size_t)grads->count * zs_dtype_size(grads->dtype)));
    for (int u = 0; u < zs->unit_count; u++) zs->units[u]->grads_declared = 0;

    zs->step++;
    if (info) {
        info->step = zs->step;
        info->lr = lr;
        /* The owned gradients are sums over ranks; the norm is of their mean. */
        info->grad_norm = sqrt(sums[0]) / (double)zs->world_size;
        info->skipped = 0;
        info->skipped_total = zs->skipped_total;
        info->loss_scale = 1.0;
    }
    return ZS_OK;
}
