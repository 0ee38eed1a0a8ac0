/* The loss scaler (see loss_scaler.h): DeepSpeed's dynamic loss-scaling rules
 * written against zs__settings, with zeroshard's bound on skipped steps. */
#include "mixed_precision/loss_scaler.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"

void zs__loss_scaler_init(zs__loss_scaler *s, const zs__settings *settings) {
    const double static_scale = settings->precision.loss_scale;
    *s = (zs__loss_scaler){0};
    /* Only fp16 needs an adaptive scale: bf16 has fp32's exponent range, so its
     * gradients neither underflow nor overflow for lack of a scale. */
    s->dynamic = settings->precision.dtype == ZS_DTYPE_FP16 && static_scale == 0.0;
    /* 2^p is exact in a double for every p the configuration allows (0..64). */
    s->scale = s->dynamic ? ldexp(1.0, settings->precision.initial_scale_power)
                          : (static_scale > 0.0 ? static_scale : 1.0);
    s->min_scale = settings->precision.min_loss_scale;
    s->window = settings->precision.loss_scale_window;
    s->hysteresis = settings->precision.hysteresis;
    s->consecutive_hysteresis = settings->precision.consecutive_hysteresis;
    s->on_min_scale = settings->precision.on_min_scale;
    s->max_consecutive_skips = settings->precision.max_consecutive_skips;
    s->cur_iter = 0;
    /* As if an overflow had happened just before the first step, so the first
     * growth comes after the same number of good steps as any later one. */
    s->last_overflow_iter = -1;
    s->cur_hysteresis = s->hysteresis;
}

/* The shortest decimal that reads back as `value` ("65536", "0.5", "1e-4"), so
 * messages show scales exactly without 17 digits of noise. */
static void format_scale(double value, char *out, size_t capacity) {
    for (int precision = 1; precision <= 17; precision++) {
        snprintf(out, capacity, "%.*g", precision, value);
        if (strtod(out, NULL) == value) return;
    }
}

/* What DeepSpeed does on an overflow, given that neither error applies. */
static void shrink(zs__loss_scaler *s) {
    if (s->hysteresis == 1 || s->cur_hysteresis == 1) {
        /* At the minimum this leaves the scale where it is, which is the
         * "continue" policy; "abort" was handled before the state changed. */
        s->scale = fmax(s->scale / 2.0, s->min_scale);
    } else {
        /* Tolerate this overflow: one fewer before the next halves the scale. */
        s->cur_hysteresis -= 1;
    }
    s->last_overflow_iter = s->cur_iter;
}

static void grow(zs__loss_scaler *s) {
    if (s->consecutive_hysteresis) s->cur_hysteresis = s->hysteresis;
    /* Good steps since the last overflow, not counting this one. */
    int64_t stable = (s->cur_iter - s->last_overflow_iter) - 1;
    if (stable > 0 && stable % s->window == 0) {
        if (!s->consecutive_hysteresis) s->cur_hysteresis = s->hysteresis;
        /* Doubling keeps a power of two a power of two, so unscaling stays
         * exact; the cap only matters when gradients are all zero. */
        s->scale = fmin(s->scale * 2.0, ZS_LOSS_SCALE_MAX);
    }
}

zs_status zs__loss_scaler_update(zs__loss_scaler *s, int overflow, int64_t step) {
    if (!overflow) {
        s->consecutive_overflows = 0;
        if (s->dynamic) grow(s);
        s->cur_iter += 1;
        return ZS_OK;
    }

    /* Both errors are decided before anything changes, so a failed update
     * leaves the scaler as it was (the caller may report its state). */
    const int64_t in_a_row = s->consecutive_overflows + 1;
    char scale[32];
    format_scale(s->scale, scale, sizeof scale);
    if (s->dynamic && (s->hysteresis == 1 || s->cur_hysteresis == 1) &&
        s->scale == s->min_scale && s->on_min_scale == ZS_MIN_SCALE_ABORT)
        return zs__fail(ZS_ERR_NUMERIC,
                        "step %" PRId64 ": gradients overflowed with the fp16 loss scale already at "
                        "its minimum %s (precision.min_loss_scale); consecutive overflowing steps: %" PRId64
                        "; stopping because precision.on_min_scale = "
                        "\"abort\". Lower the learning rate, check the data for bad samples, lower "
                        "precision.min_loss_scale, or train in bf16 (precision.dtype = \"bf16\"), "
                        "which needs no loss scale",
                        step, scale, in_a_row);
    if (in_a_row > s->max_consecutive_skips)
        return zs__fail(ZS_ERR_NUMERIC,
                        "step %" PRId64 ": %" PRId64 " consecutive steps had non-finite gradients "
                        "and were skipped, more than precision.max_consecutive_skips = %" PRId64
                        " (loss scale %s); training is not making progress. Lower the learning "
                        "rate, check the data and the model for NaN or Inf, or raise "
                        "precision.max_consecutive_skips if the loss scale needs longer to settle",
                        step, in_a_row, s->max_consecutive_skips, scale);

    s->consecutive_overflows = in_a_row;
    s->overflows_total += 1;
    if (s->dynamic) shrink(s);
    s->cur_iter += 1;
    return ZS_OK;
}

double zs__loss_scaler_scale(const zs__loss_scaler *s) { return s->scale; }

int zs__loss_scaler_is_dynamic(const zs__loss_scaler *s) { return s->dynamic; }

int64_t zs__loss_scaler_consecutive_overflows(const zs__loss_scaler *s) {
    return s->consecutive_overflows;
}

int64_t zs__loss_scaler_overflows_total(const zs__loss_scaler *s) { return s->overflows_total; }

int zs__loss_scaler_hysteresis_left(const zs__loss_scaler *s) { return s->cur_hysteresis; }
