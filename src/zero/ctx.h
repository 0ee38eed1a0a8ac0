/* The private shape of a context, its units and parameters. */
#ifndef ZS_ZERO_CTX_H
#define ZS_ZERO_CTX_H

#include <stdint.h>
#include <xxhash.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "comm/engine.h"
#include "comm/injected_network.h"
#include "core/config.h"
#include "core/memory.h"
#include "core/trace.h"
#include "mixed_precision/loss_scaler.h"
#include "offload/nvme_state.h"
#include "offload/store.h"
#include "zero/job.h"
#include "zero/live.h"
#include "zero/metrics.h"
#include "zero/plan.h"
#include "zero/residency.h"
#include "zero/zeropp.h"
#include "zeroshard.h"

#define ZS_NAME_CAPACITY 256
/* Parameter and user-state names leave room for the suffixes of checkpoint
 * tensor names (":exp_avg_sq", "global:") within safetensors' 255 bytes. */
#define ZS_PARAM_NAME_MAX 240
#define ZS_MAX_DIMS 8

/* Collective: all-gathers every rank's `kernel` name (kernels_agree.c);
 * *differ = 1 when they are not all equal, and `groups` then lists every
 * name with its ranks ("ranks 0-1: 'Zen'; rank 2: 'Haswell'"). */
zs_status zs__kernels_compare(zs_ctx *zs, const char *what, const char *kernel, char *groups,
                              size_t cap, int *differ);

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

/* A collective of one unit, run by the comm engine (unit_ops.c). */
typedef struct zs__unit_op {
    zs__engine_op op;            /* first: the engine hands this back to run() */
    zs_ctx *zs;
    zs_unit *unit;
    void *buf;                   /* the unit's full buffer being gathered or reduced */
    int all_reduce;              /* stage 0: all-reduce instead of reduce-scatter */
    int to_shard;                /* stages 2-3: add the owned chunk into the gradient shard */
} zs__unit_op;

struct zs_unit {
    zs_ctx *ctx;
    int index;                   /* forward order */
    char name[ZS_NAME_CAPACITY];
    int first_param;
    int param_count;
    /* Per-step state. */
    int fetched;                 /* between zs_fetch and zs_release */
    void *live_params;           /* stage 3: the gathered parameters, carved from the live
                                    budget between fetch (or a gather ahead) and release;
                                    NULL otherwise */
    int prefetched;              /* stage 3: gathered ahead of the program's zs_fetch */
    zs__unit_grad grad;          /* the gradient's life cycle in this micro-step (residency.h) */
    /* The unit's collectives on the comm engine: at most one of each in flight. */
    zs__unit_op gather;          /* stage 3: the owned slice copied in, then all-gathered */
    zs__unit_op reduce;          /* the gradient's reduction (and, stages 2-3, into the shard) */
};

/* zs_grads_ready was called for the unit in this micro-step. */
static inline int zs__grads_declared(const zs_unit *unit) {
    return unit->grad.state >= ZS__GRAD_QUEUED;
}

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
    int ranks_on_host;           /* ranks of the job on this rank's host (zs_create) */
    uint64_t created_ns;         /* zs_create's start (zs__clock_ns): the start-up's clock */
    zs__mem mem;
    zs__comm *comm;
    /* Which ranks share a node (comm/topology.h), agreed at zs_create; a
     * mode that needs nodes of equal size calls
     * zs__topology_require_equal(zs->topology, "<the setting>"). */
    zs__topology *topology;
    /* The node and cross-node communicators (comm.h), created at zs_create
     * beside zs->comm and owned by it (destroyed with it): borrowed. */
    zs__comm *node_comm;
    zs__comm *cross_comm;
    zs__engine *engine;          /* every collective of the step protocol (comm/engine.h) */
    zs__injected_network network; /* benchmarks' simulated network (ZS_COMM_DELAY_*) */
    zs__trace *trace;            /* trace.file, or NULL (core/trace.h) */
    zs__metrics metrics;         /* log.metrics_file (zero/metrics.h) */
    uint64_t trace_mark;         /* when the last runtime call returned: compute since then */
    zs__backend *backend;

    /* The model as described, in registration order. */
    zs_unit **units;
    int unit_count, unit_capacity;
    zs_param **params;
    int param_count, param_capacity;
    zs_unit *open_unit;          /* between zs_unit_begin and zs_unit_end */
    int built;
    zs__plan *plan;
    /* The group the model is sharded over (zero.shard_group, fixed at
     * zs_build): the world, or with "node" this rank's node, the model then
     * being replicated across nodes. The plan is laid out for shard_size
     * ranks and this rank owns slice shard_rank of every unit; the shard
     * collectives (gathers, reduce-scatters) run on shard_comm, and
     * replica_comm (NULL when nothing is replicated) sums the owned slices
     * of the `replicas` ranks holding the same one. `replica` is this rank's
     * index among them: replica 0 alone adds its slice to the gradient
     * norm and writes it into checkpoints. */
    zs__comm *shard_comm, *replica_comm;
    int shard_rank, shard_size, replica, replicas;

    /* Model state (DESIGN §3). Which of these exist depends on the stage:
     *   params_full  [plan->padded_numel] compute dtype, stages 0-2  (tag params)
     *   params_shard [plan->shard_numel]  compute dtype, stage 3     (tag params;
     *                host_params in host memory with offload.params = "host")
     *   grads_full   [plan->padded_numel] compute dtype, stages 0-1  (tag grads)
     *   grads_shard  [plan->shard_numel]  grad_shard_dtype, stages 2-3 (tag grads;
     *                host_state in host memory with the optimizer offloaded)
     * The fp32 master weights and moments are the store's (offload/store.h:
     * device, host or nvme tier), in the state index space: [padded_numel]
     * in stage 0, [shard_numel] in stages 1-3. In fp32 without offload the
     * parameters are their own master copy. Every buffer names the backend
     * that computes on it (zs__buf.be): the context's backend, or, for host
     * memory, host_backend. */
    zs__buf params_full, params_shard, grads_full, grads_shard;
    zs__store store;
    /* Computes on host memory: the context's backend when that is the CPU
     * and nothing is offloaded, else a CPU backend of its own (so that, on
     * the CPU too, the offload tiers are another backend's memory and every
     * copy between them is explicit, as on a GPU). */
    zs__backend *host_backend;
    /* With the optimizer offloaded, host copies the update reads and writes
     * (tags host_state and offload_staging):
     *   grads_host    [state_numel] compute dtype, stages 0-1: the owned,
     *                 reduced gradient, copied from grads_full as each unit's
     *                 reduction ends (stages 2-3 reduce into the host shard)
     *   grads_landing [largest unit shard] in the reduction's dtype, stages
     *                 2-3 with accumulation: a reduced chunk lands here before
     *                 the host adds it into the shard
     *   params_host   [state_numel] compute dtype: the new parameters, copied
     *                 to the device unit by unit (not with the parameters in
     *                 host memory or on NVMe, nor in fp32 with the master in
     *                 host memory, which is then the source) */
    zs__buf grads_host, grads_landing, params_host;
    struct zs__update *update; /* the optimizer pass and its pipeline (update.c) */
    /* offload.params = "nvme" (stage 3): params_shard is not allocated; a
     * gather reads the unit's shard of master weights into this fp32
     * staging (the largest unit's shard, tag offload_staging) and rounds it
     * into place. */
    int params_on_nvme;
    zs__buf gather_staging, gather_rounded; /* rounded: [2 x largest unit shard] compute
                                               dtype, host; none in fp32 */
    /* The copy into place reads one of two halves of the staging (fp32) or
     * the rounding; gathers alternate halves (gather_next, touched only by
     * the thread running the engine's ops), and a half is rewritten only
     * after its fence, recorded behind the copy that read it, has passed
     * (unit_ops.c). */
    int64_t gather_half_numel;
    void *gather_fence[2];
    int gather_next;
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
    /* ZeRO++ (zero/zeropp.h, docs/NODES.md): comm.quantize_weights,
     * comm.quantize_grads, zero.secondary_partition. */
    zs__zeropp zeropp;
    /* What a step keeps live (zero/residency.h): the live budget of stages
     * 2-3 (zero.live_bytes, zero/live.h), the units holding its carves, the
     * open gradient bucket (comm.bucket_bytes) and the fetch orders stage-3
     * prefetch follows. */
    zs__live live;
    zs__residency residency;
    zs__buckets buckets;
    zs__prefetch prefetch;

    int64_t step;                /* optimizer steps applied */
    int64_t skipped_total;
    int64_t micro;               /* micro-steps done in the current accumulation window */
    double *unit_sums;           /* [unit_count] squared norms of this rank's owned gradients */
    /* [unit_count] each unit's owned gradient, its dtype and elements: the
     * arguments of the one sum_squares_many call of a step (allocated at
     * zs_build, so a step allocates nothing). */
    const void **norm_ptrs;
    zs_dtype *norm_dtypes;
    int64_t *norm_counts;
    zs__loss_scaler scaler;

    /* Checkpoints (src/checkpoint): user state to save, or as restored. */
    zs__user_entry *user;
    int user_count, user_capacity;
    uint64_t ckpt_warned; /* retention: digest of the entries it last warned about leaving */
    /* Stop signals, the checkpoint timer, the generation, exit reports (zero/job.h). */
    zs__job job;
};

/* Traces: the program computed between two runtime calls. A runtime call
 * records the span since the previous one returned (zs__trace_enter) and
 * marks its own return (zs__trace_leave); free when tracing is off. */
static inline void zs__trace_enter(zs_ctx *zs) {
    if (!zs->trace) return;
    uint64_t now = zs__clock_ns();
    if (zs->trace_mark) zs__trace_span(zs->trace, ZS_TRACE_COMPUTE, "compute", zs->trace_mark, now, NULL);
    zs->trace_mark = now;
}
static inline void zs__trace_leave(zs_ctx *zs) {
    if (zs->trace) zs->trace_mark = zs__clock_ns();
}

/* The mechanisms under the public zs_build and zs_step (src/api.c adds
 * their checkpoint policy: resume after the build, a save every
 * checkpoint.every steps). zs__build_model lays out, allocates and
 * initializes the model; zs__step_run ends a micro-step and, at a boundary,
 * runs the optimizer step, filling *info (never NULL) in either case. */
zs_status zs__build_model(zs_ctx *zs);
zs_status zs__step_run(zs_ctx *zs, zs_step_info *info);

/* The metrics file (metrics.c): opened at zs_create (rank 0), a line at
 * every optimizer step. */
zs_status zs__metrics_open(zs_ctx *zs);
void zs__metrics_close(zs_ctx *zs);
zs_status zs__metrics_step(zs_ctx *zs, const zs_step_info *info);

/* Collective helpers shared by the zero/ files. */
/* Every rank contributes a 64-bit digest; fails on every rank (ZS_ERR_MISMATCH)
 * if any differs from rank 0's, naming the first differing rank and `what`. */
zs_status zs__agree_u64(zs_ctx *zs, uint64_t value, const char *what, const char *advice);

/* Agreement after a phase that may fail on some ranks only: every rank
 * returns the lowest failing rank's status and message ("... (reported by
 * rank r)"), or ZS_OK when all succeeded. Collective. */
zs_status zs__agree_status(zs_ctx *zs, zs_status local, const char *what);
/* zs__calloc agreed on before the collective that needs the memory:
 * ZS_ERR_OUT_OF_MEMORY naming `what` on every rank if any rank's failed
 * (nothing then stays allocated). Collective. */
zs_status zs__calloc_agreed(zs_ctx *zs, size_t count, size_t size, const char *what,
                            void **out);
/* Every rank learns rank `from`'s status and message. Collective. */
zs_status zs__share_outcome(zs_ctx *zs, zs_status local, int from, const char *what);

/* Where element `element` of parameter `param` lives (state_io.c): its
 * index in the optimizer-state arrays (the full layout in stage 0, the
 * shard in stages 1-3), and its compute-dtype value in the parameter
 * buffer (full in stages 0-2, the shard in stage 3; owned elements only in
 * stage 3; NULL with offload.params = "nvme", where the master on NVMe is
 * the only copy). */
int64_t zs__state_index(const zs_ctx *zs, int param, int64_t element);
/* The elements [*first, *end) of a parameter whose optimizer state this
 * rank keeps and updates: all of them in stage 0 (every rank holds full
 * state), its owned slice in stages 1-3. 0 when there are none. */
int zs__state_range(const zs_ctx *zs, int param, int64_t *first, int64_t *end);
/* Unit u's part of the state index space, [*first, *end). */
void zs__unit_state_range(const zs_ctx *zs, int unit, int64_t *first, int64_t *end);
void *zs__param_at(const zs_ctx *zs, int param, int64_t element);
/* The buffer holding unit u's owned parameters (params_full, or
 * params_shard in stage 3; NULL with offload.params = "nvme") and, in *at,
 * the index there of the parameter of the unit's first state element: the
 * unit's state [first, end) is elements [*at, *at + end - first). */
zs__buf *zs__unit_owned_params(zs_ctx *zs, int unit, int64_t *at);
/* The fp32 state `array` of elements [first, first + count) of a parameter,
 * wherever it lives (device, host, NVMe), copied to or from host memory.
 * The master of fp32 training without a separate master is the parameter
 * itself. Fails for an array this optimizer does not keep. Waits for a
 * running optimizer update first. */
zs_status zs__state_read(zs_ctx *zs, zs__state_array array, int param, int64_t first,
                         int64_t count, float *dst);
zs_status zs__state_write(zs_ctx *zs, zs__state_array array, int param, int64_t first,
                          int64_t count, const float *src);

/* The parameters from the master weights, everywhere they are kept (after
 * a load or an import): each owned range rounded into the compute dtype.
 * Local; the caller agrees, then gathers (zs__gather_full_params). */
zs_status zs__params_from_master(zs_ctx *zs);
/* After zs_load has written every rank's owned state: stage 0's chunks
 * gathered, the parameters rounded from the masters and gathered, the
 * gradients zeroed. Collective; agreed. */
zs_status zs__state_loaded(zs_ctx *zs);
/* Stages 1-2 keep full parameters that each rank updates only in its owned
 * slices: every rank gathers the others' slices of unit u, or of every
 * unit. A no-op in stages 0 and 3. Collective. */
zs_status zs__gather_unit_params(zs_ctx *zs, int unit);
zs_status zs__gather_full_params(zs_ctx *zs);
/* Gradients start from zero: the device's (the next backward adds into
 * them), and with host_too the host copies as well (which an offloaded
 * update may still be reading otherwise; it zeroes each unit's accumulated
 * host gradient itself when done with it, and copies overwrite the rest). */
zs_status zs__reset_gradients(zs_ctx *zs, int host_too);

/* The optimizer pass (update.c). zs__update_run prepares one step's update
 * with these scalars (on the device: runs it), which zs_step then agrees on
 * across ranks; zs__update_start, after the agreement, starts what follows:
 * on the device the stage-1/2 gathers; offloaded, the pass by the host
 * backend, in forward (unit) order, on a thread of its own when
 * offload.overlap (it then returns at once), else inside the call, each
 * unit's new parameters going back to the device (and gathered in stages
 * 1-2) when the main thread first needs them:
 * zs__update_unit_ready(u) before unit u's parameters are read (a fetch, a
 * gather), zs__update_finish before anything that reads or writes the state
 * or every unit (zs_step, checkpoints, import, destroy). unit_ready never
 * fails (it runs the collectives every rank runs, whatever happened on this
 * rank): a failure after the agreement (the host update, a copy back, a
 * gather) is kept and returned by the next zs__update_finish, which the
 * next zs_step (or zs_save) agrees on across ranks, and stays until zs_load
 * (the state is then half updated). */
zs_status zs__update_create(zs_ctx *zs);
void zs__update_destroy(zs_ctx *zs);
zs_status zs__update_run(zs_ctx *zs, double lr, double grad_div, double clip);
void zs__update_start(zs_ctx *zs);
void zs__update_unit_ready(zs_ctx *zs, int unit);
zs_status zs__update_finish(zs_ctx *zs);
/* After zs_load replaced the state: a failed pass is forgotten. */
void zs__update_forget(zs_ctx *zs);
/* For the metrics: the last whole host pass (ms) and the bytes a step moves
 * between host and device with the optimizer offloaded. */
void zs__update_report(zs_ctx *zs, double *pass_ms, uint64_t *copied_bytes);

/* ZS_STEP_FAULT=<point>:<rank>[:<step>] (tests only; step_fault.c): a local
 * failure (ZS_ERR_INTERNAL, "injected by ZS_STEP_FAULT") on that rank at a
 * point of the optimizer step: "ready" (before the step's agreement),
 * "update" (the update, or its hand-over to the host), "host" (the host
 * update of a unit), "gather" (a unit's stage-1/2 gather after the update,
 * which the rank still runs), for `step`, the optimizer step being taken
 * (1 for the first). ZS_OK when not named. */
zs_status zs__step_fault(int rank, int64_t step, const char *point);

/* offload.optimizer = "nvme" (nvme_tier.c): the per-run directory's name,
 * rank 0's, on every rank (collective), and the namer of the tier's chunks. */
zs_status zs__nvme_runid(zs_ctx *zs, char *runid, size_t cap);
void zs__nvme_tier_named(zs_ctx *zs);

/* A digest of every piece of this rank's training state: parameters (full or
 * shard), master weights, optimizer moments and the step counters. Tests use
 * it to prove that a skipped step changed nothing. */
uint64_t zs__state_digest(zs_ctx *zs);

/* Residency (residency.c): the one place where carves of the live budget
 * are taken, counted and given back. */
/* The unit's full buffer size in bytes (compute dtype). */
size_t zs__unit_bytes(const zs_ctx *zs, const zs_unit *unit);
/* zs_build: the held list and the buckets (staging_numel: the bucket
 * staging's elements, 0 where buckets do not apply). zs__residency_destroy
 * frees them and the fetch orders (zs_destroy, built or not). */
zs_status zs__residency_create(zs_ctx *zs, int64_t staging_numel);
void zs__residency_destroy(zs_ctx *zs);
/* Stage 3: carves the unit's parameters from the live budget into
 * unit->live_params, counts them and submits their gather. reclaim = 1 (the
 * program's fetch): a carve that does not fit first waits for held
 * reductions and returns their carves, then drops what was gathered ahead;
 * reclaim = 0 (a gather ahead): fails at once. zs__params_return gives the
 * carve back and uncounts it. */
zs_status zs__params_gather(zs_ctx *zs, zs_unit *unit, int reclaim);
void zs__params_return(zs_ctx *zs, zs_unit *unit);
/* Waits for the oldest held reduction and returns its carve to the budget
 * (the unit's gradient is then DONE). */
zs_status zs__reclaim_oldest(zs_ctx *zs);
/* A new micro-step (after zs_step agreed, after zs_load): every declared
 * gradient goes back to NONE; an open one stays open. */
void zs__grads_new_micro_step(zs_ctx *zs);
/* At zs_step: waits for every queued collective, returns every held carve
 * and whatever was gathered ahead and not fetched, and ends the training
 * pass's fetch order. Fails (after all that) inside an evaluation pass. */
zs_status zs__residency_step_end(zs_ctx *zs);

/* The unit's collectives (unit_ops.c). */
/* Submits the stage-3 gather of `unit` into unit->live_params. */
void zs__unit_gather_submit(zs_ctx *zs, zs_unit *unit);
/* Submits the reduction of `unit`'s gradient in `full` (stages 0-1: the
 * unit's part of the full gradient buffer; stages 2-3: its carve); the
 * gradient is then IN_FLIGHT. */
void zs__unit_reduce_submit(zs_ctx *zs, zs_unit *unit, void *full, int all_reduce, int to_shard);
/* A reduce-scatter over the shard group of a buffer of shard_size chunks
 * of `chunk` elements, then (the model replicated across nodes) the
 * all-reduce of the owned chunk between the replicas: the owned chunk ends
 * with the sum over every rank. */
zs_status zs__shard_reduce_scatter(zs_ctx *zs, void *buf, size_t chunk, zs_dtype dtype,
                                   const char *label);
/* The second half of that: a unit's owned slice (`count` elements, a
 * multiple of the replicas) summed between the replicas; a no-op when the
 * model is not replicated. Always one unit at a time, so the order in which
 * the ring adds an element depends on the unit alone (buckets keep the bits
 * of unit-by-unit reductions). */
zs_status zs__replica_all_reduce(zs_ctx *zs, void *slice, size_t count, zs_dtype dtype,
                                 const char *label);
/* A reduced unit's owned chunk into the gradient the optimizer reads (the
 * shard in stages 2-3, the host copy of an offloaded stage 0-1). */
zs_status zs__grad_into_owned(zs_ctx *zs, int unit, const void *full, const void *chunk,
                              zs_dtype chunk_dtype, void *scratch, int to_shard);
/* Buckets (bucket.c): zs_grads_ready hands a unit's reduction to
 * zs__bucket_add, which submits it alone (large units, buckets off) or
 * queues it with the next units' for one collective; zs__bucket_flush
 * submits what is queued (before any wait on a queued unit, and at
 * zs_step); zs__bucket_step_end empties the micro-step's buckets once
 * everything is drained. */
zs_status zs__bucket_create(zs_ctx *zs, int64_t staging_numel);
void zs__bucket_destroy(zs_ctx *zs);
void zs__bucket_add(zs_ctx *zs, zs_unit *unit, void *full, int all_reduce, int to_shard);
void zs__bucket_flush(zs_ctx *zs);
void zs__bucket_step_end(zs_ctx *zs);

/* Prefetch (prefetch.c): called by zs_fetch before (zs__prefetch_check) and
 * after (zs__prefetch_ahead) a fetch; zs__prefetch_taken when the program
 * fetches a unit that was gathered ahead; zs__prefetch_cancel waits for the
 * units gathered ahead and returns them; zs__prefetch_pass_end at the end of
 * a pass (zs_step for training, zs_eval_end). */
zs_status zs__prefetch_check(zs_ctx *zs, zs_unit *unit);
void zs__prefetch_ahead(zs_ctx *zs);
void zs__prefetch_taken(zs_ctx *zs, zs_unit *unit);
zs_status zs__prefetch_cancel(zs_ctx *zs);
int zs__prefetch_pending(const zs_ctx *zs); /* units gathered ahead and not fetched */
zs_status zs__prefetch_pass_end(zs_ctx *zs);
/* The fetch orders' room, at zs_build (zs__residency_create). */
zs_status zs__prefetch_create(zs_ctx *zs);
void zs__prefetch_destroy(zs_ctx *zs);

/* Learning rate of optimizer step t (1-based) under the configured schedule. */
double zs__schedule_lr(const zs__settings *settings, int64_t t);

#endif
