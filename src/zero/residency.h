/* The residency room (residency.c over carves.c): where a unit's full
 * parameters and gradients live during a step. The public zs_fetch,
 * zs_release, zs_param_data, zs_param_grad, zs_grads_open and
 * zs_grads_ready are its; these are what the rooms above it (the build,
 * the step, the state after a load) call. */
#ifndef ZS_ZERO_RESIDENCY_H
#define ZS_ZERO_RESIDENCY_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "zeroshard.h"

/* zs_build: the live budget (`live_budget` bytes on `be`, at most
 * `live_blocks` carves at once), the held list, the fetch orders and the
 * buckets (staging_numel: the bucket staging's elements, 0 where buckets
 * do not apply). zs__residency_destroy frees them (zs_destroy, built or
 * not). */
zs_status zs__residency_create(zs_ctx *zs, zs__backend *be, size_t live_budget, int live_blocks,
                               int64_t staging_numel);
void zs__residency_destroy(zs_ctx *zs);
/* A new micro-step (after zs_step agreed, after zs_load): every declared
 * gradient goes back to NONE; an open one stays open. */
void zs__grads_new_micro_step(zs_ctx *zs);
/* At zs_step: waits for every queued collective, returns every held carve
 * and whatever was gathered ahead and not fetched, and ends the training
 * pass's fetch order. Fails (after all that) inside an evaluation pass. */
zs_status zs__residency_step_end(zs_ctx *zs);

#endif
