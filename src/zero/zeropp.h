/* ZeRO++ in the zero layer (docs/NODES.md): the quantized weight gather
 * (qwZ, quantized_gather.c), the node-local secondary partition (hpZ,
 * secondary.c) and the quantized gradient reduce-scatter (qgZ,
 * quantized_reduce.c), with their state in one struct of zs_ctx (zeropp.c
 * creates and destroys it). Sizes come from the memory plan
 * (memory_plan.c), so zs_estimate_memory reports what zs_build allocates;
 * the records they move are zero/quant_record.h's.
 *
 * Threads: the gather and reduction functions run inside comm-engine ops
 * (the communication thread, or inline); everything else runs on the main
 * thread. What an op reads of the state below was written before it was
 * submitted (the engine's queue orders the two). */
#ifndef ZS_ZERO_ZEROPP_H
#define ZS_ZERO_ZEROPP_H

#include <stdint.h>

#include "backend/backend.h"
#include "comm/engine.h"
#include "core/trace.h"
#include "zeroshard.h"

struct zs__memory_plan;

typedef struct zs__zeropp {
    int weight_bits;       /* qwZ: 8, or 0 (off, or one rank) */
    int grad_bits;         /* qgZ: 8 or 4, or 0 */
    int64_t block;         /* comm.quant_block */
    /* The records of one collective at a time (tag comm): qwZ's gathered
     * records, or qgZ's send, receive and fp32 sums (quant_record.h). */
    zs__buf staging;
    /* hpZ (secondary.c). A unit's node slice is valid while the parameters
     * keep the version its last world gather saw: `version` goes up
     * whenever the parameters may have changed (zs__params_changed), and a
     * gather whose unit was filled at the current version reads the slice
     * instead of gathering across nodes. */
    int secondary_on;
    zs__buf secondary;     /* [plan->padded_numel / node_size] compute dtype, tag secondary */
    int64_t *slice_at;     /* [unit_count] where each unit's node slice starts in it */
    uint64_t version;      /* starts at 1 */
    uint64_t *filled;      /* [unit_count] the version each unit's slice holds; 0: none */
    unsigned char *from_secondary; /* [unit_count] the unit's submitted gather reads its slice */
} zs__zeropp;

/* A step inside a quantized collective (quantize, a hop, dequantize) as a
 * span on the comm track, from `from` (zs__trace_clock) to now: `group`
 * is the hop's communicator (zs__comm_group_name), `bytes` what the step
 * wrote or sent. On CUDA the kernels' spans show their enqueueing; the
 * hops' show them complete (the communicator waits). Free when tracing is
 * off. */
static inline void zs__zeropp_span(zs__trace *tr, const char *name, const char *unit,
                                   const char *group, uint64_t from, uint64_t bytes) {
    if (!tr) return;
    zs__trace_args args = ZS_TRACE_ARGS_INIT;
    args.unit = unit;
    args.op = name;
    args.group = group;
    args.bytes = bytes;
    args.has = ZS_TRACE_HAS_BYTES;
    zs__trace_span(tr, ZS_TRACE_COMM, name, from, zs__clock_ns(), &args);
}

/* zs_build, before the memory plan: nodes of equal size where a setting
 * needs them (qgZ, hpZ), the same ZS_ERR_CONFIG on every rank otherwise. */
zs_status zs__zeropp_require(zs_ctx *zs);
/* zs_build: the staging and the secondary partition as the plan says. */
zs_status zs__zeropp_create(zs_ctx *zs, const struct zs__memory_plan *mp);
/* NULL-safe on a context that never built. */
void zs__zeropp_destroy(zs_ctx *zs);
/* comm.quantize_grads is on: a unit's gradient reduction is qgZ's. */
int zs__zeropp_quantizes_grads(const zs_ctx *zs);

/* The parameters may have changed: an applied optimizer step, zs_load, an
 * import, any write of the parameters or their master weights. Every
 * unit's node slice is stale from here on; main thread. */
void zs__params_changed(zs_ctx *zs);

/* A stage-3 gather of `unit` is being submitted (main thread): decides
 * whether it reads the unit's node slice (hpZ) or gathers over the shard
 * group (then filling the slice), and sets the op's group and payload for
 * traces and the injected network. */
void zs__gather_plan(zs_ctx *zs, zs_unit *unit, zs__engine_op *op);
/* Inside the gather op: 1 when zs__gather_plan chose the node slice. */
int zs__gather_from_secondary(const zs_ctx *zs, int unit);
/* hpZ: the unit's node slice into its place in `buf` (the gathered
 * unit), then the all-gather inside the node. */
zs_status zs__secondary_gather(zs_ctx *zs, int unit, void *buf);
/* The gather over the shard group (zs__params_all_gather), `buf` holding
 * this rank's shard in its place; with hpZ this rank's node slice of the
 * result is kept (or, should the gather fail, the slice marked unfilled). */
zs_status zs__gather_wide(zs_ctx *zs, int unit, void *buf);

/* The all-gather of a stage-3 unit over the shard group, `buf` holding this
 * rank's shard in its place: plain, or (qwZ) the shard quantized into a
 * record, the records gathered, and every record dequantized into its
 * owner's place, this rank's own included. */
zs_status zs__params_all_gather(zs_ctx *zs, int unit, void *buf);

/* qgZ: the reduce-scatter of unit `unit`'s gradient `full` (compute dtype,
 * every rank's contribution) as two quantized all-to-all hops, inside the
 * node then across nodes; *owned points at this rank's slice summed over
 * every rank, in fp32, inside the staging (valid until the next
 * collective). */
zs_status zs__quantized_reduce_scatter(zs_ctx *zs, int unit, const void *full, float **owned);
/* A gradient reduction of `unit` is being submitted (main thread): with
 * qgZ, the op's payload for traces and the injected network is what its
 * hops carry, not the unit's full buffer. */
void zs__reduce_plan(zs_ctx *zs, zs_unit *unit, zs__engine_op *op);

#endif
