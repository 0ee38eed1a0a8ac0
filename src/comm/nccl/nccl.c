/* Collectives of device-resident backends: NCCL for data on the device, MPI
 * for the few host-side values (norms, flags, agreement checks).
 *
 * Ordering without host synchronization. Every data collective runs on a
 * communication stream this file owns:
 *
 *   compute stream:  ... grads written ... [record compute_ready]   ...   [wait comm_done] ... optimizer
 *   comm stream:                       [wait compute_ready] NCCL op [record comm_done]
 *
 * so the collective sees everything the program and the runtime enqueued on
 * the compute stream before the call, and everything enqueued afterwards
 * sees its result. The host never waits on the device here: a call returns
 * as soon as NCCL has enqueued its kernel, and comm.h's "synchronous"
 * contract holds in stream order (the only way the host reads device memory
 * is through the backend, whose download orders after the compute stream).
 * The two events are reused by every call: cudaStreamWaitEvent captures the
 * event's state when it is called, so a later record does not move an
 * earlier wait.
 *
 * Failure instead of hangs. The NCCL communicator is non-blocking
 * (config.blocking = 0): no NCCL call waits for a peer on the host, and an
 * asynchronous error (a dead peer, a network fault) is reported by
 * ncclCommGetAsyncError. This file registers a health check with the backend
 * that polls it while the backend blocks (synchronize, download); on an error
 * it aborts the communicator, which ends this rank's NCCL kernels, and
 * returns ZS_ERR_COMM naming the last collective this rank enqueued. Every
 * rank blocked on the dead peer thus gets an error instead of a hang. After
 * an abort every call fails at once with the same message.
 *
 * Determinism: NCCL fixes the order in which ranks' contributions are added
 * for a given communicator, count and algorithm, so stage 0's all-reduce
 * (reduce-scatter + all-gather, comm.c) matches stages 1-3 bit for bit at the
 * same world size as long as NCCL picks the same algorithm for the same
 * sizes; it differs from the MPI implementations in the last bits. Set
 * NCCL_ALGO=Ring to rule out algorithms whose order depends on message size.
 *
 * NCCL's own buffers are allocated by NCCL and are not charged to
 * ZS_MEM_COMM: the communicator stages nothing itself.
 *
 * Groups (comm.h: the node and cross-node communicators) are NCCL
 * communicators split from the world's (ncclCommSplit, non-blocking, every
 * wait bounded by comm.timeout_s). They enqueue on the world's
 * communication stream with the world's two events, so the ordering above
 * holds across the family and the watchdog watches the last collective any
 * of them enqueued; the health check polls every one; a failure aborts every
 * one. Their host-side collectives run on the world's MPI duplicate (world
 * ranks, a tag space of their own: mpi_host.h).
 *
 * Floor (src/floors.txt): the NCCL implementation: calls the communicator
 * object, the waits, the host collectives and termination below it.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "comm/comm_impl.h"
#include "comm/terminated.h"
#include "core/job_signals.h"
#include "comm/mpi_host.h"
#include "comm/wait.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"

/* The key that bounds every wait: creation, the first collective (NCCL
 * connects lazily), each collective's completion on the device (the
 * watchdog in health_check) and the final flush. */
#define NCCL_TIMEOUT_KEY "comm.timeout_s"

/* The hint every NCCL failure carries. */
#define NCCL_HINT                                                                    \
    "run with NCCL_DEBUG=INFO (and ZS_LOG_LEVEL=debug to log every collective) to see " \
    "which rank or link failed"

typedef struct nccl_state nccl_state;

struct nccl_state {
    /* Every communicator's own. */
    ncclComm_t nccl;              /* NULL once aborted or destroyed */
    zs__comm *comm;               /* the communicator that owns this state, once created */
    nccl_state *root;             /* the world's state (itself in the world) */
    int color, key;               /* a group's split of the world's communicator */
    /* The rest is used through `root`: the family shares it (a group's
     * copy is unused). */
    nccl_state *groups[ZS_COMM_KIND_COUNT]; /* the world's groups' states, by kind */
    zs__comm *last_comm;          /* the communicator of the last data collective */
    MPI_Comm mpi;                 /* our duplicate, MPI_ERRORS_RETURN; host-side ops */
    zs__backend *backend;         /* its compute stream orders every data collective */
    int device;                   /* the CUDA device current at creation */
    int rank;
    int size;
    double timeout_s;             /* comm.timeout_s */
    const zs__settings *settings; /* during creation only */
    cudaStream_t stream;          /* the communication stream */
    cudaEvent_t compute_ready;    /* recorded on the compute stream before a collective */
    cudaEvent_t comm_done;        /* recorded on the comm stream after it */
    int stream_created, ready_created, done_created;
    /* The last data collective enqueued, for the health check's message
     * (the label is copied: the caller's string may not outlive the call). */
    char last_op[32];
    char last_label[128];
    uint64_t last_seq;
    uint64_t last_bytes;
    double last_enqueued_at;      /* zs__clock_s() when it was enqueued: the watchdog's clock */
    /* Set when the communicator was aborted: the message every later call
     * repeats. */
    int failed;
    char failure[2048];
};

/* ------------------------------------------------------------- utilities */

static void pause_briefly(unsigned polls) {
    /* Spin for the common case (an enqueue that finishes in microseconds),
     * then sleep so that a long wait for peers does not burn a core the
     * program's own threads may need. */
    if (polls < 64) return;
    struct timespec ts = {0, 1000000}; /* 1 ms */
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}


/* Polls a non-blocking communicator until its pending operation (creation,
 * an enqueue, a flush) is no longer in progress or the deadline passes.
 * Returns the final state; ncclInProgress means the deadline passed. */
static ncclResult_t wait_async(ncclComm_t nccl, double deadline, ncclResult_t *query_rc) {
    ncclResult_t state = ncclInProgress;
    *query_rc = ncclSuccess;
    for (unsigned polls = 0;; polls++) {
        ncclResult_t rc = ncclCommGetAsyncError(nccl, &state);
        if (rc != ncclSuccess) {
            *query_rc = rc;
            return rc;
        }
        /* After SIGTERM no wait outlasts job.term_grace_s (comm/terminated.h). */
        if (state != ncclInProgress || zs__clock_s() > deadline || zs__signals_term_expired())
            return state;
        pause_briefly(polls);
    }
}

/* Aborts every communicator of the family once (their kernels share one
 * stream: one stuck kernel holds every later one) and keeps `message` for
 * every later call. */
static void abort_with(nccl_state *st, const char *message) {
    nccl_state *root = st->root;
    nccl_state *family[ZS_COMM_KIND_COUNT] = {root};
    for (int k = 1; k < ZS_COMM_KIND_COUNT; k++) family[k] = root->groups[k];
    for (int k = 0; k < ZS_COMM_KIND_COUNT; k++)
        if (family[k] && family[k]->nccl) {
            /* The abort's own result is of no use: the communicator is gone
             * either way, and the first error is what the user needs. */
            (void)ncclCommAbort(family[k]->nccl);
            family[k]->nccl = NULL;
        }
    if (!root->failed) {
        root->failed = 1;
        snprintf(root->failure, sizeof root->failure, "%s", message);
    }
}

/* NCCL's detail for the last error on this communicator, when it has one. */
static const char *nccl_detail(const nccl_state *st) {
    const char *detail = st->nccl ? ncclGetLastError(st->nccl) : NULL;
    return detail && *detail ? detail : "no further detail";
}

/* A creation step (ncclCommInitRankConfig, ncclCommSplit) that ended with
 * `rc`: the half-made communicator *nccl is aborted, and the message names
 * `what`, this rank and its device, the deadline when it ran out, or
 * `function`, NCCL's error and detail, and `advice`. */
static zs_status creation_failed(const nccl_state *root, ncclComm_t *nccl, ncclResult_t rc,
                                 const char *function, const char *what, const char *advice) {
    char detail[512];
    snprintf(detail, sizeof detail, "%s",
             *nccl && ncclGetLastError(*nccl) && *ncclGetLastError(*nccl)
                 ? ncclGetLastError(*nccl)
                 : "no further detail");
    if (*nccl) {
        (void)ncclCommAbort(*nccl);
        *nccl = NULL;
    }
    if (rc == ncclInProgress)
        return zs__fail(ZS_ERR_COMM,
                        "creating %s on rank %d (CUDA device %d) of %d did not finish in %.0f s "
                        "(a rank missing or unreachable?); raise %s if setup takes longer; "
                        NCCL_HINT,
                        what, root->rank, root->device, root->size, root->timeout_s,
                        NCCL_TIMEOUT_KEY);
    return zs__fail(ZS_ERR_COMM,
                    "creating %s failed on rank %d (CUDA device %d) of %d: %s: %s (%s); %s"
                    NCCL_HINT,
                    what, root->rank, root->device, root->size, function,
                    ncclGetErrorString(rc), detail, advice);
}

/* A failed NCCL call or asynchronous error during collective `call`: aborts
 * the communicator (its state is unknown; peers blocked on this rank then
 * fail too) and returns the message. */
static zs_status nccl_fail(zs__comm *comm, const zs__comm_call *call, const char *function,
                           ncclResult_t rc) {
    nccl_state *st = comm->state;
    char message[sizeof st->failure];
    snprintf(message, sizeof message,
             "%s #%" PRIu64 " of '%s'%s failed on rank %d (CUDA device %d): %s: %s (%s); "
             "the NCCL communicators were aborted; " NCCL_HINT,
             call->op, call->seq, call->label, call->in, comm->world_rank, st->root->device,
             function, ncclGetErrorString(rc), nccl_detail(st));
    abort_with(st, message);
    return zs__fail(ZS_ERR_COMM, "%s", message);
}

static zs_status cuda_fail(const zs__comm *comm, const zs__comm_call *call, const char *function,
                           cudaError_t rc) {
    const nccl_state *st = comm->state;
    return zs__fail(ZS_ERR_COMM,
                    "%s #%" PRIu64 " of '%s'%s failed on rank %d (CUDA device %d): %s: %s (%s); "
                    "run with CUDA_LAUNCH_BLOCKING=1 to find the kernel that failed first",
                    call->op, call->seq, call->label, call->in, comm->world_rank,
                    st->root->device, function, cudaGetErrorName(rc), cudaGetErrorString(rc));
}

#define CUDA_OP_CHECK(comm, call, function, expr)                                  \
    do {                                                                           \
        cudaError_t cuda_check_rc_ = (expr);                                       \
        if (cuda_check_rc_ != cudaSuccess) {                                       \
            zs_status cuda_check_status_ = cuda_fail((comm), (call), (function),   \
                                                     cuda_check_rc_);              \
            zs__error_breadcrumb(__FILE__, __LINE__);                              \
            return cuda_check_status_;                                             \
        }                                                                          \
    } while (0)


/* A communicator aborted earlier fails every call with its first message,
 * prefixed with the call now refused. */
static zs_status check_alive(const zs__comm *comm, const zs__comm_call *call) {
    const nccl_state *root = ((const nccl_state *)comm->state)->root;
    if (!root->failed) return ZS_OK;
    return zs__fail(ZS_ERR_COMM,
                    "%s #%" PRIu64 " of '%s'%s on rank %d refused: the NCCL communicators were "
                    "aborted after an earlier failure: %s",
                    call->op, call->seq, call->label, call->in, comm->world_rank, root->failure);
}

/* ------------------------------------------------------- health check */

/* Run by the backend while it blocks (ctx: the world's state). A real
 * asynchronous error on any communicator of the family (anything but
 * success or "still enqueueing") aborts them all, so this rank's NCCL
 * kernels end and the compute stream, which waits on them, drains; the
 * blocked call then returns this error instead of hanging. */
static zs_status health_check(void *ctx) {
    nccl_state *st = ctx;
    if (st->failed)
        return zs__fail(ZS_ERR_COMM, "%s", st->failure);
    nccl_state *family[ZS_COMM_KIND_COUNT] = {st};
    for (int k = 1; k < ZS_COMM_KIND_COUNT; k++) family[k] = st->groups[k];
    nccl_state *bad = NULL;
    ncclResult_t error = ncclSuccess;
    for (int k = 0; k < ZS_COMM_KIND_COUNT && !bad; k++) {
        if (!family[k] || !family[k]->nccl) continue;
        ncclResult_t state = ncclSuccess;
        ncclResult_t rc = ncclCommGetAsyncError(family[k]->nccl, &state);
        if (rc != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
            bad = family[k];
            error = rc != ncclSuccess ? rc : state;
        }
    }
    if (!bad) {
        /* The watchdog: NCCL reports no error when a peer merely stops (a
         * stopped process, a rank that left the loop); its kernels wait
         * forever. The last collective enqueued (by any communicator of the
         * family: they share the stream) must complete on the device within
         * comm.timeout_s of its enqueue, as MPI waits must. */
        if (st->last_seq == 0 || !st->last_comm ||
            cudaEventQuery(st->comm_done) != cudaErrorNotReady)
            return ZS_OK;
        const double waited = zs__clock_s() - st->last_enqueued_at;
        const int terminated = zs__signals_term_expired();
        if (waited <= st->timeout_s && !terminated) return ZS_OK;
        zs__comm *late = st->last_comm;
        const zs__comm_call call = {st->last_op, st->last_label, st->last_seq, st->last_bytes,
                                    late->in};
        char what[160];
        snprintf(what, sizeof what, "the NCCL kernel on CUDA device %d has not completed",
                 st->device);
        /* Abort first, so this rank's kernels end and the device drains
         * whether the policy returns or ends the job. */
        abort_with(st, "the NCCL communicators were aborted by the watchdog (comm.timeout_s)");
        if (terminated) return zs__comm_terminated(late, &call, -1, 1, what);
        zs_status timed_out = zs__comm_timed_out(late, &call, -1, 1, waited, what);
        snprintf(st->failure, sizeof st->failure, "%s", late->failure);
        return timed_out;
    }
    const char *where = bad->comm && bad->comm->where[0] ? bad->comm->where : "world";
    char message[sizeof st->failure];
    if (st->last_seq > 0)
        snprintf(message, sizeof message,
                 "NCCL reported an asynchronous error on rank %d (CUDA device %d, %s "
                 "communicator) while the device was busy; the last collective enqueued was "
                 "%s #%" PRIu64 " of '%s'%s: %s (%s); a peer may have died or a link failed; the "
                 "NCCL communicators were aborted; " NCCL_HINT,
                 st->rank, st->device, where, st->last_op, st->last_seq, st->last_label,
                 st->last_comm ? st->last_comm->in : "", ncclGetErrorString(error),
                 nccl_detail(bad));
    else
        snprintf(message, sizeof message,
                 "NCCL reported an asynchronous error on rank %d (CUDA device %d, %s "
                 "communicator) before any collective: %s (%s); the NCCL communicators were "
                 "aborted; " NCCL_HINT,
                 st->rank, st->device, where, ncclGetErrorString(error), nccl_detail(bad));
    abort_with(st, message);
    return zs__fail(ZS_ERR_COMM, "%s", message);
}

/* ------------------------------------------------------ data collectives */

static int nccl_type(zs_dtype dtype, ncclDataType_t *out) {
    switch (dtype) {
    case ZS_DTYPE_FP32:
        *out = ncclFloat32;
        return 1;
    case ZS_DTYPE_FP16:
        *out = ncclFloat16;
        return 1;
    case ZS_DTYPE_BF16:
        *out = ncclBfloat16;
        return 1;
    }
    return 0;
}

/* One data collective: the in-place ones of comm.h (buf, count, dtype), or
 * an all-to-all (send, recv, block). */
typedef enum { NCCL_REDUCE_SCATTER, NCCL_ALL_GATHER, NCCL_ALL_TO_ALL } nccl_kind;

typedef struct nccl_op {
    nccl_kind kind;
    void *buf;
    size_t count;
    zs_dtype dtype;
    const void *send;
    void *recv;
    size_t block;
} nccl_op;

/* Issues `op` on the communication stream. NCCL's in-place forms:
 * reduce-scatter receives into chunk `rank` of its own send buffer;
 * all-gather sends from chunk `rank` of its own receive buffer. The
 * all-to-all is one NCCL group of a send and a receive per peer (NCCL runs
 * them together; the result is bits, whatever the order), and its own block
 * a device copy on the same stream. */
static ncclResult_t issue(zs__comm *comm, nccl_state *st, const nccl_op *op, cudaStream_t stream,
                          const char **function, cudaError_t *crc) {
    const int n = comm->size, r = comm->rank;
    if (op->kind != NCCL_ALL_TO_ALL) {
        ncclDataType_t type = ncclFloat32;
        (void)nccl_type(op->dtype, &type); /* checked by the caller */
        void *mine = (unsigned char *)op->buf + (size_t)r * op->count * zs_dtype_size(op->dtype);
        if (op->kind == NCCL_ALL_GATHER) {
            *function = "ncclAllGather";
            return ncclAllGather(mine, op->buf, op->count, type, st->nccl, stream);
        }
        *function = "ncclReduceScatter";
        return ncclReduceScatter(op->buf, mine, op->count, type, ncclSum, st->nccl, stream);
    }
    const unsigned char *send = op->send;
    unsigned char *recv = op->recv;
    *function = "cudaMemcpyAsync(all_to_all's own block)";
    *crc = cudaMemcpyAsync(recv + (size_t)r * op->block, send + (size_t)r * op->block, op->block,
                           cudaMemcpyDeviceToDevice, stream);
    if (*crc != cudaSuccess) return ncclSuccess;
    if (n == 1) return ncclSuccess;
    *function = "ncclGroupStart";
    ncclResult_t rc = ncclGroupStart();
    if (rc != ncclSuccess) return rc;
    /* Pairwise, in the MPI path's order (rank + s, rank - s). */
    for (int step = 1; step < n && (rc == ncclSuccess || rc == ncclInProgress); step++) {
        const int to = (r + step) % n, from = (r - step + n) % n;
        *function = "ncclSend";
        rc = ncclSend(send + (size_t)to * op->block, op->block, ncclUint8, to, st->nccl, stream);
        if (rc == ncclSuccess || rc == ncclInProgress) {
            *function = "ncclRecv";
            rc = ncclRecv(recv + (size_t)from * op->block, op->block, ncclUint8, from, st->nccl,
                          stream);
        }
        zs__comm_count_sent(comm, to, op->block);
    }
    /* The group ends whatever happened inside it; the first error wins. */
    ncclResult_t end = ncclGroupEnd();
    if (rc != ncclSuccess && rc != ncclInProgress) return rc;
    *function = "ncclGroupEnd";
    return end;
}

/* Enqueues `op` on the communication stream, ordered after and before the
 * compute stream (the diagram at the top). */
static zs_status enqueue(zs__comm *comm, const nccl_op *op, const zs__comm_call *call) {
    nccl_state *st = comm->state, *root = st->root;
    ZS_CHECK(check_alive(comm, call));
    ncclDataType_t type;
    if (op->kind != NCCL_ALL_TO_ALL && !nccl_type(op->dtype, &type))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s #%" PRIu64 " of '%s'%s: dtype %d has no NCCL "
                        "type", call->op, call->seq, call->label, call->in, (int)op->dtype);
    snprintf(root->last_op, sizeof root->last_op, "%s", call->op);
    snprintf(root->last_label, sizeof root->last_label, "%s", call->label);
    root->last_seq = call->seq;
    root->last_bytes = call->bytes;
    root->last_comm = comm;
    root->last_enqueued_at = zs__clock_s();

    /* NCCL requires its device to be current; a program that switched
     * devices between calls gets its own device back afterwards. */
    int current = root->device;
    CUDA_OP_CHECK(comm, call, "cudaGetDevice", cudaGetDevice(&current));
    if (current != root->device)
        CUDA_OP_CHECK(comm, call, "cudaSetDevice", cudaSetDevice(root->device));
    zs_status status = ZS_OK;
    cudaError_t crc = cudaSuccess;
    const char *function = NULL;
    cudaStream_t compute = (cudaStream_t)root->backend->ops->get_stream(root->backend);

    function = "cudaEventRecord(compute stream)";
    crc = cudaEventRecord(root->compute_ready, compute);
    if (crc == cudaSuccess) {
        function = "cudaStreamWaitEvent(communication stream)";
        crc = cudaStreamWaitEvent(root->stream, root->compute_ready, 0);
    }
    if (crc != cudaSuccess) {
        status = cuda_fail(comm, call, function, crc);
        goto done;
    }

    ncclResult_t rc = issue(comm, st, op, root->stream, &function, &crc);
    if (crc != cudaSuccess) {
        status = cuda_fail(comm, call, function, crc);
        goto done;
    }
    if (rc == ncclInProgress) {
        /* Normal on a non-blocking communicator: NCCL finishes enqueueing in
         * the background (the first call also connects to the peers). The
         * communicator must not be used again before it is done. */
        ncclResult_t query_rc;
        rc = wait_async(st->nccl, zs__clock_s() + root->timeout_s, &query_rc);
        if (query_rc != ncclSuccess) function = "ncclCommGetAsyncError";
        if (rc == ncclInProgress) {
            char message[sizeof root->failure];
            snprintf(message, sizeof message,
                     "%s #%" PRIu64 " of '%s'%s on rank %d (CUDA device %d): %s was still being "
                     "enqueued after %.0f s (peers not responding?); the NCCL communicators were "
                     "aborted; raise %s if connecting takes longer; " NCCL_HINT,
                     call->op, call->seq, call->label, call->in, comm->world_rank, root->device,
                     function, root->timeout_s, NCCL_TIMEOUT_KEY);
            abort_with(st, message);
            if (zs__signals_term_expired())
                status = zs__comm_terminated(comm, call, -1, 1, "NCCL was still enqueueing");
            else
                status = zs__fail(ZS_ERR_COMM, "%s", message);
            goto done;
        }
    }
    if (rc != ncclSuccess) {
        status = nccl_fail(comm, call, function, rc);
        goto done;
    }

    function = "cudaEventRecord(communication stream)";
    crc = cudaEventRecord(root->comm_done, root->stream);
    if (crc == cudaSuccess) {
        function = "cudaStreamWaitEvent(compute stream)";
        crc = cudaStreamWaitEvent(compute, root->comm_done, 0);
    }
    if (crc != cudaSuccess) status = cuda_fail(comm, call, function, crc);

done:
    if (current != root->device) {
        cudaError_t restore = cudaSetDevice(current);
        if (restore != cudaSuccess && status == ZS_OK)
            status = cuda_fail(comm, call, "cudaSetDevice(restore)", restore);
    }
    if (status != ZS_OK) zs__error_breadcrumb(__FILE__, __LINE__);
    return status;
}

static zs_status op_reduce_scatter(zs__comm *comm, void *buf, size_t count, zs_dtype dtype,
                                   zs__comm_impl impl, const zs__comm_call *call) {
    (void)impl; /* NCCL chooses its own algorithm */
    const nccl_op op = {.kind = NCCL_REDUCE_SCATTER, .buf = buf, .count = count, .dtype = dtype};
    return enqueue(comm, &op, call);
}

static zs_status op_all_gather(zs__comm *comm, void *buf, size_t count, zs_dtype dtype,
                               zs__comm_impl impl, const zs__comm_call *call) {
    (void)impl;
    const nccl_op op = {.kind = NCCL_ALL_GATHER, .buf = buf, .count = count, .dtype = dtype};
    return enqueue(comm, &op, call);
}

static zs_status op_all_to_all(zs__comm *comm, const void *send, void *recv, size_t block,
                               const zs__comm_call *call) {
    const nccl_op op = {.kind = NCCL_ALL_TO_ALL, .send = send, .recv = recv, .block = block};
    return enqueue(comm, &op, call);
}

/* ------------------------------------------------- host-side collectives */

/* These move host memory with point-to-point MPI on our duplicate
 * (mpi_host.c: deadlines and named peers, as on the MPI path). They do not
 * touch the device, so they need no stream ordering; they refuse to
 * run after an abort so that a failed rank does not answer its peers as if
 * nothing had happened. */

static zs_status op_all_reduce_scalars(zs__comm *comm, double *values, int n, zs__reduce_op op,
                                       const zs__comm_call *call) {
    ZS_CHECK(check_alive(comm, call));
    return zs__mpi_all_reduce_scalars(comm, values, n, op, call);
}

static zs_status op_all_gather_bytes(zs__comm *comm, const void *mine, size_t bytes, void *all,
                                     const zs__comm_call *call) {
    ZS_CHECK(check_alive(comm, call));
    return zs__mpi_all_gather_bytes(comm, mine, bytes, all, call);
}

static zs_status op_broadcast(zs__comm *comm, void *buf, size_t bytes, int root,
                              const zs__comm_call *call) {
    ZS_CHECK(check_alive(comm, call));
    return zs__mpi_broadcast(comm, buf, bytes, root, call);
}

static zs_status op_barrier(zs__comm *comm, const zs__comm_call *call) {
    ZS_CHECK(check_alive(comm, call));
    return zs__mpi_barrier(comm, call);
}

/* ------------------------------------------------------------ destroy */

/* Finalizes (flushes) an NCCL communicator, bounded by the deadline, or
 * aborts it when the flush fails or does not finish. */
static void finish_nccl(ncclComm_t nccl, double timeout_s, int rank, const char *where) {
    /* Finalize flushes the collectives still queued, so peers waiting on
     * them complete; it is asynchronous on this communicator. A flush that
     * fails or does not finish in time falls back to an abort, so destroy
     * never hangs on a dead peer. */
    ncclResult_t rc = ncclCommFinalize(nccl), query_rc = ncclSuccess;
    if (rc == ncclInProgress) rc = wait_async(nccl, zs__clock_s() + timeout_s, &query_rc);
    if (rc == ncclSuccess) {
        rc = ncclCommDestroy(nccl);
        if (rc != ncclSuccess)
            ZS_WARN("ncclCommDestroy (%s) on rank %d failed: %s", where, rank,
                    ncclGetErrorString(rc));
    } else {
        ZS_WARN("flushing the NCCL communicator (%s) on rank %d failed (%s); aborting it instead",
                where, rank, rc == ncclInProgress ? "timed out" : ncclGetErrorString(rc));
        (void)ncclCommAbort(nccl);
    }
}

/* A group's state: its own NCCL communicator only (comm.h: the rest is the
 * world's). */
static void free_group_state(nccl_state *st) {
    nccl_state *root = st->root;
    if (st->nccl) {
        int current = root->device;
        const int switched = cudaGetDevice(&current) == cudaSuccess && current != root->device &&
                             cudaSetDevice(root->device) == cudaSuccess;
        finish_nccl(st->nccl, root->timeout_s, root->rank,
                    st->comm ? st->comm->where : "a group");
        st->nccl = NULL;
        if (switched) (void)cudaSetDevice(current);
    }
    for (int k = 1; k < ZS_COMM_KIND_COUNT; k++)
        if (root->groups[k] == st) root->groups[k] = NULL;
    free(st);
}

/* Releases everything `st` holds; safe on a partly created state. */
static void free_state(nccl_state *st) {
    if (!st) return;
    if (st->root && st->root != st) {
        free_group_state(st);
        return;
    }
    if (st->backend) st->backend->ops->set_health_check(st->backend, NULL, NULL);
    int current = st->device;
    const int switched = cudaGetDevice(&current) == cudaSuccess && current != st->device &&
                         cudaSetDevice(st->device) == cudaSuccess;
    if (st->nccl) {
        finish_nccl(st->nccl, st->timeout_s, st->rank, "world");
        st->nccl = NULL;
    }
    /* Destroying a stream or event with work pending is allowed: CUDA
     * releases it once that work completes. */
    if (st->done_created) (void)cudaEventDestroy(st->comm_done);
    if (st->ready_created) (void)cudaEventDestroy(st->compute_ready);
    if (st->stream_created) (void)cudaStreamDestroy(st->stream);
    if (switched) (void)cudaSetDevice(current);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && st->mpi != MPI_COMM_NULL) MPI_Comm_free(&st->mpi);
    free(st);
}

static void op_destroy(zs__comm *comm) { free_state(comm->state); }

/* ------------------------------------------------------------- groups */

static zs_status op_group_state(zs__comm *world, zs__comm *group) {
    nccl_state *root = world->state;
    nccl_state *st = zs__calloc(1, sizeof *st);
    if (!st)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_create: out of host memory for the %s NCCL "
                        "communicator's state (%zu bytes)", group->where, sizeof *st);
    const zs__topology *t = group->topology;
    st->root = root;
    st->comm = group;
    st->mpi = MPI_COMM_NULL; /* the world's serves (group->host) */
    st->device = root->device;
    st->rank = group->rank;
    st->size = group->size;
    st->timeout_s = root->timeout_s;
    /* The split: a node's ranks by local rank; a local rank's by node. */
    st->color = group->kind == ZS_COMM_KIND_NODE ? t->node : t->local_rank;
    st->key = group->kind == ZS_COMM_KIND_NODE ? t->local_rank : t->node;
    group->state = st;
    root->groups[group->kind] = st;
    return ZS_OK;
}

/* Every rank splits the world's communicator once per group kind, in kind
 * order (ncclCommSplit is collective over the world), and waits for the new
 * communicator with the deadline; on failure the half-made one is aborted. */
static zs_status split_one(nccl_state *root, nccl_state *g) {
    const char *where = g->comm->where;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t rc = ncclCommSplit(root->nccl, g->color, g->key, &g->nccl, &config);
    ncclResult_t query_rc = ncclSuccess;
    const char *function = "ncclCommSplit";
    const double deadline = zs__clock_s() + root->timeout_s;
    if ((rc == ncclInProgress || rc == ncclSuccess) && g->nccl) {
        rc = wait_async(g->nccl, deadline, &query_rc);
        if (query_rc != ncclSuccess) function = "ncclCommGetAsyncError";
    }
    /* The world's communicator is in progress during a non-blocking split
     * too: it is ready before its next use. */
    if (rc == ncclSuccess) {
        rc = wait_async(root->nccl, deadline, &query_rc);
        if (rc != ncclSuccess) function = "ncclCommGetAsyncError(world)";
    }
    if (rc == ncclSuccess) return ZS_OK;
    char what[96];
    snprintf(what, sizeof what, "the %s NCCL communicator (ncclCommSplit)", where);
    return creation_failed(root, &g->nccl, rc, function, what, "");
}

static zs_status op_connect_groups(zs__comm *world) {
    nccl_state *root = world->state;
    if (root->failed)
        return zs__fail(ZS_ERR_COMM, "creating the node and cross-node NCCL communicators on "
                        "rank %d refused: %s", root->rank, root->failure);
    int current = root->device;
    if (cudaGetDevice(&current) != cudaSuccess) current = root->device;
    const int switched = current != root->device && cudaSetDevice(root->device) == cudaSuccess;
    zs_status st = ZS_OK;
    for (int k = 1; k < ZS_COMM_KIND_COUNT && st == ZS_OK; k++)
        if (root->groups[k] && !root->groups[k]->nccl) st = split_one(root, root->groups[k]);
    if (switched) (void)cudaSetDevice(current);
    if (st == ZS_OK) {
        int version = 0;
        (void)ncclGetVersion(&version);
        ZS_DEBUG("comm: NCCL %d node and cross-node communicators split on rank %d", version,
                 root->rank);
    }
    return st;
}

static const zs__comm_ops nccl_ops = {
    .name = "nccl",
    .reduce_scatter = op_reduce_scatter,
    .all_gather = op_all_gather,
    .all_reduce_scalars = op_all_reduce_scalars,
    .all_gather_bytes = op_all_gather_bytes,
    .broadcast = op_broadcast,
    .barrier = op_barrier,
    .all_to_all = op_all_to_all,
    .group_state = op_group_state,
    .connect_groups = op_connect_groups,
    .destroy = op_destroy,
};

/* ------------------------------------------------------------- create */

static zs_status create_mpi_fail(int rank, const char *function, int rc) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error code %d", rc);
    return zs__fail(ZS_ERR_COMM, "creating the NCCL communicator failed on rank %d: %s: %s",
                    rank, function, text);
}

static zs_status create_cuda_fail(int rank, const char *function, cudaError_t rc) {
    return zs__fail(ZS_ERR_COMM,
                    "creating the NCCL communicator failed on rank %d: %s: %s (%s); check that "
                    "the CUDA backend was created and the device is usable (nvidia-smi)",
                    rank, function, cudaGetErrorName(rc), cudaGetErrorString(rc));
}

/* All ranks learn whether every rank got this far, so a failure on one rank
 * fails creation everywhere instead of leaving the others waiting in NCCL.
 * Returns ZS_OK when every rank's `local` is ZS_OK; a rank that failed keeps
 * its own message, the others name the first rank that failed. */
static zs_status agree(nccl_state *st, zs_status local, const char *stage) {
    int failed_rank = local == ZS_OK ? INT_MAX : st->rank;
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, &failed_rank, 1, MPI_INT, MPI_MIN, st->mpi, &request);
    if (rc == MPI_SUCCESS) {
        zs_status waited = zs__comm_wait_startup(&request, st->settings, st->mpi,
                                                 "agreeing on the NCCL set-up in zs_create");
        if (waited != ZS_OK) return waited;
    }
    if (rc != MPI_SUCCESS) {
        if (local != ZS_OK) return local;
        return create_mpi_fail(st->rank, "MPI_Allreduce", rc);
    }
    if (local != ZS_OK) return local;
    if (failed_rank == INT_MAX) return ZS_OK;
    return zs__fail(ZS_ERR_COMM,
                    "creating the NCCL communicator failed: rank %d failed %s (its own error "
                    "message says why); this rank (%d) stops too",
                    failed_rank, stage, st->rank);
}

/* Local CUDA resources: the device, the communication stream (highest
 * priority, so NCCL's kernels are scheduled ahead of compute kernels queued
 * at the same time, which is what lets communication overlap compute) and
 * the two ordering events (no timing: cheaper to record and wait on). */
static zs_status create_cuda_resources(nccl_state *st) {
    cudaError_t rc = cudaGetDevice(&st->device);
    if (rc != cudaSuccess) return create_cuda_fail(st->rank, "cudaGetDevice", rc);
    int least = 0, greatest = 0;
    rc = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (rc != cudaSuccess) return create_cuda_fail(st->rank, "cudaDeviceGetStreamPriorityRange", rc);
    rc = cudaStreamCreateWithPriority(&st->stream, cudaStreamNonBlocking, greatest);
    if (rc != cudaSuccess) return create_cuda_fail(st->rank, "cudaStreamCreateWithPriority", rc);
    st->stream_created = 1;
    rc = cudaEventCreateWithFlags(&st->compute_ready, cudaEventDisableTiming);
    if (rc != cudaSuccess) return create_cuda_fail(st->rank, "cudaEventCreateWithFlags", rc);
    st->ready_created = 1;
    rc = cudaEventCreateWithFlags(&st->comm_done, cudaEventDisableTiming);
    if (rc != cudaSuccess) return create_cuda_fail(st->rank, "cudaEventCreateWithFlags", rc);
    st->done_created = 1;
    return ZS_OK;
}

/* What rank 0 broadcasts: the id, or the news that it could not make one. */
typedef struct bootstrap_msg {
    int ok;
    int code; /* ncclResult_t when !ok */
    ncclUniqueId id;
} bootstrap_msg;

/* Creates the non-blocking NCCL communicator and waits (bounded) until it is
 * ready. On failure the half-made communicator is aborted. */
static zs_status create_nccl(nccl_state *st) {
    bootstrap_msg msg;
    memset(&msg, 0, sizeof msg);
    if (st->rank == 0) {
        ncclResult_t rc = ncclGetUniqueId(&msg.id);
        msg.ok = rc == ncclSuccess;
        msg.code = (int)rc;
    }
    MPI_Request request = MPI_REQUEST_NULL;
    int mrc = MPI_Ibcast(&msg, (int)sizeof msg, MPI_BYTE, 0, st->mpi, &request);
    if (mrc != MPI_SUCCESS) return create_mpi_fail(st->rank, "MPI_Ibcast(NCCL unique id)", mrc);
    ZS_CHECK(zs__comm_wait_startup(&request, st->settings, st->mpi,
                                   "broadcasting the NCCL unique id in zs_create"));
    if (!msg.ok)
        return zs__fail(ZS_ERR_COMM,
                        "creating the NCCL communicator failed: ncclGetUniqueId on rank 0: %s; "
                        "check NCCL_SOCKET_IFNAME and " NCCL_HINT,
                        ncclGetErrorString((ncclResult_t)msg.code));

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&st->nccl, st->size, msg.id, st->rank, &config);
    ncclResult_t query_rc = ncclSuccess;
    const char *function = "ncclCommInitRankConfig";
    if ((rc == ncclInProgress || rc == ncclSuccess) && st->nccl) {
        rc = wait_async(st->nccl, zs__clock_s() + st->timeout_s, &query_rc);
        if (query_rc != ncclSuccess) function = "ncclCommGetAsyncError";
    }
    if (rc == ncclSuccess) return ZS_OK;
    return creation_failed(st, &st->nccl, rc, function, "the NCCL communicator",
                           "NCCL needs a GPU per rank (ranks that share a GPU need comm.impl = "
                           "\"mpi\" or \"auto\"); ");
}

zs_status zs__comm_create_nccl(MPI_Comm comm, const zs__settings *settings, zs__mem *mem,
                               zs__backend *backend, zs__comm **out) {
    if (!settings || !mem || !backend || !out || comm == MPI_COMM_NULL)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "zs__comm_create_nccl needs a communicator, settings, an accountant, "
                        "a backend and an output pointer");
    if (backend->ops->host_accessible || !backend->ops->get_stream ||
        !backend->ops->set_health_check)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "zs__comm_create_nccl: backend '%s' is not a device backend with streams",
                        backend->ops->name);
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized)
        return zs__fail(ZS_ERR_STATE, "MPI is %s; initialize it (MPI_Init_thread with "
                                      "MPI_THREAD_FUNNELED or better) before creating a context",
                        finalized ? "already finalized" : "not initialized");
    /* The host-side ops move at most this many bytes per MPI call. */
    const int64_t segment = settings->comm.segment_bytes;
    if (segment < 1 || segment > INT_MAX)
        return zs__fail(ZS_ERR_CONFIG, "comm.segment_bytes = %lld is out of range [1, %d]",
                        (long long)segment, INT_MAX);

    zs_status status = ZS_OK;
    nccl_state *st = zs__calloc(1, sizeof *st);
    if (!st) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "cannot allocate the NCCL communicator state");
    st->root = st;
    st->mpi = MPI_COMM_NULL;
    st->device = -1;
    st->timeout_s = (double)settings->comm.timeout_s;
    st->settings = settings;
    MPI_Request dup_request = MPI_REQUEST_NULL;
    int rc = MPI_Comm_idup(comm, &st->mpi, &dup_request);
    if (rc != MPI_SUCCESS) {
        st->mpi = MPI_COMM_NULL;
        status = create_mpi_fail(-1, "MPI_Comm_idup", rc);
        goto fail;
    }
    status = zs__comm_wait_startup(&dup_request, settings, comm,
                                   "duplicating the communicator for NCCL in zs_create");
    if (status != ZS_OK) {
        st->mpi = MPI_COMM_NULL; /* never came into being: nothing to free */
        goto fail;
    }
    rc = MPI_Comm_set_errhandler(st->mpi, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
        status = create_mpi_fail(-1, "MPI_Comm_set_errhandler", rc);
        goto fail;
    }
    MPI_Comm_rank(st->mpi, &st->rank);
    MPI_Comm_size(st->mpi, &st->size);

    ZS_CHECK_GOTO(agree(st, create_cuda_resources(st), "to set up its CUDA stream and events"),
                  status, fail);
    ZS_CHECK_GOTO(agree(st, create_nccl(st), "to create its NCCL communicator"), status, fail);

    ZS_CHECK_GOTO(zs__comm_new(&nccl_ops, st, st->rank, st->size, settings, mem, out), status,
                  fail);
    zs__comm_set_host(*out, st->mpi);
    st->comm = *out;
    st->settings = NULL;
    /* Registered last: from here on the communicator owns st, and the
     * backend's waits can report NCCL's errors. */
    st->backend = backend;
    backend->ops->set_health_check(backend, health_check, st);
    int version = 0;
    (void)ncclGetVersion(&version);
    ZS_DEBUG("comm: NCCL %d created on %d ranks, CUDA device %d, timeout %.0f s", version,
             st->size, st->device, st->timeout_s);
    return ZS_OK;

fail:
    /* A communicator this rank created while another rank failed is aborted,
     * not finalized: a flush would wait for the rank that is not coming. */
    if (st->nccl) {
        (void)ncclCommAbort(st->nccl);
        st->nccl = NULL;
    }
    free_state(st);
    return status;
}
