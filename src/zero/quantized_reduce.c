/* qgZ, ZeRO++'s quantized gradient reduce-scatter (comm.quantize_grads =
 * "int8" | "int4", stages 1-3; docs/NODES.md): a unit's reduce-scatter as
 * two all-to-all hops carrying quantized records, summed in fp32 between
 * and after them.
 *
 * On M nodes of P ranks (equal nodes), world rank r owns slice r of the
 * unit (S = padded / W elements, r = rank_of(node, local)). On the rank at
 * (node m, local j):
 *   hop 1, inside the node (node_comm, local-rank order): to local peer k
 *     go the M slices owned by rank_of(n, k), n = 0..M-1, each quantized as
 *     a record of its own (blocks counted from the slice's first element);
 *     the P records received for each node n (the slice of rank_of(n, j),
 *     from every peer of the node) are dequantized and added into
 *     sums[n] (fp32, zeroed first) in peer order k = 0..P-1;
 *   hop 2, across nodes (cross_comm, node order): sums[n] is quantized
 *     and goes to node n's rank with this local rank, rank_of(n, j), the
 *     owner of that slice; the M records received (this rank's slice, one
 *     partial sum per node) are dequantized and added into `owned` (fp32,
 *     zeroed first) in node order n = 0..M-1.
 * Every piece goes through quantize and dequantize, this rank's own
 * included, so the result does not depend on which peer is this rank: a
 * uniform rule, and a fixed order of additions (peers, then nodes), so two
 * runs give the same bits, and so do stages 1-3 (the same reduction of the
 * same gradients). On one node there is no hop 2: sums[0] is the owned
 * slice already, and quantizing it again would only lose precision (every
 * rank is on that one node, so the rule stays uniform).
 *
 * A non-finite gradient value makes its block's scale NaN, every value of
 * the block NaN after dequantizing, and the NaN survives the second hop
 * the same way: the owner's squared norm is NaN and the step is skipped
 * on every rank, as for any overflow.
 *
 * Floor (src/floors.txt): Reads ZeRO++'s record (zeropp.h); calls nothing of
 * zero/ above it.
 */
#include "core/error.h"
#include "zero/ground.h"
#include "zero/quant_record.h"
#include "zero/zeropp.h"

/* Slice `slice` of `src` (S elements of `dtype` each) quantized into the
 * record at `rec`. */
static zs_status quantize_slice(zs_ctx *zs, unsigned char *rec, const void *src, zs_dtype dtype,
                                int64_t slice, int64_t S, int64_t scales_at) {
    zs__backend *be = zs->backend;
    return be->ops->quantize(be, rec, (float *)(rec + scales_at),
                             (const char *)src + (size_t)(slice * S) * zs_dtype_size(dtype), dtype,
                             S, zs->zeropp.block, zs->zeropp.grad_bits);
}

/* Adds record `rec` into `sum` (S fp32 elements): one fp32 addition per
 * element, rounded once (the backend's dequantize in accumulate mode). */
static zs_status add_record(zs_ctx *zs, float *sum, const unsigned char *rec, int64_t S,
                            int64_t scales_at) {
    zs__backend *be = zs->backend;
    return be->ops->dequantize(be, sum, ZS_DTYPE_FP32, 1, rec, (const float *)(rec + scales_at),
                               S, zs->zeropp.block, zs->zeropp.grad_bits);
}

zs_status zs__quantized_reduce_scatter(zs_ctx *zs, int u, const void *full, float **owned) {
    const zs__topology *t = zs->topology;
    const int M = t->node_count, P = t->node_size, W = zs->world_size;
    const zs__plan_unit *pu = &zs->plan->units[u];
    const char *name = zs->units[u]->name;
    const int64_t S = pu->shard_numel;
    const int bits = zs->zeropp.grad_bits;
    const int64_t record = zs__quant_record_bytes(S, zs->zeropp.block, bits);
    const int64_t scales_at = zs__quant_record_scales_at(S, bits);
    ZS_ASSERT(M * P == W && (int64_t)W * S == pu->padded_numel);
    ZS_ASSERT(zs__qgz_staging_bytes(W, M, S, zs->zeropp.block, bits) <=
              (int64_t)zs->zeropp.staging.count * 4);
    zs__backend *be = zs->backend;
    unsigned char *send = zs->zeropp.staging.ptr;
    unsigned char *recv = send + (size_t)W * (size_t)record;
    float *sums = (float *)(recv + (size_t)W * (size_t)record); /* [M][S] */
    float *mine = sums + (size_t)M * (size_t)S;                  /* [S] */
    const char *node = zs__comm_group_name(zs->node_comm);
    const char *cross = zs__comm_group_name(zs->cross_comm);

    /* Hop 1: inside the node. Block k (for local peer k) holds the records
     * of the slices of rank_of(n, k), n = 0..M-1. */
    uint64_t from = zs__trace_clock(zs->trace);
    for (int k = 0; k < P; k++)
        for (int n = 0; n < M; n++)
            ZS_CHECK(quantize_slice(zs, send + ((size_t)k * (size_t)M + (size_t)n) * (size_t)record,
                                    full, zs->compute_dtype, zs__topology_rank_of(t, n, k), S,
                                    scales_at));
    zs__zeropp_span(zs->trace, "quantize", name, node, from, (uint64_t)W * (uint64_t)record);
    from = zs__trace_clock(zs->trace);
    ZS_CHECK(zs__comm_all_to_all(zs->node_comm, send, recv, (size_t)M * (size_t)record, name));
    zs__zeropp_span(zs->trace, "all_to_all", name, node, from,
                    (uint64_t)(P - 1) * (uint64_t)M * (uint64_t)record);
    from = zs__trace_clock(zs->trace);
    ZS_CHECK(be->ops->zero(be, sums, (size_t)M * (size_t)S * sizeof(float)));
    for (int k = 0; k < P; k++)
        for (int n = 0; n < M; n++)
            ZS_CHECK(add_record(zs, sums + (size_t)n * (size_t)S,
                                recv + ((size_t)k * (size_t)M + (size_t)n) * (size_t)record, S,
                                scales_at));
    zs__zeropp_span(zs->trace, "dequantize", name, node, from,
                    (uint64_t)W * (uint64_t)S * sizeof(float));

    if (M == 1) { /* the node's sum is the slice: nothing crosses, nothing to re-quantize */
        *owned = sums;
        return ZS_OK;
    }
    /* Hop 2: across nodes, each partial slice to its owner. The send and
     * receive areas are free again (M records fit in W). */
    from = zs__trace_clock(zs->trace);
    for (int n = 0; n < M; n++)
        ZS_CHECK(quantize_slice(zs, send + (size_t)n * (size_t)record, sums, ZS_DTYPE_FP32, n, S,
                                scales_at));
    zs__zeropp_span(zs->trace, "quantize", name, cross, from, (uint64_t)M * (uint64_t)record);
    from = zs__trace_clock(zs->trace);
    ZS_CHECK(zs__comm_all_to_all(zs->cross_comm, send, recv, (size_t)record, name));
    zs__zeropp_span(zs->trace, "all_to_all", name, cross, from,
                    (uint64_t)(M - 1) * (uint64_t)record);
    from = zs__trace_clock(zs->trace);
    ZS_CHECK(be->ops->zero(be, mine, (size_t)S * sizeof(float)));
    for (int n = 0; n < M; n++)
        ZS_CHECK(add_record(zs, mine, recv + (size_t)n * (size_t)record, S, scales_at));
    zs__zeropp_span(zs->trace, "dequantize", name, cross, from, (uint64_t)S * sizeof(float));
    *owned = mine;
    return ZS_OK;
}

void zs__reduce_plan(zs_ctx *zs, zs_unit *unit, zs__engine_op *op) {
    if (!zs->zeropp.grad_bits || unit->reduce.all_reduce) return; /* stage 0: none */
    const zs__topology *t = zs->topology;
    const int64_t record = zs__quant_record_bytes(zs->plan->units[unit->index].shard_numel,
                                                  zs->zeropp.block, zs->zeropp.grad_bits);
    /* Hop 1's buffer (a record per rank), then hop 2's (one per node). */
    op->bytes = (uint64_t)(zs->world_size + t->node_count) * (uint64_t)record;
}
