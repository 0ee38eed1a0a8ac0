/* The loss scaler: the factor the loss is multiplied by before backward so that
 * small fp16 gradients do not flush to zero, and how it adapts to overflow.
 *
 * Semantics follow DeepSpeed's DynamicLossScaler (skip every overflowing step;
 * the hysteresis-th overflow since the last refill, and each after it, halves
 * the scale; after `window` good steps in a row the next one doubles it), plus zeroshard's policy for the minimum (precision.on_min_scale)
 * and a bound on consecutive skipped steps (precision.max_consecutive_skips),
 * so a run never loops forever skipping updates.
 *
 * Which mode runs follows the configuration:
 *   - fp16 with precision.loss_scale = 0: dynamic, starting at
 *     2^precision.initial_scale_power;
 *   - precision.loss_scale > 0 (any dtype): static at that value;
 *   - bf16 or fp32 with precision.loss_scale = 0: static at 1.
 * A static scaler never changes its scale but still counts consecutive
 * overflowing steps, so the skip bound holds in every mode.
 *
 * Pure host arithmetic: no MPI, no allocation. The caller (zs_step) agrees
 * across ranks whether the step overflowed and calls update once per optimizer
 * step with the same value on every rank, so every rank holds the same scale. */
#ifndef ZS_MIXED_PRECISION_LOSS_SCALER_H
#define ZS_MIXED_PRECISION_LOSS_SCALER_H

#include <stdint.h>

#include "core/config.h"
#include "zeroshard.h"

/* The largest scale: the top of precision.loss_scale's range. Dynamic growth
 * stops here, so a run whose gradients are all zero (which never overflow)
 * cannot double the scale into infinity. 2^64 is far above any scale an fp16
 * gradient survives: the smallest fp16 subnormal (2^-24) times 2^64 already
 * exceeds the fp16 maximum. */
#define ZS_LOSS_SCALE_MAX 18446744073709551616.0 /* 2^64 */

/* The whole state is plain values, so it can be copied, compared and saved in
 * a checkpoint field by field. Fields are read through the accessors below. */
typedef struct zs__loss_scaler {
    /* Configuration, fixed at init. */
    int dynamic;                  /* 1 when the scale adapts (fp16, loss_scale = 0) */
    double min_scale;             /* precision.min_loss_scale (dynamic only) */
    int64_t window;               /* precision.loss_scale_window */
    int hysteresis;               /* precision.hysteresis */
    int consecutive_hysteresis;   /* precision.consecutive_hysteresis */
    zs__min_scale_policy on_min_scale;
    int64_t max_consecutive_skips;

    /* State; cur_iter and last_overflow_iter count update calls, not the
     * caller's step numbers (DeepSpeed's cur_iter and last_overflow_iter). */
    double scale;                 /* the scale in force for the next step */
    int64_t cur_iter;             /* updates done so far */
    int64_t last_overflow_iter;   /* cur_iter of the last overflow; -1 before any */
    int cur_hysteresis;           /* overflows still tolerated before halving */
    int64_t consecutive_overflows;/* overflowing updates in a row, ended by a good one */
    int64_t overflows_total;      /* overflowing updates since init */
} zs__loss_scaler;

/* Sets up the scaler for `settings` (see the modes above). Never fails: the
 * configuration module has already checked every range. */
void zs__loss_scaler_init(zs__loss_scaler *s, const zs__settings *settings);

/* Records one optimizer step: `overflow` is nonzero when any gradient of the
 * step was non-finite (the step was skipped). `step` is the caller's step
 * number, used only in messages. Returns ZS_ERR_NUMERIC (with a message that
 * names the step, the scale and the count of consecutive overflows, and what
 * to change) when
 *   - the dynamic scale is already at precision.min_loss_scale, no hysteresis
 *     is left, and precision.on_min_scale = "abort"; or
 *   - this overflow makes more than precision.max_consecutive_skips in a row.
 * On failure the scaler is left exactly as it was before the call. */
zs_status zs__loss_scaler_update(zs__loss_scaler *s, int overflow, int64_t step);

/* The scale to multiply the next step's loss by. */
double zs__loss_scaler_scale(const zs__loss_scaler *s);
/* 1 when the scale adapts to overflows, 0 when it is static. */
int zs__loss_scaler_is_dynamic(const zs__loss_scaler *s);
/* Overflowing steps in a row up to now (0 after a good step). */
int64_t zs__loss_scaler_consecutive_overflows(const zs__loss_scaler *s);
/* Overflowing steps since init. */
int64_t zs__loss_scaler_overflows_total(const zs__loss_scaler *s);
/* Overflows still tolerated before the next one halves the scale. */
int zs__loss_scaler_hysteresis_left(const zs__loss_scaler *s);

#endif
