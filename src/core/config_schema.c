/* The one table of runtime configuration keys (see config_schema.h). */
#include "core/config_schema.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text_append.h"

/* Enums are stored through an int, so every enum in zs__settings that the
 * table names must have the size of an int. */
_Static_assert(sizeof(zs__backend_kind) == sizeof(int), "enum size");
_Static_assert(sizeof(zs__optimizer_kind) == sizeof(int), "enum size");
_Static_assert(sizeof(zs__schedule_kind) == sizeof(int), "enum size");
_Static_assert(sizeof(zs__comm_impl) == sizeof(int), "enum size");
_Static_assert(sizeof(zs__comm_library) == sizeof(int), "enum size");
_Static_assert(sizeof(zs_log_level) == sizeof(int), "enum size");
_Static_assert(sizeof(zs_dtype) == sizeof(int), "enum size");
_Static_assert(sizeof(zs__reduce_dtype) == sizeof(int), "enum size");
_Static_assert(sizeof(zs__accumulate_dtype) == sizeof(int), "enum size");
_Static_assert(sizeof(zs__min_scale_policy) == sizeof(int), "enum size");
_Static_assert(sizeof(zs__timeout_policy) == sizeof(int), "enum size");
_Static_assert(sizeof(zs__offload_tier) == sizeof(int), "enum size");
_Static_assert(sizeof(zs__stop_signal) == sizeof(int), "enum size");

#define FIELD(f) .offset = offsetof(zs__settings, f), .size = sizeof(((zs__settings *)0)->f)

#define INT_KEY(p, f, def, lo, hi, text) \
    {.path = p, .type = ZS__KEY_INT, FIELD(f), .int_default = def, .int_min = lo, \
     .int_max = hi, .doc = text}
#define FLOAT_KEY(p, f, def, lo, lo_open, hi, hi_open, text)                               \
    {.path = p, .type = ZS__KEY_FLOAT, FIELD(f), .float_default = def, .float_min = lo, \
     .float_min_open = lo_open, .float_max = hi, .float_max_open = hi_open, .doc = text}
#define BOOL_KEY(p, f, def, text) \
    {.path = p, .type = ZS__KEY_BOOL, FIELD(f), .bool_default = def, .doc = text}
#define ENUM_KEY(p, f, def, list, text) \
    {.path = p, .type = ZS__KEY_ENUM, FIELD(f), .string_default = def, .values = list, .doc = text}
#define STRING_KEY(p, f, def, text) \
    {.path = p, .type = ZS__KEY_STRING, FIELD(f), .string_default = def, .doc = text}

/* The order of each list is the order of the C enum it fills. */
static const char *const backend_values[] = {"cpu", "cuda", "sim", NULL};
static const char *const optimizer_values[] = {"sgd", "adam", "adamw", NULL};
static const char *const schedule_values[] = {"constant", "warmup_cosine", NULL};
static const char *const comm_impl_values[] = {"ring", "mpi", NULL};
static const char *const all_gather_values[] = {"ring", "mpi", "auto", NULL};
static const char *const comm_library_values[] = {"auto", "nccl", "mpi", NULL};
static const char *const log_level_values[] = {"error", "warn", "info", "debug", NULL};
static const char *const dtype_values[] = {"fp32", "fp16", "bf16", NULL};
static const char *const reduce_dtype_values[] = {"compute", "fp32", NULL};
static const char *const accumulate_dtype_values[] = {"fp32", "compute", NULL};
static const char *const min_scale_policy_values[] = {"abort", "continue", NULL};
static const char *const timeout_policy_values[] = {"abort", "return", NULL};
static const char *const durability_policy_values[] = {"fail", "warn", NULL};
static const char *const stop_signal_values[] = {"USR1", "USR2", "none", NULL};
_Static_assert(ZS_STOP_SIGNAL_USR1 == 0 && ZS_STOP_SIGNAL_USR2 == 1 && ZS_STOP_SIGNAL_NONE == 2,
               "stop signal values follow the enum");
static const char *const shard_group_values[] = {"world", "node", NULL};
static const char *const secondary_partition_values[] = {"none", "node", NULL};
static const char *const quantize_weights_values[] = {"none", "int8", NULL};
static const char *const frozen_storage_values[] = {"compute", "int8", "nf4", NULL};
_Static_assert(ZS_FROZEN_COMPUTE == 0 && ZS_FROZEN_INT8 == 1 && ZS_FROZEN_NF4 == 2,
               "frozen storage values follow the enum");
static const char *const quantize_grads_values[] = {"none", "int8", "int4", NULL};
_Static_assert(ZS_SHARD_GROUP_WORLD == 0 && ZS_SHARD_GROUP_NODE == 1 && ZS_SECONDARY_NONE == 0 &&
                   ZS_SECONDARY_NODE == 1 && ZS_QUANTIZE_NONE == 0 && ZS_QUANTIZE_INT8 == 1 &&
                   ZS_QUANTIZE_INT4 == 2,
               "the sharding and quantization value lists follow the C enums");
static const char *const offload_optimizer_values[] = {"none", "host", "nvme", NULL};
static const char *const offload_params_values[] = {"none", "host", "nvme", NULL};
_Static_assert(ZS_OFFLOAD_NONE == 0 && ZS_OFFLOAD_HOST == 1 && ZS_OFFLOAD_NVME == 2,
               "offload values follow the enum");

_Static_assert(ZS_BACKEND_CUDA == 1 && ZS_BACKEND_SIM == 2 && ZS_OPTIMIZER_ADAMW == 2 && ZS_SCHEDULE_WARMUP_COSINE == 1 &&
                   ZS_COMM_IMPL_MPI == 1 && ZS_COMM_IMPL_AUTO == 2 && ZS_LOG_DEBUG == 3 &&
                   ZS_COMM_LIBRARY_AUTO == 0 && ZS_COMM_LIBRARY_NCCL == 1 &&
                   ZS_COMM_LIBRARY_MPI == 2,
               "the value lists above must follow the C enums");
_Static_assert(ZS_DTYPE_FP32 == 0 && ZS_DTYPE_FP16 == 1 && ZS_DTYPE_BF16 == 2 &&
                   ZS_REDUCE_DTYPE_COMPUTE == 0 && ZS_REDUCE_DTYPE_FP32 == 1 &&
                   ZS_ACCUMULATE_DTYPE_FP32 == 0 && ZS_ACCUMULATE_DTYPE_COMPUTE == 1 &&
                   ZS_MIN_SCALE_ABORT == 0 && ZS_MIN_SCALE_CONTINUE == 1 &&
                   ZS_TIMEOUT_ABORT == 0 && ZS_TIMEOUT_RETURN == 1,
               "the precision value lists above must follow the C enums");

/* 2^64: the largest loss scale, static or reached by initial_scale_power. */
#define LOSS_SCALE_MAX 18446744073709551616.0

const zs__key zs__config_keys[] = {
    ENUM_KEY("backend", backend, "cpu", backend_values,
             "Where tensors live and kernels run: cpu (host memory, OpenMP), cuda (a GPU), or "
             "sim (the simulated device: the CUDA backend's memory the host cannot touch and "
             "asynchronous stream, with the CPU's kernels; docs/GPU.md)."),
    INT_KEY("seed", seed, 42, 0, INT64_MAX,
            "Seed of parameter initialization; the same seed gives the same initial values "
            "on every rank, world size and stage."),
    INT_KEY("gradient_accumulation_steps", gradient_accumulation_steps, 1, 1, 65536,
            "Micro-steps (forward and backward passes) whose gradients are summed before one "
            "optimizer step; the effective batch is this times the per-rank batch times the "
            "world size."),
    FLOAT_KEY("gradient_clipping", gradient_clipping, 0.0, 0.0, 0, 1e6, 0,
              "Largest global L2 norm of the unscaled, averaged gradient; a larger gradient is "
              "scaled down to it; 0 turns clipping off."),

    INT_KEY("device_memory_bytes", device_memory_bytes, 0, 0, INT64_MAX,
            "The device's memory where it is simulated: on the cpu backend, allocations of "
            "device state (parameters, gradients, master weights, moments, the live budget) "
            "beyond this many bytes fail, as a GPU's would (0 = no cap); on the sim backend, the "
            "size of its memory (0 = ZS_SIM_MEMORY_BYTES, 16 GiB by default)."),
    ENUM_KEY("offload.optimizer", offload.optimizer, "none", offload_optimizer_values,
             "Where the fp32 master weights and optimizer moments live: on the device (none), in "
             "host memory (host, ZeRO-Offload) or in a per-rank swap file under "
             "offload.nvme_path (nvme, ZeRO-Infinity); with host and nvme the gradient shard is in "
             "host memory and the optimizer runs there."),
    ENUM_KEY("offload.params", offload.params, "none", offload_params_values,
             "Stage 3: where the owned parameter shard lives between its gathers: on the device "
             "(none), in host memory (host), staged in by each gather, or on NVMe (nvme, with "
             "offload.optimizer = \"nvme\": each gather reads the shard's fp32 master weights "
             "from the swap file and rounds them, so no separate copy is kept)."),
    INT_KEY("offload.buffer_bytes", offload.buffer_bytes, 16777216, 4096, 1073741824,
            "offload.optimizer = \"nvme\": the size of each of the four chunk buffers: three "
            "for the optimizer step (read-ahead, update, write-behind) and one for the "
            "write-back cache that initialization, checkpoints and stage-3 gathers read "
            "through; each holds one chunk of the swap file: a block per optimizer array."),
    BOOL_KEY("offload.overlap", offload.overlap, 1,
             "With the optimizer offloaded: zs_step returns once the step is decided and the "
             "host updates the units in forward order on its own thread, each unit's new "
             "parameters going back as soon as it is done, while the next forward runs (a unit's "
             "zs_fetch waits for that unit only); false updates every unit inside zs_step. Same "
             "results either way."),
    INT_KEY("offload.threads", offload.threads, 0, 0, 4096,
            "With the optimizer offloaded: OpenMP threads of the host update; 0 = the cores "
            "this rank may use divided by the ranks on its host (at least 1)."),
    STRING_KEY("offload.nvme_path", offload.nvme_path, "",
               "offload.optimizer = \"nvme\": an existing directory (on a fast local disk) where "
               "each rank keeps its swap file, in a per-run subdirectory removed at exit."),
    BOOL_KEY("offload.pin_memory", offload.pin_memory, 1,
             "CUDA: page-lock host buffers of offloaded state for fast, asynchronous copies."),
    INT_KEY("zero.stage", zero.stage, 0, 0, 3,
            "ZeRO stage: 0 replicates everything, 1 shards optimizer state, 2 also gradients, "
            "3 also parameters."),
    INT_KEY("zero.max_live_units", zero.max_live_units, 2, 1, 65536,
            "Stage 3: most units whose parameters are gathered at once; stages 2-3: most unit "
            "gradients open at once (both also bounded by zero.live_bytes)."),
    INT_KEY("zero.live_bytes", zero.live_bytes, 0, 0, INT64_MAX,
            "Stages 2-3: bytes of the one buffer, allocated at zs_build, from which gathered "
            "unit parameters (stage 3) and open unit gradients are carved at their exact sizes; "
            "0 = max_live_units times the largest unit for each (stage 3: parameters and "
            "gradients); at least the largest unit's parameters plus its gradient."),
    INT_KEY("zero.prefetch_bytes", zero.prefetch_bytes, 67108864, 0, INT64_MAX,
            "Stage 3: most bytes of unit parameters gathered ahead of the program's fetches, in "
            "the order recorded in the first step (or stated with zs_prefetch), within "
            "zero.live_bytes; 0 turns prefetching off."),
    {.path = "zero.align", .type = ZS__KEY_INT, FIELD(zero.align), .int_default = 16, .int_min = 1,
     .int_max = 4096, .power_of_two = 1,
     .doc = "Shard boundaries and flat-buffer offsets are padded to this many elements."},
    ENUM_KEY("zero.shard_group", zero.shard_group, "world", shard_group_values,
             "The ranks the model state is sharded over: \"world\" (ZeRO) or \"node\" (hybrid "
             "sharding, FSDP's HYBRID_SHARD): sharded inside each node and replicated across "
             "nodes, so parameter gathers stay inside a node, gradients are reduce-scattered "
             "inside it and then all-reduced across nodes between the ranks owning the same "
             "slice, and memory per rank follows the node's rank count; stages 1-3, nodes of "
             "equal size."),
    ENUM_KEY("zero.secondary_partition", zero.secondary_partition, "none",
             secondary_partition_values,
             "Stage 3 (ZeRO++'s hpZ): \"node\" keeps what a unit's first gather after its "
             "parameters changed (an optimizer step, zs_load, an import) produced, partitioned "
             "across the node's ranks, so its later gathers until the next change (the "
             "backward's, the next micro-steps', evaluation's) stay inside the node and see "
             "exactly the weights the forward saw; changes no value (docs/NODES.md); costs one "
             "node slice of every unit (memory tag secondary); nodes of equal size."),
    ENUM_KEY("zero.frozen_storage", zero.frozen_storage, "compute", frozen_storage_values,
             "How frozen units whose parameters are all ZS_PARAM_FROZEN and ZS_PARAM_QUANTIZE (a "
             "fine-tune's base weight matrices) are stored, gathered and kept (QLoRA): "
             "\"compute\" in the compute dtype; \"int8\" or \"nf4\" (QLoRA's 4-bit "
             "NormalFloat) with one fp32 scale per zero.frozen_block elements, quantized once "
             "where they are written (import, load, initialization: each rank its own shard), "
             "gathered in that form in stage 3, and dequantized one parameter at a time by "
             "the model's layers (zs_param_dequantize); every stage and backend computes with "
             "the same values."),
    {.path = "zero.frozen_block", .type = ZS__KEY_INT, FIELD(zero.frozen_block),
     .int_default = 64, .int_min = 2, .int_max = 4096, .power_of_two = 1,
     .doc = "Elements per scale of zero.frozen_storage = \"int8\" or \"nf4\" (QLoRA's 64), "
            "counted from each parameter's first element; shards and parameter offsets are "
            "aligned to it (zero.align is raised to it)."},
    BOOL_KEY("zero.frozen_double_quant", zero.frozen_double_quant, 0,
             "With zero.frozen_storage = \"int8\" or \"nf4\", QLoRA's double quantization: "
             "the fp32 scales stored as int8 codes with one fp32 scale per 256 of them "
             "(4.127 bits a weight with NF4 instead of 4.5); values dequantize with their "
             "block's scale as decoded."),

    ENUM_KEY("optimizer.type", optimizer.kind, "adamw", optimizer_values,
             "Optimizer: sgd (with optional momentum), adam (L2 decay added to the gradient) "
             "or adamw (decoupled weight decay)."),
    {.path = "optimizer.lr", .type = ZS__KEY_FLOAT, FIELD(optimizer.lr), .required = 1,
     .float_min = 0.0, .float_min_open = 1, .float_max = 10.0, .float_max_open = 0,
     .doc = "Peak learning rate.", .example = "the learning rate, e.g. optimizer: { lr = 3e-4; }"},
    FLOAT_KEY("optimizer.beta1", optimizer.beta1, 0.9, 0.0, 0, 1.0, 1,
              "Adam/AdamW: decay rate of the first moment."),
    FLOAT_KEY("optimizer.beta2", optimizer.beta2, 0.999, 0.0, 0, 1.0, 1,
              "Adam/AdamW: decay rate of the second moment."),
    FLOAT_KEY("optimizer.eps", optimizer.eps, 1e-8, 0.0, 1, 1.0, 0,
              "Adam/AdamW: added to the denominator for numerical stability."),
    FLOAT_KEY("optimizer.weight_decay", optimizer.weight_decay, 0.0, 0.0, 0, 10.0, 0,
              "Weight decay coefficient (parameters created with ZS_PARAM_NO_DECAY are exempt)."),
    FLOAT_KEY("optimizer.momentum", optimizer.momentum, 0.0, 0.0, 0, 1.0, 1,
              "SGD: momentum coefficient; 0 disables momentum."),
    BOOL_KEY("optimizer.nesterov", optimizer.nesterov, 0,
             "SGD: use Nesterov momentum; needs optimizer.momentum > 0."),

    ENUM_KEY("scheduler.type", scheduler.kind, "constant", schedule_values,
             "Learning-rate schedule: constant, or linear warmup then cosine decay to min_lr."),
    INT_KEY("scheduler.warmup_steps", scheduler.warmup_steps, 0, 0, INT64_MAX,
            "warmup_cosine: optimizer steps of linear warmup from 0 to optimizer.lr."),
    INT_KEY("scheduler.total_steps", scheduler.total_steps, 0, 0, INT64_MAX,
            "warmup_cosine: optimizer steps of the whole run; must exceed warmup_steps."),
    FLOAT_KEY("scheduler.min_lr", scheduler.min_lr, 0.0, 0.0, 0, 10.0, 0,
              "warmup_cosine: learning rate at the end of the decay; at most optimizer.lr."),

    ENUM_KEY("precision.dtype", precision.dtype, "fp32", dtype_values,
             "Compute dtype of the parameters and gradients the program works with; fp16 and bf16 "
             "keep an fp32 master copy of the parameters for the optimizer."),
    ENUM_KEY("precision.reduce_dtype", precision.reduce_dtype, "compute", reduce_dtype_values,
             "What gradient collectives carry: the compute dtype (half the bytes in fp16/bf16) or "
             "fp32 (more exact sums, twice the bytes)."),
    ENUM_KEY("precision.accumulate_dtype", precision.accumulate_dtype, "fp32",
             accumulate_dtype_values,
             "Stages 2-3 with gradient_accumulation_steps > 1: the dtype of the gradient shard "
             "that sums micro-steps (fp32, or the compute dtype to save memory)."),
    FLOAT_KEY("precision.loss_scale", precision.loss_scale, 0.0, 0.0, 0, LOSS_SCALE_MAX, 0,
              "0: dynamic loss scaling in fp16 and no scaling (1) in bf16/fp32; > 0: this static "
              "scale in any dtype (a power of two keeps unscaling exact; at most 2^64)."),
    INT_KEY("precision.initial_scale_power", precision.initial_scale_power, 16, 0, 64,
            "Dynamic loss scaling: the scale starts at 2 to this power."),
    INT_KEY("precision.loss_scale_window", precision.loss_scale_window, 1000, 1, 2147483648LL,
            "Dynamic loss scaling: after this many optimizer steps in a row without overflow, the "
            "next one doubles the scale, and so does every window-th one after it."),
    INT_KEY("precision.hysteresis", precision.hysteresis, 2, 1, 1000,
            "Dynamic loss scaling: the hysteresis-th overflow since the last refill, and each "
            "after it, halves the scale; earlier ones only skip the step (1 halves on every "
            "overflow)."),
    BOOL_KEY("precision.consecutive_hysteresis", precision.consecutive_hysteresis, 0,
             "Dynamic loss scaling: refill the hysteresis after every step without overflow "
             "(true) or only when the scale grows (false)."),
    FLOAT_KEY("precision.min_loss_scale", precision.min_loss_scale, 1.0, 0.0, 1, LOSS_SCALE_MAX,
              0,
              "Dynamic loss scaling: the scale never goes below this; at most "
              "2^initial_scale_power (a power of two keeps unscaling exact)."),
    ENUM_KEY("precision.on_min_scale", precision.on_min_scale, "abort", min_scale_policy_values,
             "Dynamic loss scaling: when gradients overflow at min_loss_scale, fail the step "
             "with ZS_ERR_NUMERIC (abort) or skip it and stay at the minimum (continue)."),
    INT_KEY("precision.max_consecutive_skips", precision.max_consecutive_skips, 100, 1, 1000000,
            "zs_step fails with ZS_ERR_NUMERIC when more than this many steps in a row overflow "
            "(are skipped), in every dtype and loss-scale mode."),
    BOOL_KEY("precision.check_overflow", precision.check_overflow, 1,
             "Check gradients for Inf/NaN before every update and skip the step on overflow; "
             "must be true in fp16."),

    ENUM_KEY("comm.impl", comm.impl, "auto", comm_library_values,
             "Library of the cuda backend's data collectives: nccl (device memory, one GPU per "
             "rank) or mpi (device buffers staged through pinned host memory into the MPI "
             "collectives below: ranks may share a GPU, clusters without NCCL can train); auto "
             "picks nccl where every rank computes on a GPU of its own (GPU UUIDs compared), "
             "else mpi, and says so in one INFO line. The cpu backend always uses MPI (nccl is refused)."),
    ENUM_KEY("comm.reduce_scatter", comm.reduce_scatter, "ring", comm_impl_values,
             "Algorithm of gradient reduce-scatter on the MPI path: our ring over point-to-point, "
             "or MPI's own; each fixes its summation order, so there is no auto."),
    ENUM_KEY("comm.all_gather", comm.all_gather, "auto", all_gather_values,
             "Algorithm of all-gather on the MPI path: our ring over point-to-point, MPI's own, "
             "or auto: the faster of the two for each message size, measured at zs_build on the "
             "model's own unit sizes and agreed by all ranks (logged at INFO), or chosen by "
             "comm.all_gather_mpi_from_bytes. An all-gather only moves bits: every choice gives "
             "the same results."),
    INT_KEY("comm.all_gather_mpi_from_bytes", comm.all_gather_mpi_from_bytes, 0, 0,
            INT64_MAX,
            "comm.all_gather = \"auto\": 0 measures at zs_build; a positive value skips the "
            "measurement and uses MPI's all-gather for messages of at least this many bytes "
            "per rank, the ring for smaller ones."),
    INT_KEY("comm.staging_bytes", comm.staging_bytes, 16777216, 1024, 1073741824,
            "comm.impl = \"mpi\" on the cuda backend: bytes of the pinned host buffer that "
            "device data passes through on its way into and out of MPI's collectives, at most "
            "this much of a collective at a time (counted under the comm tag)."),
    BOOL_KEY("comm.host_staging", comm.host_staging, 0,
             "Testing: the cpu backend passes collectives through the staging buffer of "
             "comm.impl = \"mpi\" as a device backend does (same results, more copies), so "
             "that path runs on machines without a GPU."),
    INT_KEY("comm.segment_bytes", comm.segment_bytes, 4194304, 4096, 1073741824,
            "Size of one collective staging buffer in bytes (default 4 MiB, at most 1 GiB)."),
    INT_KEY("comm.timeout_s", comm.timeout_s, 600, 1, 86400,
            "Seconds a collective may wait for its peers without progress (MPI and NCCL, "
            "creation and checkpoint agreements included) before it fails naming the op, its "
            "sequence number, the unit and the silent peer; then comm.on_timeout applies."),
    ENUM_KEY("comm.on_timeout", comm.on_timeout, "abort", timeout_policy_values,
             "After a collective timed out and was reported: abort the whole job with "
             "MPI_Abort (exit code 75) or return ZS_ERR_TIMEOUT to the program (the context "
             "is then unusable: destroy it and end the job without MPI_Finalize)."),
    BOOL_KEY("comm.check_collectives", comm.check_collectives, 0,
             "Debug: before every collective, ranks agree on its fingerprint (op, sequence "
             "number, unit, count, dtype) and fail together, printing both sides, when they "
             "differ; costs one small exchange per collective."),
    INT_KEY("comm.bucket_bytes", comm.bucket_bytes, 0, 0, 1073741824,
            "Gradients of consecutive units smaller than this are reduced together, in one "
            "collective of at least this many bytes (DDP's bucket_cap_mb, DeepSpeed's "
            "reduce_bucket_size), with the same results bit for bit (ring reduce-scatter, "
            "reduce_dtype = \"compute\"); 0 reduces every unit on its own."),
    BOOL_KEY("comm.overlap", comm.overlap, 1,
             "Run collectives on a communication thread in program order, overlapping them with "
             "the program's compute (results are identical either way); needs "
             "MPI_THREAD_MULTIPLE, else it falls back to synchronous collectives with a warning."),
    INT_KEY("comm.ranks_per_node", comm.ranks_per_node, 0, 0, 65536,
            "Which ranks share a node (the node and cross-node communicators, the byte counters "
            "by link): 0 detects it at zs_create from each rank's host name, boot id and "
            "network namespace (logged at INFO); N > 0 makes consecutive groups of N ranks "
            "nodes (the last may be smaller), to simulate nodes on one machine."),
    ENUM_KEY("comm.quantize_weights", comm.quantize_weights, "none", quantize_weights_values,
             "Stage 3 (ZeRO++'s qwZ): \"int8\" makes parameter all-gathers carry int8 values "
             "with one fp32 scale per comm.quant_block elements of each owner's shard, "
             "dequantized on arrival into the compute dtype; every rank, the owner included, "
             "computes with the dequantized values; the fp32 master weights are never "
             "quantized. On one rank nothing is gathered, so nothing is quantized."),
    ENUM_KEY("comm.quantize_grads", comm.quantize_grads, "none", quantize_grads_values,
             "Stages 1-3 (ZeRO++'s qgZ): gradient reduce-scatters become two all-to-all hops, "
             "inside each node then across nodes, carrying \"int8\" or \"int4\" values (two "
             "per byte) with one fp32 scale per comm.quant_block elements, summed in fp32 in a "
             "fixed order between and after the hops; takes precedence over "
             "precision.reduce_dtype; every unit is reduced alone (comm.bucket_bytes does not "
             "apply); nodes of equal size. On one rank nothing is reduced or quantized."),
    INT_KEY("comm.quant_block", comm.quant_block, 256, 1, 1048576,
            "Elements per fp32 scale of the quantized collectives, counted from the start of "
            "each owner's slice (the last block of a slice may be shorter)."),

    /* The logger owns the names of its levels, so its parser decides. */
    {.path = "log.level", .type = ZS__KEY_ENUM, FIELD(log.level), .string_default = "info",
     .values = log_level_values, .parse = zs__log_level_parse,
     .doc = "Least severe log level printed; the ZS_LOG_LEVEL environment variable wins."},
    STRING_KEY("checkpoint.dir", checkpoint.dir, "",
               "Checkpoint root: step directories step_NNNNNNNN and the file `latest` go here; "
               "needed by checkpoint.every and checkpoint.resume = \"auto\"."),
    INT_KEY("checkpoint.every", checkpoint.every, 0, 0, INT64_MAX,
            "Save a checkpoint after every this many optimizer steps (in zs_step); 0 = only "
            "when the program calls zs_save."),
    INT_KEY("checkpoint.keep", checkpoint.keep, 0, 0, INT64_MAX,
            "Keep this many newest step directories, deleting older ones only after a new one is "
            "committed; 0 = keep all."),
    STRING_KEY("checkpoint.resume", checkpoint.resume, "none",
               "At zs_build: \"none\" starts fresh; \"auto\" loads the newest step in "
               "checkpoint.dir that verifies (fresh if there is none); any other value is a step "
               "directory that must load."),
    ENUM_KEY("checkpoint.on_durability_error", checkpoint.on_durability_error, "fail",
             durability_policy_values,
             "When an fsync of the checkpoint root or the update of `latest` fails after a "
             "save's commit point: \"fail\" fails the save on every rank and keeps the previous "
             "step as the resume point (an fsync error means the data may not be durable); "
             "\"warn\" keeps the new step and only warns."),
    FLOAT_KEY("checkpoint.every_seconds", checkpoint.every_seconds, 0.0, 0.0, 0, 31536000.0, 0,
              "Save a checkpoint (in zs_step) at the first optimizer step this many seconds after "
              "the last save, or the start; any rank's clock decides for all, through the step's "
              "agreement; beside checkpoint.every; 0 = off."),
    ENUM_KEY("job.stop_signal", job.stop_signal, "USR1", stop_signal_values,
             "The preemption warning (Slurm's --signal=USR1@<seconds>): at the next optimizer step "
             "every rank saves a checkpoint into checkpoint.dir and zs_stop_requested turns "
             "nonzero, even when only one rank got the signal; SIGTERM does the same within "
             "job.term_grace_s; a second signal ends the process at once; \"none\" installs no "
             "handler (neither this signal nor SIGTERM)."),
    FLOAT_KEY("job.term_grace_s", job.term_grace_s, 10.0, 0.0, 1, 3600.0, 0,
              "After SIGTERM: the longest any collective waits (instead of comm.timeout_s); if "
              "the agreed checkpoint does not fit, the rank writes its exit report "
              "(\"terminated\") and ends by SIGTERM."),
    STRING_KEY("job.report_dir", job.report_dir, "",
               "Where each rank writes its exit report rank-NNNNN.json on an abnormal end "
               "(docs/UNATTENDED.md); empty = the directory reports in checkpoint.dir, or none "
               "without checkpoint.dir; the ZS_REPORT_DIR environment variable wins."),
    INT_KEY("job.generation", job.generation, 0, 0, INT64_MAX,
            "The job's generation (zs-run takes one per launch from checkpoint.dir's file "
            "generation): zs_build and every save refuse when that file names a higher one "
            "(an old job fenced out); 0 = unfenced; the ZS_JOB_GENERATION environment "
            "variable wins."),
    STRING_KEY("log.file", log.file, "",
               "Log file name pattern (%h host, %p pid, %r rank); empty means stderr; the "
               "ZS_LOG_FILE environment variable wins."),
    STRING_KEY("log.metrics_file", log.metrics_file, "",
               "JSON-lines file rank 0 appends one line to per optimizer step: step, lr, grad "
               "norm, loss scale, skipped, step time split into compute, exposed communication, "
               "optimizer and checkpoint, peak memory per tag, bytes per collective, and the "
               "program's zs_log_scalar values (pattern with %h %p %r; empty = none)."),
    STRING_KEY("trace.file", trace.file, "",
               "Timeline trace file name pattern (%r rank, %p pid, %h host; use %r so each rank "
               "has its own file): Chrome/Perfetto JSON of compute, comm, optimizer and "
               "checkpoint spans, rewritten at every checkpoint and at the end; empty = off."),
    INT_KEY("trace.capacity", trace.capacity, 65536, 1024, 16777216,
            "Trace events each rank keeps in memory (128 bytes each, allocated at start), half "
            "for the comm track; when full, the oldest are overwritten and counted."),
};

const size_t zs__config_key_count = sizeof zs__config_keys / sizeof zs__config_keys[0];

const zs__key *zs__config_key_find(const char *path) {
    for (size_t i = 0; i < zs__config_key_count; i++)
        if (strcmp(zs__config_keys[i].path, path) == 0) return &zs__config_keys[i];
    return NULL;
}

int zs__config_is_group(const char *path) {
    size_t n = strlen(path);
    for (size_t i = 0; i < zs__config_key_count; i++) {
        const char *k = zs__config_keys[i].path;
        if (strncmp(k, path, n) == 0 && k[n] == '.') return 1;
    }
    return 0;
}

const char *zs__config_key_type_name(const zs__key *key) {
    switch (key->type) {
    case ZS__KEY_INT: return "integer";
    case ZS__KEY_FLOAT: return "float";
    case ZS__KEY_BOOL: return "bool";
    case ZS__KEY_STRING: return "string";
    case ZS__KEY_ENUM: return "string";
    }
    return "?";
}

void zs__config_format_double(double value, char *out, size_t capacity) {
    if (capacity == 0) return;
    /* The shortest precision that reads back to the same double, preferring
     * plain digits ("10", not "1e+01") for ordinary magnitudes. */
    double magnitude = fabs(value);
    int plain_ok = magnitude >= 1e-4 && magnitude < 1e15;
    for (int precision = 1; precision <= 17; precision++) {
        snprintf(out, capacity, "%.*g", precision, value);
        if (strtod(out, NULL) == value && (precision == 17 || !plain_ok || !strchr(out, 'e')))
            break;
    }
    /* "1e-08" -> "1e-8": the exponent's leading zeros are noise. */
    char *e = strchr(out, 'e');
    if (e) {
        char *digits = e + 1 + (e[1] == '-' || e[1] == '+');
        if (e[1] == '+') {
            memmove(e + 1, e + 2, strlen(e + 2) + 1);
            digits--;
        }
        char *first = digits;
        while (first[0] == '0' && first[1] != '\0') first++;
        if (first != digits) memmove(digits, first, strlen(first) + 1);
    }
    if (isfinite(value) && !strpbrk(out, ".e")) {
        size_t n = strlen(out);
        if (n + 2 < capacity) memcpy(out + n, ".0", 3);
    }
}

void zs__config_key_default_text(const zs__key *key, char *out, size_t capacity) {
    if (key->required) {
        snprintf(out, capacity, "required");
        return;
    }
    switch (key->type) {
    case ZS__KEY_INT: snprintf(out, capacity, "%" PRId64, key->int_default); break;
    case ZS__KEY_FLOAT: zs__config_format_double(key->float_default, out, capacity); break;
    case ZS__KEY_BOOL: snprintf(out, capacity, "%s", key->bool_default ? "true" : "false"); break;
    case ZS__KEY_STRING:
    case ZS__KEY_ENUM: snprintf(out, capacity, "\"%s\"", key->string_default); break;
    }
}


void zs__config_key_range_text(const zs__key *key, char *out, size_t capacity) {
    size_t used = 0;
    if (capacity == 0) return;
    out[0] = '\0';
    switch (key->type) {
    case ZS__KEY_INT:
        if (key->power_of_two) {
            zs__text_append(out, capacity, &used, "a power of two from %" PRId64 " to %" PRId64, key->int_min,
                   key->int_max);
        } else if (key->int_max - key->int_min <= 4) {
            /* A short list reads better than a range: "0, 1, 2 or 3". */
            for (int64_t v = key->int_min; v <= key->int_max; v++)
                zs__text_append(out, capacity, &used, "%s%" PRId64,
                       v == key->int_min ? "" : (v == key->int_max ? " or " : ", "), v);
        } else if (key->int_max == INT64_MAX) {
            zs__text_append(out, capacity, &used, "at least %" PRId64, key->int_min);
        } else {
            zs__text_append(out, capacity, &used, "from %" PRId64 " to %" PRId64, key->int_min, key->int_max);
        }
        break;
    case ZS__KEY_FLOAT: {
        char lo[32], hi[32];
        zs__config_format_double(key->float_min, lo, sizeof lo);
        zs__config_format_double(key->float_max, hi, sizeof hi);
        zs__text_append(out, capacity, &used, "%s%s, %s%s", key->float_min_open ? "(" : "[", lo, hi,
               key->float_max_open ? ")" : "]");
        break;
    }
    case ZS__KEY_BOOL: zs__text_append(out, capacity, &used, "true or false"); break;
    case ZS__KEY_STRING:
        zs__text_append(out, capacity, &used, "at most %zu bytes", key->size - 1);
        break;
    case ZS__KEY_ENUM:
        for (int i = 0; key->values[i]; i++)
            zs__text_append(out, capacity, &used, "%s\"%s\"",
                   i == 0 ? "" : (key->values[i + 1] ? ", " : " or "), key->values[i]);
        break;
    }
}

size_t zs__config_keys_markdown(char *out, size_t capacity) {
    size_t needed = 0;
    size_t written = 0; /* whole pieces copied; once one does not fit, nothing more is */
    int truncated = 0;
    char def[128], range[256], line[1024];
    /* Counts the full length even when `out` is too small, like snprintf. */
#define EMIT(...)                                                            \
    do {                                                                     \
        int n_ = snprintf(line, sizeof line, __VA_ARGS__);                   \
        if (n_ > 0) {                                                        \
            size_t k_ = (size_t)n_ < sizeof line ? (size_t)n_ : sizeof line - 1; \
            if (out && !truncated && needed + k_ < capacity) {               \
                memcpy(out + needed, line, k_);                              \
                written = needed + k_;                                       \
            } else {                                                         \
                truncated = 1;                                               \
            }                                                                \
            needed += k_;                                                    \
        }                                                                    \
    } while (0)
    EMIT("<!-- Generated from src/core/config_schema.c; test_config checks that they agree. -->\n");
    EMIT("| key | type | default | range/values | meaning |\n");
    EMIT("|---|---|---|---|---|\n");
    for (size_t i = 0; i < zs__config_key_count; i++) {
        const zs__key *key = &zs__config_keys[i];
        zs__config_key_default_text(key, def, sizeof def);
        zs__config_key_range_text(key, range, sizeof range);
        const char *type = key->type == ZS__KEY_ENUM ? "enum (string)" : zs__config_key_type_name(key);
        EMIT("| `%s` | %s | %s | %s | %s |\n", key->path, type, def, range, key->doc);
    }
    EMIT("| `app.*` | any | — | — | Free-form keys of the training program, read with "
         "zs_config_app_*; unread keys are rejected by zs_config_app_finish. |\n");
#undef EMIT
    if (out && capacity > 0) out[written] = '\0';
    return needed;
}
