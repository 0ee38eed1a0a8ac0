/* Machine-readable exit reports: on every abnormal end of a job (a
 * collective's deadline, an agreed zs_step failure, a stop after a
 * preemption warning, an end by signal) each rank that can writes
 * <report_dir>/rank-NNNNN.json (the rank in at least 5 digits) for the
 * launcher (tools/zs-run) to read: why the job ended, where, after which
 * step, and which peer it was waiting for. A rank killed with SIGKILL
 * writes nothing; the launcher then goes by mpirun's output.
 *
 * The file is one JSON object (docs/UNATTENDED.md; the field names are a
 * contract with the launcher):
 *   version 1, cause ("timeout" | "failed" | "stopped" | "terminated" |
 *   "config"),
 *   exit_code, rank, world_size, host, addresses [strings], pid,
 *   generation, step, last_committed_step (-1: none), checkpoint_dir,
 *   peer (-1: unknown), peer_host ("" unknown), peer_addresses [strings],
 *   op ("" none), message, time (unix seconds).
 *
 * This sits in core so that every layer can write one: the comm layer's
 * waits (comm/wait.c) know nothing of a context, so the zero layer registers
 * the job's identity here (zs_create), keeps its progress up to date (steps,
 * commits), and the writer takes a plain struct.
 *
 * Formatting and writing are async-signal-safe (no stdio, no allocation,
 * no locks: only open, write, fsync, rename, mkdir, close, getpid and
 * clock_gettime), so a signal handler can write a report before it ends the
 * process. The file appears whole or not at all: written to a temporary
 * name in the same directory, fsynced, renamed over rank-NNNNN.json, and
 * the directory fsynced. One job per process: the registration is
 * process-wide, as signals are. */
#ifndef ZS_CORE_EXIT_REPORT_H
#define ZS_CORE_EXIT_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "core/host_addresses.h"

typedef enum zs__exit_cause {
    ZS_EXIT_CAUSE_TIMEOUT = 0,   /* a collective's deadline (comm.timeout_s) */
    ZS_EXIT_CAUSE_FAILED = 1,    /* a runtime call failed on every rank (zs_step, zs_build) */
    ZS_EXIT_CAUSE_STOPPED = 2,   /* a stop signal honoured at an agreed step */
    ZS_EXIT_CAUSE_TERMINATED = 3, /* a signal ended the job without a checkpoint */
    ZS_EXIT_CAUSE_CONFIG = 4      /* the program refused its configuration (zs_report_config_error) */
} zs__exit_cause;

/* "timeout", "failed", "stopped", "terminated", "config". */
const char *zs__exit_cause_name(zs__exit_cause cause);

#define ZS_EXIT_DIR_BYTES 1024

/* Who this process is in the job, as registered at zs_create. */
typedef struct zs__exit_job {
    int rank;
    int world_size;
    int64_t generation;                       /* job.generation (0: unfenced) */
    char report_dir[ZS_EXIT_DIR_BYTES];       /* "" = no reports */
    char checkpoint_dir[ZS_EXIT_DIR_BYTES];
    zs__host_addresses self;
    /* [world_size] every rank's host, or NULL when unknown (peer_host is
     * then ""); owned by the registrant, which unregisters before freeing. */
    const zs__host_addresses *hosts;
} zs__exit_job;

/* What one report says beyond the job's identity. */
typedef struct zs__exit_report {
    zs__exit_cause cause;
    int exit_code;       /* ZS_TIMEOUT_EXIT_CODE, ZS_STOPPED_EXIT_CODE, ZS_TERMINATED_EXIT_CODE, 1 */
    int peer;            /* the rank waited for, or the silent one; -1 unknown */
    const char *op;      /* the collective or runtime call; NULL or "" for none */
    const char *message; /* the error text (at most ZS_EXIT_MESSAGE_MAX bytes are kept) */
} zs__exit_report;

#define ZS_EXIT_MESSAGE_MAX 2048
/* Room that always holds a formatted report (every string escaped at worst). */
#define ZS_EXIT_REPORT_BYTES 32768

/* Registers (copies) the job's identity; the step and last committed step
 * start at 0 and -1. A later registration replaces it. Not collective. */
void zs__exit_report_register(const zs__exit_job *job);
/* No more reports from this process (zs_destroy), and the hosts array
 * given at registration is no longer read. */
void zs__exit_report_unregister(void);
/* The job's progress, for the next report: optimizer steps applied, and the
 * last step committed to (or resumed from) a checkpoint, -1 if none. */
void zs__exit_report_set_step(int64_t step);
void zs__exit_report_set_committed(int64_t step);

/* The report as JSON text into out[0..cap) (NUL-terminated, truncated when
 * cap is too small; ZS_EXIT_REPORT_BYTES always suffices); returns the
 * length. `time` is unix seconds. Async-signal-safe; pure (tests call it). */
size_t zs__exit_report_format(char *out, size_t cap, const zs__exit_job *job, int64_t step,
                              int64_t last_committed, long pid, double time,
                              const zs__exit_report *report);

/* Writes this rank's report for the registered job, atomically (see the
 * top), creating the report directory (and missing parents) if needed.
 * Returns 0 when written (its path in path[0..cap) if path is not NULL),
 * 1 when there is nothing to write to (no job registered, or no report
 * directory), or -errno of the step that failed. Async-signal-safe. */
int zs__exit_report_write(const zs__exit_report *report, char *path, size_t cap);

/* 1 once zs__exit_report_write wrote a report for the registered job: the
 * rank's first verdict, which a later observer (comm/peer_watch.h) leaves
 * standing. Async-signal-safe. */
int zs__exit_report_written(void);

/* zs__exit_report_write from ordinary code: says where the report went
 * (INFO) or why it could not be written (WARN). Not async-signal-safe. */
void zs__exit_report_emit(const zs__exit_report *report);

/* The job's identity as the launcher's environment gives it, for a report
 * written before zs_create registered one (a configuration error): the
 * rank from OMPI_COMM_WORLD_RANK, PMIX_RANK or SLURM_PROCID (else 0), the
 * world size from OMPI_COMM_WORLD_SIZE or SLURM_NTASKS (else 0: unknown),
 * the report directory from ZS_REPORT_DIR ("" when unset: no report), the
 * generation from ZS_JOB_GENERATION (0 when unset or not a number), this
 * host's addresses, and no checkpoint directory or peers. Not collective;
 * reads the environment through core/env.h. */
void zs__exit_job_from_environment(zs__exit_job *job);

/* Writes a report for `job` instead of the registered one, at step 0 with
 * nothing committed, the same way and with the same return values as
 * zs__exit_report_write (1: `job` has no report directory). */
int zs__exit_report_write_for(const zs__exit_job *job, const zs__exit_report *report, char *path,
                              size_t cap);

#endif
