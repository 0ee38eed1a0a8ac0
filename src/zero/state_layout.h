/* Where each parameter's optimizer state and compute-dtype copy live
 * (state_layout.c): pure arithmetic over the plan and the ground's buffers,
 * no collective, no wait. Every room that touches the state stands on it. */
#ifndef ZS_ZERO_STATE_LAYOUT_H
#define ZS_ZERO_STATE_LAYOUT_H

#include <stdint.h>
#include "backend/backend.h"
#include "zeroshard.h"

/* Where element `element` of parameter `param` lives (state_io.c): its
 * index in the optimizer-state arrays (the full layout in stage 0, the
 * shard in stages 1-3), and its compute-dtype value in the parameter
 * buffer (full in stages 0-2, the shard in stage 3; owned elements only in
 * stage 3; NULL with offload.params = "nvme", where the master on NVMe is
 * the only copy). */
int64_t zs__state_index(const zs_ctx *zs, int param, int64_t element);
/* The elements [*first, *end) of a parameter whose optimizer state this
 * rank keeps and updates: all of them in stage 0 (every rank holds full
 * state), its owned slice in stages 1-3. 0 when there are none (a frozen
 * parameter has no state). */
int zs__state_range(const zs_ctx *zs, int param, int64_t *first, int64_t *end);
/* The same elements whatever the parameter's state: the range this rank
 * writes when it sets the parameter (zs_params_import), frozen or not. */
int zs__param_range(const zs_ctx *zs, int param, int64_t *first, int64_t *end);
/* Unit u's part of the state index space, [*first, *end). */
void zs__unit_state_range(const zs_ctx *zs, int unit, int64_t *first, int64_t *end);
void *zs__param_at(const zs_ctx *zs, int param, int64_t element);
/* The buffer holding unit u's owned parameters (params_full, or
 * params_shard in stage 3; NULL with offload.params = "nvme") and, in *at,
 * the index there of the parameter of the unit's first state element: the
 * unit's state [first, end) is elements [*at, *at + end - first). */
zs__buf *zs__unit_owned_params(zs_ctx *zs, int unit, int64_t *at);

#endif
