/* The validated configuration. zs_config_load parses a libconfig file into
 * zs__settings; the runtime reads only zs__settings, never libconfig.
 * Every key, its type, default and range is listed once in config_schema.c,
 * which drives validation, unknown-key suggestions, the hash and the docs. */
#ifndef ZS_CORE_CONFIG_H
#define ZS_CORE_CONFIG_H

#include <stdint.h>

#include "core/log.h"
#include "zeroshard.h"

typedef enum zs__backend_kind {
    ZS_BACKEND_CPU = 0,
    ZS_BACKEND_CUDA = 1,
    ZS_BACKEND_SIM = 2
} zs__backend_kind;

typedef enum zs__optimizer_kind {
    ZS_OPTIMIZER_SGD = 0,
    ZS_OPTIMIZER_ADAM = 1,  /* L2 weight decay added to the gradient */
    ZS_OPTIMIZER_ADAMW = 2  /* decoupled weight decay */
} zs__optimizer_kind;

typedef enum zs__schedule_kind {
    ZS_SCHEDULE_CONSTANT = 0,
    ZS_SCHEDULE_WARMUP_COSINE = 1
} zs__schedule_kind;

/* Which algorithm carries a collective on the MPI path: a ring over MPI
 * point-to-point, or the MPI library's own collective
 * (MPI_Reduce_scatter_block, MPI_Allgather). All-gathers may also be "auto":
 * the faster of the two for each message size, decided once per context
 * (comm/mpi.h); reduce-scatter keeps one fixed summation order. */
typedef enum zs__comm_impl {
    ZS_COMM_IMPL_RING = 0,
    ZS_COMM_IMPL_MPI = 1,
    ZS_COMM_IMPL_AUTO = 2   /* comm.all_gather only */
} zs__comm_impl;

/* comm.impl: which library carries the data collectives of a device
 * backend. The CPU backend always uses MPI. */
typedef enum zs__comm_library {
    ZS_COMM_LIBRARY_AUTO = 0, /* nccl where every node has a GPU per rank, else mpi */
    ZS_COMM_LIBRARY_NCCL = 1, /* NCCL on device memory: one GPU per rank */
    ZS_COMM_LIBRARY_MPI = 2   /* MPI on host memory: device data staged through pinned buffers */
} zs__comm_library;

/* comm.on_timeout: what a collective past comm.timeout_s does after logging. */
/* offload.optimizer / offload.params: where the state lives (src/offload). */
typedef enum zs__offload_tier {
    ZS_OFFLOAD_NONE = 0,   /* on the device, with the parameters */
    ZS_OFFLOAD_HOST = 1,   /* host memory (ZeRO-Offload) */
    ZS_OFFLOAD_NVME = 2    /* a per-rank swap file under offload.nvme_path (ZeRO-Infinity) */
} zs__offload_tier;

typedef enum zs__timeout_policy {
    ZS_TIMEOUT_ABORT = 0,  /* MPI_Abort with ZS_TIMEOUT_EXIT_CODE: mpirun ends the whole job */
    ZS_TIMEOUT_RETURN = 1  /* return ZS_ERR_TIMEOUT; the communicator refuses every later call */
} zs__timeout_policy;

/* checkpoint.on_durability_error: what a save does when a step after its
 * commit point (the fsync of the root, writing or renaming `latest`) fails. */
typedef enum zs__durability_policy {
    ZS_DURABILITY_FAIL = 0, /* the save fails on every rank; the previous step stays the resume point */
    ZS_DURABILITY_WARN = 1  /* warn and keep the new step (it may not survive a power failure) */
} zs__durability_policy;

/* job.stop_signal: the preemption warning that stops the job at an agreed
 * step after a checkpoint (core/job_signals.h). */
typedef enum zs__stop_signal {
    ZS_STOP_SIGNAL_USR1 = 0,
    ZS_STOP_SIGNAL_USR2 = 1,
    ZS_STOP_SIGNAL_NONE = 2 /* no handlers at all: the program keeps SIGTERM and its own */
} zs__stop_signal;

/* What happens when the dynamic loss scale would go below min_loss_scale. */
typedef enum zs__min_scale_policy {
    ZS_MIN_SCALE_ABORT = 0,     /* zs_step fails with ZS_ERR_NUMERIC, naming the step */
    ZS_MIN_SCALE_CONTINUE = 1   /* stay at the minimum and skip the step (bounded by max_consecutive_skips) */
} zs__min_scale_policy;

/* precision.reduce_dtype: what collectives carry. */
typedef enum zs__reduce_dtype {
    ZS_REDUCE_DTYPE_COMPUTE = 0, /* the compute dtype (half the bytes of fp32 in fp16/bf16) */
    ZS_REDUCE_DTYPE_FP32 = 1
} zs__reduce_dtype;

/* precision.accumulate_dtype: the stage-2/3 gradient shard when
 * gradient_accumulation_steps > 1 (with one micro-step there is nothing to
 * accumulate and the shard holds the compute dtype). */
typedef enum zs__accumulate_dtype {
    ZS_ACCUMULATE_DTYPE_FP32 = 0,
    ZS_ACCUMULATE_DTYPE_COMPUTE = 1
} zs__accumulate_dtype;

/* zero.shard_group: the ranks the model is sharded over. */
typedef enum zs__shard_group {
    ZS_SHARD_GROUP_WORLD = 0, /* every rank (ZeRO) */
    ZS_SHARD_GROUP_NODE = 1   /* the ranks of a node, replicated across nodes (hybrid sharding) */
} zs__shard_group;

/* zero.secondary_partition: stage 3's node-local copy of the gathered
 * parameters (ZeRO++'s hpZ). */
typedef enum zs__secondary_partition {
    ZS_SECONDARY_NONE = 0,
    ZS_SECONDARY_NODE = 1
} zs__secondary_partition;

/* comm.quantize_weights / comm.quantize_grads: what quantized collectives
 * carry (kernels/quantize.h). The value is the bit width where there is one. */
typedef enum zs__quantize {
    ZS_QUANTIZE_NONE = 0,
    ZS_QUANTIZE_INT8 = 1,
    ZS_QUANTIZE_INT4 = 2
} zs__quantize;

/* zero.frozen_storage: how frozen units marked ZS_PARAM_QUANTIZE are
 * stored (zero/frozen_store.h). The value is not a bit width. */
typedef enum zs__frozen_storage {
    ZS_FROZEN_COMPUTE = 0, /* the compute dtype, as every other parameter */
    ZS_FROZEN_INT8 = 1,
    ZS_FROZEN_NF4 = 2
} zs__frozen_storage;

typedef struct zs__settings {
    zs__backend_kind backend;      /* backend = "cpu" | "cuda"; default "cpu" */
    uint64_t seed;                 /* seed; 0..2^63-1; default 42; parameter initialization */
    int64_t gradient_accumulation_steps; /* micro-steps per optimizer step; 1..65536; default 1 */
    double gradient_clipping;      /* max global L2 norm; 0 = off; [0, 1e6]; default 0 */
    int64_t device_memory_bytes;   /* device_memory_bytes; the CPU backend's simulated device
                                      holds at most this many bytes; 0 = no cap; default 0 */

    struct {
        zs__offload_tier optimizer;  /* offload.optimizer = "none" | "host" | "nvme"; default "none" */
        zs__offload_tier params;     /* offload.params = "none" | "host" | "nvme"; stage 3 only */
        int64_t buffer_bytes;        /* offload.buffer_bytes; nvme I/O buffer; default 16 MiB */
        int overlap;                 /* offload.overlap; bool; default true */
        int64_t threads;             /* offload.threads; 0 = cores / ranks on the host */
        int pin_memory;              /* offload.pin_memory; bool; default true (CUDA) */
        char nvme_path[512];         /* offload.nvme_path; directory of the swap files; default "" */
    } offload;

    struct {
        int stage;                 /* zero.stage; 0..3; default 0 */
        int max_live_units;        /* zero.max_live_units; 1..65536; default 2 */
        int64_t live_bytes;        /* zero.live_bytes; bytes; >= 0; default 0 = room for
                                      max_live_units of the largest unit (src/zero/live.h) */
        int64_t prefetch_bytes;    /* zero.prefetch_bytes; bytes; >= 0; default 64 MiB: stage-3
                                      gathers issued ahead of the program's fetches; 0 = off */
        int64_t align;             /* zero.align; elements; power of two 1..4096; default 16 */
        zs__shard_group shard_group; /* zero.shard_group = "world" | "node"; default "world" */
        zs__secondary_partition secondary_partition; /* zero.secondary_partition = "none" |
                                      "node"; stage 3; default "none" */
        zs__frozen_storage frozen_storage; /* zero.frozen_storage = "compute" | "int8" |
                                      "nf4"; default "compute" */
        int64_t frozen_block;      /* zero.frozen_block; elements per scale; power of two
                                      2..4096; default 64 */
        int frozen_double_quant;   /* zero.frozen_double_quant; bool; default false */
    } zero;

    struct {
        zs__optimizer_kind kind;   /* optimizer.type = "sgd" | "adam" | "adamw"; default "adamw" */
        double lr;                 /* optimizer.lr; REQUIRED; (0, 10] */
        double beta1;              /* optimizer.beta1; [0, 1); default 0.9 */
        double beta2;              /* optimizer.beta2; [0, 1); default 0.999 */
        double eps;                /* optimizer.eps; (0, 1]; default 1e-8 */
        double weight_decay;       /* optimizer.weight_decay; [0, 10]; default 0.0 */
        double momentum;           /* optimizer.momentum (sgd); [0, 1); default 0.0 */
        int nesterov;              /* optimizer.nesterov (sgd); bool; default false; needs momentum > 0 */
    } optimizer;

    struct {
        zs__schedule_kind kind;    /* scheduler.type = "constant" | "warmup_cosine"; default "constant" */
        int64_t warmup_steps;      /* scheduler.warmup_steps; >= 0; default 0 */
        int64_t total_steps;       /* scheduler.total_steps; >= 0, > warmup_steps for warmup_cosine; default 0 */
        double min_lr;             /* scheduler.min_lr; [0, optimizer.lr]; default 0.0 */
    } scheduler;

    struct {
        zs_dtype dtype;                  /* precision.dtype = "fp32" | "fp16" | "bf16"; default "fp32" */
        zs__reduce_dtype reduce_dtype;   /* precision.reduce_dtype = "compute" | "fp32"; default "compute" */
        zs__accumulate_dtype accumulate_dtype; /* precision.accumulate_dtype = "fp32" | "compute"; default "fp32" */
        double loss_scale;               /* precision.loss_scale; 0 = dynamic (fp16), >0 static; [0, 2^64]; default 0.
                                            bf16 and fp32 use 1 unless a static scale is given */
        int initial_scale_power;         /* precision.initial_scale_power; 0..64; default 16 */
        int64_t loss_scale_window;       /* precision.loss_scale_window; 1..2^31; default 1000 */
        int hysteresis;                  /* precision.hysteresis; 1..1000; default 2 */
        int consecutive_hysteresis;      /* precision.consecutive_hysteresis; bool; default false */
        double min_loss_scale;           /* precision.min_loss_scale; (0, 2^64]; default 1; <= 2^initial_scale_power */
        zs__min_scale_policy on_min_scale; /* precision.on_min_scale = "abort" | "continue"; default "abort" */
        int64_t max_consecutive_skips;   /* precision.max_consecutive_skips; 1..1000000; default 100 */
        int check_overflow;              /* precision.check_overflow; bool; default true; must be true for fp16 */
    } precision;

    struct {
        zs__comm_library impl;        /* comm.impl = "auto" | "nccl" | "mpi"; default "auto";
                                         zs_create replaces "auto" with what it chose */
        zs__comm_impl reduce_scatter; /* comm.reduce_scatter = "ring" | "mpi"; default "ring" */
        zs__comm_impl all_gather;     /* comm.all_gather = "auto" | "ring" | "mpi"; default "auto" */
        int64_t all_gather_mpi_from_bytes; /* comm.all_gather_mpi_from_bytes; 0 = measured at
                                         zs_build; > 0: MPI's all-gather from this many bytes
                                         per rank, the ring below */
        int64_t staging_bytes;        /* comm.staging_bytes; host staging of device collectives
                                         (comm.impl = "mpi"); default 16 MiB */
        int host_staging;             /* comm.host_staging; bool; default false: the CPU backend
                                         stages like a device backend (tests) */
        int64_t segment_bytes;        /* comm.segment_bytes; 4096..1 GiB; default 4 MiB */
        int64_t timeout_s;            /* comm.timeout_s; 1..86400; default 600: the longest any
                                         collective (MPI or NCCL, creation included) may wait
                                         for its peers */
        zs__timeout_policy on_timeout; /* comm.on_timeout = "abort" | "return"; default "abort" */
        int check_collectives;        /* comm.check_collectives; bool; default false: agree on a
                                         fingerprint of every collective before running it */
        int overlap;                  /* comm.overlap; bool; default true: collectives run on
                                         the comm engine's thread (src/comm/engine.h) */
        int64_t bucket_bytes;         /* comm.bucket_bytes; 0..1 GiB; default 0 = off:
                                         gradients of consecutive smaller units reduced as one */
        int64_t ranks_per_node;       /* comm.ranks_per_node; 0..65536; default 0 = detect the
                                         nodes from the ranks' host identities; N > 0:
                                         consecutive groups of N ranks (comm/topology.h) */
        zs__quantize quantize_weights; /* comm.quantize_weights = "none" | "int8"; default "none" */
        zs__quantize quantize_grads;  /* comm.quantize_grads = "none" | "int8" | "int4"; default "none" */
        int64_t quant_block;          /* comm.quant_block; elements per scale; 1..1048576; default 256 */
    } comm;

    struct {
        char dir[512];             /* checkpoint.dir; the checkpoint root; default "" (none) */
        int64_t every;             /* checkpoint.every; save every N optimizer steps; 0 = never; >= 0; default 0 */
        int64_t keep;              /* checkpoint.keep; newest step directories kept; 0 = all; >= 0; default 0 */
        char resume[512];          /* checkpoint.resume = "none" | "auto" | "<step directory>"; default "none" */
        zs__durability_policy on_durability_error; /* checkpoint.on_durability_error = "fail" | "warn"; default "fail" */
        double every_seconds;      /* checkpoint.every_seconds; a save at the first step boundary this
                                      long after the last one (or the start); 0 = off; default 0 */
    } checkpoint;

    struct {
        zs__stop_signal stop_signal; /* job.stop_signal = "USR1" | "USR2" | "none"; default "USR1" */
        double term_grace_s;       /* job.term_grace_s; (0, 3600]; default 10: after SIGTERM, the
                                      longest any wait goes on */
        char report_dir[512];      /* job.report_dir; default "" = <checkpoint.dir>/reports */
        int64_t generation;        /* job.generation; >= 0; default 0 = unfenced */
    } job;

    struct {
        zs_log_level level;        /* log.level = "error"|"warn"|"info"|"debug"; default "info" */
        char file[512];            /* log.file; pattern (%h %p %r), at most 511 bytes; default "" = stderr */
        char metrics_file[512];    /* log.metrics_file; JSON lines from rank 0 per optimizer step;
                                      pattern (%h %p %r); default "" = none */
    } log;

    struct {
        char file[512];            /* trace.file; pattern (%h %p %r), at most 511 bytes; default "" = off */
        int64_t capacity;          /* trace.capacity; events per rank kept in memory; 1024..16777216;
                                      default 65536 */
    } trace;
} zs__settings;

/* Settings as validated. The pointer lives as long as cfg. */
const zs__settings *zs__config_settings(const zs_config *cfg);

#endif
