/* Buffer sizes of zs_build, decided once (memory_plan.h).
 *
 * Floor (src/floors.txt): Owns nothing (a plan is a value); calls only
 * live.c's arithmetic.
 */
#include "zero/memory_plan.h"

#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/memory.h"
#include "zero/live.h"
#include "zero/quant_record.h"

/* The live budget of stages 2-3: zero.live_bytes, or max_live_units carves
 * of the largest unit for gradients (and for gathered parameters in stage
 * 3); it must hold the largest unit's parameters plus the largest
 * trainable unit's gradient (frozen units have none), or no micro-step
 * could run. */
static zs_status live_budget(const zs__settings *s, const zs__plan *plan, size_t elem,
                             const char *const *names, zs__memory_plan *out) {
    const int stage = s->zero.stage;
    const int max_units = s->zero.max_live_units;
    if (stage < 2 || plan->unit_count == 0) return ZS_OK;
    int largest = -1, largest_grad = -1;
    for (int u = 0; u < plan->unit_count; u++) {
        /* Gathered in stage 3: quantized units as their records. */
        if (largest < 0 ||
            zs__plan_unit_bytes(plan, u, elem) > zs__plan_unit_bytes(plan, largest, elem))
            largest = u;
        if (!plan->units[u].frozen &&
            (largest_grad < 0 ||
             plan->units[u].padded_numel > plan->units[largest_grad].padded_numel))
            largest_grad = u;
    }
    if (largest_grad < 0) largest_grad = largest; /* zs__plan_freeze_flags refuses this */
    const int named = stage == 3 ? largest : largest_grad;
    char fallback[32];
    snprintf(fallback, sizeof fallback, "unit #%d", named);
    const char *name = names ? names[named] : fallback;
    size_t unit_bytes, grad_bytes, span, grad_span, needed, automatic;
    /* Parameters and gradient, or the gradient alone. */
    unit_bytes = (size_t)zs__plan_unit_bytes(plan, largest, elem);
    if (!zs__mul_size((size_t)plan->units[largest_grad].padded_numel, elem, &grad_bytes) ||
        (span = zs__live_span(unit_bytes)) == 0 || (grad_span = zs__live_span(grad_bytes)) == 0 ||
        !zs__add_size(stage == 3 ? span : 0, grad_span, &needed) ||
        !zs__mul_size(needed, (size_t)max_units, &automatic))
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "the live budget for unit '%s' overflows", name);
    const int kinds = stage == 3 ? 2 : 1;
    size_t budget = s->zero.live_bytes > 0 ? (size_t)s->zero.live_bytes : automatic;
    if (budget < needed) {
        if (stage == 3 && largest == largest_grad)
            return zs__fail(ZS_ERR_CONFIG,
                            "zero.live_bytes = %zu cannot hold the largest unit, '%s': its "
                            "gathered parameters and its gradient (%zu bytes each) need %zu "
                            "bytes together; set zero.live_bytes to at least %zu (0 sizes it "
                            "for zero.max_live_units = %d such units: %zu)",
                            budget, name, unit_bytes, needed, needed, max_units, automatic);
        if (stage == 3)
            return zs__fail(ZS_ERR_CONFIG,
                            "zero.live_bytes = %zu cannot hold the largest unit, '%s' (%zu "
                            "bytes gathered; it is frozen), with the largest trainable unit's "
                            "gradient, '%s' (%zu bytes): %zu bytes together; set "
                            "zero.live_bytes to at least %zu (0 sizes it for "
                            "zero.max_live_units = %d such pairs: %zu)",
                            budget, name, unit_bytes,
                            names ? names[largest_grad] : "the largest trainable unit",
                            grad_bytes, needed, needed, max_units, automatic);
        return zs__fail(ZS_ERR_CONFIG,
                        "zero.live_bytes = %zu cannot hold the gradient of the largest unit, "
                        "'%s' (%zu bytes); set zero.live_bytes to at least %zu (0 sizes it for "
                        "zero.max_live_units = %d such units: %zu)",
                        budget, name, grad_bytes, needed, max_units, automatic);
    }
    out->live_budget = budget - budget % ZS__LIVE_ALIGN; /* whole blocks (live.c) */
    out->live_blocks = kinds * max_units;
    return ZS_OK;
}

zs__zeropp_use zs__zeropp_use_of(const zs__settings *s, int world) {
    zs__zeropp_use use = {0, 0, 0};
    const int stage = s->zero.stage;
    if (world < 2) return use;
    use.weight_bits = stage == 3 && s->comm.quantize_weights == ZS_QUANTIZE_INT8 ? 8 : 0;
    use.grad_bits = stage >= 1 && s->comm.quantize_grads == ZS_QUANTIZE_INT8   ? 8
                    : stage >= 1 && s->comm.quantize_grads == ZS_QUANTIZE_INT4 ? 4
                                                                                : 0;
    use.secondary = stage == 3 && s->zero.secondary_partition == ZS_SECONDARY_NODE;
    return use;
}

const char *zs__zeropp_needs_equal_nodes(const zs__settings *s, int world) {
    const zs__zeropp_use use = zs__zeropp_use_of(s, world);
    return use.grad_bits   ? "comm.quantize_grads"
           : use.secondary ? "zero.secondary_partition = \"node\""
                           : NULL;
}

/* ZeRO++'s share of the plan: what the collectives carry, their staging
 * and hpZ's secondary partition (zero/zeropp.h). One staging serves qwZ and
 * qgZ, sized for the largest unit: the comm engine runs one collective at a
 * time, and on CUDA the quantize and dequantize kernels are ordered with
 * the collectives between them by the communicator's events. */
static zs_status zeropp_plan(const zs__settings *s, const zs__plan *plan, int world,
                             int node_size, zs__memory_plan *out) {
    const zs__zeropp_use use = zs__zeropp_use_of(s, world);
    out->weight_bits = use.weight_bits;
    out->grad_bits = use.grad_bits;
    const char *needs = zs__zeropp_needs_equal_nodes(s, world);
    if (needs && (node_size < 1 || node_size > world || world % node_size != 0))
        return zs__fail(ZS_ERR_CONFIG, "%s needs nodes of equal size, but %d ranks do not make "
                        "nodes of %d; set comm.ranks_per_node to a divisor of %d",
                        needs, world, node_size, world);
    const int64_t block = s->comm.quant_block;
    const int64_t max_shard = plan->max_unit_padded_numel / plan->world_size;
    int64_t bytes = 0;
    if (use.weight_bits) bytes = zs__qwz_staging_bytes(plan->world_size, max_shard, block);
    if (use.grad_bits) {
        const int64_t b = zs__qgz_staging_bytes(world, world / node_size, max_shard, block,
                                                use.grad_bits);
        if (b > bytes) bytes = b;
    }
    out->quant_staging_numel = bytes / 4; /* records are multiples of 4 bytes */
    /* Units are padded to a multiple of world x align, so every node slice
     * is whole. */
    if (use.secondary) out->secondary_numel = plan->padded_numel / node_size;
    return ZS_OK;
}

zs_status zs__estimate_node_size(const zs__settings *s, int world, int *out) {
    const int64_t per_node = s->comm.ranks_per_node;
    *out = per_node > 0 && per_node <= world ? (int)per_node : world;
    const char *needs = zs__zeropp_needs_equal_nodes(s, world);
    /* ranks_per_node >= world: one node of every rank (topology.h). */
    if (!needs || (per_node > 0 && (per_node >= world || world % per_node == 0))) return ZS_OK;
    return zs__fail(ZS_ERR_CONFIG, "an estimate of %s on %d ranks needs the ranks per node: set "
                    "comm.ranks_per_node (zs-estimate: --set comm.ranks_per_node=N) to a divisor "
                    "of %d (it is %lld)",
                    needs, world, world, (long long)per_node);
}

zs__comm_path zs__comm_path_of(const zs__settings *s) {
    if (zs__backend_kind_host_accessible(s->backend))
        return s->comm.host_staging ? ZS_COMM_PATH_MPI_STAGED : ZS_COMM_PATH_MPI;
    return s->comm.impl == ZS_COMM_LIBRARY_MPI || !zs__backend_kind_device_collectives(s->backend)
               ? ZS_COMM_PATH_MPI_STAGED
               : ZS_COMM_PATH_NCCL;
}

zs_status zs__memory_plan_make(const zs__settings *s, const zs__plan *plan, int node_size,
                               const char *const *unit_names, zs__memory_plan *out) {
    memset(out, 0, sizeof *out);
    const int stage = s->zero.stage;
    /* Every rank of the job (the shard group's ranks times its replicas):
     * more than one means collectives and their staging. */
    const int world = plan->world_size * plan->replicas;
    const zs_dtype dt = s->precision.dtype;
    const size_t elem = zs_dtype_size(dt);
    out->compute_dtype = dt;
    out->grad_shard_dtype = dt;
    if (s->gradient_accumulation_steps > 1 && s->precision.accumulate_dtype == ZS_ACCUMULATE_DTYPE_FP32)
        out->grad_shard_dtype = ZS_DTYPE_FP32;
    out->reduce_dtype = s->precision.reduce_dtype == ZS_REDUCE_DTYPE_FP32 ? ZS_DTYPE_FP32 : dt;
    ZS_CHECK(zeropp_plan(s, plan, world, node_size, out));
    /* qgZ takes precedence over precision.reduce_dtype: its sums are fp32
     * already, and the fp32 staging would go unused. */
    if (out->grad_bits) out->reduce_dtype = dt;
    out->moments = s->optimizer.kind == ZS_OPTIMIZER_SGD ? (s->optimizer.momentum > 0 ? 1 : 0) : 2;
    /* Quantized frozen units are not in the parameter buffer (frozen_store.h). */
    out->params_numel = stage < 3 ? plan->store_padded_numel : plan->store_shard_numel;
    out->frozen_numel = stage < 3 ? plan->frozen_padded_numel : plan->frozen_shard_numel;
    /* Frozen units have no gradient and no state. */
    out->grads_numel = stage < 2 ? plan->grad_padded_numel : plan->grad_shard_numel;
    out->state_numel = stage == 0 ? plan->grad_padded_numel : plan->grad_shard_numel;
    const int offload_opt = s->offload.optimizer != ZS_OFFLOAD_NONE;
    out->has_master = dt != ZS_DTYPE_FP32 || offload_opt;
    out->params_tag = stage == 3 && s->offload.params != ZS_OFFLOAD_NONE ? ZS_MEM_HOST_PARAMS
                                                                          : ZS_MEM_PARAMS;
    out->params_on_nvme = stage == 3 && s->offload.params == ZS_OFFLOAD_NVME;
    if (out->params_on_nvme && plan->frozen_units > 0)
        return zs__fail(ZS_ERR_CONFIG, "offload.params = \"nvme\" keeps no parameter shard (a "
                        "gather reads the fp32 master), and frozen parameters have no master: "
                        "use offload.params = \"host\" or \"none\" with frozen units");
    const int64_t max_shard = plan->max_unit_padded_numel / plan->world_size;
    if (out->params_on_nvme) {
        /* Two halves of whichever buffer the copy into place reads (the
         * staging itself in fp32, else the rounding): that copy is
         * asynchronous on CUDA, so a gather fills one half while the
         * previous gather's copy may still read the other (unit_ops.c). */
        out->gather_half_numel = max_shard;
        out->gather_staging_numel = dt == ZS_DTYPE_FP32 ? 2 * max_shard : max_shard;
        if (dt != ZS_DTYPE_FP32) out->gather_rounded_numel = 2 * max_shard;
    }
    out->grads_tag = stage >= 2 && offload_opt ? ZS_MEM_HOST_STATE : ZS_MEM_GRADS;
    out->nvme = s->offload.optimizer == ZS_OFFLOAD_NVME;
    const zs_mem_tag state_tag = out->nvme ? ZS_MEM_NVME_STATE : ZS_MEM_HOST_STATE;
    out->master_tag = offload_opt ? state_tag : ZS_MEM_MASTER;
    out->optim_tag = offload_opt ? state_tag : ZS_MEM_OPTIM;
    if (offload_opt) {
        const int params_on_device = !(stage == 3 && s->offload.params != ZS_OFFLOAD_NONE);
        if (stage < 2) out->grads_host_numel = out->state_numel;
        if (stage >= 2 && s->gradient_accumulation_steps > 1) {
            out->grads_landing_numel = max_shard;
            /* A reduced chunk is fp32 with reduce_dtype = "fp32" or qgZ. */
            out->landing_dtype =
                (s->precision.reduce_dtype == ZS_REDUCE_DTYPE_FP32 || out->grad_bits) && world > 1
                    ? ZS_DTYPE_FP32
                    : dt;
        }
        /* fp32 with the master in host memory: the master is the source. */
        if (params_on_device && (dt != ZS_DTYPE_FP32 || out->nvme))
            out->params_host_numel = out->state_numel;
    }
    ZS_CHECK(live_budget(s, plan, elem, unit_names, out));
    if (out->reduce_dtype != dt && world > 1)
        out->reduce_staging_numel = plan->max_grad_unit_padded_numel;
    /* qgZ reduces every unit alone, as reduce_dtype = "fp32" does (bucket.c). */
    if (s->comm.bucket_bytes > 0 && world > 1 && out->reduce_dtype == dt && !out->grad_bits &&
        s->comm.reduce_scatter == ZS_COMM_IMPL_RING)
        out->bucket_staging_numel = 2 * s->comm.bucket_bytes / (int64_t)elem;

    uint64_t *b = out->bytes;
    /* Frozen units' share of the parameter buffer is reported as frozen
     * when it is on the device (offload.params = "host" keeps it in host
     * memory, as host_params). */
    out->frozen_tag = out->params_tag == ZS_MEM_PARAMS ? ZS_MEM_FROZEN : out->params_tag;
    if (!out->params_on_nvme) {
        b[out->params_tag] += (uint64_t)(out->params_numel - out->frozen_numel) * elem;
        b[out->frozen_tag] += (uint64_t)out->frozen_numel * elem;
    }
    /* The frozen store's records: every shard's in stages 0-2, this rank's
     * in stage 3. */
    out->frozen_store_bytes =
        (stage < 3 ? (uint64_t)plan->world_size : 1u) * (uint64_t)plan->quantized_record_bytes;
    b[out->frozen_tag] += out->frozen_store_bytes;
    /* Double quantization's decoded scales: beside the records, and on the
     * device too when they are in host memory (a gathered unit is decoded
     * there). */
    const uint64_t decoded = (uint64_t)zs__plan_frozen_scales_numel(plan) * 4;
    b[out->frozen_tag] += decoded;
    if (out->frozen_tag != ZS_MEM_FROZEN) b[ZS_MEM_FROZEN] += decoded;
    b[out->grads_tag] += (uint64_t)out->grads_numel *
                         (stage < 2 ? elem : zs_dtype_size(out->grad_shard_dtype));
    b[ZS_MEM_HOST_STATE] += (uint64_t)out->grads_host_numel * elem;
    b[ZS_MEM_OFFLOAD_STAGING] = (uint64_t)out->params_host_numel * elem +
                                (uint64_t)out->grads_landing_numel *
                                    (out->grads_landing_numel ? zs_dtype_size(out->landing_dtype) : 0);
    if (out->nvme) {
        /* Whole chunks in the swap file; four of them in memory (three for the sweep, one for the get/put cache). */
        zs__nvme_layout_make(1 + out->moments, out->state_numel, s->offload.buffer_bytes,
                             &out->nvme_layout);
        b[ZS_MEM_NVME_STATE] = (uint64_t)out->nvme_layout.chunks * out->nvme_layout.block_bytes;
        b[ZS_MEM_OFFLOAD_STAGING] += zs__nvme_buffer_bytes(&out->nvme_layout) +
                                     (uint64_t)out->gather_staging_numel * 4 +
                                     (uint64_t)out->gather_rounded_numel * elem;
        b[ZS_MEM_HOST_STATE] += zs__nvme_table_bytes(&out->nvme_layout);
    } else {
        b[out->master_tag] += out->has_master ? (uint64_t)out->state_numel * 4 : 0;
        b[out->optim_tag] += (uint64_t)out->moments * (uint64_t)out->state_numel * 4;
    }
    b[ZS_MEM_LIVE_FREE] = out->live_budget;
    /* The MPI communicator's ring staging (comm.segment_bytes) and, where
     * the collectives' buffers are not host memory the MPI path can use,
     * the host staging (comm.staging_bytes), whenever there is more than one
     * rank; NCCL stages nothing of ours. Then the fp32 reduction staging and
     * the bucket. */
    const zs__comm_path path = zs__comm_path_of(s);
    uint64_t comm_staging = 0;
    if (world > 1 && path != ZS_COMM_PATH_NCCL)
        comm_staging = (uint64_t)s->comm.segment_bytes +
                       (path == ZS_COMM_PATH_MPI_STAGED ? (uint64_t)s->comm.staging_bytes : 0);
    b[ZS_MEM_COMM] = comm_staging + (uint64_t)out->reduce_staging_numel * 4 +
                     (uint64_t)out->bucket_staging_numel * elem +
                     (uint64_t)out->quant_staging_numel * 4;
    b[ZS_MEM_SECONDARY] = (uint64_t)out->secondary_numel * elem;
    for (int t = 0; t < ZS_MEM_TAG_COUNT; t++)
        if (zs__mem_tag_on_device((zs_mem_tag)t)) out->device_bytes += b[t];
    return ZS_OK;
}

int zs__frozen_bits_of(const zs__settings *s) {
    switch (s->zero.frozen_storage) {
    case ZS_FROZEN_INT8: return 8;
    case ZS_FROZEN_NF4: return ZS_K_QUANT_NF4;
    default: return 0;
    }
}

int64_t zs__plan_align_of(const zs__settings *s) {
    const int64_t align = s->zero.align;
    if (s->zero.frozen_storage == ZS_FROZEN_COMPUTE || align >= s->zero.frozen_block) return align;
    return s->zero.frozen_block; /* both powers of two: a multiple of align */
}

zs_status zs__plan_of_settings(const zs__settings *s, int shard, int replicas, int unit_count,
                               const int *params_per_unit, const int64_t *param_numel,
                               const unsigned *param_flags, const char *const *unit_names,
                               const char *const *param_names, zs__plan **out) {
    *out = NULL;
    zs__plan *plan = NULL;
    ZS_CHECK(zs__plan_create_replicated(shard, replicas, zs__plan_align_of(s), unit_count,
                                        params_per_unit, param_numel, &plan));
    zs_status st = zs__plan_freeze_flags(plan, param_flags, unit_names, param_names);
    zs__plan_double_quant(plan, s->zero.frozen_double_quant);
    if (st == ZS_OK)
        st = zs__plan_quantize(plan, param_flags, zs__frozen_bits_of(s), s->zero.frozen_block,
                               unit_names, param_names);
    if (st != ZS_OK) {
        zs__plan_destroy(plan);
        return st;
    }
    *out = plan;
    return ZS_OK;
}
