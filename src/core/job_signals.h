/* Signals that end a job: the preemption warning (job.stop_signal, SIGUSR1
 * by default: what Slurm's --signal=USR1@<seconds> sends) and SIGTERM (what
 * mpirun and Slurm send when they tear a job down, also after a rank died).
 *
 * The handlers only record: which signal came, how many, and (for SIGTERM)
 * when. The runtime acts on it at safe points:
 *   - every rank votes "stop" in the step agreement (zero/step.c) once
 *     either signal arrived, so one signal reaching one rank stops every
 *     rank at the same accumulation boundary, after a checkpoint;
 *   - after SIGTERM every wait of the comm layer ends at the SIGTERM's time
 *     plus job.term_grace_s at the latest (zs__signals_term_expired): if
 *     every rank is alive the agreed stop and its checkpoint fit in that
 *     grace; if a peer is dead, nobody waits out comm.timeout_s for it: the
 *     waiting rank writes its exit report ("terminated") and ends by SIGTERM
 *     (zs__signals_terminate);
 *   - a second signal (either kind; the same signal again within 1 s counts
 *     once, since a launcher and the scheduler often both forward one
 *     warning) ends the process from inside the handler: it writes the exit
 *     report (the writer is async-signal-safe), restores the default action
 *     and raises the signal again.
 *
 * SIGCONT is handled too, only to post an alarm (below).
 *
 * The state is process-wide, as signal dispositions are. Contexts install
 * and restore with a count: the first zs__signals_install saves the
 * program's handlers and installs these (clearing what an earlier context
 * saw); the last zs__signals_restore puts the program's back. */
#ifndef ZS_CORE_JOB_SIGNALS_H
#define ZS_CORE_JOB_SIGNALS_H

#include "zeroshard.h"

/* Installs the handlers (sigaction, SA_RESTART) for `stop_signal` (SIGUSR1
 * or SIGUSR2) and SIGTERM, or counts another user of them. stop_signal 0
 * (job.stop_signal = "none") installs nothing: the program keeps its own
 * handling of both; zs__signals_restore must still be called once. The
 * grace is the latest context's. */
zs_status zs__signals_install(int stop_signal, double term_grace_s);
void zs__signals_restore(void);

/* 1 once the stop signal or SIGTERM has arrived (sticky until the handlers
 * are installed anew). */
int zs__signals_stop_seen(void);
/* The signal number that arrived first (0: none), and its name
 * ("SIGUSR1", "SIGUSR2", "SIGTERM", "" for none). */
int zs__signals_first(void);
const char *zs__signals_name(int signal_number);

/* 1 when SIGTERM arrived more than job.term_grace_s ago: a wait that has
 * not finished must end the job (zs__signals_terminate) instead of waiting
 * on. Cheap enough for every poll of a wait. */
int zs__signals_term_expired(void);
/* After an agreed stop committed its checkpoint under SIGTERM: the grace
 * starts again from now, for zs_destroy's agreement that every rank is
 * leaving (a rank that died after the commit still ends the job soon). */
void zs__signals_term_regrace(void);
/* The configured grace in seconds (job.term_grace_s), for messages. */
double zs__signals_term_grace(void);

/* The alarm of the peer watch (comm/peer_watch.h): SIGCONT and SIGTERM,
 * the signals with which mpirun and Slurm begin to end a job (SIGCONT
 * first, to every rank, a second before SIGTERM), post it; they are
 * handled only when job.stop_signal is not "none" (SIGCONT's handler only
 * posts: the kernel has continued the process already). Waits up to
 * timeout_s for a post: 1 when one came (a signal, or
 * zs__signals_alarm_wake), 0 at the timeout, -1 when no handler was ever
 * installed. Posts made before the handlers' installation are dropped. */
int zs__signals_alarm_wait(double timeout_s);
void zs__signals_alarm_wake(void);
/* The signal that posted the alarm last (0: none yet), for messages. */
int zs__signals_alarm_signal(void);

/* Ends the process by SIGTERM with its default action: restores SIG_DFL,
 * unblocks it in this thread and raises it. Returns only where that did not
 * end the process (the caller then fails with its own status). */
void zs__signals_terminate(void);

#endif
