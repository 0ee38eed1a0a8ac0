/* A unit's collectives as comm-engine ops (unit_ops.c): the stage-3 gather,
 * the gradient reduction, and the reduce-scatter and replica sum that
 * buckets use too. */
#ifndef ZS_ZERO_UNIT_OPS_H
#define ZS_ZERO_UNIT_OPS_H

#include <stddef.h>

#include "zero/memory_plan.h"
#include "zeroshard.h"

/* zs_build: the staging the unit's collectives need, as the memory plan
 * sizes it (the NVMe gather's halves and fences with offload.params =
 * "nvme"; the fp32 reduction's buffer). zs__unit_ops_destroy frees it
 * (safe when never created; before the backend is destroyed). */
zs_status zs__unit_ops_create(zs_ctx *zs, const zs__memory_plan *mp);
void zs__unit_ops_destroy(zs_ctx *zs);
/* Submits the stage-3 gather of `unit` into unit->live_params. */
void zs__unit_gather_submit(zs_ctx *zs, zs_unit *unit);
/* Submits the reduction of `unit`'s gradient in `full` (stages 0-1: the
 * unit's part of the full gradient buffer; stages 2-3: its carve); the
 * gradient is then IN_FLIGHT. */
void zs__unit_reduce_submit(zs_ctx *zs, zs_unit *unit, void *full, int all_reduce, int to_shard);
/* A reduce-scatter over the shard group of a buffer of shard_size chunks
 * of `chunk` elements, then (the model replicated across nodes) the
 * all-reduce of the owned chunk between the replicas: the owned chunk ends
 * with the sum over every rank. */
zs_status zs__shard_reduce_scatter(zs_ctx *zs, void *buf, size_t chunk, zs_dtype dtype,
                                   const char *label);
/* The second half of that: a unit's owned slice (`count` elements, a
 * multiple of the replicas) summed between the replicas; a no-op when the
 * model is not replicated. Always one unit at a time, so the order in which
 * the ring adds an element depends on the unit alone (buckets keep the bits
 * of unit-by-unit reductions). */
zs_status zs__replica_all_reduce(zs_ctx *zs, void *slice, size_t count, zs_dtype dtype,
                                 const char *label);
/* A reduced unit's owned chunk into the gradient the optimizer reads (the
 * shard in stages 2-3, the host copy of an offloaded stage 0-1). */
zs_status zs__grad_into_owned(zs_ctx *zs, int unit, const void *full, const void *chunk,
                              zs_dtype chunk_dtype, void *scratch, int to_shard);

#endif
