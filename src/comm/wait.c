/* Waits with deadlines, timeout reports and comm.on_timeout (see wait.h).
 *
 * Floor (src/floors.txt): owns nothing; calls terminated.c below it.
 */
#include "comm/wait.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/terminated.h"
#include "core/error.h"
#include "core/exit_report.h"
#include "core/job_signals.h"
#include "core/log.h"

/* The most requests one wait handles: a ring step has two, a dissemination
 * round two, a broadcast a parent and log2(size) children. */
enum { WAIT_MAX = 64 };

/* What a timed-out rank tells every other rank. Sent as bytes: every rank
 * runs the same build, so the layout is the same. */
typedef struct timeout_report {
    int32_t rank;      /* world ranks */
    int32_t peer;      /* the rank it waited for; -1 when unknown */
    int32_t receiving;
    int32_t pad;
    uint64_t seq;
    double waited_s;
    char op[24];
    char label[64];
} timeout_report;

/* Reports stay in flight after the timed-out call returns (a send buffer
 * must outlive its request), so they live here, not on the stack: a process
 * times out once per kind of communicator (a failed communicator, and every
 * one of its family, refuses every call afterwards). */
static timeout_report g_outgoing[ZS_COMM_KIND_COUNT];

void zs__comm_backoff(double start) {
    const double waited = zs__clock_s() - start;
    /* A message between ranks of one node lands within microseconds: spin.
     * Then yield, which costs nothing when the core has nothing else to do
     * and lets an oversubscribed peer run when it does; 2 ms of it covers a
     * segment's transfer (bench/comm measured the ring's large all-gathers
     * ~8% slower when sleeps began at 0.5 ms). Past that the wait is for a
     * peer that is busy or gone: sleep for a sixteenth of the time waited so
     * far, so the latency added is at most ~6% of the wait, and never more
     * than 1 ms, which keeps a long wait near 0% CPU. */
    if (waited < 50e-6) return;
    if (waited < 2e-3) {
        sched_yield();
        return;
    }
    double pause = waited / 16;
    if (pause < 10e-6) pause = 10e-6;
    if (pause > 1e-3) pause = 1e-3;
    struct timespec ts = {0, (long)(pause * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int zs__comm_tag(const zs__comm *comm, zs__tag_kind kind, const zs__comm_call *call) {
    const int space = (int)comm->kind;
    if (kind == ZS_TAG_REPORT) return (int)kind + ZS_TAG_KINDS * space;
    /* FNV-1a of the label, mixed with the number: equal on every rank for
     * the same collective, different (modulo collisions) for another one. */
    uint64_t h = 1469598103934665603ull;
    /* Fingerprints are how ranks learn that their labels differ: their
     * messages must match whatever the labels. */
    if (kind != ZS_TAG_FINGERPRINT)
        for (const char *c = call->label; c && *c; c++)
            h = (h ^ (unsigned char)*c) * 1099511628211ull;
    h ^= call->seq * 0x9E3779B97F4A7C15ull;
    const int slot = space + ZS_COMM_KIND_COUNT * (int)(h % (uint64_t)comm->tag_period);
    return (int)kind + ZS_TAG_KINDS * slot;
}

void zs__comm_set_host(zs__comm *comm, MPI_Comm host) {
    comm->host = host;
    int *ub = NULL, found = 0;
    const int per_slot = ZS_TAG_KINDS * ZS_COMM_KIND_COUNT;
    if (host != MPI_COMM_NULL && MPI_Comm_get_attr(host, MPI_TAG_UB, &ub, &found) == MPI_SUCCESS &&
        found && ub && *ub / per_slot > comm->tag_period)
        comm->tag_period = *ub / per_slot - 1;
}

static void copy_text(char *out, size_t capacity, const char *text) {
    snprintf(out, capacity, "%s", text ? text : "");
}

/* What one rank was waiting for, as a sentence fragment; `peer` is a world
 * rank. */
static void describe_wait(char *out, size_t capacity, int peer, int receiving) {
    if (peer < 0)
        snprintf(out, capacity, "for the other ranks (MPI's own collective does not say which; "
                                "comm.reduce_scatter/all_gather = \"ring\" name the peer)");
    else if (receiving)
        snprintf(out, capacity, "for rank %d to send its data", peer);
    else
        snprintf(out, capacity, "for rank %d to take this rank's data", peer);
}

/* Tells every other rank what this one waited for, then listens for the
 * same from the others for a grace period, so that every rank that timed
 * out can name the ranks that gave no sign: those are stopped, dead, or
 * somewhere else in the program. Writes the findings to `out`. */
/* The member of `comm` that is world rank `world`, or -1. */
static int member_of(const zs__comm *comm, int world) {
    if (!comm->world_of) return world >= 0 && world < comm->size ? world : -1;
    for (int r = 0; r < comm->size; r++)
        if (comm->world_of[r] == world) return r;
    return -1;
}

static int exchange_reports(zs__comm *comm, const zs__comm_call *call, int peer, int receiving,
                            double waited_s, char *out, size_t capacity, int *silent_rank) {
    out[0] = '\0';
    *silent_rank = -1; /* the first (world) rank that sent no report */
    int lowest = comm->world_rank; /* the lowest (world) rank known to have timed out */
    if (comm->host == MPI_COMM_NULL || comm->size < 2) return lowest;
    const int n = comm->size;
    const int tag = zs__comm_tag(comm, ZS_TAG_REPORT, call);
    timeout_report *outgoing = &g_outgoing[comm->kind];
    *outgoing = (timeout_report){.rank = comm->world_rank, .peer = peer, .receiving = receiving,
                                 .seq = call->seq, .waited_s = waited_s};
    copy_text(outgoing->op, sizeof outgoing->op, call->op);
    copy_text(outgoing->label, sizeof outgoing->label, call->label);
    for (int r = 0; r < n; r++) {
        if (r == comm->rank) continue;
        MPI_Request request;
        if (MPI_Isend(outgoing, (int)sizeof *outgoing, MPI_BYTE, zs__comm_host_rank(comm, r), tag,
                      comm->host, &request) == MPI_SUCCESS)
            MPI_Request_free(&request);
    }
    /* Ranks stuck in the same collective time out within milliseconds of
     * each other (they entered it together); the grace covers that and
     * message latency, and stays short next to the deadline. */
    double grace = comm->timeout_s / 4;
    if (grace < 0.5) grace = 0.5;
    if (grace > 2.0) grace = 2.0;
    unsigned char heard[4096] = {0};
    timeout_report listed[8];
    int listed_count = 0, heard_count = 0;
    const double start = zs__clock_s();
    while (zs__clock_s() - start < grace && heard_count < n - 1) {
        int flag = 0;
        MPI_Status status;
        if (MPI_Iprobe(MPI_ANY_SOURCE, tag, comm->host, &flag, &status) != MPI_SUCCESS)
            break;
        if (!flag) {
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
            continue;
        }
        timeout_report in;
        if (MPI_Recv(&in, (int)sizeof in, MPI_BYTE, status.MPI_SOURCE, tag, comm->host,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
            break;
        if (status.MPI_SOURCE < lowest) lowest = status.MPI_SOURCE;
        const int from = member_of(comm, status.MPI_SOURCE);
        if (from >= 0 && from < (int)sizeof heard * 8 && !(heard[from / 8] & (1u << (from % 8)))) {
            heard[from / 8] |= (unsigned char)(1u << (from % 8));
            heard_count++;
            in.op[sizeof in.op - 1] = in.label[sizeof in.label - 1] = '\0';
            if (listed_count < (int)(sizeof listed / sizeof listed[0])) listed[listed_count++] = in;
        }
    }
    size_t used = 0;
#define APPEND(...)                                                                     \
    do {                                                                                \
        if (used < capacity) {                                                          \
            int appended_ = snprintf(out + used, capacity - used, __VA_ARGS__);         \
            if (appended_ > 0) used += (size_t)appended_;                               \
        }                                                                               \
    } while (0)
    int out_of_step = -1;
    for (int i = 0; i < listed_count; i++) {
        char wait[160];
        describe_wait(wait, sizeof wait, listed[i].peer, listed[i].receiving);
        const int same = listed[i].seq == call->seq && strcmp(listed[i].op, outgoing->op) == 0 &&
                         strcmp(listed[i].label, outgoing->label) == 0;
        if (!same && out_of_step < 0) out_of_step = listed[i].rank;
        APPEND("; rank %d timed out too, in %s%s #%" PRIu64 " of '%s', waiting %s", listed[i].rank,
               same ? "the same collective, " : "a DIFFERENT collective, ", listed[i].op,
               listed[i].seq, listed[i].label, wait);
    }
    if (out_of_step >= 0)
        APPEND("; the ranks are out of step: rank %d is in another collective than this one "
               "(every rank must make the same collective calls in the same order; "
               "comm.check_collectives = true finds the first difference)",
               out_of_step);
    if (n <= (int)sizeof heard * 8) {
        int silent = 0, first_silent = -1;
        char names[256] = "";
        size_t names_used = 0;
        for (int r = 0; r < n; r++) {
            if (r == comm->rank || (heard[r / 8] & (1u << (r % 8)))) continue;
            if (silent == 0) first_silent = zs__comm_host_rank(comm, r);
            if (silent < 16 && names_used < sizeof names) {
                int w = snprintf(names + names_used, sizeof names - names_used, "%s%d",
                                 silent ? ", " : "", zs__comm_host_rank(comm, r));
                if (w > 0) names_used += (size_t)w;
            }
            silent++;
        }
        *silent_rank = first_silent;
        if (silent > 0)
            APPEND("; no report from rank%s %s%s within %.1f s: %s stopped, dead, or not in this "
                   "collective (a rank that left the training loop early, or called zs_save or "
                   "zs_destroy alone); look at rank %d first",
                   silent == 1 ? "" : "s", names, silent > 16 ? " and more" : "", grace,
                   silent == 1 ? "it is" : "they are", first_silent);
        else if (out_of_step < 0)
            APPEND("; every other rank timed out too, in this collective");
    }
#undef APPEND
    return lowest;
}

zs_status zs__comm_timed_out(zs__comm *comm, const zs__comm_call *call, int peer, int receiving,
                             double waited_s, const char *what) {
    /* From here on ranks are world ranks. */
    peer = peer >= 0 ? zs__comm_host_rank(comm, peer) : -1;
    char wait[160];
    describe_wait(wait, sizeof wait, peer, receiving);
    /* Said at once, in case the reports below never come (a rank killed
     * meanwhile); the full diagnosis follows as an error. */
    ZS_WARN("%s #%" PRIu64 " of '%s'%s timed out after %.1f s waiting %s; asking the other ranks "
            "what they wait for", call->op, call->seq, call->label, call->in, waited_s, wait);
    char reports[1200];
    int silent = -1;
    const int aborter = exchange_reports(comm, call, peer, receiving, waited_s, reports,
                                         sizeof reports, &silent);
    const int abort_job = comm->on_timeout == ZS_TIMEOUT_ABORT;
    snprintf(comm->failure, sizeof comm->failure,
             "%s #%" PRIu64 " of '%s'%s (%" PRIu64 " bytes) on rank %d timed out: %s%sno "
             "progress for %.1f s (comm.timeout_s = %.0f) waiting %s%s; %s",
             call->op, call->seq, call->label, call->in, call->bytes, comm->world_rank,
             what ? what : "",
             what && *what ? ", " : "", waited_s, comm->timeout_s, wait, reports,
             abort_job ? "aborting the job (comm.on_timeout = \"abort\"; exit code 75)"
                       : "the context is unusable: destroy it and end the job without "
                         "MPI_Finalize, which waits for every rank (comm.on_timeout = \"return\")");
    comm->failed = ZS_ERR_TIMEOUT;
    ZS_LOG_ERROR_("%s", comm->failure);
    /* The exit report (core/exit_report.h) names the rank that sent no
     * report where there is one (the stopped or dead one), else the one
     * this rank waited for; written before MPI_Abort ends the job. */
    const zs__exit_report report = {ZS_EXIT_CAUSE_TIMEOUT, ZS_TIMEOUT_EXIT_CODE,
                                    silent >= 0 ? silent : peer, call->op, comm->failure};
    zs__exit_report_emit(&report);
    if (abort_job) {
        /* One rank ends the job: the lowest that timed out. Open MPI 4.1's
         * mpirun was seen to crash or hang when several ranks call MPI_Abort
         * at once, or when one aborts after another finalized (which is why
         * zs_destroy is collective). The others stay quiet while it does,
         * and abort themselves only if nothing happened within seconds (the
         * chosen rank may have been killed meanwhile). Before aborting, the
         * chosen rank lingers briefly: the other stuck ranks finish their
         * reports within moments of this one (their deadlines expired
         * together), and MPI_Abort would cut them off. */
        fflush(NULL);
        struct timespec linger = {aborter == comm->world_rank ? 0 : 5,
                                  aborter == comm->world_rank ? 500000000 : 0};
        while (nanosleep(&linger, &linger) != 0 && errno == EINTR) {
        }
        MPI_Abort(MPI_COMM_WORLD, ZS_TIMEOUT_EXIT_CODE);
    }
    return zs__fail(ZS_ERR_TIMEOUT, "%s", comm->failure);
}

/* Gives up on requests that will not complete: point-to-point receives are
 * cancelled, and point-to-point requests freed (MPI finishes or drops them
 * in the background). A request of MPI's own non-blocking collectives (peer
 * -1: MPI_Iallgather, MPI_Ireduce_scatter_block) may be neither cancelled
 * nor freed (MPI 3.1, 5.12: erroneous; Open MPI's answer is an invalid
 * request error on MPI_COMM_WORLD, which is fatal), so it is left as it is:
 * the communicator is marked failed and never waits on it again. */
static void abandon(zs__pending *p, int n) {
    for (int i = 0; i < n; i++) {
        if (p[i].request == MPI_REQUEST_NULL || p[i].peer < 0) continue;
        if (p[i].receiving) MPI_Cancel(&p[i].request);
        MPI_Request_free(&p[i].request);
    }
}

zs_status zs__comm_wait(zs__comm *comm, const zs__comm_call *call, zs__pending *p, int n) {
    ZS_ASSERT(n >= 0 && n <= WAIT_MAX);
    MPI_Request requests[WAIT_MAX];
    int done[WAIT_MAX], left = 0;
    for (int i = 0; i < n; i++) {
        requests[i] = p[i].request;
        if (requests[i] != MPI_REQUEST_NULL) left++;
    }
    double start = zs__clock_s();
    while (left > 0) {
        int completed = 0;
        MPI_Status statuses[WAIT_MAX];
        int rc = MPI_Testsome(n, requests, &completed, done, statuses);
        if (rc != MPI_SUCCESS) {
            for (int i = 0; i < n; i++) p[i].request = requests[i];
            /* The request's own error says more than MPI_ERR_IN_STATUS. */
            const char *function = "MPI_Testsome";
            if (rc == MPI_ERR_IN_STATUS)
                for (int k = 0; k < completed && k < n; k++)
                    if (statuses[k].MPI_ERROR != MPI_SUCCESS) {
                        rc = statuses[k].MPI_ERROR;
                        function = p[done[k]].receiving ? "a receive" : "a send";
                        break;
                    }
            zs__error_breadcrumb(__FILE__, __LINE__);
            return zs__mpi_fail(comm, call, function, rc);
        }
        if (completed == MPI_UNDEFINED) break; /* all null */
        if (completed > 0) {
            left -= completed;
            start = zs__clock_s(); /* progress restarts the deadline */
            continue;
        }
        const double waited = zs__clock_s() - start;
        /* After SIGTERM no wait outlasts job.term_grace_s (comm/terminated.h). */
        const int terminated = zs__signals_term_expired();
        if (waited > comm->timeout_s || terminated) {
            /* Report the first request still pending: in every algorithm
             * here it is the one the next step depends on. */
            int first = 0;
            for (int i = 0; i < n; i++)
                if (requests[i] != MPI_REQUEST_NULL) {
                    first = i;
                    break;
                }
            for (int i = 0; i < n; i++) p[i].request = requests[i];
            abandon(p, n);
            if (terminated)
                return zs__comm_terminated(comm, call, p[first].peer, p[first].receiving, NULL);
            return zs__comm_timed_out(comm, call, p[first].peer, p[first].receiving, waited, "");
        }
        zs__comm_backoff(start);
    }
    for (int i = 0; i < n; i++) p[i].request = MPI_REQUEST_NULL;
    return ZS_OK;
}

zs_status zs__comm_wait_startup(MPI_Request *request, const zs__settings *settings,
                                MPI_Comm parent, const char *what) {
    const double timeout = (double)settings->comm.timeout_s;
    double start = zs__clock_s();
    for (;;) {
        int flag = 0;
        int rc = MPI_Test(request, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return zs__fail(ZS_ERR_COMM, "%s failed: MPI error code %d", what, rc);
        if (flag) return ZS_OK;
        const double waited = zs__clock_s() - start;
        if (waited > timeout) break;
        zs__comm_backoff(start);
    }
    int rank = -1, size = 0;
    MPI_Comm_rank(parent, &rank);
    MPI_Comm_size(parent, &size);
    zs_status st = zs__fail(ZS_ERR_TIMEOUT,
                            "%s on rank %d of %d timed out: no progress for %.0f s "
                            "(comm.timeout_s): some rank has not called zs_create (it may have "
                            "failed before it, be stopped, or be running another program); %s",
                            what, rank, size, timeout,
                            settings->comm.on_timeout == ZS_TIMEOUT_ABORT
                                ? "aborting the job (comm.on_timeout = \"abort\"; exit code 75)"
                                : "end the job without MPI_Finalize (comm.on_timeout = \"return\")");
    ZS_LOG_ERROR_("%s", zs_last_error());
    if (settings->comm.on_timeout == ZS_TIMEOUT_ABORT) {
        fflush(NULL);
        MPI_Abort(MPI_COMM_WORLD, ZS_TIMEOUT_EXIT_CODE);
    }
    return st;
}

zs_status zs__comm_agree_startup(MPI_Comm comm, const zs__settings *settings, zs_status local,
                                 const char *what) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    /* The lowest failing rank (INT_MAX: none), then its status and message. */
    int lowest = local == ZS_OK ? INT_MAX : rank;
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, comm, &request);
    if (rc != MPI_SUCCESS) return zs__fail(ZS_ERR_COMM, "%s: MPI_Iallreduce failed (%d)", what, rc);
    ZS_CHECK(zs__comm_wait_startup(&request, settings, comm, what));
    if (lowest == INT_MAX) return ZS_OK;
    struct {
        int32_t status;
        char message[ZS_STARTUP_MESSAGE_BYTES];
    } outcome;
    memset(&outcome, 0, sizeof outcome);
    if (rank == lowest) {
        outcome.status = (int32_t)local;
        snprintf(outcome.message, sizeof outcome.message, "%s", zs_last_error());
    }
    rc = MPI_Ibcast(&outcome, (int)sizeof outcome, MPI_BYTE, lowest, comm, &request);
    if (rc != MPI_SUCCESS) return zs__fail(ZS_ERR_COMM, "%s: MPI_Ibcast failed (%d)", what, rc);
    ZS_CHECK(zs__comm_wait_startup(&request, settings, comm, what));
    if (local != ZS_OK) return local; /* this rank's own message stays */
    return zs__fail((zs_status)outcome.status, "%s failed on rank %d: %s", what, lowest,
                    outcome.message);
}

zs_status zs__comm_wait_one(zs__comm *comm, const zs__comm_call *call, MPI_Request *request,
                            int peer, int receiving) {
    if (*request == MPI_REQUEST_NULL) return ZS_OK;
    zs__pending p = {*request, peer, receiving};
    zs_status st = zs__comm_wait(comm, call, &p, 1);
    *request = p.request;
    return st;
}

zs_status zs__mpi_fail(const zs__comm *comm, const zs__comm_call *call, const char *function,
                       int rc) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error code %d", rc);
    return zs__fail(ZS_ERR_COMM,
                    "%s #%llu of '%s'%s failed on rank %d: %s: %s; check that every rank made "
                    "the same calls (ZS_LOG_LEVEL=debug logs every collective, "
                    "comm.check_collectives = true compares them)",
                    call->op, (unsigned long long)call->seq, call->label, call->in,
                    comm->world_rank, function, text);
}
