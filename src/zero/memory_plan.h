/* What zs_build will hold, per tag, computed from the configuration and the
 * partition plan alone: the one place buffer sizes are decided. zs_build
 * allocates what this says, and zs_estimate_memory (zs-estimate) reports
 * it without building, so estimate = measured by construction (and a test
 * checks it). */
#ifndef ZS_ZERO_MEMORY_PLAN_H
#define ZS_ZERO_MEMORY_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "offload/nvme_state.h"
#include "zero/plan.h"
#include "zeroshard.h"

typedef struct zs__memory_plan {
    zs_dtype compute_dtype;
    zs_dtype grad_shard_dtype;   /* stages 2-3: fp32 with accumulation unless accumulate_dtype says otherwise */
    zs_dtype reduce_dtype;       /* what gradient collectives carry */
    int moments;                 /* fp32 optimizer state buffers: 0, 1 (SGD momentum) or 2 (Adam) */
    int64_t params_numel;        /* full (stages 0-2) or the shard (stage 3) */
    int64_t frozen_numel;        /* the frozen units' part of it (ZS_MEM_FROZEN) */
    uint64_t frozen_store_bytes; /* quantized frozen units' records (frozen_store.h), also
                                    charged to frozen_tag */
    int64_t grads_numel;         /* full (stages 0-1) or the shard (stages 2-3) */
    int64_t state_numel;         /* master and each moment: full in stage 0, else the shard */
    int has_master;              /* the compute dtype is not fp32, or the optimizer is offloaded
                                    (the device keeps the parameters, the host their master) */
    /* Where each buffer is charged (device tags, or the host tiers of
     * offload.optimizer / offload.params). */
    zs_mem_tag params_tag, grads_tag, master_tag, optim_tag; /* nvme: master and optim are
                                                                 ZS_MEM_NVME_STATE */
    zs_mem_tag frozen_tag;       /* ZS_MEM_FROZEN, or params_tag where that is a host tier */
    int nvme;                    /* offload.optimizer = "nvme": master and moments in the swap file */
    int params_on_nvme;          /* offload.params = "nvme": no parameter shard is kept; each
                                    gather reads the fp32 master through gather staging */
    int64_t gather_half_numel;    /* the largest unit's shard: one half of the copy source */
    int64_t gather_staging_numel; /* fp32 elements of that staging: the largest unit's shard,
                                     two halves in fp32 (where the copy reads it) */
    int64_t gather_rounded_numel; /* ... and of its rounding into the compute dtype (not fp32):
                                     two halves */
    /* The optimizer offloaded (ground.h): host copies of the owned gradient
     * (stages 0-1, compute dtype, tag host_state), the landing of a reduced
     * chunk before the host adds it into the shard (stages 2-3 with
     * accumulation, landing_dtype, tag offload_staging) and the new
     * parameters before they go back (compute dtype, tag offload_staging). */
    int64_t grads_host_numel, grads_landing_numel, params_host_numel;
    zs_dtype landing_dtype;
    zs__nvme_layout nvme_layout; /* its chunks (offload/nvme_state.h) */
    uint64_t device_bytes;       /* the sum of the tags that live on the device */
    size_t live_budget;          /* stages 2-3: zero.live_bytes as allocated (0 otherwise) */
    int live_blocks;             /* most carves at once */
    int64_t reduce_staging_numel; /* fp32 staging of reduce_dtype = "fp32" */
    int64_t bucket_staging_numel; /* comm.bucket_bytes staging, compute dtype */
    /* ZeRO++ (zero/zeropp.h), on more than one rank: the bits the weight
     * gathers (qwZ: 8) and the gradient reduce-scatters (qgZ: 8 or 4) carry,
     * 0 when off; the records' staging, shared by both since the comm
     * engine runs one collective at a time (fp32 elements, tag comm:
     * zero/quant_record.h); hpZ's node slices of every unit (compute dtype,
     * tag secondary: plan->padded_numel / node_size). */
    int weight_bits, grad_bits;
    int64_t quant_staging_numel;
    int64_t secondary_numel;
    uint64_t bytes[ZS_MEM_TAG_COUNT]; /* per tag when zs_build returns (CPU backend) */
} zs__memory_plan;

/* How the data collectives move data, which decides the comm tag's
 * staging. zs_create resolves comm.impl = "auto" (a node with more ranks
 * than GPUs takes MPI); a configuration still saying "auto" (zs-estimate,
 * zs_estimate_memory) is planned as one GPU per rank: NCCL on CUDA. */
typedef enum zs__comm_path {
    ZS_COMM_PATH_MPI = 0,        /* MPI on the backend's host memory */
    ZS_COMM_PATH_MPI_STAGED = 1, /* MPI through host staging (comm.staging_bytes) */
    ZS_COMM_PATH_NCCL = 2        /* NCCL on device memory: nothing staged of ours */
} zs__comm_path;
zs__comm_path zs__comm_path_of(const zs__settings *s);

/* ZeRO++ as it runs on `world` ranks: more than one, since a single rank
 * moves nothing, so nothing is quantized or kept. The one rule the memory
 * plan, zs_build's checks and the bytes-per-step formula (comm_plan.c)
 * read. */
typedef struct zs__zeropp_use {
    int weight_bits; /* qwZ (stage 3): 8, or 0 */
    int grad_bits;   /* qgZ (stages 1-3): 8 or 4, or 0 */
    int secondary;   /* hpZ (stage 3): 1, or 0 */
} zs__zeropp_use;
zs__zeropp_use zs__zeropp_use_of(const zs__settings *s, int world);
/* The key of the setting in use on `world` ranks that needs nodes of equal
 * size (qgZ's hops pair ranks by node and local rank; hpZ's node slices
 * are 1/node_size of a unit), qgZ's first; NULL when none is. */
const char *zs__zeropp_needs_equal_nodes(const zs__settings *s, int world);

/* node_size: the ranks of each node (equal nodes; zs_build's topology, or
 * comm.ranks_per_node for an estimate), which sizes hpZ's secondary
 * partition and qgZ's staging. Fails with ZS_ERR_CONFIG (naming the
 * largest unit, from unit_names when given, and the bytes needed) when
 * zero.live_bytes cannot hold it, or when those settings meet a node size
 * that does not divide the ranks. */
/* zero.frozen_storage as the `bits` of kernels/quantize.h (0: the compute
 * dtype, 8, ZS_K_QUANT_NF4). */
int zs__frozen_bits_of(const zs__settings *s);
/* The plan's alignment: zero.align, raised to zero.frozen_block when frozen
 * units may be quantized (blocks then never cross a parameter's start or a
 * shard's). Every plan of a run is made with it. */
int64_t zs__plan_align_of(const zs__settings *s);

/* The plan zs_build makes of a layout under these settings: units sharded
 * over `shard` ranks and copied `replicas` times (hybrid sharding), aligned
 * as zs__plan_align_of says, frozen and quantized as the parameters' flags
 * say (param_flags NULL: none; names, when given, for the refusals). The
 * one recipe zs_build, zs_estimate_memory, the bytes per step and
 * zs-estimate follow. */
zs_status zs__plan_of_settings(const zs__settings *s, int shard, int replicas, int unit_count,
                               const int *params_per_unit, const int64_t *param_numel,
                               const unsigned *param_flags, const char *const *unit_names,
                               const char *const *param_names, zs__plan **out);

zs_status zs__memory_plan_make(const zs__settings *s, const zs__plan *plan, int node_size,
                               const char *const *unit_names, zs__memory_plan *out);

/* The node size an estimate (zs_estimate_memory, zs-estimate) plans with,
 * which zs_build learns from its ranks: comm.ranks_per_node, or the whole
 * world as one node when it is 0. Fails with ZS_ERR_CONFIG, saying to set
 * comm.ranks_per_node, when a setting whose memory follows the nodes (hpZ,
 * qgZ) runs on more than one rank without it, or when it does not divide
 * the world (nodes of unequal size, which those settings refuse). */
zs_status zs__estimate_node_size(const zs__settings *s, int world, int *out);

#endif
