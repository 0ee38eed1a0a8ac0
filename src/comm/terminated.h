/* The end of a wait after SIGTERM's grace (core/job_signals.h): every wait
 * of the comm layer (comm/wait.c, the NCCL path) checks
 * zs__signals_term_expired while it polls, and when it is set calls this
 * instead of waiting on for a peer that, after a SIGTERM, is most likely
 * gone (mpirun and Slurm send SIGTERM when they tear a job down after a
 * rank died). */
#ifndef ZS_COMM_TERMINATED_H
#define ZS_COMM_TERMINATED_H

#include "comm/comm_impl.h"

/* Logs the collective (op, number, label) and the peer it waited for
 * (`peer` -1: unknown; `what` may add detail or be NULL), writes this
 * rank's exit report (cause "terminated", ZS_TERMINATED_EXIT_CODE), marks
 * the communicator failed and ends the process by SIGTERM with its default
 * action. Returns ZS_ERR_TIMEOUT with that message only where the signal
 * could not end the process. */
zs_status zs__comm_terminated(zs__comm *comm, const zs__comm_call *call, int peer, int receiving,
                              const char *what);

#endif
