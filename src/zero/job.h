/* The context as one process of a job that may be stopped, ended or
 * relaunched without a person (issue 29): the stop and termination signals
 * (core/job_signals.h) turned into an agreed stop, the time-based
 * checkpoint timer, the job's generation, the exit reports' identity
 * (core/exit_report.h) with every rank's host, and the parent-death signal
 * (core/launcher_death.h). The checkpoint policy that acts on the agreed
 * decisions (a save, then the stop) is src/api.c's; the fence on the
 * generation is src/checkpoint/fence.c's. */
#ifndef ZS_ZERO_JOB_H
#define ZS_ZERO_JOB_H

#include <stdint.h>

#include "core/exit_report.h"
#include "core/host_addresses.h"
#include "core/peer_watch.h"
#include "zeroshard.h"

typedef struct zs__job {
    int created;              /* zs__job_create got as far as installing (destroy undoes) */
    int registered;           /* this context's identity is the exit reports' */
    int64_t generation;       /* job.generation, or ZS_JOB_GENERATION; agreed at create */
    char report_dir[ZS_EXIT_DIR_BYTES]; /* ZS_REPORT_DIR, job.report_dir or <checkpoint.dir>/reports */
    zs__host_addresses *hosts; /* [world_size] every rank's host, gathered at create */
    zs__process_identity *processes; /* [world_size] every rank's process, gathered at create */
    zs__peer_watch *watch;    /* ends this rank at once when a peer died (core/peer_watch.h) */
    /* Agreed at the last accumulation boundary (the same on every rank). */
    int stop_due;             /* ranks had a stop signal: save, then stop, after this step */
    int stop_ranks;           /* how many */
    int save_due;             /* some rank's checkpoint.every_seconds ran out */
    int stop;                 /* zs_stop_requested: 0, ZS_STOPPED_ or ZS_TERMINATED_EXIT_CODE */
    int64_t last_committed;   /* zs_last_committed_step: -1 none */
    uint64_t last_save_ns;    /* zs__clock_ns of the last commit (or create) */
} zs__job;

/* zs_create, once the runtime's communicator exists: reads the generation
 * and the report directory, arms the parent-death signal, installs the
 * signal handlers, all-gathers every rank's host (its name and addresses),
 * generation (which must be equal) and process, and registers the job for
 * exit reports. Collective; fails on every rank alike. */
zs_status zs__job_create(zs_ctx *zs);
/* Starts the peer watch (core/peer_watch.h) once the communicator is final,
 * when the signal handlers are installed; and stops it at the start of
 * zs_destroy, before the agreement where ranks leave legitimately (also
 * done by zs__job_destroy). */
zs_status zs__job_watch(zs_ctx *zs);
void zs__job_unwatch(zs_ctx *zs);
/* zs_destroy: the reports unregistered, the program's signal handling and
 * parent-death signal put back. Safe on a context whose create failed. */
void zs__job_destroy(zs_ctx *zs);

/* This rank's votes for the step agreement (zero/step.c), 0 or 1 each:
 * a stop signal arrived (and no stop was agreed yet); checkpoint.every_seconds
 * has run out since the last commit. */
void zs__job_votes(const zs_ctx *zs, double *stop, double *save);
/* At an accumulation boundary, the agreed sums of every rank's votes: what
 * the checkpoint policy (src/api.c) does after this step. */
void zs__job_decide(zs_ctx *zs, double stop_ranks, double save_ranks);

/* A checkpoint of `step` was committed (zs_save) or resumed from: the
 * timer restarts and the exit reports name it. */
void zs__job_committed(zs_ctx *zs, int64_t step);
/* The optimizer steps applied, for the exit reports. */
void zs__job_progress(const zs_ctx *zs);
/* The agreed stop after a step: `saving` says whether a checkpoint was to
 * be saved for it (checkpoint.dir is set) and `saved` how that went. Sets
 * zs_stop_requested; writes the exit report ("stopped") unless the save
 * failed (zs_step's failure then writes "failed"). */
void zs__job_stopped(zs_ctx *zs, int saving, zs_status saved);
/* A runtime call (`op`) failed on every rank with `status` (its message is
 * the last error): the exit report ("failed"). A deadline's own report
 * (written by the comm layer) is not overwritten. */
void zs__job_failed(zs_ctx *zs, const char *op, zs_status status);

/* What the rooms above read of the job (src/api.c's checkpoint policy,
 * src/checkpoint's fence): the agreed decisions of the last accumulation
 * boundary (a stop after a save; a save because checkpoint.every_seconds
 * ran out) and the job's generation (0 or less: none). */
int zs__job_stop_due(const zs_ctx *zs);
int zs__job_save_due(const zs_ctx *zs);
int64_t zs__job_generation(const zs_ctx *zs);

#endif
