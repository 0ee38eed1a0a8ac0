/* The frozen store (issue 43): frozen units kept quantized, int8 or NF4
 * (zero.frozen_storage; zero/plan.h's zs__plan_quantize decides which
 * units), outside the parameter buffers.
 *
 * A quantized unit is one record per shard (zero/quant_record.h: the shard's
 * values, then one fp32 scale per zero.frozen_block elements counted from
 * the shard's start, which is also every parameter's own block boundary).
 * Stages 0-2 keep every record of every quantized unit (the same bytes
 * stage 3 gathers); stage 3 keeps this rank's record and all-gathers the
 * records into the unit's carve, so the bytes that move are the quantized
 * ones. The records are written once, where the values arrive:
 *
 *   - writes (zs__frozen_store_write: imports, checkpoint loads, the
 *     build's initialization) land in fp32 in a pending buffer holding the
 *     part of one unit this rank quantizes (stage 0: the whole unit, every
 *     rank having read all of it; stages 1-3: its own shard), in the
 *     memory of the store's backend, allocated for the unit and freed when
 *     it is quantized;
 *   - the pending unit is quantized into its records by the backend's own
 *     quantize op (the CUDA kernels on a GPU, the CPU's at every SIMD level,
 *     the same bits) when a write moves to another unit, and at
 *     zs__frozen_store_flush (the end of an import, a load, the build);
 *   - stages 1-2 then all-gather each unit's records in place
 *     (zs__frozen_store_gather_full), so every rank holds every record and
 *     no rank quantized more than its shard.
 * A write that covers only part of a unit keeps the rest at its current
 * values (dequantized into the pending buffer first). Reads
 * (zs__frozen_store_read: checkpoint saves, digests) dequantize.
 *
 * Floor (src/floors.txt): above the plan and the state's layout; below the
 * rooms that gather (unit_ops.c), hand the records to the program
 * (residency.c) and move the state (state_io.c). */
#ifndef ZS_ZERO_FROZEN_STORE_H
#define ZS_ZERO_FROZEN_STORE_H

#include <stdint.h>

#include "zero/ground.h"

/* zs_build: the store's records, charged to `tag` (frozen on the device,
 * host_params with offload.params = "host" in stage 3); nothing without
 * quantized units. */
zs_status zs__frozen_store_create(zs_ctx *zs, zs_mem_tag tag);
void zs__frozen_store_destroy(zs_ctx *zs);

/* Elements [first, first + count) of quantized parameter `param` (in the
 * part of its unit this rank quantizes) set to src's fp32 values. */
zs_status zs__frozen_store_write(zs_ctx *zs, int param, int64_t first, int64_t count,
                                 const float *src);
/* Quantizes the pending unit, if any. */
zs_status zs__frozen_store_flush(zs_ctx *zs);
/* Stages 1-2: every quantized unit's records all-gathered in place
 * (collective, on the shard group). Flushes first. */
zs_status zs__frozen_store_gather_full(zs_ctx *zs);
/* Elements [first, first + count) of quantized parameter `param` as fp32
 * (dequantized), from the records this rank keeps. */
zs_status zs__frozen_store_read(zs_ctx *zs, int param, int64_t first, int64_t count, float *dst);

/* Stage 3: unit u's records into `dst` (records x record_bytes of the
 * store's device memory): this rank's copied into its place, then the
 * all-gather of every rank's (collective, on the shard group). */
zs_status zs__frozen_store_gather(zs_ctx *zs, int u, void *dst);
/* The records of unit u that stages 0-2 keep (NULL in stage 3, whose are
 * gathered into the unit's carve). */
const void *zs__frozen_store_records(const zs_ctx *zs, int u);
/* The records this rank keeps (NULL without quantized units), for digests. */
const zs__buf *zs__frozen_store_buf(const zs_ctx *zs);
/* Dequantizes parameter `param` from its unit's records `records` (every
 * shard's, as the store or a gather holds them) into dst (numel elements
 * of dtype) on backend be. */
zs_status zs__frozen_store_dequantize(zs_ctx *zs, zs__backend *be, int param,
                                      const void *records, void *dst, zs_dtype dtype);

#endif
