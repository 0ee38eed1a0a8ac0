/* Stage-3 prefetch: gathering units before the program asks for them, so
 * that the all-gather of the next unit runs while the program computes on
 * this one (DeepSpeed ZeRO-3's trace-based prefetch; FSDP2's implicit
 * forward/backward prefetch).
 *
 * The order is what the program did, one order per kind of pass (the kinds of pass below:
 * training micro-steps, ended by zs_step, and evaluation passes, between
 * zs_eval_begin and zs_eval_end): every zs_fetch of a pass is recorded (tied
 * weights appear twice, backward in reverse), and each fetch of the next
 * pass of that kind is checked against the recording. After a fetch at
 * position k, the units at positions k+1, k+2, ... are gathered ahead while
 * they fit: the bytes gathered ahead stay within zero.prefetch_bytes, the
 * count within zero.max_live_units, and the carve must fit the live budget
 * at once (a prefetch never waits). Every input of that decision is the same
 * on every rank (program order, sizes, and a budget whose carves are returned
 * only at points where the runtime waits), so every rank issues the same
 * gathers and the collectives stay in step.
 *
 * The first training micro-step starts at zs_build, so its recording also
 * holds whatever the program fetched before training (reading the initial
 * weights, say). Gathering ahead along it would gather, after the forward,
 * the unit those earlier fetches continued with, which the backward does not
 * want: so an order recorded from zs_build is only checked, and is followed
 * ahead once a pass has repeated it (or a pass that started at zs_step has
 * replaced it). A pass's order is never gathered ahead across its end.
 *
 * A fetch that differs from the recording (another unit, or more fetches)
 * cancels what was gathered ahead, turns prefetching off until the pass
 * ends, and is reported once per kind of pass by a warning that names the
 * position and both units; results do not change, only overlap. zs_prefetch
 * lets a program state a unit itself.
 *
 * Floor (src/floors.txt): Owns struct zs__prefetch (the fetch orders and the
 * pass kind); calls the carves (carves.h) below it; residency calls it from
 * above.
 */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "zero/carves.h"
#include "zero/ground.h"
#include "zero/prefetch.h"

/* The kinds of pass whose fetch orders are recorded apart: training
 * micro-steps (ended by zs_step) and evaluation passes (zs_eval_begin ..
 * zs_eval_end), so that validating between steps is another order, not a
 * departure from the training one. */
typedef enum zs__pass {
    ZS__PASS_TRAIN = 0,
    ZS__PASS_EVAL = 1,
    ZS__PASS_COUNT
} zs__pass;

/* One kind of pass's fetch order: every pass is recorded; at its end the
 * recording becomes the order to follow, unless the pass followed the
 * current one (which is then confirmed). */
typedef struct zs__fetch_order {
    int *order, *recorded;       /* the order followed; this pass's fetches */
    int len, recorded_len, pos;
    int capacity;                /* of both arrays, allocated at zs_build (a fetch allocates nothing) */
    int state;                   /* recording, verifying (gathering ahead), off until the pass ends */
    int confirmed;               /* a whole pass followed `order` */
    int anchored;                /* `order` was recorded from a pass's first fetch (not from
                                    zs_build, where fetches before training also land) */
    int warned;
    int lost;                    /* this pass fetched more than `capacity` units: not adopted */
} zs__fetch_order;

/* The room's state (zs_ctx.prefetch), from zs_build to zs_destroy. */
struct zs__prefetch {
    zs__fetch_order orders[ZS__PASS_COUNT];
    zs__pass pass;               /* the kind of pass fetches belong to now */
    int64_t bytes_in_flight;     /* gathered ahead and not fetched yet */
};

enum { ORDER_RECORDING = 0, ORDER_VERIFYING = 1, ORDER_OFF = 2 };

static const char *pass_noun(zs__pass pass) {
    return pass == ZS__PASS_EVAL ? "evaluation pass" : "micro-step";
}

static zs__fetch_order *current(zs_ctx *zs) { return &zs->prefetch->orders[zs->prefetch->pass]; }

/* Every pass's fetches are recorded into o->recorded; at its end the
 * recording becomes the order to follow unless the pass followed the
 * current one (then that order is confirmed). */
static int record(zs__fetch_order *o, int unit) {
    if (o->recorded_len == o->capacity) return 0;
    o->recorded[o->recorded_len++] = unit;
    return 1;
}

/* Returns a unit gathered ahead: waits for its gather and gives the carve back. */
static zs_status drop_prefetched(zs_ctx *zs, zs_unit *unit) {
    zs_status st = zs__engine_wait(zs->engine, &unit->gather.op);
    zs__prefetch_taken(zs, unit);
    zs__params_return(zs, unit);
    return st;
}

void zs__prefetch_taken(zs_ctx *zs, zs_unit *unit) {
    unit->prefetched = 0;
    zs->prefetch->bytes_in_flight -= (int64_t)zs__unit_bytes(zs, unit);
}

int zs__prefetch_pending(const zs_ctx *zs) {
    return zs->prefetch && zs->prefetch->bytes_in_flight > 0;
}

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
    zs__fetch_order *o = current(zs);
    const int k = o->pos++;
    /* The recording's room was allocated at zs_build, so a fetch allocates
     * nothing (an allocation failing on one rank would leave the others in
     * its gather). A pass with more fetches than that room (the same on
     * every rank: they fetch alike) fetches on demand from there on and is
     * not adopted. */
    if (!o->lost && !record(o, unit->index)) {
        ZS_DEBUG("zs_fetch('%s'): more than %d fetches in one pass; gathering ahead is off "
                 "until the pass ends", unit->name, o->capacity);
        o->lost = 1;
        o->state = ORDER_OFF;
    }
    if (o->lost) return ZS_OK;
    if (o->state != ORDER_VERIFYING) return ZS_OK;
    if (k < o->len && o->order[k] == unit->index) return ZS_OK;
    /* The program went another way: what was gathered ahead is not needed.
     * An order seen once (the first micro-step, which may include fetches
     * made before training) is simply recorded again; one that was followed
     * before is worth a warning. */
    const char *noun = pass_noun(zs->prefetch->pass);
    if (o->confirmed && !o->warned) {
        o->warned = 1;
        ZS_WARN("zs_fetch('%s'): fetch %d of this %s differs from the order the earlier %ss "
                "followed (%s); gathering ahead is off until it repeats, so fetches are on "
                "demand (results do not change). Programs whose order varies can state it with "
                "zs_prefetch; evaluation between steps is declared with zs_eval_begin and "
                "zs_eval_end.",
                unit->name, k + 1, noun, noun,
                k < o->len ? zs->units[o->order[k]]->name : "which fetched fewer units");
    } else {
        ZS_DEBUG("zs_fetch('%s'): fetch %d differs from the recorded order; prefetch off until "
                 "the %s ends", unit->name, k + 1, noun);
    }
    o->state = ORDER_OFF;
    return zs__prefetch_cancel(zs);
}

/* Gathers `unit` ahead if it is free to and it fits now, without waiting.
 * Returns 1 when issued. */
static int try_prefetch(zs_ctx *zs, zs_unit *unit) {
    if (unit->fetched || unit->prefetched || unit->live_params) return 0;
    const int64_t bytes = (int64_t)zs__unit_bytes(zs, unit);
    if (zs__carves_live_units(zs) >= zs->settings.zero.max_live_units) return 0;
    if (zs->prefetch->bytes_in_flight + bytes > zs->settings.zero.prefetch_bytes) return 0;
    if (zs__params_gather(zs, unit) != ZS_OK) {
        zs__clear_error(); /* it does not fit now: the program's fetch will gather it */
        return 0;
    }
    unit->prefetched = 1;
    zs->prefetch->bytes_in_flight += bytes;
    return 1;
}

void zs__prefetch_ahead(zs_ctx *zs) {
    const zs__fetch_order *o = current(zs);
    if (o->state != ORDER_VERIFYING || !(o->anchored || o->confirmed) ||
        zs->settings.zero.prefetch_bytes <= 0)
        return;
    for (int k = o->pos; k < o->len; k++) {
        zs_unit *next = zs->units[o->order[k]];
        if (next->prefetched) continue; /* already on its way */
        if (!try_prefetch(zs, next)) break;
    }
}

zs_status zs__prefetch_pass_end(zs_ctx *zs) {
    zs_status st = zs__prefetch_cancel(zs);
    zs__fetch_order *o = current(zs);
    const int followed = o->state == ORDER_VERIFYING && o->pos == o->len;
    if (o->lost) {
        /* Nothing trustworthy to follow: the next pass records afresh. */
        o->len = 0;
        o->confirmed = 0;
        o->anchored = 0;
        o->lost = 0;
    } else if (followed) {
        o->confirmed = 1;
    } else {
        /* A new order: this pass's, to be followed (and confirmed) next. It
         * began at a pass's first fetch unless it is the training order
         * recorded since zs_build. */
        int *t = o->order;
        o->order = o->recorded;
        o->recorded = t;
        o->len = o->recorded_len;
        o->confirmed = 0;
        o->anchored = zs->prefetch->pass != ZS__PASS_TRAIN || o->state != ORDER_RECORDING;
    }
    o->recorded_len = 0;
    o->state = ORDER_VERIFYING;
    o->pos = 0;
    return st;
}

zs_status zs__prefetch_create(zs_ctx *zs) {
    struct zs__prefetch *pf = zs__calloc(1, sizeof *pf);
    if (!pf)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_build: out of host memory for the fetch "
                        "orders of stage-3 prefetch");
    zs->prefetch = pf;
    /* Room for generous passes: every unit fetched 16 times (forward,
     * backward, recomputation, tied weights, fetches before training). */
    const int capacity = 16 * zs->unit_count + 1024;
    for (int p = 0; p < ZS__PASS_COUNT; p++) {
        zs__fetch_order *o = &pf->orders[p];
        o->order = zs__calloc((size_t)capacity, sizeof *o->order);
        o->recorded = zs__calloc((size_t)capacity, sizeof *o->recorded);
        if (!o->order || !o->recorded)
            return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_build: out of host memory for the fetch "
                            "orders of stage-3 prefetch (%d entries)", capacity);
        o->capacity = capacity;
    }
    return ZS_OK;
}

void zs__prefetch_destroy(zs_ctx *zs) {
    struct zs__prefetch *pf = zs->prefetch;
    if (!pf) return;
    for (int p = 0; p < ZS__PASS_COUNT; p++) {
        free(pf->orders[p].order);
        free(pf->orders[p].recorded);
    }
    free(pf);
    zs->prefetch = NULL;
}

int zs__prefetch_in_eval(const zs_ctx *zs) {
    return zs->prefetch && zs->prefetch->pass == ZS__PASS_EVAL;
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

/* Evaluation passes: fetches between zs_eval_begin and zs_eval_end follow
 * an order of their own. Units gathered ahead for the other kind of pass are
 * returned when the kind changes (the new pass fetches in its own order). */
static zs_status switch_pass(zs_ctx *zs, zs__pass to, const char *call) {
    if (!zs) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: context is NULL", call);
    if (!zs->built) return zs__fail(ZS_ERR_STATE, "%s: call zs_build first", call);
    if (to == ZS__PASS_EVAL && zs->prefetch->pass == ZS__PASS_EVAL)
        return zs__fail(ZS_ERR_STATE, "zs_eval_begin: an evaluation pass is open already; call "
                        "zs_eval_end first");
    if (to == ZS__PASS_TRAIN && zs->prefetch->pass != ZS__PASS_EVAL)
        return zs__fail(ZS_ERR_STATE, "zs_eval_end: no evaluation pass is open; call "
                        "zs_eval_begin first");
    /* A collective that failed in the background is reported by the next call. */
    ZS_CHECK(zs__engine_check(zs->engine));
    zs_status st = to == ZS__PASS_TRAIN ? zs__prefetch_pass_end(zs) : zs__prefetch_cancel(zs);
    zs->prefetch->pass = to;
    return st;
}

zs_status zs_eval_begin(zs_ctx *zs) { return switch_pass(zs, ZS__PASS_EVAL, "zs_eval_begin"); }

zs_status zs_eval_end(zs_ctx *zs) { return switch_pass(zs, ZS__PASS_TRAIN, "zs_eval_end"); }
