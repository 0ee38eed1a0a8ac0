/* The ground floor of zero/: the context's data that every room reads, and
 * nothing that acts. Settings, the rank and its communicators, the backend,
 * the memory accountant, the trace, the model's units and parameters with
 * their plan, the model's state buffers (DESIGN §3) and the step counters.
 *
 * The rooms above it (docs/ARCHITECTURE.md, "The floors of zero/"; the order
 * is src/floors.txt) each own a struct of their own, created and destroyed
 * by them and reached only through their functions: the live budget and the
 * units' carves of it (carves.c), buckets (bucket.c), prefetch
 * (prefetch.c), the unit's collectives' staging (unit_ops.c), the step's
 * norms (step.c), the optimizer pass and its thread (update.c), ZeRO++
 * (zeropp.h), the metrics file (metrics.c) and the job (job.h). The ground
 * holds them by pointer, or by value where the struct is a plain record of
 * its room's header. A room calls only the rooms below it; a room below
 * never names one above.
 *
 * ground.c holds the accessors (zs_rank, zs_stage, ...) and the few helpers
 * every room needs (zs__unit_bytes). */
#ifndef ZS_ZERO_GROUND_H
#define ZS_ZERO_GROUND_H

#include <stdint.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "comm/engine.h"
#include "comm/injected_network.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/memory.h"
#include "core/trace.h"
#include "mixed_precision/loss_scaler.h"
#include "offload/store.h"
#include "zero/job.h"
#include "zero/plan.h"
#include "zero/zeropp.h"
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

/* A collective of one unit, run by the comm engine (unit_ops.c). */
typedef struct zs__unit_op {
    zs__engine_op op;            /* first: the engine hands this back to run() */
    zs_ctx *zs;
    zs_unit *unit;
    void *buf;                   /* the unit's full buffer being gathered or reduced */
    int all_reduce;              /* stage 0: all-reduce instead of reduce-scatter */
    int to_shard;                /* stages 2-3: add the owned chunk into the gradient shard */
} zs__unit_op;

/* One unit's gradient in a micro-step. The state only moves forward, then
 * back to NONE when the micro-step ends (zs__grads_new_micro_step):
 *   NONE       untouched in this micro-step
 *   OPEN       backward adds into it: stages 2-3 a carve of the live budget
 *              (kept across release and refetch, for tied weights); stages
 *              0-1 never open one (they add into grads_full)
 *   QUEUED     zs_grads_ready called; waiting in the open bucket
 *   IN_FLIGHT  its reduction is submitted to the comm engine (stages 2-3:
 *              the carve stays held until the runtime waits for it)
 *   DONE       reduced where the optimizer reads it (the shard, or the owned
 *              chunk of grads_full), the carve given back; stages 0-1 between
 *              accumulation boundaries: left in grads_full to accumulate */
typedef enum zs__grad_state {
    ZS__GRAD_NONE = 0,
    ZS__GRAD_OPEN,
    ZS__GRAD_QUEUED,
    ZS__GRAD_IN_FLIGHT,
    ZS__GRAD_DONE
} zs__grad_state;

typedef struct zs__unit_grad {
    zs__grad_state state;
    void *carve;                 /* stages 2-3, OPEN to IN_FLIGHT: from the live budget */
    void *full;                  /* QUEUED, IN_FLIGHT: what the reduction reads (the carve,
                                    or the unit's part of grads_full) */
    zs__engine_op *reduced_by;   /* IN_FLIGHT: the op that reduces it, its own or its bucket's */
    int open_unfetched;          /* zs_grads_open: zs_param_grad answers while the unit is
                                    not fetched, until the micro-step ends */
} zs__unit_grad;

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
    zs__unit_grad grad;          /* the gradient's life cycle in this micro-step */
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

/* Where the time of the optimizer step in progress went, added to by the
 * room that waited (nanoseconds): for collectives (exposed communication),
 * in the optimizer pass, saving checkpoints, and for the offloaded host
 * update. The metrics file (metrics.c) reads and resets them per step. */
typedef struct zs__step_times {
    uint64_t comm_ns, optimizer_ns, checkpoint_ns, offload_wait_ns;
} zs__step_times;

/* A fine-tune's frozen base (zs_set_frozen_base): the Hugging Face
 * checkpoint the frozen parameters' values come from. Declared before
 * zs_build, which imports it (checkpoint/hf_import.c) and fills xxh3.
 * `current` while the frozen values are the base's: a load or an import
 * that writes frozen parameters clears it. While it is set, checkpoints
 * record the base (path, prefix, xxh3) instead of copying its values. */
typedef struct zs__base_record {
    char *path;           /* as declared; NULL: no base */
    char *name_prefix;    /* the tensors' prefix ("" for none) */
    char **ignore;        /* zs_safetensors_import.ignore, copied */
    int ignore_count;
    uint64_t xxh3;        /* zs__frozen_base_digest of its frozen tensors */
    int tensors;          /* frozen parameters it holds */
    int current;
} zs__base_record;

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
    uint64_t trace_mark;         /* when the last runtime call returned: compute since then */
    zs__step_times times;
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

    /* Model state (DESIGN §3), allocated by the build (model.c) and freed by
     * zs__model_state_destroy. Which of these exist depends on the stage:
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
    /* offload.params = "nvme" (stage 3): params_shard is not allocated; a
     * gather reads the unit's shard of master weights through the unit's
     * collectives' staging (unit_ops.c) and rounds it into place. */
    int params_on_nvme;
    /* The frozen units' bytes of the parameter buffer, charged to
     * frozen_tag instead of its own tag (params_tag) while it lives. */
    size_t frozen_bytes;
    zs_mem_tag frozen_tag, params_tag;
    /* The stage-2/3 gradient shard holds the compute dtype when there is one
     * micro-step per step (nothing to accumulate), else
     * precision.accumulate_dtype (fp32 by default). */
    zs_dtype grad_shard_dtype;
    /* What gradient collectives carry: the compute dtype, or fp32 when
     * precision.reduce_dtype = "fp32" (then a unit is converted into the
     * unit's collectives' fp32 staging, reduced, and converted back). */
    zs_dtype reduce_dtype;

    /* The step counters and the loss scale. */
    int64_t step;                /* optimizer steps applied */
    int64_t skipped_total;
    int64_t micro;               /* micro-steps done in the current accumulation window */
    zs__loss_scaler scaler;

    /* A fine-tune's frozen base (zs_set_frozen_base), imported by zs_build. */
    zs__base_record base;

    /* Checkpoints (src/checkpoint): user state to save, or as restored. */
    zs__user_entry *user;
    int user_count, user_capacity;
    uint64_t ckpt_warned; /* retention: digest of the entries it last warned about leaving */

    /* The rooms' own state. Each is created and destroyed by its room and
     * read only through its functions. */
    struct zs__carves *carves;   /* the live budget and the units holding carves of it */
    struct zs__unit_staging *staging; /* the unit's collectives' staging (unit_ops.c) */
    struct zs__frozen_store *frozen_store; /* quantized frozen units (frozen_store.c) */
    struct zs__step_norms *norms; /* what the step's one norm call reads (step.c) */
    struct zs__buckets *buckets; /* the open gradient bucket (comm.bucket_bytes) */
    struct zs__prefetch *prefetch; /* the fetch orders stage-3 prefetch follows */
    struct zs__update *update;   /* the optimizer pass and its pipeline */
    struct zs__metrics *metrics; /* log.metrics_file and the program's scalars */
    zs__zeropp zeropp;           /* ZeRO++ (zeropp.h): a record its files share */
    zs__job job;                 /* stop signals, the checkpoint timer, the generation (job.h) */
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

/* The unit's full buffer size in bytes (compute dtype). */
size_t zs__unit_bytes(const zs_ctx *zs, const zs_unit *unit);
/* A buffer of the memory plan (zs_build): device tags in the backend's
 * memory; host tags (offload) in host memory the host backend computes on,
 * page-locked by the device backend when offload.pin_memory says so. A
 * count of 0 allocates nothing. */
zs_status zs__plan_buf(zs_ctx *zs, zs__buf *buf, zs_mem_tag tag, zs_dtype dtype, int64_t count);

#endif
