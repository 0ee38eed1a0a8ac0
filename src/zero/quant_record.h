/* The quantized records ZeRO++'s collectives move (docs/NODES.md), as pure
 * arithmetic shared by the code that writes them (quantized_gather.c,
 * quantized_reduce.c), the memory plan that sizes their staging
 * (memory_plan.c) and the bytes-per-step formula (comm_plan.c), so the
 * three cannot disagree.
 *
 * A record is one piece of `count` elements quantized on its own: blocks of
 * `block` elements counted from the piece's first element (so from the
 * owner's shard start for a weight gather, from the slice start for a
 * gradient piece; the last block may be shorter), laid out as
 *
 *   [values: zs_k_quant_value_bytes(count, bits), zero-padded to 4 bytes]
 *   [scales: zs_k_quant_blocks(count, block) fp32]
 *
 * Whole records only: a record is never split, so neither the parity of
 * `count` (int4 packs two values per byte) nor where a block ends matters
 * to anything but the record itself. Its size is a multiple of 4, so an
 * all-gather can carry records as fp32 elements (an all-gather moves bits:
 * the MPI ring and its host staging copy bytes, NCCL's all-gather copies)
 * and every record in a buffer of records keeps its scales 4-byte
 * aligned. */
#ifndef ZS_ZERO_QUANT_RECORD_H
#define ZS_ZERO_QUANT_RECORD_H

#include <stdint.h>

#include "kernels/quantize.h"

/* Where the scales start: the values' bytes rounded up to 4. */
static inline int64_t zs__quant_record_scales_at(int64_t count, int bits) {
    return (zs_k_quant_value_bytes(count, bits) + 3) / 4 * 4;
}

/* Bytes of a record of `count` elements (a multiple of 4). */
static inline int64_t zs__quant_record_bytes(int64_t count, int64_t block, int bits) {
    return zs__quant_record_scales_at(count, bits) + 4 * zs_k_quant_blocks(count, block);
}

/* The frozen store's records (zero/frozen_store.h, issue 43): a record as
 * above, or, with double quantization (zero.frozen_double_quant, QLoRA's),
 * its fp32 scales replaced by their own int8 record: one int8 code per
 * scale and one fp32 scale per ZS_FROZEN_SCALE_GROUP codes
 *
 *   [values: zs_k_quant_value_bytes(count, bits), zero-padded to 4]
 *   [codes: blocks bytes, zero-padded to 4][group scales: fp32]
 *
 * (blocks = zs_k_quant_blocks(count, block)); a value dequantizes with its
 * block's scale as dequantized from its code. */
#define ZS_FROZEN_SCALE_GROUP 256

static inline int64_t zs__frozen_record_bytes(int64_t count, int64_t block, int bits,
                                              int double_quant) {
    if (!double_quant) return zs__quant_record_bytes(count, block, bits);
    return zs__quant_record_scales_at(count, bits) +
           zs__quant_record_bytes(zs_k_quant_blocks(count, block), ZS_FROZEN_SCALE_GROUP, 8);
}

/* qwZ's staging for a unit whose shard is `shard` elements on a shard
 * group of `ranks`: one int8 record per rank, gathered in place. */
static inline int64_t zs__qwz_staging_bytes(int ranks, int64_t shard, int64_t block) {
    return (int64_t)ranks * zs__quant_record_bytes(shard, block, 8);
}

/* qgZ's staging for a unit whose slice per rank is `shard` elements, on
 * `world` ranks in `nodes` nodes, carved in this order (quantized_reduce.c):
 *   send   [world records]  hop 1's, then hop 2's (nodes records) in its start
 *   recv   [world records]  the same for what arrives
 *   sums   [nodes][shard] fp32  hop 1's sums: the partial slices for each node
 *   owned  [shard] fp32         hop 2's sum: this rank's slice */
static inline int64_t zs__qgz_staging_bytes(int world, int nodes, int64_t shard, int64_t block,
                                            int bits) {
    return 2 * (int64_t)world * zs__quant_record_bytes(shard, block, bits) +
           4 * ((int64_t)nodes + 1) * shard;
}

#endif
