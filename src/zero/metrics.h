/* The metrics file (log.metrics_file, metrics.c): one JSON line per
 * optimizer step, written by rank 0, with the step's figures and the
 * program's scalars. A step's line is kept until the next step ends (or the
 * context closes), so that zs_log_scalar_previous can add what the program
 * learns after zs_step returned (a loss read from the device without a wait
 * of its own). The room owns struct zs__metrics (private); the step's times
 * it reports are the ground's (zs__step_times), added to by the rooms that
 * wait. */
#ifndef ZS_ZERO_METRICS_H
#define ZS_ZERO_METRICS_H

#include "zeroshard.h"

/* Opened at zs_create on every rank (rank 0 opens the file); closed, with
 * the last line written, at zs_destroy (safe when never opened). */
zs_status zs__metrics_open(zs_ctx *zs);
void zs__metrics_close(zs_ctx *zs);
/* A line at every optimizer step; the step's times start again from 0. */
zs_status zs__metrics_step(zs_ctx *zs, const zs_step_info *info);

#endif
