/* The implementation-independent half of the collectives: argument checks,
 * sequence numbers, debug logging and byte accounting, then dispatch through
 * zs__comm_ops. Keeping these here means an NCCL implementation counts and
 * reports exactly like the MPI one.
 *
 * Floor (src/floors.txt): the front: owns the sequence numbers and
 * fingerprints of calls; calls the communicator object and the host
 * collectives (the fingerprint exchange) below it, and the implementations
 * only through the ops table.
 */
#include "comm/comm_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/mpi_host.h"
#include "comm/wait.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"

static const char *impl_name(zs__comm_impl impl) {
    return impl == ZS_COMM_IMPL_RING ? "ring" : impl == ZS_COMM_IMPL_MPI ? "mpi" : "auto";
}

/* Numbers the call (every rank numbers its collectives the same way, so "#17"
 * identifies one collective across ranks) and logs it at debug level, which is
 * how a user finds the first call where ranks diverged. */
static zs__comm_call begin_call(zs__comm *comm, const char *op, const char *label,
                                const char *what, uint64_t bytes) {
    zs__comm_call call = {op, label ? label : "", ++comm->seq, bytes, comm->in};
    if (zs__log_enabled(ZS_LOG_DEBUG))
        ZS_DEBUG("comm: %s #%" PRIu64 " of '%s'%s: %s", call.op, call.seq, call.label, call.in,
                 what);
    return call;
}

/* What comm.check_collectives compares across ranks before a collective.
 * Fixed size and plain bytes, so one all-gather carries every rank's. */
typedef struct fingerprint {
    uint64_t seq;
    uint64_t count;   /* elements per chunk, bytes per rank, or scalars */
    int32_t dtype;    /* -1 where the op carries bytes */
    int32_t root;     /* broadcast root; -1 elsewhere */
    char op[24];
    char label[64];
    char what[96];
} fingerprint;

static void describe_fingerprint(char *out, size_t capacity, const fingerprint *f) {
    snprintf(out, capacity, "%s #%" PRIu64 " of '%s' (%s)", f->op, f->seq, f->label, f->what);
}

/* Refuses every call once the communicator failed (a timeout, or ranks out
 * of step): the transport may hold half-finished messages, and the ranks no
 * longer agree on what the next collective is. */
static zs_status check_usable(const zs__comm *comm, const char *op, const char *label) {
    const zs__comm *failed = zs__comm_family_failure(comm);
    if (!failed) return ZS_OK;
    if (failed == comm)
        return zs__fail(comm->failed,
                        "%s of '%s'%s on rank %d refused: this communicator failed earlier: %s",
                        op, label ? label : "", comm->in, comm->world_rank, comm->failure);
    return zs__fail(failed->failed,
                    "%s of '%s'%s on rank %d refused: the %s communicator failed earlier, and "
                    "the ranks no longer agree on what comes next: %s",
                    op, label ? label : "", comm->in, comm->world_rank,
                    failed->where[0] ? failed->where : "world", failed->failure);
}

/* comm.check_collectives: every rank contributes the fingerprint of the
 * collective it is about to run; all see all, so when they differ every rank
 * fails here together, naming the first rank that differs from it and both
 * fingerprints, before any data moves (the desync a flight recorder finds
 * after the fact). */
static zs_status check_fingerprints(zs__comm *comm, const zs__comm_call *call, uint64_t count,
                                    int dtype, int root, const char *what) {
    if (!comm->check_collectives || comm->size < 2 || comm->host == MPI_COMM_NULL) return ZS_OK;
    fingerprint mine;
    memset(&mine, 0, sizeof mine);
    mine.seq = call->seq;
    mine.count = count;
    mine.dtype = dtype;
    mine.root = root;
    snprintf(mine.op, sizeof mine.op, "%s", call->op);
    snprintf(mine.label, sizeof mine.label, "%s", call->label);
    snprintf(mine.what, sizeof mine.what, "%s", what);
    fingerprint *all = NULL;
    const size_t all_bytes = sizeof mine * (size_t)comm->size;
    ZS_CHECK(zs__mem_host_alloc(comm->mem, ZS_MEM_COMM, all_bytes, (void **)&all));
    zs__comm_call exchange = *call;
    exchange.bytes = sizeof mine;
    zs_status st = zs__mpi_exchange(comm, &exchange, ZS_TAG_FINGERPRINT, &mine, sizeof mine, all);
    int differing = -1;
    for (int r = 0; st == ZS_OK && r < comm->size && differing < 0; r++) {
        fingerprint *f = &all[r];
        f->op[sizeof f->op - 1] = f->label[sizeof f->label - 1] = f->what[sizeof f->what - 1] = 0;
        if (f->seq != mine.seq || f->count != mine.count || f->dtype != mine.dtype ||
            f->root != mine.root || strcmp(f->op, mine.op) != 0 ||
            strcmp(f->label, mine.label) != 0)
            differing = r;
    }
    if (st == ZS_OK && differing >= 0) {
        char a[256], b[256];
        describe_fingerprint(a, sizeof a, &mine);
        describe_fingerprint(b, sizeof b, &all[differing]);
        snprintf(comm->failure, sizeof comm->failure,
                 "ranks are out of step (comm.check_collectives)%s: rank %d is about to run %s "
                 "but rank %d is about to run %s; every rank must make the same collective "
                 "calls in the same order (same units fetched and released in the same order, "
                 "zs_step, zs_save and zs_load on every rank)",
                 comm->in, comm->world_rank, a, zs__comm_host_rank(comm, differing), b);
        comm->failed = ZS_ERR_MISMATCH;
        st = zs__fail(ZS_ERR_MISMATCH, "%s", comm->failure);
        ZS_LOG_ERROR_("%s", comm->failure);
    }
    zs__mem_host_free(comm->mem, ZS_MEM_COMM, all, all_bytes);
    return st;
}

/* Counts the call and opens its link accounting: the transport reports
 * each send (zs__comm_count_sent) until settle() splits the count. Called
 * after the fingerprints, whose exchange is not the op's traffic. */
static void account(zs__comm *comm, zs_comm_op op, uint64_t bytes) {
    comm->stats.calls[op]++;
    comm->stats.bytes[op] += bytes;
    comm->pending_op = op;
    comm->pending_bytes = bytes;
    comm->sent_intra = comm->sent_inter = 0;
}

uint64_t zs__comm_inter_share(uint64_t counted, uint64_t sent_intra, uint64_t sent_inter) {
    if (counted == 0 || sent_inter == 0) return 0;
    if (sent_intra == 0) return counted;
    if (sent_intra + sent_inter == counted) return sent_inter;
    /* Host collectives counted by the ring model (a few scalars, a
     * broadcast): a proportion, rounded down. */
    const uint64_t share =
        (uint64_t)((double)counted * ((double)sent_inter / (double)(sent_intra + sent_inter)));
    return share > counted ? counted : share;
}

/* Splits the call's count by link, so that bytes = intra + inter always:
 * in the proportion the transport really sent (exactly what it sent when
 * the count is what it sends: the ring, all-to-all, all-gather of bytes),
 * or, when the transport sent nothing this rank could see (MPI's own
 * collectives, NCCL), as the ring would: everything to the next rank.
 * Runs whether the call succeeded or not, and returns its status. */
static zs_status settle(zs__comm *comm, zs_status status) {
    const zs_comm_op op = comm->pending_op;
    const uint64_t counted = comm->pending_bytes;
    if (counted != 0 && comm->sent_intra + comm->sent_inter == 0 && comm->size > 1)
        zs__comm_count_sent(comm, (comm->rank + 1) % comm->size, 1);
    const uint64_t inter = zs__comm_inter_share(counted, comm->sent_intra, comm->sent_inter);
    comm->stats.bytes_inter[op] += inter;
    comm->stats.bytes_intra[op] += counted - inter;
    comm->pending_bytes = 0;
    return status;
}

/* Checks what every chunked collective needs: a buffer of size*count elements
 * whose byte size fits in size_t, and a known dtype. Sums accept all three
 * (fp16 and bf16 add in fp32 and round once per add, reduce.h). The check
 * runs before the call is numbered, and gives the same answer on every rank
 * when every rank made the same call, so a rejected call never leaves ranks
 * out of step. */
static zs_status check_chunked(const zs__comm *comm, const char *op, const void *buf,
                               size_t count, zs_dtype dtype, const char *label) {
    size_t esize = zs_dtype_size(dtype);
    if (esize == 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s of '%s': unknown dtype %d", op,
                        label ? label : "", (int)dtype);
    size_t total;
    if (!zs__mul_size(count, (size_t)comm->size, &total) || !zs__mul_size(total, esize, &total))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s of '%s': %d chunks of %zu %s elements overflow the address space",
                        op, label ? label : "", comm->size, count, zs_dtype_name(dtype));
    if (!buf && count > 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s of '%s': buffer is NULL", op,
                        label ? label : "");
    return ZS_OK;
}

static void describe_chunked(char *what, size_t capacity, const zs__comm *comm, size_t count,
                             zs_dtype dtype, zs__comm_impl impl) {
    snprintf(what, capacity, "%d chunks of %zu %s elements (%s)", comm->size, count,
             zs_dtype_name(dtype), impl_name(impl));
}

/* (size-1) * count * element size: what a ring sends from each rank. */
static uint64_t ring_bytes(const zs__comm *comm, size_t count, zs_dtype dtype) {
    return (uint64_t)(comm->size - 1) * (uint64_t)count * zs_dtype_size(dtype);
}

zs_status zs__comm_reduce_scatter(zs__comm *comm, void *buf, size_t count, zs_dtype dtype,
                                  const char *label) {
    ZS_CHECK(check_usable(comm, "reduce_scatter", label));
    ZS_CHECK(check_chunked(comm, "reduce_scatter", buf, count, dtype, label));
    char what[128];
    describe_chunked(what, sizeof what, comm, count, dtype, comm->reduce_scatter_impl);
    zs__comm_call call = begin_call(comm, "reduce_scatter", label, what,
                                    (uint64_t)comm->size * count * zs_dtype_size(dtype));
    ZS_CHECK(check_fingerprints(comm, &call, count, (int)dtype, -1, what));
    account(comm, ZS_COMM_REDUCE_SCATTER, ring_bytes(comm, count, dtype));
    if (comm->size == 1 || count == 0) return settle(comm, ZS_OK);
    ZS_CHECK(settle(comm, comm->ops->reduce_scatter(comm, buf, count, dtype,
                                                    comm->reduce_scatter_impl, &call)));
    return ZS_OK;
}

zs_status zs__comm_all_gather_as(zs__comm *comm, void *buf, size_t count, zs_dtype dtype,
                                 zs__comm_impl impl, const char *label) {
    ZS_CHECK(check_usable(comm, "all_gather", label));
    ZS_CHECK(check_chunked(comm, "all_gather", buf, count, dtype, label));
    char what[128];
    describe_chunked(what, sizeof what, comm, count, dtype,
                     zs__comm_all_gather_choice(comm, impl, count * zs_dtype_size(dtype)));
    zs__comm_call call = begin_call(comm, "all_gather", label, what,
                                    (uint64_t)comm->size * count * zs_dtype_size(dtype));
    ZS_CHECK(check_fingerprints(comm, &call, count, (int)dtype, -1, what));
    account(comm, ZS_COMM_ALL_GATHER, ring_bytes(comm, count, dtype));
    if (comm->size == 1 || count == 0) return settle(comm, ZS_OK);
    ZS_CHECK(settle(comm, comm->ops->all_gather(comm, buf, count, dtype, impl, &call)));
    return ZS_OK;
}

zs_status zs__comm_all_gather(zs__comm *comm, void *buf, size_t count, zs_dtype dtype,
                              const char *label) {
    return zs__comm_all_gather_as(comm, buf, count, dtype, comm->all_gather_impl, label);
}

zs_status zs__comm_all_reduce(zs__comm *comm, void *buf, size_t count, zs_dtype dtype,
                              const char *label) {
    ZS_CHECK(check_usable(comm, "all_reduce", label));
    ZS_CHECK(check_chunked(comm, "all_reduce", buf, count, dtype, label));
    char what[160];
    snprintf(what, sizeof what, "%d chunks of %zu %s elements (%s reduce-scatter, %s all-gather)",
             comm->size, count, zs_dtype_name(dtype), impl_name(comm->reduce_scatter_impl),
             impl_name(zs__comm_all_gather_choice(comm, comm->all_gather_impl,
                                                  count * zs_dtype_size(dtype))));
    zs__comm_call call = begin_call(comm, "all_reduce", label, what,
                                    (uint64_t)comm->size * count * zs_dtype_size(dtype));
    ZS_CHECK(check_fingerprints(comm, &call, count, (int)dtype, -1, what));
    account(comm, ZS_COMM_ALL_REDUCE, 2 * ring_bytes(comm, count, dtype));
    if (comm->size == 1 || count == 0) return settle(comm, ZS_OK);
    /* The two halves run under the all-reduce's name and number, and are not
     * counted again under ZS_COMM_REDUCE_SCATTER / ZS_COMM_ALL_GATHER. Because
     * the all-gather only copies the owner's bits, every rank ends with what
     * reduce_scatter alone gives the owner. */
    zs_status st =
        comm->ops->reduce_scatter(comm, buf, count, dtype, comm->reduce_scatter_impl, &call);
    if (st == ZS_OK)
        st = comm->ops->all_gather(comm, buf, count, dtype, comm->all_gather_impl, &call);
    ZS_CHECK(settle(comm, st));
    return ZS_OK;
}

zs_status zs__comm_all_reduce_scalars(zs__comm *comm, double *values, int n, zs__reduce_op op,
                                      const char *label) {
    ZS_CHECK(check_usable(comm, "all_reduce", label));
    if (n < 0 || (n > 0 && !values) || (op != ZS_REDUCE_SUM && op != ZS_REDUCE_MAX))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "all_reduce of scalars '%s': bad arguments (n = %d, values %s, op %d)",
                        label ? label : "", n, values ? "set" : "NULL", (int)op);
    char what[96];
    snprintf(what, sizeof what, "%d doubles (%s)", n, op == ZS_REDUCE_SUM ? "sum" : "max");
    zs__comm_call call = begin_call(comm, "all_reduce", label, what,
                                    (uint64_t)n * sizeof(double));
    ZS_CHECK(check_fingerprints(comm, &call, (uint64_t)n, -1 - (int)op, -1, what));
    /* 2(n-1)/n of the payload, as a ring all-reduce would send, rounded down. */
    account(comm, ZS_COMM_ALL_REDUCE,
            2 * (uint64_t)(comm->size - 1) * (uint64_t)n * sizeof(double) / (uint64_t)comm->size);
    if (comm->size == 1 || n == 0) return settle(comm, ZS_OK);
    ZS_CHECK(settle(comm, comm->ops->all_reduce_scalars(comm, values, n, op, &call)));
    return ZS_OK;
}

/* Every rank's `bytes` into `all`, named `op` in messages and fingerprints
 * and counted as `counted` bytes of `counter`: the all-gather of bytes, and
 * the all-reduce whose values the caller combines (zs__comm_all_reduce_gathered). */
static zs_status gather_bytes(zs__comm *comm, const char *op, int kind, const char *what,
                              zs_comm_op counter, uint64_t counted, const void *mine,
                              size_t bytes, void *all, const char *label) {
    ZS_CHECK(check_usable(comm, op, label));
    size_t total;
    if (!zs__mul_size(bytes, (size_t)comm->size, &total) || (bytes > 0 && (!mine || !all)))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s of bytes '%s': bad arguments (%zu bytes from each of %d ranks)", op,
                        label ? label : "", bytes, comm->size);
    zs__comm_call call = begin_call(comm, op, label, what, (uint64_t)bytes);
    ZS_CHECK(check_fingerprints(comm, &call, (uint64_t)bytes, kind, -1, what));
    account(comm, counter, counted);
    if (bytes == 0) return settle(comm, ZS_OK);
    if (comm->size == 1) {
        /* Nothing to exchange, but `all` must still hold this rank's bytes. */
        if (all != mine) memmove(all, mine, bytes);
        return settle(comm, ZS_OK);
    }
    ZS_CHECK(settle(comm, comm->ops->all_gather_bytes(comm, mine, bytes, all, &call)));
    return ZS_OK;
}

zs_status zs__comm_all_gather_bytes(zs__comm *comm, const void *mine, size_t bytes, void *all,
                                    const char *label) {
    char what[64];
    snprintf(what, sizeof what, "%zu bytes from each rank", bytes);
    return gather_bytes(comm, "all_gather", -1, what, ZS_COMM_ALL_GATHER,
                        (uint64_t)(comm->size - 1) * (uint64_t)bytes, mine, bytes, all, label);
}

zs_status zs__comm_all_reduce_gathered(zs__comm *comm, const void *mine, size_t bytes, void *all,
                                       int kind, const char *what, const char *label) {
    /* 2(n-1)/n of the payload, as a ring all-reduce would send, rounded down. */
    return gather_bytes(comm, "all_reduce", kind, what ? what : "", ZS_COMM_ALL_REDUCE,
                        2 * (uint64_t)(comm->size - 1) * (uint64_t)bytes / (uint64_t)comm->size,
                        mine, bytes, all, label);
}

zs_status zs__comm_broadcast(zs__comm *comm, void *buf, size_t bytes, int root,
                             const char *label) {
    ZS_CHECK(check_usable(comm, "broadcast", label));
    if (root < 0 || root >= comm->size || (bytes > 0 && !buf))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "broadcast of '%s': bad arguments (root %d of %d ranks, %zu bytes)",
                        label ? label : "", root, comm->size, bytes);
    char what[64];
    snprintf(what, sizeof what, "%zu bytes from rank %d", bytes, root);
    zs__comm_call call = begin_call(comm, "broadcast", label, what, (uint64_t)bytes);
    ZS_CHECK(check_fingerprints(comm, &call, (uint64_t)bytes, -1, root, what));
    account(comm, ZS_COMM_BROADCAST,
            comm->rank == root && comm->size > 1 ? (uint64_t)bytes : 0);
    if (comm->size == 1 || bytes == 0) return settle(comm, ZS_OK);
    ZS_CHECK(settle(comm, comm->ops->broadcast(comm, buf, bytes, root, &call)));
    return ZS_OK;
}

zs_status zs__comm_barrier(zs__comm *comm, const char *label) {
    ZS_CHECK(check_usable(comm, "barrier", label));
    zs__comm_call call = begin_call(comm, "barrier", label, "", 0);
    ZS_CHECK(check_fingerprints(comm, &call, 0, -1, -1, ""));
    account(comm, ZS_COMM_BARRIER, 0);
    if (comm->size == 1) return settle(comm, ZS_OK);
    ZS_CHECK(settle(comm, comm->ops->barrier(comm, &call)));
    return ZS_OK;
}

zs_status zs__comm_all_to_all(zs__comm *comm, const void *send, void *recv, size_t block_bytes,
                              const char *label) {
    ZS_CHECK(check_usable(comm, "all_to_all", label));
    size_t total;
    if (!zs__mul_size(block_bytes, (size_t)comm->size, &total) ||
        (block_bytes > 0 && (!send || !recv)))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "all_to_all of '%s': bad arguments (%d blocks of %zu bytes, send %s, "
                        "recv %s)", label ? label : "", comm->size, block_bytes,
                        send ? "set" : "NULL", recv ? "set" : "NULL");
    /* Backend memory shares the address space on every backend here (the
     * CPU's, and CUDA's unified addressing), so the ranges compare. */
    const uintptr_t s0 = (uintptr_t)send, r0 = (uintptr_t)recv;
    if (block_bytes > 0 && s0 < r0 + total && r0 < s0 + total)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "all_to_all of '%s': the send and receive buffers overlap (%zu bytes "
                        "each); pass two separate buffers", label ? label : "", total);
    char what[96];
    snprintf(what, sizeof what, "%d blocks of %zu bytes", comm->size, block_bytes);
    zs__comm_call call = begin_call(comm, "all_to_all", label, what, (uint64_t)total);
    ZS_CHECK(check_fingerprints(comm, &call, (uint64_t)block_bytes, -1, -1, what));
    account(comm, ZS_COMM_ALL_TO_ALL, (uint64_t)(comm->size - 1) * (uint64_t)block_bytes);
    if (block_bytes == 0) return settle(comm, ZS_OK);
    /* Size 1 still runs: the own block must reach `recv`, in backend memory
     * on a staged or device communicator. */
    ZS_CHECK(settle(comm, comm->ops->all_to_all(comm, send, recv, block_bytes, &call)));
    return ZS_OK;
}
