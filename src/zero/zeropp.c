/* ZeRO++'s state in a context (zeropp.h): checked, allocated as the memory
 * plan says, and freed.
 *
 * Floor (src/floors.txt): Owns zs__zeropp, the record ZeRO++'s files share
 * (quantized_gather.c, quantized_reduce.c, secondary.c); calls only the
 * memory plan below it.
 */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "zero/ground.h"
#include "zero/memory_plan.h"
#include "zero/zeropp.h"

zs_status zs__zeropp_require(zs_ctx *zs) {
    const char *needs = zs__zeropp_needs_equal_nodes(&zs->settings, zs->world_size);
    return needs ? zs__topology_require_equal(zs->topology, needs) : ZS_OK;
}

zs_status zs__zeropp_create(zs_ctx *zs, const zs__memory_plan *mp) {
    zs__zeropp *z = &zs->zeropp;
    z->weight_bits = mp->weight_bits;
    z->grad_bits = mp->grad_bits;
    z->block = zs->settings.comm.quant_block;
    z->version = 1;
    if (z->grad_bits && zs->settings.precision.reduce_dtype == ZS_REDUCE_DTYPE_FP32)
        ZS_INFO("comm.quantize_grads takes precedence over precision.reduce_dtype = \"fp32\": "
                "its sums are fp32 already");
    /* A record costs bits/8 bytes per value plus a 4-byte scale per block:
     * with small blocks it outweighs the values it replaces, and the
     * quantized collectives send more than plain ones (and lose precision
     * for nothing). Said, not refused: a test may want small blocks. */
    const double elem = (double)zs_dtype_size(zs->compute_dtype);
    const int bits[2] = {z->weight_bits, z->grad_bits};
    const char *keys[2] = {"comm.quantize_weights", "comm.quantize_grads"};
    for (int i = 0; i < 2; i++) {
        if (!bits[i]) continue;
        const double per_value = bits[i] / 8.0 + 4.0 / (double)z->block;
        if (per_value >= elem)
            ZS_WARN("%s = \"int%d\" with comm.quant_block = %lld sends %.2f bytes per value "
                    "(%d bits and a 4-byte scale per block), no fewer than the %.0f bytes of %s "
                    "it replaces: the quantized collective moves more data than the plain one; "
                    "use comm.quant_block >= %lld (the default is 256)",
                    keys[i], bits[i], (long long)z->block, per_value, bits[i], elem,
                    zs_dtype_name(zs->compute_dtype),
                    (long long)(4.0 / (elem - bits[i] / 8.0)) + 1);
    }
    if (mp->quant_staging_numel > 0)
        ZS_CHECK(zs__buf_alloc(zs->backend, &z->staging, ZS_MEM_COMM, ZS_DTYPE_FP32,
                               mp->quant_staging_numel));
    if (mp->secondary_numel <= 0) return ZS_OK;
    const size_t units = (size_t)(zs->unit_count ? zs->unit_count : 1);
    z->slice_at = zs__calloc(units, sizeof *z->slice_at);
    z->filled = zs__calloc(units, sizeof *z->filled);
    z->from_secondary = zs__calloc(units, sizeof *z->from_secondary);
    if (!z->slice_at || !z->filled || !z->from_secondary)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_build: out of host memory for the secondary "
                        "partition's table of %d units", zs->unit_count);
    ZS_CHECK(zs__buf_alloc(zs->backend, &z->secondary, ZS_MEM_SECONDARY, zs->compute_dtype,
                           mp->secondary_numel));
    /* Unit u's node slice is padded_numel / node_size elements, after the
     * slices of the units before it. */
    int64_t at = 0;
    for (int u = 0; u < zs->unit_count; u++) {
        z->slice_at[u] = at;
        at += zs->plan->units[u].padded_numel / zs->topology->node_size;
    }
    ZS_ASSERT(at == mp->secondary_numel);
    z->secondary_on = 1;
    ZS_INFO("zero.secondary_partition = \"node\": gathers of a unit whose parameters have not "
            "changed since its last gather stay inside the node (%d ranks)",
            zs->topology->node_size);
    return ZS_OK;
}

void zs__zeropp_destroy(zs_ctx *zs) {
    zs__zeropp *z = &zs->zeropp;
    zs__buf_free(&z->staging);
    zs__buf_free(&z->secondary);
    free(z->slice_at);
    free(z->filled);
    free(z->from_secondary);
    memset(z, 0, sizeof *z);
}

int zs__zeropp_quantizes_grads(const zs_ctx *zs) { return zs->zeropp.grad_bits != 0; }
