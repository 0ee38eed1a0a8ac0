/* Stage-3 prefetch: gathering units before the program asks for them, so
 * that the all-gather of the next unit runs while the program computes on
 * this one (DeepSpeed ZeRO-3's trace-based prefetch; FSDP2's implicit
 * forward/backward prefetch).
 *
 * The order is what the program did: every zs_fetch of the first micro-step
 * is recorded (tied weights appear twice, backward in reverse), then each
 * later fetch is checked against it. After a fetch at position k, the units
 * at positions k+1, k+2, ... are gathered ahead while they fit: the bytes
 * gathered ahead stay within zero.prefetch_bytes, the count within
 * zero.max_live_units, and the carve must fit the live budget at once (a
 * prefetch never waits). Every input of that decision is the same on every
 * rank (program order, sizes, and a budget whose carves are returned only
 * at points where the runtime waits), so every rank issues the same gathers
 * and the collectives stay in step.
 *
 * A fetch that differs from the recording (another unit, or more fetches)
 * cancels what was gathered ahead, turns prefetching off until the next
 * zs_step, and is reported once by a warning that names the position and
 * both units; results do not change, only overlap. zs_prefetch lets a
 * program state a unit itself. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "zero/ctx.h"

enum { ORDER_RECORDING = 0, ORDER_VERIFYING = 1, ORDER_OFF = 2 };

/* Every micro-step's fetches are recorded into zs->recorded; at zs_step the
 * recording becomes the order to follow unless the micro-step followed the
 * current one (then that order is confirmed). */
static zs_status record(zs_ctx *zs, int unit) {
    /* Grown 64 entries at a time (a buffer swapped in from `order` is
     * resized the same way, so its old size never matters). */
    if (zs->recorded_len % 64 == 0) {
        int *grown = realloc(zs->recorded, sizeof *grown * (size_t)(zs->recorded_len + 64));
        if (!grown) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "prefetch order: out of host memory");
        zs->recorded = grown;
    }
    zs->recorded[zs->recorded_len++] = unit;
    return ZS_OK;
}

/* Returns a unit gathered ahead: waits for its gather and gives the carve back. */
static zs_status drop_prefetched(zs_ctx *zs, zs_unit *unit) {
    zs_status st = zs__engine_wait(zs->engine, &unit->gather.op);
    unit->prefetched = 0;
    zs->prefetch_bytes_in_flight -= (int64_t)zs__unit_bytes(zs, unit);
    zs__live_give(&zs->live, unit->live_params);
    unit->live_params = NULL;
    zs->live_units--;
    return st;
}

int zs__prefetch_pending(const zs_ctx *zs) { return zs->prefetch_bytes_in_flight > 0; }

zs_status zs__prefetch_cancel(zs_ctx *zs) {
    zs_status first = ZS_OK;
    for (int u = 0; u < zs->unit_count; u++) {
        zs_unit *unit = zs->units[u];
        if (!unit->prefetched) continue;
        zs_status st = drop_prefetched(zs, unit);
        if (first == ZS_OK) first = st;
    }
    return first;
}

zs_status zs__prefetch_check(zs_ctx *zs, zs_unit *unit) {
    const int k = zs->order_pos++;
    ZS_CHECK(record(zs, unit->index));
    if (zs->order_state != ORDER_VERIFYING) return ZS_OK;
    if (k < zs->order_len && zs->order[k] == unit->index) return ZS_OK;
    /* The program went another way: what was gathered ahead is not needed.
     * An order seen once (the first micro-step, which may include fetches
     * made before training) is simply recorded again; one that was followed
     * before is worth a warning. */
    if (zs->order_confirmed && !zs->order_warned) {
        zs->order_warned = 1;
        ZS_WARN("zs_fetch('%s'): fetch %d of this micro-step differs from the order the earlier "
                "micro-steps followed (%s); gathering ahead is off until it repeats, so fetches "
                "are on demand (results do not change). Programs whose order varies can state it "
                "with zs_prefetch.",
                unit->name, k + 1,
                k < zs->order_len ? zs->units[zs->order[k]]->name : "which fetched fewer units");
    } else {
        ZS_DEBUG("zs_fetch('%s'): fetch %d differs from the recorded order; prefetch off until "
                 "zs_step", unit->name, k + 1);
    }
    zs->order_state = ORDER_OFF;
    return zs__prefetch_cancel(zs);
}

/* Gathers `unit` ahead if it is free to and it fits now, without waiting.
 * Returns 1 when issued. */
static int try_prefetch(zs_ctx *zs, zs_unit *unit) {
    if (unit->fetched || unit->prefetched || unit->live_params) return 0;
    const size_t bytes = zs__unit_bytes(zs, unit);
    if (zs->live_units >= zs->settings.zero.max_live_units) return 0;
    if (zs->prefetch_bytes_in_flight + (int64_t)bytes > zs->settings.zero.prefetch_bytes) return 0;
    void *full = NULL;
    if (zs__live_take(&zs->live, unit->name, ZS__LIVE_PARAMS, bytes, &full) != ZS_OK) {
        zs__clear_error();
        return 0;
    }
    unit->live_params = full;
    unit->prefetched = 1;
    zs->live_units++;
    if (zs->live_units > zs->live_units_peak) zs->live_units_peak = zs->live_units;
    zs->prefetch_bytes_in_flight += (int64_t)bytes;
    zs__unit_gather_submit(zs, unit);
    return 1;
}

void zs__prefetch_ahead(zs_ctx *zs) {
    if (zs->order_state != ORDER_VERIFYING || zs->settings.zero.prefetch_bytes <= 0) return;
    for (int k = zs->order_pos; k < zs->order_len; k++) {
        zs_unit *next = zs->units[zs->order[k]];
        if (next->prefetched) continue; /* already on its way */
        if (!try_prefetch(zs, next)) break;
    }
}

zs_status zs__prefetch_step_end(zs_ctx *zs) {
    zs_status st = zs__prefetch_cancel(zs);
    const int followed = zs->order_state == ORDER_VERIFYING && zs->order_pos == zs->order_len;
    if (followed) {
        zs->order_confirmed = 1;
    } else {
        /* A new order: this micro-step's, to be followed (and confirmed) next. */
        int *t = zs->order;
        zs->order = zs->recorded;
        zs->recorded = t;
        zs->order_len = zs->recorded_len;
        zs->order_confirmed = 0;
    }
    zs->recorded_len = 0;
    zs->order_state = ORDER_VERIFYING;
    zs->order_pos = 0;
    return st;
}

zs_status zs_prefetch(zs_ctx *zs, zs_unit *unit) {
    if (!zs || !unit) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_prefetch: context and unit are required");
    if (unit->ctx != zs)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_prefetch('%s'): the unit belongs to another "
                        "context", unit->name);
    if (!zs->built) return zs__fail(ZS_ERR_STATE, "zs_prefetch('%s'): call zs_build first", unit->name);
    if (zs->settings.zero.stage != 3) return ZS_OK;
    (void)try_prefetch(zs, unit);
    return ZS_OK;
}
