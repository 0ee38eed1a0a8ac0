/* Where a unit's full parameters and gradients live during a step, as the
 * program sees it: fetch/release (stage-3 all-gather into bytes carved from
 * the live budget), the gradient accessors, and grads_ready (the per-unit
 * reduction). The upper floor of the residency room: the carves themselves
 * are carves.c's; this file decides when to make room (held reductions
 * first, then what was gathered ahead) and calls prefetch, the buckets, the
 * unit's collectives and the optimizer pass's readiness, all below it.
 *
 * A unit may be fetched several times in one micro-step (tied weights: GPT-2
 * reads its token embedding first and last). Its gradient, once opened,
 * stays open across release and refetch, and is reduced once, at
 * zs_grads_ready after the last use.
 *
 * The same call sequence is valid in every stage; calls that a stage does not
 * need still check the order, so a loop that works in stage 0 also works in
 * stage 3. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "zero/bucket.h"
#include "zero/carves.h"
#include "zero/frozen_store.h"
#include "zero/ground.h"
#include "zero/quant_record.h"
#include "zero/prefetch.h"
#include "zero/residency.h"
#include "zero/update.h"

static zs_status check_unit(zs_ctx *zs, zs_unit *unit, const char *call) {
    if (!zs || !unit) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: context and unit are required", call);
    if (unit->ctx != zs)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s('%s'): the unit belongs to another context",
                        call, unit->name);
    if (!zs->built)
        return zs__fail(ZS_ERR_STATE, "%s('%s'): call zs_build first", call, unit->name);
    return ZS_OK;
}

/* "call('unit'): <why the budget refused>; <advice>" */
static zs_status budget_refused(zs_status st, const char *call, const zs_unit *unit,
                                const char *advice) {
    char why[1536];
    snprintf(why, sizeof why, "%s", zs_last_error());
    return zs__fail(st, "%s('%s'): %s; %s", call, unit->name, why, advice);
}

zs_status zs__residency_create(zs_ctx *zs, zs__backend *be, size_t live_budget,
                               int live_blocks, int64_t staging_numel) {
    ZS_CHECK(zs__carves_create(zs, be, live_budget, live_blocks));
    ZS_CHECK(zs__prefetch_create(zs));
    return zs__bucket_create(zs, staging_numel);
}

void zs__residency_destroy(zs_ctx *zs) {
    zs__bucket_destroy(zs);
    zs__prefetch_destroy(zs);
    zs__carves_destroy(zs);
}

/* Carves the unit's bytes of `kind` from the live budget; when they do not
 * fit, waits for the oldest held gradient reduction, returns its carve, and
 * tries again until nothing is held, then drops what was gathered ahead. */
static zs_status take_reclaiming(zs_ctx *zs, zs_unit *unit, zs__live_kind kind, void **out) {
    for (;;) {
        zs_status st = zs__carve_take(zs, unit, kind, out);
        if (st == ZS_OK) return st;
        /* First the oldest finished (or finishing) reductions, then what was
         * gathered ahead: the program's own needs come before prefetching. */
        if (zs__carves_held(zs) > 0) {
            ZS_CHECK(zs__reclaim_oldest(zs));
        } else if (zs__prefetch_pending(zs)) {
            ZS_CHECK(zs__prefetch_cancel(zs));
        } else {
            return st;
        }
    }
}

void zs__grads_new_micro_step(zs_ctx *zs) {
    for (int u = 0; u < zs->unit_count; u++) {
        if (zs__grads_declared(zs->units[u])) zs->units[u]->grad.state = ZS__GRAD_NONE;
        zs->units[u]->grad.open_unfetched = 0;
    }
}

/* Opens the unit's full gradient (stages 2-3): carved from the live budget
 * and zeroed, because backward adds into it. */
static zs_status open_grad(zs_ctx *zs, zs_unit *unit, const char *call) {
    /* Gradients still held by their reductions count too: return the
     * oldest first (it waits for it) before refusing. */
    while (zs__carves_open_grads(zs) >= zs->settings.zero.max_live_units &&
           zs__carves_held(zs) > 0)
        ZS_CHECK(zs__reclaim_oldest(zs));
    if (zs__carves_open_grads(zs) >= zs->settings.zero.max_live_units) {
        char open[512];
        zs__carves_holders(zs, 0, open, sizeof open);
        return zs__fail(ZS_ERR_STATE,
                        "%s('%s'): zero.max_live_units = %d unit gradients are open already "
                        "(%s); call zs_grads_ready on one of them first or raise "
                        "zero.max_live_units",
                        call, unit->name, zs->settings.zero.max_live_units, open);
    }
    void *grad = NULL;
    zs_status st = take_reclaiming(zs, unit, ZS__LIVE_GRAD, &grad);
    if (st != ZS_OK)
        return budget_refused(st, call, unit, "call zs_grads_ready or zs_release on a unit "
                              "first, or raise zero.live_bytes");
    st = zs->backend->ops->zero(zs->backend, grad, zs__unit_bytes(zs, unit));
    if (st != ZS_OK) {
        zs__carve_give(zs, grad);
        return st;
    }
    zs__grad_opened(zs, unit, grad);
    return ZS_OK;
}

zs_status zs__residency_step_end(zs_ctx *zs) {
    /* A micro-step cannot end inside an evaluation pass: its fetches would
     * be counted as the training order's. */
    zs_status open_pass = ZS_OK;
    if (zs__prefetch_in_eval(zs))
        open_pass = zs__fail(ZS_ERR_STATE, "zs_step: an evaluation pass is open; call "
                             "zs_eval_end before zs_step");
    zs__bucket_flush(zs);
    zs_status st = zs__engine_drain(zs->engine);
    while (zs__carves_held(zs) > 0) {
        zs_status reclaimed = zs__reclaim_oldest(zs);
        if (st == ZS_OK) st = reclaimed;
    }
    /* Stages 0-1 reduce in place, holding no carve: drained, they are done. */
    for (int u = 0; u < zs->unit_count; u++)
        if (zs->units[u]->grad.state == ZS__GRAD_IN_FLIGHT) zs->units[u]->grad.state = ZS__GRAD_DONE;
    zs__bucket_step_end(zs);
    if (open_pass != ZS_OK) return open_pass;
    zs_status prefetched = zs__prefetch_pass_end(zs);
    return st != ZS_OK ? st : prefetched;
}

zs_status zs_fetch(zs_ctx *zs, zs_unit *unit) {
    ZS_CHECK(check_unit(zs, unit, "zs_fetch"));
    /* A collective that failed in the background is reported by the next call. */
    ZS_CHECK(zs__engine_check(zs->engine));
    zs__trace_enter(zs);
    if (unit->fetched)
        return zs__fail(ZS_ERR_STATE, "zs_fetch('%s'): the unit is already fetched; release it "
                        "first", unit->name);
    if (zs->settings.zero.stage == 3) {
        /* Was it gathered ahead (and is this the order that was recorded)? */
        ZS_CHECK(zs__prefetch_check(zs, unit));
        if (!unit->prefetched) {
            /* Units gathered ahead give way to the program's own fetch. */
            const int max_live = zs->settings.zero.max_live_units;
            if (zs__carves_live_units(zs) >= max_live && zs__prefetch_pending(zs))
                ZS_CHECK(zs__prefetch_cancel(zs));
            if (zs__carves_live_units(zs) >= max_live) {
                char fetched[512];
                zs__carves_holders(zs, 1, fetched, sizeof fetched);
                return zs__fail(ZS_ERR_STATE,
                                "zs_fetch('%s'): zero.max_live_units = %d units are fetched "
                                "already (%s); release one first or raise zero.max_live_units",
                                unit->name, max_live, fetched);
            }
            void *full = NULL;
            zs_status st = take_reclaiming(zs, unit, ZS__LIVE_PARAMS, &full);
            if (st != ZS_OK)
                return budget_refused(st, "zs_fetch", unit, "release a unit or call "
                                      "zs_grads_ready first, or raise zero.live_bytes");
            zs__params_place(zs, unit, full);
        } else {
            zs__prefetch_taken(zs, unit);
        }
        const uint64_t wait_from = zs__trace_clock(zs->trace);
        const uint64_t comm_from = zs__clock_ns();
        zs_status st = zs__engine_wait(zs->engine, &unit->gather.op);
        zs->times.comm_ns += zs__clock_ns() - comm_from;
        if (zs->trace) {
            /* Exposed communication: the program waits for the gather. */
            zs__trace_args args = ZS_TRACE_ARGS_INIT;
            args.unit = unit->name;
            zs__trace_span(zs->trace, ZS_TRACE_COMPUTE, "wait all_gather", wait_from,
                           zs__clock_ns(), &args);
        }
        if (st != ZS_OK) {
            zs__params_return(zs, unit);
            return zs__fail_context(st, "zs_fetch('%s')", unit->name);
        }
        unit->fetched = 1;
        /* Gather what the recorded order fetches next, within the budget. */
        zs__prefetch_ahead(zs);
        zs__trace_leave(zs);
        return ZS_OK;
    }
    /* Stages 0-2: the parameters are in place once the last offloaded
     * update has copied this unit back (and, stages 1-2, gathered it). */
    zs__update_unit_ready(zs, unit->index);
    unit->fetched = 1;
    zs__trace_leave(zs);
    return ZS_OK;
}

zs_status zs_release(zs_ctx *zs, zs_unit *unit) {
    ZS_CHECK(check_unit(zs, unit, "zs_release"));
    if (!unit->fetched)
        return zs__fail(ZS_ERR_STATE, "zs_release('%s'): the unit is not fetched", unit->name);
    /* An open gradient stays open (tied weights: the unit is fetched again
     * later in the micro-step and adds to it); only parameters go. */
    /* Parameters do not change while fetched, so there is nothing to write
     * back: the bytes simply return to the budget. */
    if (unit->live_params) zs__params_return(zs, unit);
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
    if (zs->plan->units[unit->index].quantized) {
        zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_param_data('%s'): the parameter is stored "
                 "quantized (zero.frozen_storage); read it with zs_param_dequantize or "
                 "zs_param_quantized", p->name);
        return NULL;
    }
    if (unit->live_params)
        return (char *)unit->live_params + (size_t)pp->offset * zs_dtype_size(zs->compute_dtype);
    return zs__buf_at(&zs->params_full, zs->plan->units[unit->index].full_offset + pp->offset);
}

int zs_quantizes_frozen(const zs_ctx *zs) {
    return zs != NULL && zs->settings.zero.frozen_storage != ZS_FROZEN_COMPUTE;
}

int zs_param_is_quantized(const zs_param *p) {
    return p && p->ctx->plan && p->ctx->plan->units[p->unit->index].quantized;
}

/* The records of a fetched quantized parameter's unit: gathered (stage 3)
 * or kept (stages 0-2). */
static zs_status fetched_records(const zs_param *p, const char *what, const void **out) {
    const zs_ctx *zs = p->ctx;
    const zs_unit *unit = p->unit;
    if (!zs->plan || !zs->plan->units[unit->index].quantized)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s('%s'): the parameter is not stored "
                        "quantized (it needs ZS_PARAM_FROZEN | ZS_PARAM_QUANTIZE and "
                        "zero.frozen_storage = \"int8\" or \"nf4\")", what, p->name);
    if (!unit->fetched)
        return zs__fail(ZS_ERR_STATE, "%s('%s'): unit '%s' is not fetched; call zs_fetch first",
                        what, p->name, unit->name);
    *out = unit->live_params ? unit->live_params : zs__frozen_store_records(zs, unit->index);
    return ZS_OK;
}

zs_status zs_param_quantized(const zs_param *p, zs_quantized *out) {
    if (!p || !out)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_param_quantized: parameter and output "
                        "are required");
    const void *records = NULL;
    ZS_CHECK(fetched_records(p, "zs_param_quantized", &records));
    const zs__plan *plan = p->ctx->plan;
    const zs__plan_unit *pu = &plan->units[p->unit->index];
    const zs__plan_param *pp = &plan->params[p->index];
    *out = (zs_quantized){
        .bits = plan->quant_bits,
        .block = plan->quant_block,
        .records = plan->world_size,
        .shard_numel = pu->shard_numel,
        .record_bytes = pu->record_bytes,
        .scales_at = zs__quant_record_scales_at(pu->shard_numel, plan->quant_bits),
        .double_quant = plan->quant_double,
        .scale_group = plan->quant_double ? ZS_FROZEN_SCALE_GROUP : 0,
        .offset = pp->offset,
        .numel = pp->numel,
        .data = records,
    };
    return ZS_OK;
}

zs_status zs_param_dequantize(zs_ctx *zs, const zs_param *p, void *dst) {
    if (!zs || !p || !dst)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_param_dequantize: context, parameter and "
                        "destination are required");
    if (!zs_param_is_quantized(p)) { /* the compute dtype: a copy */
        const void *data = zs_param_data(p);
        if (!data) return zs__fail(ZS_ERR_STATE, "%s", zs_last_error());
        return zs->backend->ops->copy(zs->backend, dst, data,
                                      (size_t)p->numel * zs_dtype_size(zs->compute_dtype));
    }
    const void *records = NULL;
    ZS_CHECK(fetched_records(p, "zs_param_dequantize", &records));
    return zs__frozen_store_dequantize(zs, zs->backend, p->index, records, dst,
                                       zs->compute_dtype);
}

void *zs_param_grad(zs_param *p) {
    if (!p) {
        zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_param_grad: parameter is NULL");
        return NULL;
    }
    zs_ctx *zs = p->ctx;
    zs_unit *unit = p->unit;
    const zs__plan_param *pp = &zs->plan->params[p->index];
    if (p->flags & ZS_PARAM_FROZEN) {
        zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_param_grad('%s'): the parameter is frozen "
                 "(ZS_PARAM_FROZEN) and has no gradient; a backward through it computes only "
                 "its input's gradient", p->name);
        return NULL;
    }
    if (zs__grads_declared(unit)) {
        zs__fail(ZS_ERR_STATE, "zs_param_grad('%s'): unit '%s' already declared its gradient "
                 "ready in this micro-step", p->name, unit->name);
        return NULL;
    }
    if (zs__prefetch_in_eval(zs)) {
        zs__fail(ZS_ERR_STATE, "zs_param_grad('%s'): inside an evaluation pass, which has no "
                 "gradients; call zs_eval_end first", p->name);
        return NULL;
    }
    if (!unit->fetched && !unit->grad.open_unfetched) {
        zs__fail(ZS_ERR_STATE, "zs_param_grad('%s'): unit '%s' is not fetched; call zs_fetch "
                 "first (or zs_grads_open, for a backward that needs no parameters)", p->name,
                 unit->name);
        return NULL;
    }
    if (zs->settings.zero.stage < 2)
        return zs__buf_at(&zs->grads_full, zs->plan->units[unit->index].grad_full_offset + pp->offset);
    if (unit->grad.state == ZS__GRAD_NONE && open_grad(zs, unit, "zs_param_grad") != ZS_OK)
        return NULL;
    return (char *)unit->grad.carve + (size_t)pp->offset * zs_dtype_size(zs->compute_dtype);
}

zs_status zs_grads_open(zs_ctx *zs, zs_unit *unit) {
    ZS_CHECK(check_unit(zs, unit, "zs_grads_open"));
    if (zs->plan->units[unit->index].frozen)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_grads_open('%s'): the unit is frozen (every "
                        "parameter ZS_PARAM_FROZEN) and has no gradient to open", unit->name);
    if (zs__grads_declared(unit))
        return zs__fail(ZS_ERR_STATE, "zs_grads_open('%s'): the unit already declared its "
                        "gradient ready in this micro-step", unit->name);
    if (zs__prefetch_in_eval(zs))
        return zs__fail(ZS_ERR_STATE, "zs_grads_open('%s'): inside an evaluation pass, which "
                        "has no gradients; call zs_eval_end first", unit->name);
    /* Stages 2-3 carve it now, so a refusal (budget, max_live_units) is
     * this call's; stages 0-1 add into grads_full. Nothing is gathered. */
    if (zs->settings.zero.stage >= 2 && unit->grad.state == ZS__GRAD_NONE)
        ZS_CHECK(open_grad(zs, unit, "zs_grads_open"));
    unit->grad.open_unfetched = 1;
    return ZS_OK;
}

zs_status zs_grads_ready(zs_ctx *zs, zs_unit *unit) {
    ZS_CHECK(check_unit(zs, unit, "zs_grads_ready"));
    ZS_CHECK(zs__engine_check(zs->engine));
    zs__trace_enter(zs);
    if (zs__grads_declared(unit))
        return zs__fail(ZS_ERR_STATE, "zs_grads_ready('%s'): called twice in one micro-step",
                        unit->name);
    if (zs__prefetch_in_eval(zs))
        return zs__fail(ZS_ERR_STATE, "zs_grads_ready('%s'): inside an evaluation pass, which "
                        "has no gradients; call zs_eval_end first", unit->name);
    const int stage = zs->settings.zero.stage;
    const zs__plan_unit *pu = &zs->plan->units[unit->index];
    if (pu->frozen) {
        /* No gradient, no reduction: declared, nothing else (zs_step asks
         * frozen units for no declaration either). */
        unit->grad.state = ZS__GRAD_DONE;
        zs__trace_leave(zs);
        return ZS_OK;
    }
    if (stage < 2) {
        /* Stages 0-1 accumulate micro-steps in the full buffer (backward adds)
         * and reduce once, at the boundary. Stage 0 all-reduces as
         * reduce-scatter + all-gather, so each element is summed in exactly
         * the order the other stages' reduce-scatter uses. The reduction
         * runs on the comm engine while backward goes on; zs_step waits. */
        if (zs_is_accumulation_boundary(zs))
            zs__bucket_add(zs, unit, zs__buf_at(&zs->grads_full, pu->grad_full_offset), stage == 0, 0);
        else
            unit->grad.state = ZS__GRAD_DONE; /* accumulating in grads_full */
    } else {
        /* A unit whose backward produced no gradient on this rank still takes
         * part in the reduction, with zeros. */
        if (unit->grad.state == ZS__GRAD_NONE) ZS_CHECK(open_grad(zs, unit, "zs_grads_ready"));
        /* The carve stays held by the reduction (it still counts among the
         * open gradients) until the runtime waits for it. */
        zs__grad_hold(zs, unit);
        zs__bucket_add(zs, unit, unit->grad.carve, 0, 1);
    }
    zs__trace_leave(zs);
    /* In synchronous mode the reduction has run already: its failure is
     * this call's. */
    return zs__engine_check(zs->engine);
}
