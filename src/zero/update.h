/* The optimizer pass and its pipeline (update.c): the room that owns the
 * host optimizer's thread. */
#ifndef ZS_ZERO_UPDATE_H
#define ZS_ZERO_UPDATE_H

#include <stdint.h>
#include "zeroshard.h"

/* The optimizer pass (update.c). zs__update_run prepares one step's update
 * with these scalars (on the device: runs it), which zs_step then agrees on
 * across ranks; zs__update_start, after the agreement, starts what follows:
 * on the device the stage-1/2 gathers; offloaded, the pass by the host
 * backend, in forward (unit) order, on a thread of its own when
 * offload.overlap (it then returns at once), else inside the call, each
 * unit's new parameters going back to the device (and gathered in stages
 * 1-2) when the main thread first needs them:
 * zs__update_unit_ready(u) before unit u's parameters are read (a fetch, a
 * gather), zs__update_finish before anything that reads or writes the state
 * or every unit (zs_step, checkpoints, import, destroy). unit_ready never
 * fails (it runs the collectives every rank runs, whatever happened on this
 * rank): a failure after the agreement (the host update, a copy back, a
 * gather) is kept and returned by the next zs__update_finish, which the
 * next zs_step (or zs_save) agrees on across ranks, and stays until zs_load
 * (the state is then half updated). */
zs_status zs__update_create(zs_ctx *zs);
void zs__update_destroy(zs_ctx *zs);
zs_status zs__update_run(zs_ctx *zs, double lr, double grad_div, double clip);
void zs__update_start(zs_ctx *zs);
void zs__update_unit_ready(zs_ctx *zs, int unit);
zs_status zs__update_finish(zs_ctx *zs);
/* After zs_load replaced the state: a failed pass is forgotten. */
void zs__update_forget(zs_ctx *zs);
/* For the metrics: the last whole host pass (ms) and the bytes a step moves
 * between host and device with the optimizer offloaded. */
void zs__update_report(zs_ctx *zs, double *pass_ms, uint64_t *copied_bytes);

#endif
