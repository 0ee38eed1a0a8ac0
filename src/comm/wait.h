/* Waiting for MPI requests with a deadline, and what happens at the deadline.
 *
 * Every wait of the MPI path goes through zs__comm_wait: it polls the
 * requests (MPI_Testsome) with a short spin and then sleeps that grow with the
 * time already waited, so a rank that waits for a slow or stopped peer does
 * not burn a core, and a wait that lasts no longer than a message transfer
 * pays at most a small fraction of it. A wait that sees no completion for
 * comm.timeout_s seconds is a timeout: the collective is reported (op,
 * sequence number, label, bytes, seconds waited, the peer it was waiting
 * for), the ranks that timed out exchange what they were waiting for, so the
 * message can name the rank that gave no sign at all, and then
 * comm.on_timeout decides: MPI_Abort with ZS_TIMEOUT_EXIT_CODE (mpirun takes
 * the whole job down), or ZS_ERR_TIMEOUT with the communicator marked failed
 * (every later call fails at once with the same message).
 *
 * The deadline measures the time without progress, not the collective's
 * length: a large all-gather over a slow network that keeps completing
 * messages never times out, a peer that stops does. */
#ifndef ZS_COMM_WAIT_H
#define ZS_COMM_WAIT_H

#include <mpi.h>

#include "comm/comm_impl.h"
#include "core/clock.h"

/* One outstanding request of a collective, and who is at its other end
 * (peer -1 when MPI's own collective hides it): a rank of the communicator
 * (messages name its world rank). */
typedef struct zs__pending {
    MPI_Request request;
    int peer;
    int receiving; /* 1: waiting for data from peer; 0: waiting for peer to take ours */
} zs__pending;

/* Message tags: each kind of collective has its own, and the collective's
 * sequence number and label are folded into the tag, so a rank that skipped
 * or added a collective, or runs another one under the same number (a
 * different unit, a barrier against an all-gather), never matches the
 * others' messages: it times out and the reports show the difference,
 * instead of reading the wrong data. Each kind of communicator (the world,
 * node and cross-node groups, which share the world's MPI communicator) has
 * a tag space of its own:
 *   tag = kind + 16 * (communicator kind + 3 * (hash of label and number mod period))
 * and timeout reports one fixed tag per communicator kind. Two groups of one
 * kind (node 0, node 1) never share a rank, so they never meet. */
typedef enum zs__tag_kind {
    ZS_TAG_BARRIER = 0,
    ZS_TAG_REDUCE_SCATTER = 1,
    ZS_TAG_ALL_GATHER = 2,
    ZS_TAG_EXCHANGE = 3,    /* all-gather of bytes (agreements) */
    ZS_TAG_BROADCAST = 4,
    ZS_TAG_FINGERPRINT = 5, /* comm.check_collectives */
    ZS_TAG_SCALARS = 6,     /* all-reduce of scalars */
    ZS_TAG_REPORT = 7,      /* timeout reports: one fixed tag per communicator kind */
    ZS_TAG_ALL_TO_ALL = 8,
    ZS_TAG_KINDS = 16       /* room per tag slot */
} zs__tag_kind;

int zs__comm_tag(const zs__comm *comm, zs__tag_kind kind, const zs__comm_call *call);

/* Sets the MPI communicator of host traffic (timeout reports, fingerprints)
 * and reads its tag limit. Called by an implementation after zs__comm_new. */
void zs__comm_set_host(zs__comm *comm, MPI_Comm host);

/* Waits until every request in p[0..n) completes (completed ones become
 * MPI_REQUEST_NULL). Returns ZS_ERR_COMM when MPI fails, and at a timeout
 * reports, then aborts the job or returns ZS_ERR_TIMEOUT per comm.on_timeout.
 * Once SIGTERM's grace has run out (core/job_signals.h) a wait that has not
 * finished ends the process instead (comm/terminated.h). Both write this
 * rank's exit report (core/exit_report.h). */
zs_status zs__comm_wait(zs__comm *comm, const zs__comm_call *call, zs__pending *p, int n);

/* The same for a single request. */
zs_status zs__comm_wait_one(zs__comm *comm, const zs__comm_call *call, MPI_Request *request,
                            int peer, int receiving);

/* The timeout path for waits that are not MPI requests (the NCCL
 * communicator's watchdog): reports `what`, exchanges reports with the other
 * ranks over the host communicator, marks the communicator failed and
 * applies comm.on_timeout. `peer` is -1 when unknown. */
zs_status zs__comm_timed_out(zs__comm *comm, const zs__comm_call *call, int peer, int receiving,
                             double waited_s, const char *what);

/* Waits for a request made before a communicator exists (MPI_Comm_idup in
 * zs_create), with comm.timeout_s and comm.on_timeout from `settings`;
 * `parent` is the communicator being duplicated, `what` names the step. */
zs_status zs__comm_wait_startup(MPI_Request *request, const zs__settings *settings,
                                MPI_Comm parent, const char *what);

/* The pause between two polls of a wait that started at `start`: none for
 * the first 50 us, a yield until 2 ms, then a sleep of about 1/16 of the time
 * waited so far, between 10 us and 1 ms. */
void zs__comm_backoff(double start);

/* The failure message of a collective whose MPI call returned rc. */
zs_status zs__mpi_fail(const zs__comm *comm, const zs__comm_call *call, const char *function,
                       int rc);

#endif
