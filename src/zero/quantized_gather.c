/* The stage-3 parameter all-gather, plain or quantized (qwZ: ZeRO++'s
 * quantized weight gather, comm.quantize_weights = "int8"; docs/NODES.md).
 *
 * qwZ, over the shard group of n ranks, for a unit whose shard is S
 * elements:
 *   1. this rank's shard (already in its place in the gathered buffer,
 *      copied there from params_shard, the host shard or the rounded NVMe
 *      master) is quantized into its record in the staging: int8 values,
 *      blocks of comm.quant_block counted from the shard's first element,
 *      then the scales (zero/quant_record.h);
 *   2. the n records are all-gathered in place, as fp32 elements (records
 *      are multiples of 4 bytes and an all-gather only moves bits);
 *   3. every record, this rank's own included, is dequantized into its
 *      owner's place in the gathered buffer, in the compute dtype.
 * So every rank computes with the same dequantized values, whatever rank
 * owns a shard, and the blocks depend on the shard alone: not on buckets,
 * staging pieces or the world's ring. The shard itself and the fp32 master
 * weights are never quantized; only the gathered copy is.
 *
 * Floor (src/floors.txt): Reads ZeRO++'s record (zeropp.h); calls nothing of
 * zero/ above it.
 */
#include "core/error.h"
#include "zero/ground.h"
#include "zero/quant_record.h"
#include "zero/zeropp.h"

zs_status zs__params_all_gather(zs_ctx *zs, int u, void *buf) {
    const zs__plan_unit *pu = &zs->plan->units[u];
    const char *name = zs->units[u]->name;
    const zs_dtype dt = zs->compute_dtype;
    const zs__zeropp *z = &zs->zeropp;
    if (!z->weight_bits)
        return zs__comm_all_gather(zs->shard_comm, buf, (size_t)pu->shard_numel, dt, name);

    zs__backend *be = zs->backend;
    const int bits = z->weight_bits;
    const int64_t S = pu->shard_numel;
    const int64_t record = zs__quant_record_bytes(S, z->block, bits);
    const int64_t scales_at = zs__quant_record_scales_at(S, bits);
    const size_t elem = zs_dtype_size(dt);
    unsigned char *records = z->staging.ptr;
    const char *group = zs__comm_group_name(zs->shard_comm);
    const int n = zs->shard_size;

    uint64_t from = zs__trace_clock(zs->trace);
    unsigned char *own = records + (size_t)zs->shard_rank * (size_t)record;
    ZS_CHECK(be->ops->quantize(be, own, (float *)(own + scales_at),
                               (const char *)buf + (size_t)zs->shard_rank * (size_t)S * elem, dt,
                               S, z->block, bits));
    zs__zeropp_span(zs->trace, "quantize", name, group, from, (uint64_t)record);

    from = zs__trace_clock(zs->trace);
    ZS_CHECK(zs__comm_all_gather(zs->shard_comm, records, (size_t)record / 4, ZS_DTYPE_FP32,
                                 name));
    zs__zeropp_span(zs->trace, "all_gather", name, group, from,
                    (uint64_t)(n - 1) * (uint64_t)record);

    from = zs__trace_clock(zs->trace);
    for (int r = 0; r < n; r++) {
        const unsigned char *rec = records + (size_t)r * (size_t)record;
        ZS_CHECK(be->ops->dequantize(be, (char *)buf + (size_t)r * (size_t)S * elem, dt, 0, rec,
                                     (const float *)(rec + scales_at), S, z->block, bits));
    }
    zs__zeropp_span(zs->trace, "dequantize", name, group, from, (uint64_t)n * (uint64_t)S * elem);
    return ZS_OK;
}
