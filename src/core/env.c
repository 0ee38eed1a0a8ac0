/* The registry of environment variables (env.h). */
#include "core/env.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const zs__env_entry registry[ZS_ENV_COUNT] = {
    [ZS_ENV_LOG_LEVEL] = {"ZS_LOG_LEVEL", "error, warn, info or debug", "log.level",
                          "Overrides log.level for every rank, also before the configuration "
                          "is read; debug logs every collective."},
    [ZS_ENV_LOG_FILE] = {"ZS_LOG_FILE", "file pattern (%h host, %p pid, %r rank)", "log.file",
                         "Overrides log.file: each rank appends its log lines there instead "
                         "of stderr."},
    [ZS_ENV_LOG_ALL_RANKS] = {"ZS_LOG_ALL_RANKS", "1 or unset", "rank 0 only",
                              "1: INFO and DEBUG lines from every rank, not only rank 0."},
    [ZS_ENV_CPU_ISA] = {"ZS_CPU_ISA", "scalar, avx2, avx512 or auto", "auto",
                        "The CPU kernels' SIMD level, clamped to what the CPU and build "
                        "support (every level gives the same bits)."},
    [ZS_ENV_FAULT] = {"ZS_FAULT", "point:rank[:step]", "off",
                      "Tests only: kills the process (SIGKILL) at a named point of the "
                      "checkpoint save protocol."},
    [ZS_ENV_FAULT_ERRNO] = {"ZS_FAULT_ERRNO", "point:ERRNO:n", "off",
                            "Tests only: the n-th file-system call of a kind (e.g. "
                            "fsync:EIO:2) fails with that errno."},
    [ZS_ENV_STEP_FAULT] = {"ZS_STEP_FAULT", "point:rank[:step]", "off",
                           "Tests only: one rank fails at a point of zs_step (ready, update, "
                           "host, gather), to show that every rank fails together."},
    [ZS_ENV_COMM_DELAY_US] = {"ZS_COMM_DELAY_US", "microseconds, >= 0", "0",
                              "Benchmarks only: every collective of the comm engine takes at "
                              "least this latency (a simulated network)."},
    [ZS_ENV_COMM_DELAY_GBPS] = {"ZS_COMM_DELAY_GBPS", "Gbit/s, >= 0", "0 (no bandwidth limit)",
                                "Benchmarks only: and at least its bytes at this bandwidth."},
    [ZS_ENV_COMM_DELAY_US_INTER] = {"ZS_COMM_DELAY_US_INTER", "microseconds, >= 0",
                                    "ZS_COMM_DELAY_US",
                                    "Benchmarks only: the latency of a collective that sends "
                                    "anything to another node (the topology of zs_create, e.g. "
                                    "simulated nodes of comm.ranks_per_node); set, a "
                                    "collective is charged the bytes this rank sent on each "
                                    "link, not its payload."},
    [ZS_ENV_COMM_DELAY_GBPS_INTER] = {"ZS_COMM_DELAY_GBPS_INTER", "Gbit/s, >= 0",
                                      "ZS_COMM_DELAY_GBPS",
                                      "Benchmarks only: the bandwidth of the links between "
                                      "nodes, for the bytes this rank sent across nodes (those "
                                      "it sent inside its node at ZS_COMM_DELAY_GBPS); 0: no "
                                      "limit."},
    [ZS_ENV_PROGRESS_AFTER_S] = {"ZS_PROGRESS_AFTER_S", "seconds, >= 0", "2",
                                 "zs-ckpt: seconds before a long operation starts printing "
                                 "progress on a terminal."},
    [ZS_ENV_CUDA_PIN_CHUNK_BYTES] = {"ZS_CUDA_PIN_CHUNK_BYTES",
                                     "bytes, a power of two >= 4096", "1073741824 (1 GiB)",
                                     "CUDA backend: page-locked host memory is registered in "
                                     "chunks of this size on several threads (copies are cut at "
                                     "chunk boundaries); tests make it small to cross "
                                     "boundaries with small buffers."},
    [ZS_ENV_REPORT_DIR] = {"ZS_REPORT_DIR", "directory", "job.report_dir",
                           "Overrides job.report_dir: where each rank writes its exit report "
                           "rank-NNNNN.json when the job ends abnormally (zs-run sets it)."},
    [ZS_ENV_JOB_GENERATION] = {"ZS_JOB_GENERATION", "integer, >= 0", "job.generation",
                               "Overrides job.generation: the launch's generation, fenced "
                               "against <checkpoint.dir>/generation (zs-run sets it)."},
    [ZS_ENV_SIM_LAUNCH_US] = {"ZS_SIM_LAUNCH_US", "microseconds, >= 0", "20",
                              "Sim device: the time every op waits on the device's thread "
                              "before it runs (a kernel launch), so that the host runs ahead "
                              "of the device as on a GPU; 0 for none."},
    [ZS_ENV_SIM_HOST_GBPS] = {"ZS_SIM_HOST_GBPS", "GB/s, >= 0", "16",
                              "Sim device: the bandwidth of copies between host and device "
                              "memory (0: no limit)."},
    [ZS_ENV_SIM_DEVICE_GBPS] = {"ZS_SIM_DEVICE_GBPS", "GB/s, >= 0", "800",
                                "Sim device: the bandwidth of copies inside device memory (0: "
                                "no limit)."},
    [ZS_ENV_SIM_MEMORY_BYTES] = {"ZS_SIM_MEMORY_BYTES", "bytes, >= 4096", "17179869184 (16 GiB)",
                                 "Sim device: the size of its memory when device_memory_bytes is "
                                 "0 (a sparse file: only what is written takes memory)."},
    [ZS_ENV_STREAM_CHECK] = {"ZS_STREAM_CHECK", "0 or 1", "1 on sim, 0 on cuda",
                             "The stream-order check (docs/GPU.md): every op's reads and writes, "
                             "the waits and the host's accesses to page-locked memory checked "
                             "for an order; a race ends the process with a report naming both "
                             "accesses. 0 turns it off on the sim device; 1 turns it on on CUDA "
                             "(metadata only)."},
    [ZS_ENV_PEER_WATCH_OFF] = {"ZS_PEER_WATCH_OFF", "1 or unset", "unset (the watch runs)",
                               "Tests only: 1 starts no peer watch, so a rank whose peer died "
                               "ends by job.term_grace_s after SIGTERM, as when the dead rank "
                               "was alone on another machine."},
    [ZS_ENV_OMPI_COMM_WORLD_RANK] = {"OMPI_COMM_WORLD_RANK", "integer, >= 0", "PMIX_RANK",
                                     "Open MPI's rank of the process: the rank of an exit "
                                     "report written before zs_create "
                                     "(zs_report_config_error).", 1},
    [ZS_ENV_OMPI_COMM_WORLD_SIZE] = {"OMPI_COMM_WORLD_SIZE", "integer, >= 0", "SLURM_NTASKS",
                                     "Open MPI's world size: the world_size of such a report.", 1},
    [ZS_ENV_PMIX_RANK] = {"PMIX_RANK", "integer, >= 0", "SLURM_PROCID",
                          "A PMIx launcher's rank (srun --mpi=pmix, prterun), for the same "
                          "report.", 1},
    [ZS_ENV_SLURM_PROCID] = {"SLURM_PROCID", "integer, >= 0", "rank 0",
                             "srun's task id, for the same report.", 1},
    [ZS_ENV_SLURM_NTASKS] = {"SLURM_NTASKS", "integer, >= 0", "0 (unknown)",
                             "srun's task count: the report's world_size without Open MPI.", 1},
};

const zs__env_entry *zs__env_entry_of(zs__env_var var) {
    return var >= 0 && var < ZS_ENV_COUNT ? &registry[var] : NULL;
}

const char *zs__env_text(zs__env_var var) {
    const zs__env_entry *e = zs__env_entry_of(var);
    if (!e) return NULL;
    const char *v = getenv(e->name);
    return v && *v ? v : NULL;
}

int zs__env_flag(zs__env_var var) {
    const char *v = zs__env_text(var);
    return v && strcmp(v, "1") == 0;
}

int zs__env_nonnegative(zs__env_var var, double *out, char *why, size_t capacity) {
    *out = 0.0;
    if (capacity > 0) why[0] = '\0';
    const char *v = zs__env_text(var);
    if (!v) return 0;
    char *end = NULL;
    const double d = strtod(v, &end);
    if (end == v || *end != '\0' || !(d >= 0) || d > 1e300) {
        snprintf(why, capacity, "%s=\"%s\" is not a non-negative number", zs__env_entry_of(var)->name,
                 v);
        return -1;
    }
    *out = d;
    return 0;
}

int zs__env_fault_matches(zs__env_var var, const char *point, int rank, int64_t step) {
    const char *spec = zs__env_text(var);
    if (!spec) return 0;
    char name[32];
    int want_rank = -1;
    long long want_step = -1;
    const int fields = sscanf(spec, "%31[a-z]:%d:%lld", name, &want_rank, &want_step);
    if (fields < 2 || strcmp(name, point) != 0 || want_rank != rank) return 0;
    return fields == 2 || want_step == step;
}

/* Appends like snprintf at out + *used, counting the full length. */
static void put(char *out, size_t capacity, size_t *used, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *at = out && *used < capacity ? out + *used : NULL;
    const int n = vsnprintf(at, at ? capacity - *used : 0, fmt, ap);
    va_end(ap);
    if (n > 0) *used += (size_t)n;
}

/* One table: the header, then the rows of the user's variables
 * (from_launcher 0) or of the launcher's (1). */
static void put_table(char *out, size_t capacity, size_t *used, int from_launcher) {
    put(out, capacity, used, "| variable | value | unset means | meaning |\n|---|---|---|---|\n");
    for (int i = 0; i < ZS_ENV_COUNT; i++)
        if (registry[i].from_launcher == from_launcher)
            put(out, capacity, used, "| `%s` | %s | %s | %s |\n", registry[i].name,
                registry[i].type, registry[i].default_text, registry[i].doc);
}

size_t zs__env_markdown(char *out, size_t capacity) {
    size_t used = 0;
    if (out && capacity > 0) out[0] = '\0';
    put(out, capacity, &used,
        "<!-- Generated from src/core/env.c; test_env checks that they agree. -->\n");
    put_table(out, capacity, &used, 0);
    put(out, capacity, &used,
        "\nSet by the launcher (mpirun, a PMIx launcher, Slurm's srun) and only read, to "
        "name the rank of an exit report written before zs_create:\n\n");
    put_table(out, capacity, &used, 1);
    return used;
}
