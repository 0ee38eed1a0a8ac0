/* Ending the job from a wait after SIGTERM's grace (see terminated.h).
 *
 * Why the process ends by SIGTERM (its default action, raised again) and
 * not by MPI_Abort(ZS_TERMINATED_EXIT_CODE): a SIGTERM usually reaches
 * every rank at once (mpirun forwarding it, Slurm signalling the step), so
 * their graces expire together, and Open MPI 4.1's mpirun was seen to crash
 * or hang when several ranks call MPI_Abort at the same time (comm/wait.c
 * picks one aborter for that reason, which needs an exchange that a dead
 * peer would stall). A rank that dies of SIGTERM is what mpirun handles
 * every day: it reports "exited on signal 15" and takes the rest down. The
 * exit report carries the cause and ZS_TERMINATED_EXIT_CODE for the
 * launcher; the shell sees 143 (128 + SIGTERM).
 *
 * Floor (src/floors.txt): calls nothing of comm/; the waits call it.
 */
#include "comm/terminated.h"

#include <inttypes.h>
#include <stdio.h>

#include "core/error.h"
#include "core/exit_report.h"
#include "core/job_signals.h"
#include "core/log.h"

zs_status zs__comm_terminated(zs__comm *comm, const zs__comm_call *call, int peer, int receiving,
                              const char *what) {
    peer = peer >= 0 ? zs__comm_host_rank(comm, peer) : -1; /* world ranks from here on */
    char waiting[96];
    if (peer < 0)
        snprintf(waiting, sizeof waiting, "for the other ranks");
    else
        snprintf(waiting, sizeof waiting, receiving ? "for rank %d to send its data"
                                                    : "for rank %d to take this rank's data",
                 peer);
    snprintf(comm->failure, sizeof comm->failure,
             "%s #%" PRIu64 " of '%s'%s on rank %d was still waiting %s%s%s when the grace after "
             "SIGTERM ran out (job.term_grace_s = %g): a peer is dead or stopped, so the job "
             "ends now instead of waiting out comm.timeout_s = %.0f s for it; a checkpoint "
             "not committed by now is not (commits are atomic: the last committed step stays "
             "the one to resume from)",
             call->op, call->seq, call->label, call->in ? call->in : "", comm->world_rank,
             waiting, what && *what ? ": " : "", what ? what : "", zs__signals_term_grace(),
             comm->timeout_s);
    comm->failed = ZS_ERR_TIMEOUT;
    ZS_LOG_ERROR_("%s", comm->failure);
    const zs__exit_report report = {ZS_EXIT_CAUSE_TERMINATED, ZS_TERMINATED_EXIT_CODE, peer,
                                    call->op, comm->failure};
    zs__exit_report_emit(&report);
    fflush(NULL);
    zs__signals_terminate();
    return zs__fail(ZS_ERR_TIMEOUT, "%s", comm->failure);
}
