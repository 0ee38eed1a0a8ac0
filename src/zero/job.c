/* The context as one process of an unattended job (see job.h).
 *
 * Floor (src/floors.txt): Owns zs__job (the ground holds it by value,
 * job.h); calls only the agreement helpers (agree.h) below it. The rooms
 * above read it through zs__job_stop_due, zs__job_save_due and
 * zs__job_generation.
 */
#include "zero/job.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/env.h"
#include "core/error.h"
#include "core/job_signals.h"
#include "core/launcher_death.h"
#include "core/log.h"
#include "core/number.h"
#include "zero/agree.h"
#include "zero/ground.h"

/* What every rank tells the others at zs_create: where it runs, and which
 * launch it belongs to. Plain bytes, the same layout on every rank. */
typedef struct rank_record {
    zs__host_addresses host;
    int64_t generation;
    zs__process_identity process; /* for the peer watch */
} rank_record;

/* This rank's generation and report directory (local; no communication). */
static zs_status read_identity(zs_ctx *zs) {
    zs__job *job = &zs->job;
    const zs__settings *s = &zs->settings;
    job->generation = s->job.generation;
    const char *text = zs__env_text(ZS_ENV_JOB_GENERATION);
    if (text) {
        int64_t value = 0;
        if (zs__number_integer(text, strlen(text), 0, INT64_MAX, &value) != ZS__NUMBER_OK)
            return zs__fail(ZS_ERR_CONFIG, "ZS_JOB_GENERATION=\"%s\" on rank %d is not an "
                            "integer >= 0 (the launch's job generation; zs-run sets it)", text,
                            zs->rank);
        job->generation = value;
    }
    const char *dir = zs__env_text(ZS_ENV_REPORT_DIR);
    int n = 0;
    if (dir)
        n = snprintf(job->report_dir, sizeof job->report_dir, "%s", dir);
    else if (s->job.report_dir[0])
        n = snprintf(job->report_dir, sizeof job->report_dir, "%s", s->job.report_dir);
    else if (s->checkpoint.dir[0])
        n = snprintf(job->report_dir, sizeof job->report_dir, "%s/reports", s->checkpoint.dir);
    if (n < 0 || (size_t)n >= sizeof job->report_dir)
        return zs__fail(ZS_ERR_CONFIG, "the exit report directory (%s) is longer than %zu bytes",
                        dir ? "ZS_REPORT_DIR" : s->job.report_dir[0] ? "job.report_dir"
                                                                      : "checkpoint.dir/reports",
                        sizeof job->report_dir - 1);
    return ZS_OK;
}

/* Every rank's host and generation, gathered once; the generations must
 * agree (an old launch's rank among a new launch's would be fenced by
 * one rule and not the other). The same outcome on every rank: each
 * decides from the same gathered records. */
static zs_status gather_hosts(zs_ctx *zs, zs__process_identity **processes) {
    /* Every rank's process too, for the peer watch (comm/peer_watch.h). */
    zs__job *job = &zs->job;
    rank_record mine;
    memset(&mine, 0, sizeof mine);
    zs__host_addresses_get(&mine.host);
    mine.generation = job->generation;
    zs__process_identity_get(&mine.process);
    rank_record *all = NULL;
    ZS_CHECK(zs__calloc_agreed(zs, (size_t)zs->world_size, sizeof *all,
                               "zs_create (every rank's host)", (void **)&all));
    zs_status st = zs__calloc_agreed(zs, (size_t)zs->world_size, sizeof *job->hosts,
                                     "zs_create (the hosts table)", (void **)&job->hosts);
    if (st == ZS_OK)
        st = zs__calloc_agreed(zs, (size_t)zs->world_size, sizeof **processes,
                               "zs_create (every rank's process)", (void **)processes);
    if (st == ZS_OK)
        st = zs__comm_all_gather_bytes(zs->comm, &mine, sizeof mine, all, "host addresses");
    for (int r = 0; st == ZS_OK && r < zs->world_size; r++) {
        job->hosts[r] = all[r].host;
        (*processes)[r] = all[r].process;
        if (all[r].generation != all[0].generation)
            st = zs__fail(ZS_ERR_MISMATCH,
                          "ranks disagree on the job generation: rank %d (on %s) has %lld but "
                          "rank 0 (on %s) has %lld (job.generation or ZS_JOB_GENERATION): ranks "
                          "of two launches met; end both and launch again",
                          r, all[r].host.host, (long long)all[r].generation, all[0].host.host,
                          (long long)all[0].generation);
    }
    free(all);
    return st;
}

zs_status zs__job_create(zs_ctx *zs) {
    zs__job *job = &zs->job;
    job->last_committed = -1;
    job->last_save_ns = zs__clock_ns();
    ZS_CHECK(zs__agree_status(zs, read_identity(zs), "zs_create (job identity)"));
    /* Armed early: a launcher that dies from here on takes this rank along. */
    const int armed = zs__launcher_death_arm();
    const zs__stop_signal which = zs->settings.job.stop_signal;
    zs_status st = zs__signals_install(which == ZS_STOP_SIGNAL_USR1   ? SIGUSR1
                                       : which == ZS_STOP_SIGNAL_USR2 ? SIGUSR2
                                                                      : 0,
                                       zs->settings.job.term_grace_s);
    if (st != ZS_OK) {
        zs__launcher_death_disarm();
    } else {
        job->created = 1;
    }
    ZS_CHECK(zs__agree_status(zs, st, "zs_create (signal handlers)"));
    ZS_CHECK(gather_hosts(zs, &job->processes));

    zs__exit_job identity;
    memset(&identity, 0, sizeof identity);
    identity.rank = zs->rank;
    identity.world_size = zs->world_size;
    identity.generation = job->generation;
    snprintf(identity.report_dir, sizeof identity.report_dir, "%s", job->report_dir);
    snprintf(identity.checkpoint_dir, sizeof identity.checkpoint_dir, "%s",
             zs->settings.checkpoint.dir);
    identity.self = job->hosts[zs->rank];
    identity.hosts = job->hosts;
    zs__exit_report_register(&identity);
    job->registered = 1;

    ZS_DEBUG("job: generation %lld, exit reports in '%s', stop signal %s, parent-death signal "
             "%s", (long long)job->generation, job->report_dir[0] ? job->report_dir : "(none)",
             which == ZS_STOP_SIGNAL_NONE ? "none (no handlers)"
             : which == ZS_STOP_SIGNAL_USR1 ? "SIGUSR1" : "SIGUSR2",
             armed ? "armed" : "not armed");
    return ZS_OK;
}

zs_status zs__job_watch(zs_ctx *zs) {
    zs__job *job = &zs->job;
    /* The handlers post the watch's alarm; without them nothing would. */
    zs_status st = ZS_OK;
    if (zs->settings.job.stop_signal != ZS_STOP_SIGNAL_NONE && job->processes &&
        !zs__env_flag(ZS_ENV_PEER_WATCH_OFF))
        st = zs__peer_watch_start(zs->rank, zs->world_size, job->processes, job->report_dir,
                                  &job->watch);
    return zs__agree_status(zs, st, "zs_create (peer watch)");
}

void zs__job_unwatch(zs_ctx *zs) {
    zs__peer_watch_stop(zs->job.watch);
    zs->job.watch = NULL;
}

void zs__job_destroy(zs_ctx *zs) {
    zs__job *job = &zs->job;
    zs__job_unwatch(zs);
    free(job->processes);
    job->processes = NULL;
    if (job->registered) zs__exit_report_unregister();
    job->registered = 0;
    if (job->created) {
        zs__signals_restore();
        zs__launcher_death_disarm();
        job->created = 0;
    }
    free(job->hosts);
    job->hosts = NULL;
}

void zs__job_votes(const zs_ctx *zs, double *stop, double *save) {
    const zs__job *job = &zs->job;
    *stop = !job->stop && zs__signals_stop_seen() ? 1.0 : 0.0;
    const double every = zs->settings.checkpoint.every_seconds;
    *save = every > 0 && 1e-9 * (double)(zs__clock_ns() - job->last_save_ns) >= every ? 1.0 : 0.0;
}

void zs__job_decide(zs_ctx *zs, double stop_ranks, double save_ranks) {
    zs__job *job = &zs->job;
    job->stop_ranks = (int)stop_ranks;
    job->stop_due = !job->stop && stop_ranks > 0;
    job->save_due = save_ranks > 0;
}

void zs__job_committed(zs_ctx *zs, int64_t step) {
    zs->job.last_committed = step;
    zs->job.last_save_ns = zs__clock_ns();
    zs__exit_report_set_committed(step);
}

void zs__job_progress(const zs_ctx *zs) { zs__exit_report_set_step(zs->step); }

void zs__job_stopped(zs_ctx *zs, int saving, zs_status saved) {
    zs__job *job = &zs->job;
    job->stop_due = 0;
    const int committed = saving && saved == ZS_OK;
    job->stop = committed ? ZS_STOPPED_EXIT_CODE : ZS_TERMINATED_EXIT_CODE;
    if (saving && !committed) return;
    const int mine = zs__signals_first();
    char where[600];
    if (committed)
        snprintf(where, sizeof where, "the checkpoint of step %lld is committed in %s",
                 (long long)zs->step, zs->settings.checkpoint.dir);
    else
        snprintf(where, sizeof where, "no checkpoint was saved (checkpoint.dir is empty)");
    char message[900];
    snprintf(message, sizeof message,
             "stopped after optimizer step %lld: %d of %d rank%s received a stop signal (this "
             "rank: %s); %s; exit with %d (%s)",
             (long long)zs->step, job->stop_ranks, zs->world_size, zs->world_size == 1 ? "" : "s",
             mine ? zs__signals_name(mine) : "none", where, job->stop,
             committed ? "ZS_STOPPED_EXIT_CODE" : "ZS_TERMINATED_EXIT_CODE");
    ZS_INFO("%s", message);
    zs__exit_report_set_step(zs->step);
    const zs__exit_report report = {ZS_EXIT_CAUSE_STOPPED, job->stop, -1, "zs_step", message};
    zs__exit_report_emit(&report);
    /* Under SIGTERM the grace starts again: zs_destroy's agreement that
     * every rank leaves still has a deadline short of comm.timeout_s. */
    zs__signals_term_regrace();
}

void zs__job_failed(zs_ctx *zs, const char *op, zs_status status) {
    /* A deadline wrote its own report where it happened, naming the peer;
     * the calls refused after it fail with its status too. */
    if (status == ZS_OK || status == ZS_ERR_TIMEOUT) return;
    zs__exit_report_set_step(zs->step);
    const zs__exit_report report = {ZS_EXIT_CAUSE_FAILED, 1, -1, op, zs_last_error()};
    zs__exit_report_emit(&report);
}

int zs_stop_requested(const zs_ctx *zs) { return zs ? zs->job.stop : 0; }

int64_t zs_last_committed_step(const zs_ctx *zs) { return zs ? zs->job.last_committed : -1; }

int zs__job_stop_due(const zs_ctx *zs) { return zs->job.stop_due; }
int zs__job_save_due(const zs_ctx *zs) { return zs->job.save_due; }
int64_t zs__job_generation(const zs_ctx *zs) { return zs->job.generation; }
