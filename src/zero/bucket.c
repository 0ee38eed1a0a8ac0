/* Buckets (comm.bucket_bytes): the gradients of consecutive small units
 * reduced by one collective instead of one each (DDP's gradient buckets,
 * DeepSpeed's reduce_bucket_size), because a collective has a fixed cost
 * (latency, a message per ring step) that small units pay again and again.
 *
 * Same bits as unit by unit: the bucket is packed rank-interleaved, chunk r
 * of the bucket being the chunks r of its units one after another, so the
 * ring reduce-scatter sums every element in the same rank order as it would
 * in the unit's own collective (the ring's order depends only on which
 * rank owns the chunk). That holds for the ring algorithm and the compute
 * dtype; with comm.reduce_scatter = "mpi" (whose order may depend on the
 * message size), reduce_dtype = "fp32" or comm.quantize_grads (qgZ's
 * blocks are anchored to each unit's slices, and its hops are all-to-alls,
 * not a ring), units are reduced alone: the memory plan gives no staging.
 *
 * A bucket closes when it holds bucket_bytes or more, before a unit that is
 * not smaller than bucket_bytes, before any wait on one of its units, and
 * at zs_step. Its members are all < bucket_bytes, so it is < 2 x
 * bucket_bytes: the staging buffer's size.
 *
 * Floor (src/floors.txt): Owns struct zs__buckets; calls the unit's
 * collectives (unit_ops.h) below it.
 */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "zero/bucket.h"
#include "zero/ground.h"
#include "zero/unit_ops.h"

/* The room's state (zs_ctx.buckets), from zs_build to zs_destroy: units
 * whose reduction waits for the bucket to fill, in zs_grads_ready order,
 * and the buffer the bucket is packed into ([2 x bucket_bytes], tag comm;
 * only where buckets apply). */
typedef struct zs__buckets {
    zs_unit **members;           /* [unit_count]: buckets of this micro-step, one after another */
    int used, open_first;        /* the open bucket is members [open_first, used) */
    int64_t open_bytes;
    int open_all_reduce, open_to_shard;
    struct zs__bucket_op *ops;   /* [unit_count]: one per flushed bucket, reused per micro-step */
    int ops_used;
    zs__buf staging;
} zs__buckets;

typedef struct zs__bucket_op {
    zs__engine_op op;
    zs_ctx *zs;
    int first, count;        /* members in zs->buckets->members */
    int all_reduce, to_shard;
    char label[200];
} zs__bucket_op;

/* The memory plan sizes the staging only where buckets apply. */
static int enabled(const zs_ctx *zs) { return zs->buckets->staging.ptr != NULL; }

zs_status zs__bucket_create(zs_ctx *zs, int64_t staging_numel) {
    zs__buckets *b = zs__calloc(1, sizeof *b);
    if (!b) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "buckets: out of host memory");
    zs->buckets = b;
    const size_t n = (size_t)(zs->unit_count ? zs->unit_count : 1);
    b->members = zs__calloc(n, sizeof *b->members);
    b->ops = zs__calloc(n, sizeof *b->ops);
    if (!b->members || !b->ops) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "buckets: out of host memory");
    if (staging_numel <= 0) return ZS_OK;
    return zs__buf_alloc(zs->backend, &b->staging, ZS_MEM_COMM, zs->compute_dtype, staging_numel);
}

void zs__bucket_destroy(zs_ctx *zs) {
    zs__buckets *b = zs->buckets;
    if (!b) return;
    zs__buf_free(&b->staging);
    free(b->members);
    free(b->ops);
    free(b);
    zs->buckets = NULL;
}

void zs__bucket_step_end(zs_ctx *zs) {
    zs->buckets->used = zs->buckets->open_first = 0;
    zs->buckets->ops_used = 0;
}

/* On the comm thread: pack, reduce, unpack. */
static zs_status run_bucket(zs__engine_op *op) {
    zs__bucket_op *b = (zs__bucket_op *)op;
    zs_ctx *zs = b->zs;
    zs__backend *be = zs->backend;
    const size_t elem = zs_dtype_size(zs->compute_dtype);
    /* The shard group's chunks (the world's, but for hybrid sharding). */
    const int world = zs->shard_size;
    zs_unit **units = zs->buckets->members + b->first;
    size_t S = 0; /* elements of one rank's chunk of the bucket */
    for (int i = 0; i < b->count; i++) S += (size_t)zs->plan->units[units[i]->index].shard_numel;
    char *staging = zs->buckets->staging.ptr;
    /* Chunk r of the bucket = chunk r of every member, in order. */
    for (int r = 0; r < world; r++) {
        size_t at = (size_t)r * S;
        for (int i = 0; i < b->count; i++) {
            const size_t shard = (size_t)zs->plan->units[units[i]->index].shard_numel;
            ZS_CHECK(be->ops->copy(be, staging + at * elem,
                                   (char *)units[i]->grad.full + (size_t)r * shard * elem,
                                   shard * elem));
            at += shard;
        }
    }
    if (b->all_reduce) ZS_CHECK(zs__comm_all_reduce(zs->comm, staging, S, zs->compute_dtype, b->label));
    else ZS_CHECK(zs__comm_reduce_scatter(zs->shard_comm, staging, S, zs->compute_dtype, b->label));
    /* Back where each unit's reduction would have left it. */
    size_t off = 0;
    for (int i = 0; i < b->count; i++) {
        const zs__plan_unit *pu = &zs->plan->units[units[i]->index];
        const size_t shard = (size_t)pu->shard_numel;
        char *mine = (char *)units[i]->grad.full + (size_t)zs->shard_rank * shard * elem;
        /* Replicated across nodes: each member's slice on its own, as its
         * own reduction would (zs__replica_all_reduce). */
        if (!b->all_reduce)
            ZS_CHECK(zs__replica_all_reduce(zs, staging + ((size_t)zs->shard_rank * S + off) * elem,
                                            shard, zs->compute_dtype, b->label));
        if (b->to_shard) {
            const char *chunk = staging + ((size_t)zs->shard_rank * S + off) * elem;
            ZS_CHECK(zs__grad_into_owned(zs, units[i]->index, units[i]->grad.full, chunk,
                                         zs->compute_dtype, mine, 1));
        } else {
            for (int r = 0; r < world; r++) {
                if (!b->all_reduce && r != zs->shard_rank) continue;
                ZS_CHECK(be->ops->copy(be, (char *)units[i]->grad.full + (size_t)r * shard * elem,
                                       staging + ((size_t)r * S + off) * elem, shard * elem));
            }
            ZS_CHECK(zs__grad_into_owned(zs, units[i]->index, units[i]->grad.full, mine,
                                         zs->compute_dtype, NULL, 0));
        }
        off += shard;
    }
    return ZS_OK;
}

void zs__bucket_flush(zs_ctx *zs) {
    zs__buckets *open = zs->buckets;
    const int count = open->used - open->open_first;
    if (count == 0) return;
    zs_unit **units = open->members + open->open_first;
    if (count == 1) {
        /* Alone: exactly the unit's own collective. */
        zs__unit_reduce_submit(zs, units[0], units[0]->grad.full, open->open_all_reduce,
                               open->open_to_shard);
    } else {
        zs__bucket_op *b = &open->ops[open->ops_used++];
        memset(b, 0, sizeof *b);
        b->zs = zs;
        b->first = open->open_first;
        b->count = count;
        b->all_reduce = open->open_all_reduce;
        b->to_shard = open->open_to_shard;
        snprintf(b->label, sizeof b->label, "bucket of %d units '%.80s'..'%.80s'", count, units[0]->name,
                 units[count - 1]->name);
        b->op.run = run_bucket;
        b->op.name = b->all_reduce ? "all_reduce" : "reduce_scatter";
        b->op.label = b->label;
        for (int i = 0; i < count; i++) {
            b->op.bytes += zs__unit_bytes(zs, units[i]);
            units[i]->grad.state = ZS__GRAD_IN_FLIGHT;
            units[i]->grad.reduced_by = &b->op;
        }
        zs__engine_submit(zs->engine, &b->op);
    }
    open->open_first = open->used;
    open->open_bytes = 0;
}

void zs__bucket_add(zs_ctx *zs, zs_unit *unit, void *full, int all_reduce, int to_shard) {
    const int64_t bytes = (int64_t)zs__unit_bytes(zs, unit);
    if (!enabled(zs) || bytes >= zs->settings.comm.bucket_bytes) {
        zs__bucket_flush(zs);
        zs__unit_reduce_submit(zs, unit, full, all_reduce, to_shard);
        return;
    }
    zs__buckets *open = zs->buckets;
    unit->grad.full = full;
    unit->grad.state = ZS__GRAD_QUEUED;
    open->members[open->used++] = unit;
    open->open_bytes += bytes;
    open->open_all_reduce = all_reduce;
    open->open_to_shard = to_shard;
    if (open->open_bytes >= zs->settings.comm.bucket_bytes) zs__bucket_flush(zs);
}
