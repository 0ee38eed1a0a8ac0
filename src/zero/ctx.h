/* The private shape of a context, its units and parameters. */
#ifndef ZS_ZERO_CTX_H
#define ZS_ZERO_CTX_H

#include <stdint.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/config.h"
#include "core/memory.h"
#include "mixed_precision/loss_scaler.h"
#include "zero/live.h"
#include "zero/plan.h"
#include "zeroshard.h"

#define ZS_NAME_CAPACITY 256
/* Parameter and user-state names leave room for the suffixes of checkpoint
 * tensor names (":exp_avg_sq", "global:") within safetensors' 255 bytes. */
#define ZS_PARAM_NAME_MAX 240
#define ZS_MAX_DIMS 8

struct zs_param {
    zs_ctx *ctx;
    zs_unit *unit;
    int index;                   /* in the model, registration order */
    char name[ZS_NAME_CAPACITY];
    int ndim;
    int64_t shape[ZS_MAX_DIMS];
    int64_t numel;
    zs_init init;
    unsigned flags;
};

struct zs_unit {
    zs_ctx *ctx;
    int index;                   /* forward order */
    char name[ZS_NAME_CAPACITY];
    int first_param;
    int param_count;
    /* Per-step state. */
    int fetched;                 /* between zs_fetch and zs_release */
    int grads_declared;          /* zs_grads_ready called since the last zs_step */
    void *live_params;           /* stage 3: the gathered parameters, carved from the live
                                    budget between fetch and release; NULL otherwise */
    void *live_grad;             /* stages 2-3: the open full gradient, carved from the live
                                    budget at first use and kept across release and refetch
                                    (tied weights) until zs_grads_ready; NULL otherwise */
};

/* One named blob of user state (zs_user_state_set, or restored by zs_load). */
typedef struct zs__user_entry {
    char name[ZS_NAME_CAPACITY];
    int per_rank;
    void *data;
    size_t bytes;
} zs__user_entry;

struct zs_ctx {
    zs__settings settings;
    uint64_t config_hash;
    zs_dtype compute_dtype;

    int rank;
    int world_size;
    int owns_mpi;                /* this context initialized MPI */
    zs__mem mem;
    zs__comm *comm;
    zs__backend *backend;

    /* The model as described, in registration order. */
    zs_unit **units;
    int unit_count, unit_capacity;
    zs_param **params;
    int param_count, param_capacity;
    zs_unit *open_unit;          /* between zs_unit_begin and zs_unit_end */
    int built;
    zs__plan *plan;

    /* Model state (DESIGN §3). Which of these exist depends on the stage:
     *   params_full  [plan->padded_numel] compute dtype, stages 0-2  (tag params)
     *   params_shard [plan->shard_numel]  compute dtype, stage 3     (tag params)
     *   grads_full   [plan->padded_numel] compute dtype, stages 0-1  (tag grads)
     *   grads_shard  [plan->shard_numel]  grad_shard_dtype, stages 2-3 (tag grads)
     *   master       fp32, [padded_numel] stage 0, [shard_numel] stages 1-3,
     *                only when the compute dtype is not fp32     (tag master)
     *   optim_m/v    fp32, [padded_numel] stage 0, [shard_numel] stages 1-3 (tag optim)
     * In fp32 the parameters are their own master copy, so no master buffer
     * exists. */
    zs__buf params_full, params_shard, grads_full, grads_shard, master, optim_m, optim_v;
    /* The stage-2/3 gradient shard holds the compute dtype when there is one
     * micro-step per step (nothing to accumulate), else
     * precision.accumulate_dtype (fp32 by default). */
    zs_dtype grad_shard_dtype;
    /* What gradient collectives carry: the compute dtype, or fp32 when
     * precision.reduce_dtype = "fp32" (then a unit is converted into
     * reduce_staging, [largest unit] fp32, tag comm, reduced, and converted
     * back). */
    zs_dtype reduce_dtype;
    zs__buf reduce_staging;
    zs__live live;               /* stages 2-3: zero.live_bytes (zero/live.h) */
    int live_units;              /* stage-3 units gathered now (<= max_live_units) */
    int live_units_peak;
    int open_grads;              /* stages 2-3: unit gradients open now (<= max_live_units) */

    int64_t step;                /* optimizer steps applied */
    int64_t skipped_total;
    int64_t micro;               /* micro-steps done in the current accumulation window */
    double *unit_sums;           /* [unit_count] squared norms of this rank's owned gradients */
    zs__loss_scaler scaler;

    /* Checkpoints (src/checkpoint): user state to save, or as restored. */
    zs__user_entry *user;
    int user_count, user_capacity;
    uint64_t ckpt_warned; /* retention: digest of the entries it last warned about leaving */
};

/* Collective helpers shared by the zero/ files. */
/* Every rank contributes a 64-bit digest; fails on every rank (ZS_ERR_MISMATCH)
 * if any differs from rank 0's, naming the first differing rank and `what`. */
zs_status zs__agree_u64(zs_ctx *zs, uint64_t value, const char *what, const char *advice);

/* A digest of every piece of this rank's training state: parameters (full or
 * shard), master weights, optimizer moments and the step counters. Tests use
 * it to prove that a skipped step changed nothing. */
uint64_t zs__state_digest(const zs_ctx *zs);

/* Stages 1-2 keep full parameters that each rank updates only in its owned
 * slices: every rank gathers the others' slices of every unit (after an
 * optimizer step, or an import). A no-op in stages 0 and 3. Collective. */
zs_status zs__gather_full_params(zs_ctx *zs);

/* Learning rate of optimizer step t (1-based) under the configured schedule. */
double zs__schedule_lr(const zs__settings *settings, int64_t t);

#endif
