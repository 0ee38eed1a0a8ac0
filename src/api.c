/* The public zs_build and zs_step: the runtime's mechanisms (zero/) with the
 * checkpoint policy the configuration asks for (the generation fence and
 * checkpoint.resume after the build; after a step, a save every
 * checkpoint.every applied steps or checkpoint.every_seconds, and the
 * agreed stop after a stop signal). This file sits above zero/ and
 * checkpoint/, so that the mechanism layer never calls the checkpoint layer
 * that is built on it. */
#include "checkpoint/checkpoint.h"
#include "checkpoint/fence.h"
#include "checkpoint/frozen_base.h"
#include "core/error.h"
#include "zero/ground.h"
#include "zero/job.h"
#include "zero/metrics.h"
#include "zero/model.h"
#include "zero/step.h"

zs_status zs_build(zs_ctx *zs) {
    if (!zs) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_build: context is NULL");
    zs_status st = zs__build_model(zs);
    /* An old launch fenced out by a newer one stops here, before it loads
     * or trains anything (checkpoint/fence.h). */
    if (st == ZS_OK) st = zs__checkpoint_fence(zs, "not starting: nothing loaded or committed");
    /* A declared frozen base (zs_set_frozen_base) over the initial values,
     * then checkpoint.resume over both: a checkpoint that recorded the base
     * is checked against it (load.c). */
    if (st == ZS_OK) st = zs__frozen_base_import(zs);
    /* checkpoint.resume: load a checkpoint over the initial values. */
    if (st == ZS_OK) st = zs__checkpoint_resume(zs);
    zs__job_failed(zs, "zs_build", st);
    return st;
}

/* After an optimizer step (the scaler's update for it included): one save
 * for whatever asks for it at this boundary, then the agreed stop. Every
 * input is agreed, so every rank saves, or not, alike:
 *   - checkpoint.every: after every N applied steps (not after a skipped
 *     step, which applied nothing);
 *   - checkpoint.every_seconds: some rank's timer ran out (zero/job.h);
 *   - a stop signal reached some rank: a save into checkpoint.dir if there
 *     is one, then zs_stop_requested turns nonzero on every rank. */
static zs_status checkpoint_policy(zs_ctx *zs, const zs_step_info *step) {
    if (!step->boundary) return ZS_OK;
    const int64_t every = zs->settings.checkpoint.every;
    const int periodic = !step->skipped && every > 0 && step->step % every == 0;
    const int stop = zs__job_stop_due(zs);
    const int has_dir = zs->settings.checkpoint.dir[0] != '\0';
    zs_status st = ZS_OK;
    if (periodic || zs__job_save_due(zs) || (stop && has_dir)) {
        const uint64_t saved_from = zs__clock_ns();
        st = zs_save(zs, NULL);
        zs->times.checkpoint_ns += zs__clock_ns() - saved_from;
    }
    if (stop) zs__job_stopped(zs, has_dir, st);
    return st;
}

zs_status zs_step(zs_ctx *zs, zs_step_info *info) {
    if (!zs) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_step: context is NULL");
    zs__trace_enter(zs);
    zs_step_info step;
    zs_status st = zs__step_run(zs, &step);
    if (st == ZS_OK) zs__job_progress(zs);
    if (st == ZS_OK) st = checkpoint_policy(zs, &step);
    /* The metrics line of a boundary includes the save's time. */
    if (st == ZS_OK && step.boundary) st = zs__metrics_step(zs, &step);
    if (info) *info = step;
    zs__job_failed(zs, "zs_step", st);
    zs__trace_leave(zs);
    return st;
}
