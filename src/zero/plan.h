/* The partition plan: where every parameter element lives, for a given world
 * size. Pure arithmetic, no MPI and no allocation of tensors, so it can be
 * unit-tested for any world size on one process.
 *
 * Layout (DESIGN §3): within a unit, parameters are laid out in registration
 * order, each starting at a multiple of `align` elements. The unit's flat
 * length is then padded to a multiple of world_size * align, so that rank r
 * owns the equal contiguous slice [r * shard, (r + 1) * shard) of every unit,
 * and every slice starts aligned. (Replicated, "world" is the ranks of one
 * copy: zs__plan_create_replicated.) Gaps and padding hold zeros forever: their
 * gradients are zero, so every optimizer keeps them at zero.
 *
 * Model-wide buffers concatenate units: the full buffer of the model places
 * unit u at full_offset[u] (sum of padded lengths before it); a rank's shard
 * buffer places unit u's slice at shard_offset[u] (sum of shard lengths).
 *
 * Frozen units (every parameter ZS_PARAM_FROZEN; zs__plan_freeze) keep
 * their place among the parameters but have no gradient and no optimizer
 * state: the gradient buffers and the state index space concatenate the
 * trainable units only, at grad_full_offset[u] and grad_shard_offset[u].
 * Without frozen units these equal full_offset and shard_offset.
 *
 * Quantized frozen units (zero.frozen_storage = "int8" or "nf4", every
 * parameter ZS_PARAM_FROZEN | ZS_PARAM_QUANTIZE; zs__plan_quantize) are
 * not in the parameter buffers at all: they live in the frozen store
 * (zero/frozen_store.h) as one record per shard, `record_bytes` each, and
 * the parameter buffers concatenate the other units only (full_offset and
 * shard_offset skip them; store_padded_numel and store_shard_numel are the
 * buffers' lengths). Without them these equal padded_numel and
 * shard_numel. */
#ifndef ZS_ZERO_PLAN_H
#define ZS_ZERO_PLAN_H

#include <stdint.h>

#include "zeroshard.h"

typedef struct zs__plan_unit {
    int first_param;       /* index of the unit's first parameter in the plan */
    int param_count;
    int64_t used_numel;    /* end of the last parameter (includes alignment gaps) */
    int64_t padded_numel;  /* used_numel rounded up to world_size * align */
    int64_t shard_numel;   /* padded_numel / world_size: what each rank owns */
    int64_t full_offset;   /* start of the unit in a model-wide full buffer */
    int64_t shard_offset;  /* start of the unit's slice in a rank's shard buffer */
    int frozen;            /* no gradient, no state (zs__plan_freeze) */
    int64_t grad_full_offset;  /* trainable: its start in a full gradient buffer, and in */
    int64_t grad_shard_offset; /* the shard gradient buffer (= the state index space) */
    int quantized;             /* stored quantized in the frozen store (zs__plan_quantize) */
    int64_t record_bytes;      /* quantized: one shard's record (zero/quant_record.h) */
} zs__plan_unit;

typedef struct zs__plan_param {
    int unit;
    int64_t numel;
    int64_t offset;        /* start within its unit, a multiple of align */
} zs__plan_param;

typedef struct zs__plan {
    int world_size;         /* the ranks the units are sharded over */
    int replicas;           /* copies of the sharded model (hybrid sharding: the nodes), 1 otherwise */
    int64_t align;
    int unit_count;
    int param_count;
    zs__plan_unit *units;
    zs__plan_param *params;
    int64_t numel;          /* Ψ: the sum of parameter sizes, no gaps or padding */
    int64_t padded_numel;   /* sum of padded unit lengths: the full buffer length */
    int64_t shard_numel;    /* sum of shard lengths: a rank's shard buffer length */
    int64_t max_unit_padded_numel; /* the largest padded unit: a live buffer's size */
    /* The trainable units' share (all of the above without frozen units):
     * the gradient buffers' and the state's lengths, and the largest
     * trainable unit; and the frozen units' padded and shard lengths. */
    int64_t grad_padded_numel, grad_shard_numel, max_grad_unit_padded_numel;
    int64_t frozen_padded_numel, frozen_shard_numel;
    int frozen_units;
    /* Quantized frozen units (zs__plan_quantize): their format (`bits` of
     * kernels/quantize.h, 0: none), block, count, the sum of their records
     * (one shard each) and the largest; the parameter buffers' lengths
     * without them. frozen_padded_numel and frozen_shard_numel count the
     * frozen units kept in the compute dtype only. */
    int quant_bits;
    int64_t quant_block;
    int quant_double;       /* the scales quantized too (zero.frozen_double_quant) */
    int quantized_units;
    int64_t quantized_record_bytes, max_record_bytes;
    int64_t store_padded_numel, store_shard_numel;
} zs__plan;

/* Lays out `unit_count` units; unit u holds params_per_unit[u] parameters whose
 * sizes follow, in order, in param_numel[]. Fails (ZS_ERR_INVALID_ARGUMENT,
 * naming the unit index) on an empty unit, a non-positive size, world_size < 1,
 * align not a power of two, or a size that overflows int64. */
zs_status zs__plan_create(int world_size, int64_t align, int unit_count,
                          const int *params_per_unit, const int64_t *param_numel,
                          zs__plan **out);
/* The same for a model sharded over world_size ranks and replicated
 * `replicas` times (zero.shard_group = "node": world_size is the node's
 * ranks, replicas the nodes): units are padded to world_size x replicas x
 * align, so that each slice splits evenly between the replicas that sum it. */
zs_status zs__plan_create_replicated(int world_size, int replicas, int64_t align,
                                     int unit_count, const int *params_per_unit,
                                     const int64_t *param_numel, zs__plan **out);
void zs__plan_destroy(zs__plan *plan);
/* Marks units frozen (unit_frozen[u] nonzero; NULL: none) and lays out the
 * gradient and state offsets over the trainable units. */
void zs__plan_freeze(zs__plan *plan, const unsigned char *unit_frozen);
/* The same from each parameter's ZS_PARAM_* flags (NULL: none): a unit is
 * frozen when all its parameters are ZS_PARAM_FROZEN. Fails
 * (ZS_ERR_INVALID_ARGUMENT) on a unit that mixes frozen and trainable
 * parameters, naming the unit and one parameter of each kind (from the
 * names when given, else by index), and when every unit is frozen. */
zs_status zs__plan_freeze_flags(zs__plan *plan, const unsigned *param_flags,
                                const char *const *unit_names, const char *const *param_names);

/* Stores the frozen units whose parameters all carry ZS_PARAM_QUANTIZE
 * quantized to `bits` (8 or ZS_K_QUANT_NF4) in blocks of `block`, and lays
 * out the parameter buffers without them (after zs__plan_freeze_flags; the
 * plan's align must be a multiple of `block`, so that blocks never cross a
 * parameter's start or a shard's), the scales too after
 * zs__plan_double_quant (zero/quant_record.h). bits 0: nothing is
 * quantized. Fails
 * (ZS_ERR_INVALID_ARGUMENT) on ZS_PARAM_QUANTIZE on a trainable parameter,
 * or on a unit mixing quantized and unquantized frozen parameters, naming
 * them. */
zs_status zs__plan_quantize(zs__plan *plan, const unsigned *param_flags, int bits, int64_t block,
                            const char *const *unit_names, const char *const *param_names);
/* Double quantization of the scales (zero.frozen_double_quant) for the
 * next zs__plan_quantize: call it before. */
void zs__plan_double_quant(zs__plan *plan, int double_quant);

/* Double quantization: the fp32 scales one record's codes decode into, a
 * group more than the largest record's blocks (the frozen store's scratch;
 * 0 without it). */
int64_t zs__plan_frozen_scales_numel(const zs__plan *plan);

/* The bytes of unit u whole (gathered, or a gradient's): padded_numel
 * elements of `elem` bytes, or, quantized, every shard's record. */
int64_t zs__plan_unit_bytes(const zs__plan *plan, int u, size_t elem);

/* The part of parameter p that rank `rank` owns, as [*begin, *end) in the
 * parameter's own element indices. Returns 0 (and an empty range) if the rank
 * owns none of it. */
int zs__plan_owned_range(const zs__plan *plan, int param, int rank, int64_t *begin, int64_t *end);

#endif
