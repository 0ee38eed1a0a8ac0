/*
 * zeroshard — ZeRO-style sharded data-parallel training runtime for C.
 *
 * Conventions that hold for every function in this header:
 *   - Fallible functions return zs_status; ZS_OK is 0. On failure the text of
 *     zs_last_error() (thread-local) says what failed, where, and what to do.
 *   - Outputs are trailing out-parameters, written only on success.
 *   - destroy(NULL) is a no-op.
 *   - Sizes of tensors are in elements; memory and traffic are in bytes.
 *   - Calls that take a zs_ctx are collective over the context's communicator
 *     unless stated otherwise: every rank must make them in the same order.
 *   - The library never terminates the process.
 */
#ifndef ZEROSHARD_H
#define ZEROSHARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header (CMake's project version; the build checks
 * that they agree). Before 1.0 a minor version may change public structs
 * (0.2.0: zs_comm_stats split bytes by link and counts the all-to-all; the
 * memory tags grew; 0.3.0: frozen parameters and their memory tag), so the
 * shared library's SONAME carries major.minor: libzeroshard.so.0.3. */
#define ZS_VERSION_MAJOR 0
#define ZS_VERSION_MINOR 3
#define ZS_VERSION_PATCH 0

/* ------------------------------------------------------------------ status */

/* One table generates the enum, the names and the messages (see zs_status_name). */
#define ZS_STATUS_TABLE(X)                                                                   \
    X(ZS_OK, 0, "success")                                                                   \
    X(ZS_ERR_INVALID_ARGUMENT, 1, "invalid argument")                                        \
    X(ZS_ERR_CONFIG, 2, "invalid configuration")                                             \
    X(ZS_ERR_OUT_OF_MEMORY, 3, "out of memory")                                              \
    X(ZS_ERR_COMM, 4, "communication failed")                                                \
    X(ZS_ERR_STATE, 5, "call made in the wrong state or order")                              \
    X(ZS_ERR_MISMATCH, 6, "ranks disagree")                                                  \
    X(ZS_ERR_IO, 7, "file input/output failed")                                              \
    X(ZS_ERR_UNSUPPORTED, 8, "not supported by this build or backend")                       \
    X(ZS_ERR_INTERNAL, 9, "internal error (please report it)")                              \
    X(ZS_ERR_NUMERIC, 10, "training diverged: gradients keep overflowing")                 \
    X(ZS_ERR_TIMEOUT, 11, "a collective waited past comm.timeout_s for a peer")

typedef enum zs_status {
#define ZS_STATUS_ENUM_(name, value, message) name = value,
    ZS_STATUS_TABLE(ZS_STATUS_ENUM_)
#undef ZS_STATUS_ENUM_
} zs_status;

/* The error code a rank passes to MPI_Abort when a collective timed out and
 * comm.on_timeout = "abort" (the default): mpirun exits with it, so a job
 * script can tell a communication deadline from other failures. */
#define ZS_TIMEOUT_EXIT_CODE 75
/* The exit code of a training program that honoured a stop signal
 * (job.stop_signal, or SIGTERM within job.term_grace_s) after the runtime
 * committed a checkpoint: zs_stop_requested returns it. A launcher resumes
 * from that checkpoint (docs/UNATTENDED.md). */
#define ZS_STOPPED_EXIT_CODE 76
/* A signal ended the job without a checkpoint: zs_stop_requested returns it
 * when the agreed stop had no checkpoint.dir to save into, and the exit
 * reports of ranks that a signal ended carry it (such a process itself dies
 * by the signal: a shell sees 128 + its number). */
#define ZS_TERMINATED_EXIT_CODE 78
/* The exit code of a training program that refused its configuration (a
 * missing or unreadable config file, a bad override, an unknown app key, a
 * data file that cannot be opened, a batch that does not divide): sysexits'
 * EX_USAGE. zs_report_config_error returns it. A launcher stops instead of
 * restarting: the same configuration fails the same way on any host. */
#define ZS_CONFIG_EXIT_CODE 64

/* "ZS_ERR_CONFIG" for ZS_ERR_CONFIG; "ZS_UNKNOWN_STATUS" for values outside the table. */
const char *zs_status_name(zs_status status);
/* The table's one-line description of the status. */
const char *zs_status_message(zs_status status);
/* The detailed message of the last failure on the calling thread ("" if none).
 * The string stays valid until the next failing zeroshard call on this thread. */
const char *zs_last_error(void);
/* For a program's configuration error, before or after zs_create: prints
 * "program: message" to stderr, writes this rank's exit report with cause
 * "config" (docs/UNATTENDED.md) and returns ZS_CONFIG_EXIT_CODE, which the
 * program then exits with. Before zs_create the report goes into
 * ZS_REPORT_DIR (none when it is unset), for the rank the launcher's
 * environment names (OMPI_COMM_WORLD_RANK, PMIX_RANK, SLURM_PROCID; else
 * 0) and the generation of ZS_JOB_GENERATION; after it, into the context's
 * report directory. A report that cannot be written is said on stderr.
 * Not collective; never exits. */
int zs_report_config_error(const char *program, const char *message);

/* ------------------------------------------------------------------- types */

typedef enum zs_dtype {
    ZS_DTYPE_FP32 = 0,
    ZS_DTYPE_FP16 = 1,
    ZS_DTYPE_BF16 = 2
} zs_dtype;

const char *zs_dtype_name(zs_dtype dtype);
/* Bytes of one element. */
size_t zs_dtype_size(zs_dtype dtype);

/* Converts `count` host values between dtypes with round-to-nearest-even
 * (fp32 -> fp16/bf16) or exactly (the other way), using the CPU's SIMD units
 * where present. For training loops whose math runs in fp32 on fp16/bf16
 * parameters. dst and src must not overlap unless they are the same buffer
 * and dtype. Not collective. */
zs_status zs_convert(void *dst, zs_dtype dst_dtype, const void *src, zs_dtype src_dtype,
                     int64_t count);

typedef struct zs_config zs_config; /* a validated configuration */
typedef struct zs_ctx zs_ctx;       /* one training run on one communicator */
typedef struct zs_unit zs_unit;     /* a group of parameters gathered together */
typedef struct zs_param zs_param;   /* one tensor; owned by its context */

/* ------------------------------------------------------------------ config */

/* Reads and validates a libconfig file. Errors read "file:line: message".
 * The file and every file it includes must be a regular file of at most 1 MiB
 * (4 MiB in all); NUL bytes and float literals that a double cannot hold are
 * errors. Never exits or blocks on a bad path (a directory, a FIFO).
 * Not collective. The caller owns *out and frees it with zs_config_destroy. */
zs_status zs_config_load(const char *path, zs_config **out);
/* Applies "group.key=value" (e.g. "zero.stage=2") and validates again.
 * On failure the configuration is left as it was. Not collective. */
zs_status zs_config_override(zs_config *cfg, const char *assignment);
/* Applies several assignments, then validates once, so keys that constrain
 * each other may change together in any order (e.g. scheduler.warmup_steps
 * and scheduler.total_steps). All or nothing. Not collective. */
zs_status zs_config_override_list(zs_config *cfg, int count, const char *const *assignments);
void zs_config_destroy(zs_config *cfg);
/* The path given to zs_config_load. */
const char *zs_config_path(const zs_config *cfg);
/* A 64-bit hash of every validated value (runtime and app keys); equal
 * configurations have equal hashes whatever their formatting. */
uint64_t zs_config_hash(const zs_config *cfg);

/* The `app` group belongs to the training program: it reads its own keys with
 * these calls, which give file:line errors for wrong types and ranges, and
 * then calls zs_config_app_finish, which rejects any app key nobody read (with
 * a suggestion of the nearest one read). Integers accept only integer
 * literals; floats accept integers too ("lr = 1"). */
zs_status zs_config_app_int(zs_config *cfg, const char *key, int64_t default_value,
                            int64_t min, int64_t max, int64_t *out);
zs_status zs_config_app_float(zs_config *cfg, const char *key, double default_value,
                              double min, double max, double *out);
zs_status zs_config_app_bool(zs_config *cfg, const char *key, int default_value, int *out);
/* *out points into cfg and lives as long as cfg. */
zs_status zs_config_app_string(zs_config *cfg, const char *key, const char *default_value,
                               const char **out);
zs_status zs_config_app_finish(zs_config *cfg);

/* ----------------------------------------------------------------- context */

/* Creates a context on MPI_COMM_WORLD (initializing MPI if the program has
 * not; it is then finalized by the last zs_destroy). Collective: every rank
 * checks that all ranks loaded the same configuration (zs_config_hash) and
 * fails together if not. The context copies what it needs from cfg.
 * See zeroshard_mpi.h to run on another communicator. */
zs_status zs_create(const zs_config *cfg, zs_ctx **out);
/* Collective: the ranks agree that all of them are leaving (a barrier with
 * the comm.timeout_s deadline), so a rank that leaves the training loop early
 * is reported instead of finalizing MPI while the others hang. Skipped after
 * a communication failure (ZS_ERR_TIMEOUT with comm.on_timeout = "return",
 * or ZS_ERR_MISMATCH from comm.check_collectives); MPI is then not finalized
 * either, since MPI_Finalize waits for every rank. destroy(NULL) is a no-op. */
void zs_destroy(zs_ctx *zs);

/* Bits travel only with kernels. The runtime's own CPU kernels give the
 * same bits at every SIMD level; a program's BLAS usually does not (each
 * OpenBLAS core type sums in its own way). zs_create compares the runtime's
 * level across ranks (a difference only costs speed, and is logged at
 * INFO); programs compare what decides their own bits with
 * zs_agree_kernels, as the examples do with their BLAS kernel. */

/* The SIMD level of the runtime's CPU kernels in this process: "scalar",
 * "avx2" or "avx512" (the best the CPU has, or ZS_CPU_ISA). */
const char *zs_cpu_kernels(void);

/* Collective: every rank says which kernel decides a part of its numerics
 * (`what`, e.g. "BLAS kernel"; `kernel`, e.g. "Haswell"; at most 63 bytes
 * each are compared). When they differ, rank 0 logs a warning naming every
 * group of ranks and its kernel and that results then differ in the last
 * bits between those ranks, followed by `advice` (what the program's user
 * can do; may be NULL), and the call returns ZS_OK; with `require` set it
 * fails instead on every rank with ZS_ERR_MISMATCH and that message. */
zs_status zs_agree_kernels(zs_ctx *zs, const char *what, const char *kernel, int require,
                           const char *advice);

/* "cpu" or "cuda": where parameters and gradients live (zeroshard_cuda.h). */
const char *zs_backend_name(const zs_ctx *zs);
int zs_rank(const zs_ctx *zs);
int zs_world_size(const zs_ctx *zs);
/* 0, 1, 2 or 3. */
int zs_stage(const zs_ctx *zs);

/* ------------------------------------------------------- host collectives */

/* A program's own agreements (a mean loss, a validation loss, a flag that
 * one rank's data is missing, reports gathered for a file) under the
 * runtime's deadline: a stopped or departed rank makes every other rank fail
 * (or the job abort, comm.on_timeout) after comm.timeout_s with a message
 * naming the collective (`what`), its number and the silent rank, where
 * MPI's blocking collectives would wait forever. They run on the context's
 * communicator with the runtime's own host collectives: after the runtime's
 * queued collectives (the calling thread waits for them first), numbered,
 * compared by comm.check_collectives, and counted in zs_comm_report. Both are
 * collective and synchronous; buffers are host memory owned by the caller;
 * `what` (1..63 bytes) names the collective in messages and must be the same
 * on every rank. Memory: a scratch of world size times the payload, charged
 * to the "comm" tag while the call runs. Meant for small payloads (values,
 * flags, per-rank records), not for tensors. */

/* Element types of host values (zs_dtype is for tensors). */
typedef enum zs_host_type {
    ZS_HOST_TYPE_DOUBLE = 0,
    ZS_HOST_TYPE_FLOAT = 1,
    ZS_HOST_TYPE_INT32 = 2,
    ZS_HOST_TYPE_INT64 = 3
} zs_host_type;

typedef enum zs_reduce_op {
    ZS_REDUCE_OP_SUM = 0,
    ZS_REDUCE_OP_MAX = 1,
    ZS_REDUCE_OP_MIN = 2
} zs_reduce_op;

/* In-place all-reduce of `count` values of `type` in `values`. Every rank
 * receives every rank's values and combines them in rank order, so every
 * rank gets the same bits (a float sum adds in its own type, rank 0's
 * value first). A NaN wins a max or a min, as in a
 * sum. An integer sum that overflows its type fails with
 * ZS_ERR_INVALID_ARGUMENT on every rank, naming the element. count = 0 is a
 * no-op that still takes part in the numbering. Counted as an all-reduce of
 * count values. */
zs_status zs_all_reduce_host(zs_ctx *zs, void *values, size_t count, zs_host_type type,
                             zs_reduce_op op, const char *what);

/* All-gather of `bytes` bytes from every rank: `all` (world size * bytes)
 * receives rank r's bytes at offset r * bytes on every rank. `mine` and
 * `all` must not overlap. Counted as an all-gather. */
zs_status zs_all_gather_host(zs_ctx *zs, const void *mine, size_t bytes, void *all,
                             const char *what);

/* ------------------------------------------------------- model description */

typedef enum zs_init_kind {
    ZS_INIT_ZEROS = 0,
    ZS_INIT_CONSTANT,  /* every element = a */
    ZS_INIT_UNIFORM,   /* uniform in [a, b) */
    ZS_INIT_NORMAL     /* normal with mean a and standard deviation b */
} zs_init_kind;

/* Initial values depend only on (seed, parameter name, element index): they
 * are the same on every rank and for every world size and stage. */
typedef struct zs_init {
    zs_init_kind kind;
    double a;
    double b;
} zs_init;

#define ZS_INIT_ZEROS_VALUE ((zs_init){ZS_INIT_ZEROS, 0.0, 0.0})
#define ZS_INIT_CONSTANT_VALUE(v) ((zs_init){ZS_INIT_CONSTANT, (v), 0.0})
#define ZS_INIT_UNIFORM_RANGE(lo, hi) ((zs_init){ZS_INIT_UNIFORM, (lo), (hi)})
#define ZS_INIT_NORMAL_STD(std) ((zs_init){ZS_INIT_NORMAL, 0.0, (std)})

/* Parameter flags. */
#define ZS_PARAM_NO_DECAY 0x1u /* exclude from weight decay (biases, norms) */
/* Frozen: trained by nobody (a fine-tune's base). It has no gradient
 * buffer, no reduction, no fp32 master and no optimizer moments; it is
 * sharded in stage 3 and gathered on demand like any parameter (replicated
 * in stages 0-2), in the compute dtype, and zs_params_import writes it.
 * zs_param_grad on it fails naming it. A unit is frozen when all its
 * parameters are (it then takes part in no reduction: its zs_grads_ready is
 * a no-op, its zs_grads_open an error); a unit mixing frozen and trainable
 * parameters is refused by zs_build (register them in separate units: a
 * unit is reduced and updated as one). */
#define ZS_PARAM_FROZEN 0x2u
/* Quantizable: a frozen weight matrix that zero.frozen_storage = "int8" or
 * "nf4" may store quantized (QLoRA's base; issue 43). A unit is stored
 * quantized when all its parameters are ZS_PARAM_FROZEN | ZS_PARAM_QUANTIZE
 * and the setting is not "compute"; zs_build refuses the flag on a
 * trainable parameter and a unit mixing it with frozen parameters without
 * it (keep norms and embeddings, which QLoRA leaves in the compute dtype,
 * in units of their own). A quantized parameter has no zs_param_data: its
 * layers read it through zs_param_quantized or zs_param_dequantize. */
#define ZS_PARAM_QUANTIZE 0x4u

/* Units are registered in forward order between zs_build's predecessors:
 *   zs_unit_begin; zs_param_create...; zs_unit_end;   (repeat) ; zs_build.
 * Names are unique across the model, without '/' or NUL; unit names at most
 * 255 bytes, parameter names at most 240 (checkpoint tensor names add a
 * suffix such as ":exp_avg_sq" and must stay within safetensors' 255).
 * Shapes have 1..8 dimensions of positive extent. Handles stay valid until
 * zs_destroy. Not collective, but every rank must describe the same model
 * (zs_build checks). */
zs_status zs_unit_begin(zs_ctx *zs, const char *name, zs_unit **out);
zs_status zs_param_create(zs_ctx *zs, const char *name, int ndim, const int64_t *shape,
                          zs_init init, unsigned flags, zs_param **out);
zs_status zs_unit_end(zs_ctx *zs);

/* Freezes the layout, allocates this rank's shards and initializes them.
 * Collective; fails on every rank if ranks described different models. */
zs_status zs_build(zs_ctx *zs);

int zs_unit_count(const zs_ctx *zs);
zs_unit *zs_unit_at(zs_ctx *zs, int index); /* forward order; NULL if out of range */
const char *zs_unit_name(const zs_unit *unit);
const char *zs_param_name(const zs_param *p);
int64_t zs_param_numel(const zs_param *p);
zs_dtype zs_param_dtype(const zs_param *p); /* the compute dtype of data and grad */
int zs_param_frozen(const zs_param *p);    /* 1 when registered ZS_PARAM_FROZEN */
int zs_unit_frozen(const zs_unit *unit);   /* 1 when every parameter of the unit is frozen */

/* Initial values from elsewhere (pretrained weights): `source` is called for
 * the element ranges this rank keeps master weights for (stage 0: every
 * element; stages 1-3: the rank's owned slice of each parameter), in bounded
 * chunks, and writes `count` fp32 values of elements [first, first + count)
 * of `p` (flat, row-major) into the host buffer `dst`. It returns 0, or
 * nonzero after writing a one-line reason into err (err_cap bytes); a reader
 * can thus read only what this rank owns, never the whole file. The values
 * become the fp32 master weights and, rounded, the compute-dtype parameters;
 * stages 1-2 then gather the full parameters. Optimizer moments and the step
 * count are left as they are. Collective: call between optimizer steps,
 * with no unit fetched; every rank fails (naming the rank, the parameter and
 * the reason) if the source fails on any. */
typedef int (*zs_param_source)(void *user, const zs_param *p, int64_t first, int64_t count,
                               float *dst, char *err, size_t err_cap);
zs_status zs_params_import(zs_ctx *zs, zs_param_source source, void *user);
/* zs_params_import of the frozen parameters (ZS_PARAM_FROZEN) alone: a
 * fine-tune's base from a source that holds no adapters (an llm.c file);
 * the trainable parameters are not asked of the source and keep their
 * values. */
zs_status zs_params_import_frozen(zs_ctx *zs, zs_param_source source, void *user);

/* Pretrained weights from a Hugging Face checkpoint (what transformers'
 * save_pretrained writes), by name: each parameter is read from the
 * safetensors tensor of the same name, in F32, BF16 or F16 (converted
 * exactly to the fp32 master weights), through zs_params_import, so each
 * rank reads only the byte ranges it keeps (stage 0: every byte) and opens
 * only the files that hold them.
 *
 * `path` is a .safetensors file, a model.safetensors.index.json (its
 * weight_map names, for each tensor, a file in the index's directory), or a
 * directory holding one of them (the index when both are there). Symlinks
 * are followed (a Hugging Face cache links every file).
 *
 * Before any value is used, every rank checks the index and the headers of
 * the files it opens, and the ranks agree (the lowest failing rank's
 * message is returned on every rank): a parameter with no tensor ("missing
 * tensor"), a tensor that is no parameter and matches no ignore pattern
 * ("unexpected tensor"), a shape that differs (both printed), a dtype other
 * than F32/BF16/F16, offsets that overlap or leave the file, a truncated
 * file, a bad index (a missing file, a name with '/' or "..", a value that
 * is not a string). Messages name the file and the tensor. What a header
 * or index may claim is bounded by what the model needs (bytes, tensors)
 * and refused before it is parsed, so hostile files cost bounded time and
 * memory. A failed call changes no parameter.
 *
 * Collective; call after zs_build between optimizer steps, as
 * zs_params_import. Optimizer moments and the step count are left as they
 * are. options and report may be NULL; report is written on success only. */
typedef struct zs_safetensors_import {
    /* Glob patterns (fnmatch(3), no flags) of tensor names that are not
     * parameters and are skipped instead of refused, e.g.
     * "*.rotary_emb.inv_freq", which older Llama checkpoints carry; a
     * parameter's tensor is always read. `ignore_count` strings owned by the
     * caller, read during the call only. */
    const char *const *ignore;
    int ignore_count;
    /* 1: import the frozen parameters (ZS_PARAM_FROZEN) only, a
     * fine-tune's base; the trainable ones (adapters, which the file does
     * not hold) are not looked for and keep their values. */
    int frozen_only;
    /* 1: import the trainable parameters only (a fine-tune's adapters, from
     * their own file); the frozen ones keep their values. */
    int trainable_only;
    /* Tensors are named this prefix followed by the parameter's name
     * (PEFT's "base_model.model."); NULL or "" for none. A tensor without
     * it is no parameter's. */
    const char *name_prefix;
} zs_safetensors_import;

typedef struct zs_import_report {
    uint64_t bytes_read;  /* bytes of tensor data this rank read: its owned elements times
                             their size in the file (headers and the index not counted) */
    int files_opened;     /* safetensors files this rank opened: those holding its ranges */
    int tensors_ignored;  /* tensors the ignore patterns skipped: in the index (every rank
                             counts them), or in the single file (counted by the ranks that
                             opened it) */
} zs_import_report;

zs_status zs_params_import_safetensors(zs_ctx *zs, const char *path,
                                       const zs_safetensors_import *options,
                                       zs_import_report *report);

/* A fine-tune's frozen base: declares that the frozen parameters'
 * (ZS_PARAM_FROZEN) values come from the Hugging Face checkpoint at `path`
 * (as zs_params_import_safetensors reads it, with options' ignore patterns
 * and name_prefix; frozen_only implied, trainable_only refused). Call
 * before zs_build; the strings are copied.
 *
 * zs_build then imports the base (after the initialization, before
 * checkpoint.resume) and hashes it: XXH3-64 of each frozen tensor's bytes
 * in its file (each tensor by one rank, round robin), combined over the
 * tensors sorted by name, so the hash is the source's content, whatever
 * the world size, stage or compute dtype. Checkpoints then record the base
 * (the path as declared, the prefix, the hash) instead of copying the
 * frozen values: an adapter-sized checkpoint. Loading one refuses a run
 * whose base has another hash (or that declared none), naming both paths
 * and hashes; `zs-ckpt export --hf` reads the frozen tensors from the
 * recorded path after checking its hash. A load or import that writes
 * other frozen values (a checkpoint that holds them, zs_params_import)
 * ends the record: later checkpoints copy the values again. */
zs_status zs_set_frozen_base(zs_ctx *zs, const char *path, const zs_safetensors_import *options);

/* Element-wise operations on the context's backend memory (host memory on
 * the cpu backend; device memory on cuda, ordered on the compute stream),
 * for programs that compute in fp32 on fp16/bf16 parameters and gradients:
 * the same kernels, rounding and SIMD/CUDA code as the runtime's.
 * zs_backend_convert: dst[i] = src[i] converted (round to nearest even).
 * zs_backend_accumulate: dst[i] += src[i], added in fp32 and rounded once to
 * dst_dtype (adds an fp32 gradient contribution into a bf16 gradient).
 * Not collective. Sizes in elements. */
zs_status zs_backend_convert(zs_ctx *zs, void *dst, zs_dtype dst_dtype, const void *src,
                             zs_dtype src_dtype, int64_t count);
zs_status zs_backend_accumulate(zs_ctx *zs, void *dst, zs_dtype dst_dtype, const void *src,
                                zs_dtype src_dtype, int64_t count);

/* ------------------------------------------------------------------- steps */

/* zs_fetch makes a unit's full parameters readable through zs_param_data
 * until zs_release. In stage 3 it all-gathers the unit (collective) into
 * bytes carved from zero.live_bytes at the unit's exact size; at most
 * zero.max_live_units units may be fetched at once, and a fetch that does not
 * fit the budget fails (ZS_ERR_OUT_OF_MEMORY) naming every unit holding it
 * and its bytes. In stages 0-2 it only checks the call order.
 * A unit may be fetched again after its release in the same micro-step (a
 * tied weight used first and last): its gradient stays open across the
 * release (see zs_param_grad). */
zs_status zs_fetch(zs_ctx *zs, zs_unit *unit);
zs_status zs_release(zs_ctx *zs, zs_unit *unit);

/* Stage 3: gathers `unit` ahead of its zs_fetch (which then only waits for
 * it), if it fits zero.prefetch_bytes, zero.max_live_units and the live
 * budget right now; otherwise does nothing. The runtime already prefetches
 * in the order the program's earlier micro-steps fetched units (and, for
 * evaluation passes, the earlier evaluation passes); this is for programs
 * whose order varies. Collective (every rank must make the same calls); a
 * no-op in stages 0-2. */
zs_status zs_prefetch(zs_ctx *zs, zs_unit *unit);

/* An evaluation pass (a validation batch's forward, a sampled token's):
 * the fetches between zs_eval_begin and zs_eval_end follow an order of
 * their own, which stage 3 records from the first such pass and gathers
 * ahead along in the next ones, as it does for training micro-steps, whose
 * order an evaluation between them then leaves intact (without these calls
 * its fetches count as the micro-step's and turn prefetch off with a
 * warning). No gradients inside: zs_param_grad and zs_grads_ready fail
 * (ZS_ERR_STATE), and so does zs_step until zs_eval_end. Passes do not
 * nest. Collective as zs_fetch is (every rank makes the same calls; the
 * calls themselves communicate nothing), and valid in every stage (stages
 * 0-2 only check the order). */
zs_status zs_eval_begin(zs_ctx *zs);
zs_status zs_eval_end(zs_ctx *zs);

/* The unit's full parameters (compute dtype), valid between zs_fetch and
 * zs_release. NULL (with zs_last_error set) if the unit is not fetched. */
void *zs_param_data(const zs_param *p);

/* A quantized frozen parameter's storage (ZS_PARAM_QUANTIZE under
 * zero.frozen_storage = "int8" or "nf4"), valid between zs_fetch and
 * zs_release. The unit is `records` records, one per shard of
 * `shard_numel` elements of the unit, `record_bytes` apart (a multiple of
 * 4); record r holds the unit's elements [r * shard_numel, (r + 1) *
 * shard_numel) as
 *   [values: int8, one byte each; or NF4, two per byte, low nibble first,
 *    each the 4-bit two's complement of (level index - 8)]
 *   [zero bytes up to `scales_at`]
 *   [scales: fp32, one per `block` elements counted from the record's
 *    first element; NF4's is the block's absmax, int8's absmax / 127]
 * (kernels/quantize.h gives the levels and the rules). With
 * zero.frozen_double_quant (`double_quant` 1) the scales are themselves
 * quantized: at `scales_at` one int8 code per block, zero bytes up to a
 * multiple of 4, then one fp32 scale per `scale_group` codes (int8's rule:
 * a block's scale is code x its group's scale). The parameter is
 * the unit's elements [offset, offset + numel); `offset` and
 * `shard_numel` are multiples of `block`, so every block belongs to one
 * parameter and to one record, and the blocks are the parameter's own,
 * counted from its first element, whatever the world size. `data` is
 * device memory on cuda (host memory on cpu). */
typedef struct zs_quantized {
    int bits;              /* 8 (int8) or -4 (NF4) */
    int64_t block;         /* elements per scale (zero.frozen_block) */
    int records;           /* shards of the unit */
    int64_t shard_numel;   /* elements per record */
    int64_t record_bytes;  /* bytes from one record to the next */
    int64_t scales_at;     /* bytes from a record's start to its scales */
    int double_quant;      /* the scales are int8 codes (zero.frozen_double_quant) */
    int64_t scale_group;   /* codes per fp32 scale of theirs (256), with double_quant */
    int64_t offset;        /* the parameter's first element in the unit */
    int64_t numel;
    const void *data;      /* the first record */
} zs_quantized;

/* Fills *out for a quantized parameter of a fetched unit. Fails
 * (ZS_ERR_INVALID_ARGUMENT) on a parameter that is not stored quantized and
 * (ZS_ERR_STATE) on a unit that is not fetched. */
zs_status zs_param_quantized(const zs_param *p, zs_quantized *out);

/* 1 when zero.frozen_storage is "int8" or "nf4": frozen units of
 * ZS_PARAM_QUANTIZE parameters will be stored quantized (a program asks
 * before describing its model, to register them so). */
int zs_quantizes_frozen(const zs_ctx *zs);

/* 1 when the parameter is stored quantized (zs_param_data is then NULL). */
int zs_param_is_quantized(const zs_param *p);

/* Dequantizes the parameter into dst (numel elements of the compute dtype,
 * backend memory: device memory on cuda, ordered on the compute stream) so
 * that a layer computes on one weight matrix in full precision at a time.
 * Bitwise the same on every backend and stage. A parameter stored in the
 * compute dtype is copied. Not collective; the unit must be fetched. */
zs_status zs_param_dequantize(zs_ctx *zs, const zs_param *p, void *dst);

/* The unit's full gradient (compute dtype) for this micro-step. Backward passes
 * ADD into it (it starts at zero). Callable while the unit is fetched; the
 * pointer stays valid until zs_grads_ready, across zs_release and a later
 * zs_fetch of the unit (a tied weight's two uses add into the same buffer,
 * which is reduced once). In stages 2 and 3 the first call for a unit in a
 * micro-step carves the gradient from zero.live_bytes (at most
 * zero.max_live_units are open at once); NULL (with zs_last_error set) if the
 * unit is not fetched or the gradient does not fit. */
void *zs_param_grad(zs_param *p);

/* Opens the unit's gradient for this micro-step without its parameters,
 * for a backward that needs none (a token embedding's: it adds rows of the
 * output gradient into the rows of the tokens it looked up): after it,
 * zs_param_grad answers for the unit's parameters until zs_grads_ready,
 * whether the unit is fetched or not, and stage 3 gathers nothing for it.
 * An open gradient (a tied weight's) stays as it is. Stages 2-3 carve it
 * from zero.live_bytes now, so a refusal (the budget, zero.max_live_units)
 * is this call's. Not collective; not inside an evaluation pass. */
zs_status zs_grads_open(zs_ctx *zs, zs_unit *unit);

/* Declares the unit's gradient complete for this micro-step (after its last
 * use: the unit need not be fetched). Stages 2-3
 * reduce-scatter it now (into the shard, accumulating across micro-steps) and
 * return its bytes to the budget; stages 0-1 keep accumulating in the full buffer
 * and reduce it at the accumulation boundary (all-reduce in stage 0,
 * reduce-scatter in stage 1). Collective. Every unit must be declared once
 * per micro-step before zs_step. */
zs_status zs_grads_ready(zs_ctx *zs, zs_unit *unit);

/* Multiply the loss by this before backward (the dynamic or static loss
 * scale in fp16; 1 in fp32 and, unless configured, bf16). Gradients written
 * into zs_param_grad are therefore scaled; zs_step unscales them. */
float zs_loss_scale(const zs_ctx *zs);

/* With gradient_accumulation_steps = k, an optimizer step happens on every
 * k-th call of zs_step; the calls between only end a micro-step. This says
 * whether the micro-step in progress is the last of its window (the loop can
 * use it to decide when to log or evaluate). Always 1 when k = 1. */
int zs_is_accumulation_boundary(const zs_ctx *zs);

typedef struct zs_step_info {
    int64_t step;          /* optimizer steps applied so far (skipped ones not counted) */
    int boundary;          /* 1 if this call ended an accumulation window, 0 for an inner micro-step */
    double lr;             /* learning rate of this step */
    double grad_norm;      /* global L2 norm of the unscaled, averaged gradient before
                              clipping; non-finite when the step overflowed */
    double clip_coef;      /* factor applied by gradient_clipping (1 when not clipped) */
    int skipped;           /* 1 if the update was skipped: no parameter, master weight,
                              moment or step counter changed */
    int64_t skipped_total; /* skipped steps since the start */
    double loss_scale;     /* the loss scale the gradients of this step were made with */
    double next_loss_scale;/* the scale for the next step (changed by an overflow or growth) */
    int overflow_rank;     /* lowest rank whose owned slice of the reduced gradient held a
                              non-finite value, or -1. Reductions sum in place, so this is
                              where the value was found, not which rank produced it. */
    int overflow_unit;     /* index of the first such unit on that rank (zs_unit_at), or -1 */
} zs_step_info;

/* Ends a micro-step. At an accumulation boundary: averages gradients over
 * ranks and micro-steps, unscales them, agrees across ranks whether any is
 * non-finite (then every rank skips the update and the loss scale adapts),
 * clips to gradient_clipping, updates this rank's shard with the configured
 * optimizer and schedule, and gathers parameters where the stage keeps them
 * full. Collective. info may be NULL. Returns ZS_ERR_NUMERIC when the loss
 * scale cannot go lower under precision.on_min_scale = "abort", or after
 * precision.max_consecutive_skips skipped steps in a row. */
zs_status zs_step(zs_ctx *zs, zs_step_info *info);

/* ------------------------------------------------------------- checkpoints */

/* Saves a checkpoint: every rank writes its owned ranges of the fp32 master
 * weights and the optimizer moments, plus the user state, into a new step
 * directory dir/step_NNNNNNNN, committed atomically (temporary directory,
 * fsync, renames) and recorded in dir/latest; older step directories beyond
 * checkpoint.keep are deleted afterwards. dir = NULL uses checkpoint.dir.
 * Collective; call between optimizer steps (not inside an accumulation
 * window). Fails on every rank if it fails on any; nothing already
 * committed is touched by a failure. */
zs_status zs_save(zs_ctx *zs, const char *dir);

/* Loads a checkpoint into a built context, whatever world size and stage it
 * was saved with: `dir` is a step directory (that one, or an error), or a
 * checkpoint root (the newest step that verifies: dir/latest first, then the
 * step directories newest first; temporary directories are ignored). Every
 * file and tensor hash is verified before any value is used, and the model
 * layout must match (the message names the first mismatching tensor).
 * Collective; all ranks succeed or fail together. */
zs_status zs_load(zs_ctx *zs, const char *dir);

/* User state saved with the next zs_save: `bytes` bytes copied now. Global
 * state (per_rank = 0) is taken from rank 0 and restored on every rank;
 * per-rank state is restored to the rank with the same number (only when the
 * world size is unchanged). Names: 1..255 bytes, no '/' and no NUL. */
zs_status zs_user_state_set(zs_ctx *zs, const char *name, const void *data, size_t bytes,
                            int per_rank);
/* After zs_load (or an automatic resume): copies up to `capacity` bytes of the
 * named state into out and sets *bytes to its full size. ZS_ERR_INVALID_ARGUMENT
 * if the checkpoint holds no such state for this rank. */
zs_status zs_user_state_get(zs_ctx *zs, const char *name, void *out, size_t capacity,
                            size_t *bytes);

/* Optimizer steps applied so far (after zs_load: the checkpoint's). */
int64_t zs_step_count(const zs_ctx *zs);

/* ------------------------------------------------------------ stopping */

/* Whether the training loop should end now: 0 = keep training. After a stop
 * signal (job.stop_signal, SIGUSR1 by default; or SIGTERM) reached any rank,
 * the ranks agree at the next accumulation boundary (inside zs_step, through
 * its existing agreement: no extra synchronisation), finish that optimizer
 * step, save a checkpoint into checkpoint.dir, and from then on this returns
 * nonzero on every rank after the same zs_step: ZS_STOPPED_EXIT_CODE when
 * the checkpoint was committed, ZS_TERMINATED_EXIT_CODE when there was no
 * checkpoint.dir to save into. The program then destroys its context and
 * exits with that value. A save that fails makes that zs_step fail on every
 * rank, as any save does, and this then returns ZS_TERMINATED_EXIT_CODE.
 * A second signal ends the process at once (docs/UNATTENDED.md). Not
 * collective; never blocks. */
int zs_stop_requested(const zs_ctx *zs);

/* The step of the last checkpoint this job committed (any zs_save,
 * including those of checkpoint.every, checkpoint.every_seconds and a stop)
 * or resumed from (checkpoint.resume); -1 if none. Not collective. */
int64_t zs_last_committed_step(const zs_ctx *zs);

/* ------------------------------------------------------------- accounting */

/* Memory tags. Model state (params, grads, master, optim) equals the ZeRO
 * formula of the stage plus padding; the rest is bounded by configuration. */
#define ZS_MEM_TAG_TABLE(X)                                                   \
    X(ZS_MEM_PARAMS, "params", "persistent parameters (full, or the shard in stage 3)") \
    X(ZS_MEM_GRADS, "grads", "persistent gradients (full in stages 0-1, shard in 2-3)") \
    X(ZS_MEM_MASTER, "master", "fp32 master weights when the compute dtype is not fp32") \
    X(ZS_MEM_OPTIM, "optim", "optimizer state (moments, momentum)")                  \
    X(ZS_MEM_LIVE_PARAMS, "live_params", "stage-3 gathered units, carved from zero.live_bytes") \
    X(ZS_MEM_LIVE_GRADS, "live_grads", "stage-2/3 transient full gradients of units, carved from zero.live_bytes") \
    X(ZS_MEM_LIVE_FREE, "live_free", "the part of zero.live_bytes not carved for a unit now")   \
    X(ZS_MEM_HOST_STATE, "host_state", "offload.optimizer = host/nvme: master weights and moments (host), the gradient shard, the swap checksums (nvme)") \
    X(ZS_MEM_HOST_PARAMS, "host_params", "offload.params = host: the stage-3 parameter shard in host memory") \
    X(ZS_MEM_OFFLOAD_STAGING, "offload_staging", "offload.buffer_bytes of host staging between host and device; with nvme also the three swap I/O buffers") \
    X(ZS_MEM_COMM, "comm", "collective staging buffers (comm.segment_bytes, fp32 reduction, quantized records)") \
    X(ZS_MEM_SCRATCH, "scratch", "working buffers: initialization (freed after zs_build); on CUDA also the bounded host-transfer and norm staging buffers") \
    X(ZS_MEM_NVME_STATE, "nvme_state", "offload.optimizer = nvme: master weights and moments in this rank's swap file (disk: not part of the memory total)") \
    X(ZS_MEM_SECONDARY, "secondary", "zero.secondary_partition = node (hpZ): this rank's node slice of every stage-3 unit, as its last gather across nodes produced it") \
    X(ZS_MEM_FROZEN, "frozen", "frozen parameters (ZS_PARAM_FROZEN) on the device: full, or the shard in stage 3; no gradient, master or moments")

typedef enum zs_mem_tag {
#define ZS_MEM_TAG_ENUM_(name, text, description) name,
    ZS_MEM_TAG_TABLE(ZS_MEM_TAG_ENUM_)
#undef ZS_MEM_TAG_ENUM_
    ZS_MEM_TAG_COUNT
} zs_mem_tag;

const char *zs_mem_tag_name(zs_mem_tag tag);

typedef struct zs_memory_stats {
    uint64_t current[ZS_MEM_TAG_COUNT]; /* bytes held now, per tag, on this rank */
    uint64_t peak[ZS_MEM_TAG_COUNT];    /* most bytes ever held, per tag */
    uint64_t total_current;
    uint64_t total_peak;                /* peak of the sum (not the sum of peaks) */
    int live_units_current;             /* units fetched now (stage 3 gathers) */
    int live_units_peak;
    /* Stages 2-3: zero.live_bytes as allocated (live_params + live_grads +
     * live_free), and the most bytes ever carved from it for units at once
     * (the peak of live_params + live_grads together). */
    uint64_t live_bytes_budget;
    uint64_t live_bytes_peak;
} zs_memory_stats;

/* This rank's figures. Not collective. */
zs_status zs_memory_report(const zs_ctx *zs, zs_memory_stats *out);

/* What zs_build would hold on one rank (the `current` and `peak` of every
 * tag, and live_bytes_budget) for a model of `unit_count` units, unit u
 * holding params_per_unit[u] parameters whose element counts follow in
 * param_numel, on `world_size` ranks under `cfg` (zero.*, precision.*,
 * optimizer.type, comm.*), on the CPU backend, without allocating it: the
 * same planning code zs_build runs, so a built context reports exactly
 * this. Fails like zs_build on a zero.live_bytes too small for the largest
 * unit. Not collective; needs no MPI. */
zs_status zs_estimate_memory(const zs_config *cfg, int world_size, int unit_count,
                             const int *params_per_unit, const int64_t *param_numel,
                             zs_memory_stats *out);
/* The same with each parameter's ZS_PARAM_* flags (param_flags, one per
 * parameter in param_numel's order; NULL: none), so that frozen units
 * count under their own tag and hold no gradient, master or moments. */
zs_status zs_estimate_memory_flags(const zs_config *cfg, int world_size, int unit_count,
                                   const int *params_per_unit, const int64_t *param_numel,
                                   const unsigned *param_flags, zs_memory_stats *out);

#define ZS_COMM_OP_TABLE(X)                    \
    X(ZS_COMM_REDUCE_SCATTER, "reduce_scatter") \
    X(ZS_COMM_ALL_GATHER, "all_gather")         \
    X(ZS_COMM_ALL_REDUCE, "all_reduce")         \
    X(ZS_COMM_BROADCAST, "broadcast")           \
    X(ZS_COMM_BARRIER, "barrier")               \
    X(ZS_COMM_ALL_TO_ALL, "all_to_all")

typedef enum zs_comm_op {
#define ZS_COMM_OP_ENUM_(name, text) name,
    ZS_COMM_OP_TABLE(ZS_COMM_OP_ENUM_)
#undef ZS_COMM_OP_ENUM_
    ZS_COMM_OP_COUNT
} zs_comm_op;

const char *zs_comm_op_name(zs_comm_op op);

/* Bytes are what this rank sends under the ring algorithm ("bus bytes" in
 * nccl-tests terms): (n-1)/n of the buffer for reduce-scatter and all-gather,
 * 2(n-1)/n for all-reduce, (n-1)/n for all-to-all, whichever implementation
 * is configured. The counters sum the runtime's communicators: the world's
 * and the node and cross-node groups it keeps beside it.
 *
 * By link: bytes[op] = bytes_intra[op] + bytes_inter[op], split by what
 * this rank really sent to peers on its own node (intra) and on other nodes
 * (inter), segment by segment, as the topology of zs_create says (comm.
 * ranks_per_node, or the ranks' host identities). Ops whose transport this
 * rank cannot observe (MPI's and NCCL's own algorithms) are split as the
 * ring would send them: to the next rank. Host collectives whose count
 * follows the ring model rather than their own algorithm (all-reduce of a
 * few scalars, broadcast) are split in the proportion they really sent. */
typedef struct zs_comm_stats {
    uint64_t calls[ZS_COMM_OP_COUNT];
    uint64_t bytes[ZS_COMM_OP_COUNT];
    uint64_t bytes_intra[ZS_COMM_OP_COUNT]; /* sent to ranks on this rank's node */
    uint64_t bytes_inter[ZS_COMM_OP_COUNT]; /* sent to ranks on other nodes */
} zs_comm_stats;

zs_status zs_comm_report(const zs_ctx *zs, zs_comm_stats *out);

/* A value of the program's (a loss, an accuracy) for the metrics file
 * (log.metrics_file): written, with the runtime's own figures, in the line
 * of the optimizer step in progress; rank 0's values are the ones written.
 * At most 32 names per step, each 1..63 bytes. Not collective. A no-op
 * without log.metrics_file. */
zs_status zs_log_scalar(zs_ctx *zs, const char *name, double value);
/* The same for the optimizer step that just finished (the last zs_step at
 * an accumulation boundary): a value the program knows only after the step,
 * such as a loss it reads from the device once zs_step has waited for it,
 * or a validation loss. A step's line is written when the next step begins
 * (or at zs_destroy), so it can still take these. ZS_ERR_STATE before the
 * first step has finished. Not collective; a no-op without
 * log.metrics_file. */
zs_status zs_log_scalar_previous(zs_ctx *zs, const char *name, double value);

/* Prints both reports of every rank as tables with one column per rank
 * (memory per tag in MiB, current / peak; the live budget and its peak;
 * MiB sent and calls per collective) to `out` on rank 0; other ranks print
 * nothing and may pass NULL. Collective. */
zs_status zs_report_print(zs_ctx *zs, FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* ZEROSHARD_H */
