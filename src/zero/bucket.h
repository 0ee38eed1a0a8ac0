/* Gradient buckets (bucket.c, comm.bucket_bytes): the room owns its state
 * (struct zs__buckets, private), created with the residency at zs_build. */
#ifndef ZS_ZERO_BUCKET_H
#define ZS_ZERO_BUCKET_H

#include <stdint.h>
#include "zeroshard.h"

/* Buckets (bucket.c): zs_grads_ready hands a unit's reduction to
 * zs__bucket_add, which submits it alone (large units, buckets off) or
 * queues it with the next units' for one collective; zs__bucket_flush
 * submits what is queued (before any wait on a queued unit, and at
 * zs_step); zs__bucket_step_end empties the micro-step's buckets once
 * everything is drained. */
zs_status zs__bucket_create(zs_ctx *zs, int64_t staging_numel);
void zs__bucket_destroy(zs_ctx *zs);
void zs__bucket_add(zs_ctx *zs, zs_unit *unit, void *full, int all_reduce, int to_shard);
void zs__bucket_flush(zs_ctx *zs);
void zs__bucket_step_end(zs_ctx *zs);

#endif
