/* The live budget and its carves (carves.h): the one place where carves
 * of the live budget are taken, counted and given back, whoever asks: the
 * program's fetch (residency.c), a gather ahead (prefetch.c), a reduction
 * that completed. Owns struct zs__carves; calls the unit's collectives
 * (unit_ops.h) and the buckets (bucket.h), both below it. */
#include "zero/carves.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "zero/bucket.h"
#include "zero/ground.h"
#include "zero/live.h"
#include "zero/unit_ops.h"

struct zs__carves {
    zs__live live;               /* the budget itself (zero.live_bytes) */
    int live_units;              /* stage 3: units whose parameters are carved (fetched or
                                    gathered ahead; <= zero.max_live_units) */
    int live_units_peak;
    int open_grads;              /* stages 2-3: gradients carved now, OPEN to IN_FLIGHT
                                    (<= zero.max_live_units) */
    /* Units whose gradient carve a submitted reduction still holds, oldest
     * first: returned only where the runtime waits for them (a carve that
     * does not fit, zs_step), so the budget's state, and with it every
     * prefetch decision, is the same on every rank. [unit_count] */
    zs_unit **held;
    int held_count;
};

zs_status zs__carves_create(zs_ctx *zs, zs__backend *be, size_t budget, int max_blocks) {
    zs__carves *c = zs__calloc(1, sizeof *c);
    const size_t n = (size_t)(zs->unit_count ? zs->unit_count : 1);
    zs_unit **held = zs__calloc(n, sizeof *held);
    if (!c || !held) {
        free(c);
        free(held);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_build: out of host memory for the list of held "
                        "gradients");
    }
    c->held = held;
    zs->carves = c;
    return zs__live_create(&c->live, be, budget, max_blocks);
}

void zs__carves_destroy(zs_ctx *zs) {
    zs__carves *c = zs->carves;
    if (!c) return;
    zs__live_destroy(&c->live);
    free(c->held);
    free(c);
    zs->carves = NULL;
}

void zs__carves_scratch(const zs_ctx *zs, void **ptr, size_t *bytes) {
    *ptr = zs->carves ? zs->carves->live.storage.ptr : NULL;
    *bytes = zs->carves ? zs->carves->live.capacity : 0;
}

void zs__carves_report(const zs_ctx *zs, int *live_units, int *live_units_peak,
                       size_t *budget, size_t *carved_peak) {
    const zs__carves *c = zs->carves;
    *live_units = c ? c->live_units : 0;
    *live_units_peak = c ? c->live_units_peak : 0;
    *budget = c ? c->live.capacity : 0;
    *carved_peak = c ? c->live.carved_peak : 0;
}

int zs__carves_live_units(const zs_ctx *zs) { return zs->carves->live_units; }
int zs__carves_open_grads(const zs_ctx *zs) { return zs->carves->open_grads; }
int zs__carves_held(const zs_ctx *zs) { return zs->carves->held_count; }

void zs__carves_holders(const zs_ctx *zs, int params, char *out, size_t cap) {
    size_t used = 0;
    out[0] = '\0';
    for (int u = 0; u < zs->unit_count && used < cap; u++) {
        const zs_unit *unit = zs->units[u];
        if (!(params ? unit->live_params != NULL : unit->grad.carve != NULL)) continue;
        int n = snprintf(out + used, cap - used, "%s'%s'", used ? ", " : "", unit->name);
        if (n < 0) break;
        used += (size_t)n;
    }
}

zs_status zs__carve_take(zs_ctx *zs, zs_unit *unit, zs__live_kind kind, void **out) {
    return zs__live_take(&zs->carves->live, unit->name, kind, zs__unit_bytes(zs, unit), out);
}

void zs__carve_give(zs_ctx *zs, void *carve) { zs__live_give(&zs->carves->live, carve); }

void zs__params_place(zs_ctx *zs, zs_unit *unit, void *full) {
    zs__carves *c = zs->carves;
    unit->live_params = full;
    c->live_units++;
    if (c->live_units > c->live_units_peak) c->live_units_peak = c->live_units;
    zs__unit_gather_submit(zs, unit);
}

zs_status zs__params_gather(zs_ctx *zs, zs_unit *unit) {
    void *full = NULL;
    ZS_CHECK(zs__carve_take(zs, unit, ZS__LIVE_PARAMS, &full));
    zs__params_place(zs, unit, full);
    return ZS_OK;
}

void zs__params_return(zs_ctx *zs, zs_unit *unit) {
    zs__live_give(&zs->carves->live, unit->live_params);
    unit->live_params = NULL;
    zs->carves->live_units--;
}

void zs__grad_opened(zs_ctx *zs, zs_unit *unit, void *grad) {
    unit->grad.carve = grad;
    unit->grad.state = ZS__GRAD_OPEN;
    zs->carves->open_grads++;
}

void zs__grad_hold(zs_ctx *zs, zs_unit *unit) {
    zs__carves *c = zs->carves;
    c->held[c->held_count++] = unit;
}

zs_status zs__reclaim_oldest(zs_ctx *zs) {
    zs__carves *c = zs->carves;
    ZS_ASSERT(c->held_count > 0);
    zs_unit *unit = c->held[0];
    memmove(c->held, c->held + 1, sizeof *c->held * (size_t)(c->held_count - 1));
    c->held_count--;
    if (unit->grad.state == ZS__GRAD_QUEUED) zs__bucket_flush(zs);
    const uint64_t comm_from = zs__clock_ns();
    zs_status st = zs__engine_wait(zs->engine, unit->grad.reduced_by);
    zs->times.comm_ns += zs__clock_ns() - comm_from;
    zs__live_give(&c->live, unit->grad.carve);
    unit->grad.carve = NULL;
    unit->grad.state = ZS__GRAD_DONE;
    c->open_grads--;
    return st;
}
