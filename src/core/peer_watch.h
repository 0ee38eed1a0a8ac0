/* The peer watch: a rank whose peer died ends at once, with an exit report
 * that names the dead rank, instead of a second or two later without one
 * (issue 38).
 *
 * When a rank dies, mpirun (Open MPI 4.1) signals the other ranks in steps:
 * SIGCONT at once to the ranks of its own node (those under a remote daemon
 * later), SIGTERM a second later (odls_base_sigkill_timeout), SIGKILL a
 * second after that; slurmstepd sends SIGCONT and SIGTERM together. A rank
 * that handles SIGTERM (to vote for a checkpoint within job.term_grace_s: a
 * preemption) was then ended only by the SIGKILL, two seconds after the
 * death, and wrote no report. The watch is a thread that closes the gap
 * without any message over MPI (an MPI call that meets a dead peer's
 * broken connection can block inside Open MPI's TCP transport, as seen
 * here, so the watch makes none):
 *   - it checks the ranks of its own node (core/process_identity.h: /proc
 *     tells whether their processes run) every IDLE_POLL_S, and every few
 *     milliseconds for a while after SIGCONT or SIGTERM (the signal
 *     handlers' alarm, core/job_signals.h): a gone process is proof;
 *   - for ten seconds after a signal it also reads the exit report
 *     directory, often at first and then at every check (shared between
 *     nodes when it lies in a shared checkpoint.dir, as checkpoints
 *     need): a new report of another rank with a cause other
 *     than "stopped" (a neighbour of the dead rank that found the proof, a
 *     rank that failed) means the job is ending abnormally.
 * With either, this rank writes its exit report (cause "terminated", the
 * dead rank as peer), says so in the log, and ends by SIGTERM's default
 * action, as a wait does when the grace runs out (comm/terminated.h).
 * Without (every rank alive: a preemption, where every rank got SIGTERM; a
 * SIGCONT of job control) nothing happens and the preemption vote goes on.
 * A rank that already wrote a report (a deadline, an agreed failure) is
 * left to its own path: its report says more.
 *
 * The watch runs between zs_create and the start of zs_destroy (whose
 * agreement is where ranks leave legitimately, so a gone neighbour before
 * it is always a death); never with job.stop_signal = "none" (no
 * handlers), on one rank, or with ZS_PEER_WATCH_OFF=1 (tests). A rank
 * alone on its node whose report directory is not shared cannot be seen
 * by anyone: the others then end by the grace or mpirun's SIGKILL. */
#ifndef ZS_CORE_PEER_WATCH_H
#define ZS_CORE_PEER_WATCH_H

#include "core/process_identity.h"
#include "zeroshard.h"

typedef struct zs__peer_watch zs__peer_watch;

/* Starts the thread. `peers` holds every rank's identity ([world_size],
 * copied); `report_dir` the exit report directory ("" for none; copied).
 * *out stays NULL when there is nothing to watch (one rank). Call it only
 * while the signal handlers are installed, after the exit report's job is
 * registered (the thread writes reports). */
zs_status zs__peer_watch_start(int rank, int world_size, const zs__process_identity *peers,
                               const char *report_dir, zs__peer_watch **out);
/* Stops and joins the thread; NULL is a no-op. */
void zs__peer_watch_stop(zs__peer_watch *watch);

#endif
