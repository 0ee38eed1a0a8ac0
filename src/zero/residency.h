/* The private shape of what a step keeps live (residency.c, prefetch.c,
 * bucket.c, unit_ops.c): a unit gradient's life cycle, the counts of units
 * holding live-budget carves, the gradients a reduction still holds, the
 * open bucket, and the fetch orders prefetch follows. Each part is a struct
 * of its own inside zs_ctx, written by the file that owns it (zs__live, the
 * budget itself, is zero/live.h). */
#ifndef ZS_ZERO_RESIDENCY_H
#define ZS_ZERO_RESIDENCY_H

#include <stdint.h>

#include "backend/backend.h"
#include "comm/engine.h"
#include "zeroshard.h"

/* One unit's gradient in a micro-step. The state only moves forward, then
 * back to NONE when the micro-step ends (zs__grads_new_micro_step):
 *   NONE       untouched in this micro-step
 *   OPEN       backward adds into it: stages 2-3 a carve of the live budget
 *              (kept across release and refetch, for tied weights); stages
 *              0-1 never open one (they add into grads_full)
 *   QUEUED     zs_grads_ready called; waiting in the open bucket
 *   IN_FLIGHT  its reduction is submitted to the comm engine (stages 2-3:
 *              the carve stays held until the runtime waits for it)
 *   DONE       reduced where the optimizer reads it (the shard, or the owned
 *              chunk of grads_full), the carve given back; stages 0-1 between
 *              accumulation boundaries: left in grads_full to accumulate */
typedef enum zs__grad_state {
    ZS__GRAD_NONE = 0,
    ZS__GRAD_OPEN,
    ZS__GRAD_QUEUED,
    ZS__GRAD_IN_FLIGHT,
    ZS__GRAD_DONE
} zs__grad_state;

typedef struct zs__unit_grad {
    zs__grad_state state;
    void *carve;                 /* stages 2-3, OPEN to IN_FLIGHT: from the live budget */
    void *full;                  /* QUEUED, IN_FLIGHT: what the reduction reads (the carve,
                                    or the unit's part of grads_full) */
    zs__engine_op *reduced_by;   /* IN_FLIGHT: the op that reduces it, its own or its bucket's */
    int open_unfetched;          /* zs_grads_open: zs_param_grad answers while the unit is
                                    not fetched, until the micro-step ends */
} zs__unit_grad;

/* Units holding carves of the live budget (residency.c). */
typedef struct zs__residency {
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
} zs__residency;

/* comm.bucket_bytes (bucket.c): units whose reduction waits for the bucket
 * to fill, in zs_grads_ready order, and the buffer the bucket is packed into
 * ([2 x bucket_bytes], tag comm; only where buckets apply). */
typedef struct zs__buckets {
    zs_unit **members;           /* [unit_count]: buckets of this micro-step, one after another */
    int used, open_first;        /* the open bucket is members [open_first, used) */
    int64_t open_bytes;
    int open_all_reduce, open_to_shard;
    struct zs__bucket_op *ops;   /* [unit_count]: one per flushed bucket, reused per micro-step */
    int ops_used;
    zs__buf staging;
} zs__buckets;

/* The kinds of pass whose fetch orders are recorded apart: training
 * micro-steps (ended by zs_step) and evaluation passes (zs_eval_begin ..
 * zs_eval_end), so that validating between steps is another order, not a
 * departure from the training one. */
typedef enum zs__pass {
    ZS__PASS_TRAIN = 0,
    ZS__PASS_EVAL = 1,
    ZS__PASS_COUNT
} zs__pass;

/* One kind of pass's fetch order (prefetch.c): every pass is recorded; at
 * its end the recording becomes the order to follow, unless the pass
 * followed the current one (which is then confirmed). */
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

typedef struct zs__prefetch {
    zs__fetch_order orders[ZS__PASS_COUNT];
    zs__pass pass;               /* the kind of pass fetches belong to now */
    int64_t bytes_in_flight;     /* gathered ahead and not fetched yet */
} zs__prefetch;

#endif
