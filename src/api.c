/* The public zs_build and zs_step: the runtime's mechanisms (zero/) with the
 * checkpoint policy the configuration asks for (checkpoint.resume after the
 * build, a save every checkpoint.every applied steps). This file sits above
 * zero/ and checkpoint/, so that the mechanism layer never calls the
 * checkpoint layer that is built on it. */
#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "zero/ctx.h"

zs_status zs_build(zs_ctx *zs) {
    if (!zs) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_build: context is NULL");
    ZS_CHECK(zs__build_model(zs));
    /* checkpoint.resume: load a checkpoint over the initial values. */
    return zs__checkpoint_resume(zs);
}

/* checkpoint.every: a checkpoint after every N applied steps, taken after
 * the step so that the scaler's update for that step is part of it. */
static zs_status periodic_save(zs_ctx *zs, const zs_step_info *step) {
    const int64_t every = zs->settings.checkpoint.every;
    if (!step->boundary || step->skipped || every <= 0 || step->step % every != 0) return ZS_OK;
    const uint64_t saved_from = zs__clock_ns();
    const zs_status st = zs_save(zs, NULL);
    zs->metrics.checkpoint_ns += zs__clock_ns() - saved_from;
    return st;
}

zs_status zs_step(zs_ctx *zs, zs_step_info *info) {
    if (!zs) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_step: context is NULL");
    zs__trace_enter(zs);
    zs_step_info step;
    zs_status st = zs__step_run(zs, &step);
    if (st == ZS_OK) st = periodic_save(zs, &step);
    /* The metrics line of a boundary includes the save's time. */
    if (st == ZS_OK && step.boundary) st = zs__metrics_step(zs, &step);
    if (info) *info = step;
    zs__trace_leave(zs);
    return st;
}
