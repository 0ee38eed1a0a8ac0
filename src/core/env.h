/* The environment variables the runtime and its tools read: one registry
 * (name, type, default, meaning), typed readers that reject what they cannot
 * parse whole, and docs/env-vars.md generated from the table (test_env checks
 * that they agree). Nothing outside this file calls getenv for a ZS_
 * variable. Configuration belongs in the config file; these are the knobs
 * that must work before a configuration exists (logging), per process (the
 * SIMD level), or only in tests and benchmarks (faults, injected delays).
 * A few variables the launchers set (the rank under mpirun, PMIx or srun)
 * are registered too, marked from_launcher, in a table of their own. */
#ifndef ZS_CORE_ENV_H
#define ZS_CORE_ENV_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    ZS_ENV_LOG_LEVEL,
    ZS_ENV_LOG_FILE,
    ZS_ENV_LOG_ALL_RANKS,
    ZS_ENV_CPU_ISA,
    ZS_ENV_FAULT,
    ZS_ENV_FAULT_ERRNO,
    ZS_ENV_STEP_FAULT,
    ZS_ENV_COMM_DELAY_US,
    ZS_ENV_COMM_DELAY_GBPS,
    ZS_ENV_COMM_DELAY_US_INTER,
    ZS_ENV_COMM_DELAY_GBPS_INTER,
    ZS_ENV_PROGRESS_AFTER_S,
    ZS_ENV_CUDA_PIN_CHUNK_BYTES,
    ZS_ENV_REPORT_DIR,
    ZS_ENV_JOB_GENERATION,
    ZS_ENV_PEER_WATCH_OFF,
    ZS_ENV_SIM_LAUNCH_US,
    ZS_ENV_SIM_HOST_GBPS,
    ZS_ENV_SIM_DEVICE_GBPS,
    ZS_ENV_SIM_MEMORY_BYTES,
    ZS_ENV_STREAM_CHECK,
    /* Set by the launcher, not by the user: read (never written) so that a
     * rank knows who it is before zs_create gives it a communicator. */
    ZS_ENV_OMPI_COMM_WORLD_RANK,
    ZS_ENV_OMPI_COMM_WORLD_SIZE,
    ZS_ENV_PMIX_RANK,
    ZS_ENV_SLURM_PROCID,
    ZS_ENV_SLURM_NTASKS,
    ZS_ENV_COUNT
} zs__env_var;

typedef struct {
    const char *name;
    const char *type;          /* how the value is read, for the table */
    const char *default_text;  /* what unset means */
    const char *doc;
    int from_launcher;         /* 1: a launcher's variable (mpirun, PMIx, Slurm), not ZS_ */
} zs__env_entry;

/* The registry's row of a variable. */
const zs__env_entry *zs__env_entry_of(zs__env_var var);

/* The variable's text, or NULL when it is unset or empty. */
const char *zs__env_text(zs__env_var var);

/* 1 when the variable is exactly "1". */
int zs__env_flag(zs__env_var var);

/* A non-negative number read whole into *out (0 when unset). Returns 0 when
 * unset or valid, -1 when the text is not a non-negative number: *out is
 * then 0 and `why` says so, naming the variable. */
int zs__env_nonnegative(zs__env_var var, double *out, char *why, size_t capacity);

/* The fault specs of the test hooks, "point:rank" or "point:rank:step":
 * 1 when `var` names this point, rank and (if given) step. */
int zs__env_fault_matches(zs__env_var var, const char *point, int rank, int64_t step);

/* docs/env-vars.md: the table as markdown, written into out (truncated to
 * capacity, always terminated when capacity > 0); returns the full length,
 * as snprintf does. */
size_t zs__env_markdown(char *out, size_t capacity);

#endif
