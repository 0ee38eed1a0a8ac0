/* hpZ, ZeRO++'s node-local secondary partition (zero.secondary_partition =
 * "node", stage 3; docs/NODES.md): what a unit's gather over every rank
 * produced is kept partitioned across the ranks of the node, each rank
 * holding the slice its local rank indexes (padded_numel / node_size
 * elements), so that the unit's later gathers (the backward's, the next
 * micro-steps', evaluation's) are all-gathers inside the node and see
 * exactly the values the first one produced, quantized or not.
 *
 * Validity is a version: the parameters' version goes up wherever they may
 * change (an applied optimizer step, zs_load, an import, any write through
 * the state interface), and a unit's slice is read only while the version
 * it was filled at is current. The first gather after a change goes over
 * every rank and fills the slice. Since a gather of unchanged parameters
 * gives the same bits every time (the quantization is deterministic too),
 * a run with hpZ computes with exactly the values of the same run without
 * it; only where the bytes travel differs.
 *
 * The choice is made when the gather is submitted, on the main thread, and
 * the engine runs gathers in that order, so the op that fills a slice runs
 * before any op that reads it, with prefetching too.
 *
 * Floor (src/floors.txt): Reads and writes ZeRO++'s record (zeropp.h); calls
 * the quantized gather below it.
 */
#include "core/error.h"
#include "zero/ground.h"
#include "zero/quant_record.h"
#include "zero/zeropp.h"

void zs__params_changed(zs_ctx *zs) { zs->zeropp.version++; }

void zs__gather_plan(zs_ctx *zs, zs_unit *unit, zs__engine_op *op) {
    zs__zeropp *z = &zs->zeropp;
    const zs__plan_unit *pu = &zs->plan->units[unit->index];
    if (z->secondary_on) {
        const int u = unit->index;
        z->from_secondary[u] = z->filled[u] == z->version;
        if (z->from_secondary[u]) {
            op->group = zs__comm_group_name(zs->node_comm);
            return;
        }
        z->filled[u] = z->version; /* this gather fills it */
    }
    /* qwZ: what the all-gather carries is the shard group's records. */
    if (z->weight_bits)
        op->bytes = (uint64_t)zs__qwz_staging_bytes(zs->shard_size, pu->shard_numel, z->block);
}

int zs__gather_from_secondary(const zs_ctx *zs, int unit) {
    return zs->zeropp.secondary_on && zs->zeropp.from_secondary[unit];
}

/* This rank's node slice of unit u inside its gathered buffer, and its
 * length in elements. */
static void *slice_of(const zs_ctx *zs, int u, const void *buf, int64_t *count) {
    const zs__plan_unit *pu = &zs->plan->units[u];
    *count = pu->padded_numel / zs->topology->node_size;
    return (char *)buf + (size_t)(zs->topology->local_rank * *count) *
                             zs_dtype_size(zs->compute_dtype);
}

zs_status zs__secondary_gather(zs_ctx *zs, int u, void *buf) {
    int64_t count;
    void *mine = slice_of(zs, u, buf, &count);
    zs__backend *be = zs->backend;
    ZS_CHECK(be->ops->copy(be, mine, zs__buf_at(&zs->zeropp.secondary, zs->zeropp.slice_at[u]),
                           (size_t)count * zs_dtype_size(zs->compute_dtype)));
    /* The node communicator's ranks are the local ranks in order: chunk j
     * is local rank j's slice, as the world gather laid it out. */
    return zs__comm_all_gather(zs->node_comm, buf, (size_t)count, zs->compute_dtype,
                               zs->units[u]->name);
}

zs_status zs__gather_wide(zs_ctx *zs, int u, void *buf) {
    zs_status st = zs__params_all_gather(zs, u, buf);
    if (!zs->zeropp.secondary_on) return st;
    if (st == ZS_OK) {
        int64_t count;
        const void *mine = slice_of(zs, u, buf, &count);
        zs__backend *be = zs->backend;
        st = be->ops->copy(be, zs__buf_at(&zs->zeropp.secondary, zs->zeropp.slice_at[u]), mine,
                           (size_t)count * zs_dtype_size(zs->compute_dtype));
    }
    /* Not filled after all: the next gather goes over every rank again.
     * The main thread reads this only when it submits the unit's next
     * gather, after waiting for this one. */
    if (st != ZS_OK) zs->zeropp.filled[u] = 0;
    return st;
}
