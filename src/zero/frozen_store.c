/* The frozen store: quantized frozen units (frozen_store.h says how). */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "zero/frozen_store.h"
#include "zero/ground.h"
#include "zero/quant_record.h"

typedef struct zs__frozen_store {
    zs__buf records; /* bytes (fp32 elements: records are multiples of 4) */
    int64_t *at;     /* per unit: its first record's byte in `records` (-1: not quantized) */
    int kept;        /* records kept per unit: the shard group's size (stages 0-2) or 1 */
    /* The unit being written: fp32 of the part this rank quantizes, in the
     * memory of the records' backend, allocated per unit. */
    int pending_unit;
    zs__buf pending;
    /* Double quantization: one record's fp32 scales (and a group more),
     * quantized from or decoded into here, on the records' backend; and on
     * the context's backend when that is another (the records in host
     * memory, a gathered unit decoded on the device). */
    zs__buf scales, device_scales;
} zs__frozen_store;

static const zs__plan_unit *unit_of(const zs_ctx *zs, int u) { return &zs->plan->units[u]; }

/* The part of unit u this rank quantizes: [*first, first + count) of the
 * unit's elements (stage 0: all of it; else its own shard). */
static void quantized_part(const zs_ctx *zs, int u, int64_t *first, int64_t *count) {
    const zs__plan_unit *pu = unit_of(zs, u);
    if (zs->settings.zero.stage == 0) {
        *first = 0;
        *count = pu->padded_numel;
    } else {
        *first = (int64_t)zs->shard_rank * pu->shard_numel;
        *count = pu->shard_numel;
    }
}

/* Record r of unit u in the store (stage 3 keeps only its own: r is then
 * this rank's). */
static char *record_at(const zs_ctx *zs, int u, int r) {
    const zs__frozen_store *fs = zs->frozen_store;
    const int index = fs->kept == 1 ? 0 : r;
    return (char *)fs->records.ptr + fs->at[u] + (int64_t)index * unit_of(zs, u)->record_bytes;
}

zs_status zs__frozen_store_create(zs_ctx *zs, zs_mem_tag tag) {
    const zs__plan *plan = zs->plan;
    if (plan->quantized_units == 0) return ZS_OK;
    zs__frozen_store *fs = zs__calloc(1, sizeof *fs);
    if (!fs) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_build: out of host memory");
    zs->frozen_store = fs;
    fs->pending_unit = -1;
    fs->kept = zs->settings.zero.stage < 3 ? plan->world_size : 1;
    fs->at = zs__calloc((size_t)plan->unit_count, sizeof *fs->at);
    if (!fs->at) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_build: out of host memory");
    int64_t bytes = 0;
    for (int u = 0; u < plan->unit_count; u++) {
        fs->at[u] = -1;
        if (!plan->units[u].quantized) continue;
        fs->at[u] = bytes;
        bytes += (int64_t)fs->kept * plan->units[u].record_bytes;
    }
    ZS_CHECK(zs__plan_buf(zs, &fs->records, tag, ZS_DTYPE_FP32, bytes / 4));
    /* Double quantization's decoded scales: part of the store, beside its
     * records, and on the device too where the records are not. */
    const int64_t scales = zs__plan_frozen_scales_numel(plan);
    if (scales == 0) return ZS_OK;
    ZS_CHECK(zs__plan_buf(zs, &fs->scales, tag, ZS_DTYPE_FP32, scales));
    if (fs->records.be == zs->backend) return ZS_OK;
    return zs__plan_buf(zs, &fs->device_scales, ZS_MEM_FROZEN, ZS_DTYPE_FP32, scales);
}

void zs__frozen_store_destroy(zs_ctx *zs) {
    zs__frozen_store *fs = zs->frozen_store;
    if (!fs) return;
    zs__buf_free(&fs->pending);
    zs__buf_free(&fs->scales);
    zs__buf_free(&fs->device_scales);
    zs__buf_free(&fs->records);
    free(fs->at);
    free(fs);
    zs->frozen_store = NULL;
}

/* The fp32 scales of blocks [b0, b1) of a record of S elements: in the
 * record, or (double quantization) decoded from its codes into the store's
 * scratch on be, from the first code of b0's group. */
static zs_status record_scales(zs_ctx *zs, zs__backend *be, const char *rec, int64_t S,
                               int64_t b0, int64_t b1, const float **out) {
    const zs__plan *plan = zs->plan;
    const int64_t scales_at = zs__quant_record_scales_at(S, plan->quant_bits);
    if (!plan->quant_double) {
        *out = (const float *)(rec + scales_at) + b0;
        return ZS_OK;
    }
    const int64_t blocks = zs_k_quant_blocks(S, plan->quant_block);
    const int64_t g0 = b0 / ZS_FROZEN_SCALE_GROUP * ZS_FROZEN_SCALE_GROUP;
    const char *codes = rec + scales_at;
    const float *groups =
        (const float *)(codes + zs__quant_record_scales_at(blocks, 8)) + g0 / ZS_FROZEN_SCALE_GROUP;
    const zs__frozen_store *fs = zs->frozen_store;
    float *scratch = be == fs->scales.be ? fs->scales.ptr : fs->device_scales.ptr;
    ZS_CHECK(be->ops->dequantize(be, scratch, ZS_DTYPE_FP32, 0, codes + g0, groups, b1 - g0,
                                 ZS_FROZEN_SCALE_GROUP, 8));
    *out = scratch + (b0 - g0);
    return ZS_OK;
}

/* Dequantizes elements [first, first + count) of unit u into dst (fp32 or
 * the compute dtype) on be, from `records`, which holds the unit's records
 * from record `first_record` on (every one of the elements' among them);
 * `first` is a multiple of the block. */
static zs_status dequantize_range(zs_ctx *zs, zs__backend *be, int u, const void *records,
                                  int first_record, int64_t first, int64_t count, void *dst,
                                  zs_dtype dtype) {
    const zs__plan *plan = zs->plan;
    const zs__plan_unit *pu = unit_of(zs, u);
    const int64_t S = pu->shard_numel, block = plan->quant_block;
    const int bits = plan->quant_bits;
    const size_t elem = zs_dtype_size(dtype);
    for (int64_t at = first; at < first + count;) {
        const int r = (int)(at / S);
        const int64_t j0 = at - (int64_t)r * S; /* a block boundary */
        const int64_t j1 = first + count < (int64_t)(r + 1) * S ? first + count - (int64_t)r * S : S;
        const char *rec = (const char *)records + (int64_t)(r - first_record) * pu->record_bytes;
        const float *scales = NULL;
        ZS_CHECK(record_scales(zs, be, rec, S, j0 / block, zs_k_quant_blocks(j1, block),
                               &scales));
        ZS_CHECK(be->ops->dequantize(be, (char *)dst + (size_t)(at - first) * elem, dtype, 0,
                                     rec + zs_k_quant_value_bytes(j0, bits), scales, j1 - j0,
                                     block, bits));
        at += j1 - j0;
    }
    return ZS_OK;
}

/* The records this rank keeps of unit u, and the index of the first
 * (stage 3: its own shard's; else 0, every shard's). */
static const char *kept_records(const zs_ctx *zs, int u, int *first_record) {
    const zs__frozen_store *fs = zs->frozen_store;
    *first_record = fs->kept == 1 ? zs->shard_rank : 0;
    return (const char *)fs->records.ptr + fs->at[u];
}

zs_status zs__frozen_store_flush(zs_ctx *zs) {
    zs__frozen_store *fs = zs->frozen_store;
    if (!fs || fs->pending_unit < 0) return ZS_OK;
    const int u = fs->pending_unit;
    const zs__plan_unit *pu = unit_of(zs, u);
    const int64_t S = pu->shard_numel;
    const int bits = zs->plan->quant_bits;
    const int64_t scales_at = zs__quant_record_scales_at(S, bits);
    zs__backend *be = fs->records.be;
    int64_t first, count;
    quantized_part(zs, u, &first, &count);
    const int64_t blocks = zs_k_quant_blocks(S, zs->plan->quant_block);
    zs_status st = ZS_OK;
    for (int64_t at = first; at < first + count && st == ZS_OK; at += S) {
        char *rec = record_at(zs, u, (int)(at / S));
        /* Double quantization: the fp32 scales go to scratch, then their
         * codes and group scales into the record. */
        float *scales = zs->plan->quant_double ? fs->scales.ptr : (float *)(rec + scales_at);
        st = be->ops->quantize(be, rec, scales, (const float *)fs->pending.ptr + (at - first),
                               ZS_DTYPE_FP32, S, zs->plan->quant_block, bits);
        if (st == ZS_OK && zs->plan->quant_double) {
            char *codes = rec + scales_at;
            st = be->ops->quantize(be, codes, (float *)(codes + zs__quant_record_scales_at(blocks, 8)),
                                   scales, ZS_DTYPE_FP32, blocks, ZS_FROZEN_SCALE_GROUP, 8);
        }
    }
    zs__buf_free(&fs->pending);
    fs->pending_unit = -1;
    return st;
}

/* Makes unit u the pending one: its part's current values in fp32. */
static zs_status begin_unit(zs_ctx *zs, int u) {
    zs__frozen_store *fs = zs->frozen_store;
    if (fs->pending_unit == u) return ZS_OK;
    ZS_CHECK(zs__frozen_store_flush(zs));
    int64_t first, count;
    int first_record;
    quantized_part(zs, u, &first, &count);
    zs__backend *be = fs->records.be;
    ZS_CHECK(zs__buf_alloc(be, &fs->pending, ZS_MEM_SCRATCH, ZS_DTYPE_FP32, count));
    fs->pending_unit = u;
    const char *records = kept_records(zs, u, &first_record);
    return dequantize_range(zs, be, u, records, first_record, first, count, fs->pending.ptr,
                            ZS_DTYPE_FP32);
}

zs_status zs__frozen_store_write(zs_ctx *zs, int param, int64_t first, int64_t count,
                                 const float *src) {
    if (count <= 0) return ZS_OK;
    const zs__plan_param *pp = &zs->plan->params[param];
    ZS_CHECK(begin_unit(zs, pp->unit));
    zs__frozen_store *fs = zs->frozen_store;
    int64_t part_first, part_count;
    quantized_part(zs, pp->unit, &part_first, &part_count);
    const int64_t at = pp->offset + first - part_first;
    if (at < 0 || at + count > part_count)
        return zs__fail(ZS_ERR_INTERNAL, "frozen store: elements [%lld, %lld) of '%s' are not "
                        "in the part of its unit rank %d quantizes",
                        (long long)first, (long long)(first + count), zs->params[param]->name,
                        zs->rank);
    return fs->pending.be->ops->upload(fs->pending.be, (float *)fs->pending.ptr + at, src,
                                       (size_t)count * sizeof(float));
}

zs_status zs__frozen_store_gather_full(zs_ctx *zs) {
    zs__frozen_store *fs = zs->frozen_store;
    if (!fs) return ZS_OK;
    ZS_CHECK(zs__frozen_store_flush(zs));
    const int stage = zs->settings.zero.stage;
    if (stage != 1 && stage != 2) return ZS_OK;
    for (int u = 0; u < zs->unit_count; u++) {
        if (fs->at[u] < 0) continue;
        ZS_CHECK(zs__comm_all_gather(zs->shard_comm, (char *)fs->records.ptr + fs->at[u],
                                     (size_t)unit_of(zs, u)->record_bytes / 4, ZS_DTYPE_FP32,
                                     zs->units[u]->name));
    }
    return ZS_OK;
}

zs_status zs__frozen_store_read(zs_ctx *zs, int param, int64_t first, int64_t count, float *dst) {
    if (count <= 0) return ZS_OK;
    ZS_CHECK(zs__frozen_store_flush(zs));
    zs__frozen_store *fs = zs->frozen_store;
    const zs__plan_param *pp = &zs->plan->params[param];
    const int u = pp->unit;
    const int64_t block = zs->plan->quant_block;
    /* Whole blocks from the one holding element `first`, dequantized into
     * scratch on the store's backend, then the range downloaded. */
    const int64_t a = pp->offset + first, lead = a % block;
    int first_record;
    const char *records = kept_records(zs, u, &first_record);
    const int64_t S = unit_of(zs, u)->shard_numel, element = (int64_t)first_record * S;
    if (a < element || a + count > element + (int64_t)fs->kept * S)
        return zs__fail(ZS_ERR_INTERNAL, "frozen store: elements [%lld, %lld) of '%s' are not "
                        "kept by rank %d", (long long)first, (long long)(first + count),
                        zs->params[param]->name, zs->rank);
    zs__backend *be = fs->records.be;
    zs__buf scratch = {0};
    ZS_CHECK(zs__buf_alloc(be, &scratch, ZS_MEM_SCRATCH, ZS_DTYPE_FP32, lead + count));
    zs_status st = dequantize_range(zs, be, u, records, first_record, a - lead, lead + count,
                                    scratch.ptr, ZS_DTYPE_FP32);
    if (st == ZS_OK)
        st = be->ops->download(be, dst, (const float *)scratch.ptr + lead,
                               (size_t)count * sizeof(float));
    zs__buf_free(&scratch);
    return st;
}

zs_status zs__frozen_store_gather(zs_ctx *zs, int u, void *dst) {
    zs__frozen_store *fs = zs->frozen_store;
    if (fs->pending_unit >= 0)
        return zs__fail(ZS_ERR_INTERNAL, "frozen store: unit '%s' gathered while '%s' is still "
                        "being written", zs->units[u]->name, zs->units[fs->pending_unit]->name);
    const int64_t record = unit_of(zs, u)->record_bytes;
    zs__backend *be = zs->backend;
    ZS_CHECK(be->ops->copy(be, (char *)dst + (int64_t)zs->shard_rank * record,
                           record_at(zs, u, zs->shard_rank), (size_t)record));
    return zs__comm_all_gather(zs->shard_comm, dst, (size_t)record / 4, ZS_DTYPE_FP32,
                               zs->units[u]->name);
}

const void *zs__frozen_store_records(const zs_ctx *zs, int u) {
    const zs__frozen_store *fs = zs->frozen_store;
    if (!fs || zs->settings.zero.stage == 3 || fs->at[u] < 0) return NULL;
    return (const char *)fs->records.ptr + fs->at[u];
}

zs_status zs__frozen_store_dequantize(zs_ctx *zs, zs__backend *be, int param,
                                      const void *records, void *dst, zs_dtype dtype) {
    const zs__plan_param *pp = &zs->plan->params[param];
    return dequantize_range(zs, be, pp->unit, records, 0, pp->offset, pp->numel, dst, dtype);
}

const zs__buf *zs__frozen_store_buf(const zs_ctx *zs) {
    return zs->frozen_store ? &zs->frozen_store->records : NULL;
}
