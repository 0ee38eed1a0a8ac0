/* Collectives over MPI: a ring built on point-to-point messages, and the MPI
 * library's own collectives, selected per op by comm.reduce_scatter and
 * comm.all_gather. Everything moves in segments of at most comm.segment_bytes,
 * so MPI counts always fit in an int and the staging memory is bounded by
 * configuration, whatever the size of the buffer.
 *
 * Determinism: both algorithms fix the order in which the ranks' contributions
 * to an element are added, for a given communicator size, count and segment
 * size. The ring adds chunk c's contributions in the order c+1, c+2, ..., c;
 * MPI_Reduce_scatter_block's order is the library's, which is fixed for a
 * given communicator size and message size, but generally differs from the
 * ring's, so the two implementations may differ in the last bits.
 *
 * Half precision (fp16, bf16): every add, the ring's and MPI's, is
 * zs__comm_sum_into (reduce.h): widen to fp32, add, round once to the dtype.
 * So an element is rounded once per hop, in the order above, and the result
 * is as repeatable as in fp32. MPI has no half-precision types or sums, so
 * the MPI implementation reduces 2-byte integers (MPI_UINT16_T) with a
 * user-defined, commutative MPI_Op per dtype that calls the same function.
 *
 * Floor (src/floors.txt): the MPI implementation: calls the communicator
 * object, the waits, the host collectives, the staging and the sums below
 * it; the front reaches it through the ops table.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "comm/mpi_host.h"
#include "comm/reduce.h"
#include "comm/staging.h"
#include "comm/wait.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"

typedef struct mpi_state {
    MPI_Comm comm;            /* our duplicate, with MPI_ERRORS_RETURN */
    unsigned char *staging;   /* comm.segment_bytes, charged to ZS_MEM_COMM; NULL at size 1 */
    size_t staging_bytes;
    MPI_Op sum_fp16;          /* user ops for MPI_Reduce_scatter_block on MPI_UINT16_T */
    MPI_Op sum_bf16;
    zs__staging stage;        /* data in backend memory goes through it (staging.h);
                                 stage.backend is NULL while buffers are host memory */
    zs__backend *device;      /* the backend of zs__comm_stage_through, also at size 1,
                                 where nothing is staged but an all-to-all's own block
                                 is still copied in backend memory */
    /* A group's state (comm.h) holds only this: the world's state, whose
     * duplicate, staging buffer and host staging it uses (one collective
     * runs at a time across a world and its groups). NULL in the world. */
    struct mpi_state *world;
} mpi_state;

/* The state that owns the buffers: the world's. */
static mpi_state *owner(zs__comm *comm) {
    mpi_state *st = comm->state;
    return st->world ? st->world : st;
}

/* The name of the MPI function in a failing call, without its arguments. */
static const char *function_name(const char *call_text, char *out, size_t capacity) {
    size_t n = strcspn(call_text, "(");
    if (n >= capacity) n = capacity - 1;
    memcpy(out, call_text, n);
    out[n] = '\0';
    return out;
}

/* Returns the collective's failure message when an MPI call fails. */
#define MPI_CHECK(comm, call, function_call)                                     \
    do {                                                                         \
        int mpi_check_rc_ = (function_call);                                     \
        if (mpi_check_rc_ != MPI_SUCCESS) {                                      \
            char mpi_check_name_[64];                                            \
            zs_status mpi_check_status_ =                                        \
                zs__mpi_fail((comm), (call),                                         \
                         function_name(#function_call, mpi_check_name_,          \
                                       sizeof mpi_check_name_),                  \
                         mpi_check_rc_);                                         \
            zs__error_breadcrumb(__FILE__, __LINE__);                            \
            return mpi_check_status_;                                            \
        }                                                                        \
    } while (0)

/* ------------------------------------------------------------------- ring */

/* One ring pass, shared by reduce-scatter and all-gather. At step s (0..n-2)
 * rank q sends chunk (q - s - shift) mod n to q+1 and receives chunk
 * (q - s - shift - 1) mod n from q-1; shift is 1 for reduce-scatter (chunk q
 * ends complete on rank q) and 0 for all-gather (rank q starts by sending its
 * own chunk). Each step moves its chunk in segments, and the messages of all
 * steps form one stream m = s * nseg + k that is processed in order:
 *
 *   post the send of message m (its data was completed by message m - nseg),
 *   wait for the receive of message m, (reduce-scatter: add it in),
 *   post the receive of message m + depth into the slot just freed.
 *
 * With depth d, d receives and d sends are in flight, so on a transport that
 * moves data by itself (a NIC) segment m+1 arrives while segment m is added;
 * reduce-scatter then splits the staging buffer into d slots. Reduce-scatter
 * receives into staging (its own copy of the chunk must stay intact until the
 * add); all-gather receives straight into place.
 *
 * RING_DEPTH is 1 on purpose. On one node Open MPI moves large messages with a
 * single copy (CMA) made by the receiving process inside MPI_Wait, so nothing
 * is transferred while a rank adds, and a second message in flight only
 * splits the staging buffer into smaller messages and adds protocol traffic:
 * bench/comm measured depth 2 about 1.3x slower for reduce-scatter and up to
 * 1.7x slower for all-gather on 2 ranks (same message size), and no faster on
 * 4 ranks. Revisit when ranks span nodes; the loop supports any depth up to
 * RING_MAX_DEPTH. */
enum { RING_MAX_DEPTH = 8, RING_DEPTH = 1 };

typedef struct ring_pass {
    unsigned char *buf;      /* size chunks of chunk_bytes */
    size_t chunk_bytes;
    size_t segment_bytes;    /* bytes per message; a multiple of the element size */
    int shift;
    int reduce;              /* 1: receive into staging and add; 0: receive in place */
    zs_dtype dtype;          /* what the add sums when reduce */
    int tag;
    int depth;               /* messages in flight each way, 1..RING_MAX_DEPTH */
    unsigned char *slot[RING_MAX_DEPTH]; /* staging slots when reduce */
} ring_pass;

static size_t ring_chunk(int rank, int size, size_t step, int shift) {
    return (size_t)(((long long)rank - (long long)step - shift) % size + size) % (size_t)size;
}

/* Where message m lands: a staging slot, or its place in the buffer. */
static unsigned char *ring_recv_target(const ring_pass *p, int rank, int size, size_t nseg,
                                       size_t m) {
    if (p->reduce) return p->slot[m % (size_t)p->depth];
    return p->buf + ring_chunk(rank, size, m / nseg, p->shift + 1) * p->chunk_bytes +
           (m % nseg) * p->segment_bytes;
}

static size_t ring_length(const ring_pass *p, size_t nseg, size_t m) {
    size_t offset = (m % nseg) * p->segment_bytes;
    return p->chunk_bytes - offset < p->segment_bytes ? p->chunk_bytes - offset
                                                      : p->segment_bytes;
}

static zs_status ring_run(zs__comm *comm, mpi_state *st, const ring_pass *p,
                          const zs__comm_call *call) {
    const int n = comm->size, q = comm->rank;
    /* Members of the communicator, and the same ranks in st->comm (a
     * group's are world ranks). */
    const int right = (q + 1) % n, left = (q + n - 1) % n;
    const int right_host = zs__comm_host_rank(comm, right), left_host = zs__comm_host_rank(comm, left);
    const size_t depth = (size_t)p->depth;
    const size_t nseg = (p->chunk_bytes + p->segment_bytes - 1) / p->segment_bytes;
    const size_t total = (size_t)(n - 1) * nseg;
    MPI_Request recv[RING_MAX_DEPTH], send[RING_MAX_DEPTH];
    for (size_t d = 0; d < depth; d++) recv[d] = send[d] = MPI_REQUEST_NULL;

    for (size_t m = 0; m < total && m < depth; m++)
        MPI_CHECK(comm, call, MPI_Irecv(ring_recv_target(p, q, n, nseg, m),
                                        (int)ring_length(p, nseg, m), MPI_BYTE, left_host, p->tag,
                                        st->comm, &recv[m]));
    for (size_t m = 0; m < total; m++) {
        const size_t step = m / nseg, off = (m % nseg) * p->segment_bytes;
        const size_t len = ring_length(p, nseg, m);
        ZS_CHECK(zs__comm_wait_one(comm, call, &send[m % depth], right, 0));
        unsigned char *out = p->buf + ring_chunk(q, n, step, p->shift) * p->chunk_bytes + off;
        MPI_CHECK(comm, call, MPI_Isend(out, (int)len, MPI_BYTE, right_host, p->tag, st->comm,
                                        &send[m % depth]));
        /* Counted where it is sent: a segment to a peer on another node is
         * cross-node traffic (zs_comm_stats). */
        zs__comm_count_sent(comm, right, len);
        ZS_CHECK(zs__comm_wait_one(comm, call, &recv[m % depth], left, 1));
        if (p->reduce) {
            unsigned char *into =
                p->buf + ring_chunk(q, n, step, p->shift + 1) * p->chunk_bytes + off;
            /* The staging slot never overlaps the buffer, as the add requires. */
            const size_t count = len / zs_dtype_size(p->dtype);
            if (comm->backend)
                ZS_CHECK(comm->backend->ops->accumulate(comm->backend, into, p->dtype,
                                                        p->slot[m % depth], p->dtype,
                                                        (int64_t)count));
            else
                zs__comm_sum_into(into, p->slot[m % depth], count, p->dtype);
        }
        if (m + depth < total)
            MPI_CHECK(comm, call, MPI_Irecv(ring_recv_target(p, q, n, nseg, m + depth),
                                            (int)ring_length(p, nseg, m + depth), MPI_BYTE,
                                            left_host, p->tag, st->comm, &recv[m % depth]));
    }
    for (size_t d = 0; d < depth; d++) ZS_CHECK(zs__comm_wait_one(comm, call, &send[d], right, 0));
    return ZS_OK;
}

static zs_status ring_reduce_scatter(zs__comm *comm, mpi_state *st, void *buf, size_t count,
                                     zs_dtype dtype, const zs__comm_call *call) {
    /* The slots are multiples of ZS_HOST_ALIGNMENT bytes, so every segment
     * boundary falls between elements of any dtype. */
    ring_pass p = {
        .buf = buf,
        .chunk_bytes = count * zs_dtype_size(dtype),
        .shift = 1,
        .reduce = 1,
        .dtype = dtype,
        .tag = zs__comm_tag(comm, ZS_TAG_REDUCE_SCATTER, call),
        .depth = RING_DEPTH,
    };
    size_t part = st->staging_bytes / (size_t)p.depth;
    part -= part % ZS_HOST_ALIGNMENT;
    p.segment_bytes = part;
    for (int d = 0; d < p.depth; d++) p.slot[d] = st->staging + (size_t)d * part;
    return ring_run(comm, st, &p, call);
}

static zs_status ring_all_gather(zs__comm *comm, mpi_state *st, void *buf, size_t count,
                                 size_t esize, const zs__comm_call *call) {
    ring_pass p = {
        .buf = buf,
        .chunk_bytes = count * esize,
        .segment_bytes = comm->segment_bytes - comm->segment_bytes % esize,
        .shift = 0,
        .reduce = 0,
        .tag = zs__comm_tag(comm, ZS_TAG_ALL_GATHER, call),
        .depth = RING_DEPTH,
    };
    return ring_run(comm, st, &p, call);
}

/* -------------------------------------------------------- MPI collectives */

/* MPI_Reduce_scatter_block reduces block r of the send buffer into rank r, so
 * it needs the same piece of every chunk side by side. Each call packs piece
 * [off, off+len) of every chunk into the staging buffer (len = what fits for
 * all ranks), reduces in place there, and copies the result back into this
 * rank's chunk. The packing costs one extra pass over the buffer but keeps
 * memory bounded by comm.segment_bytes and every count within an int. */
static zs_status mpi_reduce_scatter(zs__comm *comm, mpi_state *st, void *buf, size_t count,
                                    zs_dtype dtype, const zs__comm_call *call) {
    const int n = comm->size;
    const size_t esize = zs_dtype_size(dtype);
    MPI_Datatype type = MPI_FLOAT;
    MPI_Op op = MPI_SUM;
    if (dtype == ZS_DTYPE_FP16 || dtype == ZS_DTYPE_BF16) {
        type = MPI_UINT16_T;
        op = dtype == ZS_DTYPE_FP16 ? st->sum_fp16 : st->sum_bf16;
    }
    const size_t piece = st->staging_bytes / ((size_t)n * esize);
    unsigned char *stage = st->staging, *data = buf;
    for (size_t off = 0; off < count; off += piece) {
        size_t len = count - off < piece ? count - off : piece;
        for (int j = 0; j < n; j++)
            memcpy(stage + (size_t)j * len * esize, data + ((size_t)j * count + off) * esize,
                   len * esize);
        MPI_Request request = MPI_REQUEST_NULL;
        MPI_CHECK(comm, call, MPI_Ireduce_scatter_block(MPI_IN_PLACE, stage, (int)len, type, op,
                                                        st->comm, &request));
        ZS_CHECK(zs__comm_wait_one(comm, call, &request, -1, 1));
        memcpy(data + ((size_t)comm->rank * count + off) * esize, stage, len * esize);
    }
    return ZS_OK;
}

/* The user ops: MPI hands over `*len` elements of MPI_UINT16_T and wants
 * inout = in + inout. The two never overlap (MPI gives distinct buffers). */
static void mpi_sum_fp16(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    zs__comm_sum_into(inout, in, (size_t)*len, ZS_DTYPE_FP16);
}

static void mpi_sum_bf16(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    zs__comm_sum_into(inout, in, (size_t)*len, ZS_DTYPE_BF16);
}

/* ------------------------------------------------------------- the table */

/* The collectives on host memory: `buf` is host memory, the staged piece of
 * backend memory or the backend's own memory where the host can address
 * it. */
static zs_status host_reduce_scatter(zs__comm *comm, void *buf, size_t count, zs_dtype dtype,
                                     zs__comm_impl impl, const zs__comm_call *call) {
    mpi_state *st = owner(comm);
    /* A group runs the ring (comm.h): MPI's own collective would span the
     * whole world duplicate. */
    if (impl == ZS_COMM_IMPL_RING || comm->world_of)
        return ring_reduce_scatter(comm, st, buf, count, dtype, call);
    return mpi_reduce_scatter(comm, st, buf, count, dtype, call);
}

/* `impl` is concrete here (op_all_gather resolved "auto"). */
static zs_status host_all_gather(zs__comm *comm, void *buf, size_t count, zs_dtype dtype,
                                 zs__comm_impl impl, const zs__comm_call *call) {
    mpi_state *st = owner(comm);
    size_t esize = zs_dtype_size(dtype);
    if (impl == ZS_COMM_IMPL_RING || comm->world_of)
        return ring_all_gather(comm, st, buf, count, esize, call);
    return zs__mpi_all_gather_native(comm, buf, count * esize,
                                     comm->segment_bytes - comm->segment_bytes % esize, call);
}

static zs_status op_reduce_scatter(zs__comm *comm, void *buf, size_t count, zs_dtype dtype,
                                   zs__comm_impl impl, const zs__comm_call *call) {
    mpi_state *st = owner(comm);
    if (st->stage.backend)
        return zs__staged_reduce_scatter(comm, &st->stage, buf, count, dtype, impl, call,
                                         host_reduce_scatter);
    return host_reduce_scatter(comm, buf, count, dtype, impl, call);
}

static zs_status op_all_gather(zs__comm *comm, void *buf, size_t count, zs_dtype dtype,
                               zs__comm_impl impl, const zs__comm_call *call) {
    mpi_state *st = owner(comm);
    /* "auto" is decided once, by the caller's chunk (what the measurement
     * timed and what the logs describe), not again per staged piece. */
    impl = zs__comm_all_gather_choice(comm, impl, count * zs_dtype_size(dtype));
    if (st->stage.backend)
        return zs__staged_all_gather(comm, &st->stage, buf, count, dtype, impl, call,
                                     host_all_gather);
    return host_all_gather(comm, buf, count, dtype, impl, call);
}

/* Pairwise exchange on host memory (comm.h): at step s this rank sends its
 * block for rank + s and receives rank - s's block for it. A pair of ranks
 * meets at one step only, and its pieces arrive in order (MPI does not
 * overtake between one sender and one receiver under one tag), so one tag
 * serves the whole call. */
static zs_status host_all_to_all(zs__comm *comm, const unsigned char *send, unsigned char *recv,
                                 size_t block, const zs__comm_call *call) {
    const int n = comm->size, r = comm->rank;
    memcpy(recv + (size_t)r * block, send + (size_t)r * block, block);
    const int tag = zs__comm_tag(comm, ZS_TAG_ALL_TO_ALL, call);
    const size_t piece = comm->segment_bytes;
    for (int s = 1; s < n; s++) {
        const int to = (r + s) % n, from = (r - s + n) % n;
        for (size_t off = 0; off < block; off += piece) {
            const size_t len = block - off < piece ? block - off : piece;
            ZS_CHECK(zs__mpi_swap(comm, call, tag, send + (size_t)to * block + off, len, to,
                                  recv + (size_t)from * block + off, len, from));
        }
    }
    return ZS_OK;
}

static zs_status op_all_to_all(zs__comm *comm, const void *send, void *recv, size_t block,
                               const zs__comm_call *call) {
    mpi_state *st = owner(comm);
    if (st->stage.backend)
        return zs__staged_all_to_all(comm, &st->stage, send, recv, block,
                                     zs__comm_tag(comm, ZS_TAG_ALL_TO_ALL, call), call);
    if (st->device && !st->device->ops->host_accessible) {
        /* Backend memory and nobody to exchange with (a world of one rank,
         * where nothing was staged): the own block, on the backend. */
        ZS_ASSERT(comm->size == 1);
        return st->device->ops->copy(st->device, (unsigned char *)recv + (size_t)comm->rank * block,
                                     (const unsigned char *)send + (size_t)comm->rank * block,
                                     block);
    }
    return host_all_to_all(comm, send, recv, block, call);
}

/* `abandoned`: a collective timed out, and requests of MPI's own
 * collectives that could be neither cancelled nor freed (wait.c) may still
 * write into the staging buffers if a slow peer wakes up: those buffers are
 * left allocated (the process is ending anyway) rather than freed under
 * MPI's feet. */
static void free_state(mpi_state *st, zs__mem *mem, int abandoned) {
    if (!st) return;
    if (!abandoned) {
        zs__staging_destroy(&st->stage);
        zs__mem_host_free(mem, ZS_MEM_COMM, st->staging, st->staging_bytes);
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    /* After MPI_Finalize the duplicate and the ops are gone with everything
     * else. */
    if (!finalized) {
        if (st->sum_fp16 != MPI_OP_NULL) MPI_Op_free(&st->sum_fp16);
        if (st->sum_bf16 != MPI_OP_NULL) MPI_Op_free(&st->sum_bf16);
        if (st->comm != MPI_COMM_NULL) MPI_Comm_free(&st->comm);
    }
    free(st);
}

static void op_destroy(zs__comm *comm) {
    mpi_state *st = comm->state;
    if (st && st->world) { /* a group's: everything it uses is the world's */
        free(st);
        return;
    }
    /* A timeout in any of the family (a group uses the world's buffers)
     * abandons them. */
    free_state(st, comm->mem, zs__comm_failed(comm) == ZS_ERR_TIMEOUT);
}

static zs_status op_group_state(zs__comm *world, zs__comm *group) {
    mpi_state *st = zs__calloc(1, sizeof *st);
    if (!st)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_create: out of host memory for the %s "
                        "communicator's state (%zu bytes)", group->where, sizeof *st);
    mpi_state *w = world->state;
    st->world = w;
    st->comm = w->comm;
    st->sum_fp16 = st->sum_bf16 = MPI_OP_NULL;
    group->state = st;
    return ZS_OK;
}

static const zs__comm_ops mpi_ops = {
    .name = "mpi",
    .reduce_scatter = op_reduce_scatter,
    .all_gather = op_all_gather,
    .all_reduce_scalars = zs__mpi_all_reduce_scalars,
    .all_gather_bytes = zs__mpi_all_gather_bytes,
    .broadcast = zs__mpi_broadcast,
    .barrier = zs__mpi_barrier,
    .all_to_all = op_all_to_all,
    .group_state = op_group_state,
    .destroy = op_destroy,
};

/* ---------------------------------------------------------------- create */

static zs_status create_fail(const char *function, int rc) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error code %d", rc);
    return zs__fail(ZS_ERR_COMM, "creating the communicator failed: %s: %s", function, text);
}

zs_status zs__comm_create_mpi(MPI_Comm comm, const zs__settings *settings, zs__mem *mem,
                              zs__comm **out) {
    if (!settings || !mem || !out || comm == MPI_COMM_NULL)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "zs__comm_create_mpi needs a communicator, settings, an accountant "
                        "and an output pointer");
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized)
        return zs__fail(ZS_ERR_STATE, "MPI is %s; initialize it (MPI_Init_thread with "
                                      "MPI_THREAD_FUNNELED or better) before creating a context",
                        finalized ? "already finalized" : "not initialized");
    const zs__comm_impl rs = settings->comm.reduce_scatter, ag = settings->comm.all_gather;
    if ((rs != ZS_COMM_IMPL_RING && rs != ZS_COMM_IMPL_MPI) ||
        (ag != ZS_COMM_IMPL_RING && ag != ZS_COMM_IMPL_MPI && ag != ZS_COMM_IMPL_AUTO))
        return zs__fail(ZS_ERR_CONFIG,
                        "comm.reduce_scatter (%d) must be \"ring\" or \"mpi\", and "
                        "comm.all_gather (%d) \"ring\", \"mpi\" or \"auto\"", (int)rs, (int)ag);
    if (settings->comm.timeout_s < 1)
        return zs__fail(ZS_ERR_CONFIG, "comm.timeout_s = %lld must be at least 1 second",
                        (long long)settings->comm.timeout_s);
    /* An aligned line for each of the ring's staging slots, and a segment
     * that is a valid MPI count. */
    const int64_t segment = settings->comm.segment_bytes;
    if (segment < RING_DEPTH * ZS_HOST_ALIGNMENT || segment > INT_MAX)
        return zs__fail(ZS_ERR_CONFIG, "comm.segment_bytes = %lld is out of range [%d, %d]",
                        (long long)segment, RING_DEPTH * ZS_HOST_ALIGNMENT, INT_MAX);

    /* Creation is collective too: a rank that never calls zs_create must not
     * leave the others waiting forever. The duplicate comes first, so that
     * every rank has it for the agreement below whatever fails after it. */
    MPI_Comm dup = MPI_COMM_NULL;
    MPI_Request dup_request = MPI_REQUEST_NULL;
    int rc = MPI_Comm_idup(comm, &dup, &dup_request);
    if (rc != MPI_SUCCESS) return create_fail("MPI_Comm_idup", rc);
    /* On failure the duplicate never came into being: nothing to free. */
    ZS_CHECK(zs__comm_wait_startup(&dup_request, settings, comm,
                                   "duplicating the communicator (MPI_Comm_idup) in zs_create"));
    zs_status status = ZS_OK;
    mpi_state *st = zs__calloc(1, sizeof *st);
    if (!st) {
        status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_create: cannot allocate the MPI "
                          "communicator's state (%zu bytes of host memory)", sizeof *st);
        goto agree;
    }
    st->comm = dup;
    st->sum_fp16 = st->sum_bf16 = MPI_OP_NULL;
    rc = MPI_Comm_set_errhandler(st->comm, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
        status = create_fail("MPI_Comm_set_errhandler", rc);
        goto agree;
    }
    /* Commutative: the sum of two elements does not depend on their order,
     * which lets MPI pick its usual algorithms. Created here, not per call,
     * so a collective never allocates MPI objects. */
    rc = MPI_Op_create(mpi_sum_fp16, 1, &st->sum_fp16);
    if (rc != MPI_SUCCESS) {
        st->sum_fp16 = MPI_OP_NULL;
        status = create_fail("MPI_Op_create", rc);
        goto agree;
    }
    rc = MPI_Op_create(mpi_sum_bf16, 1, &st->sum_bf16);
    if (rc != MPI_SUCCESS) {
        st->sum_bf16 = MPI_OP_NULL;
        status = create_fail("MPI_Op_create", rc);
        goto agree;
    }
    int rank = 0, size = 1;
    MPI_Comm_rank(st->comm, &rank);
    MPI_Comm_size(st->comm, &size);

    /* MPI_Reduce_scatter_block packs one piece of every rank's chunk into the
     * staging buffer, so it must hold at least one element per rank, of the
     * widest dtype (fp32) so that every dtype fits. The check
     * depends only on settings and size, so all ranks fail together. */
    if (rs == ZS_COMM_IMPL_MPI && (size_t)segment / ((size_t)size * sizeof(float)) == 0) {
        status = zs__fail(ZS_ERR_CONFIG,
                          "comm.segment_bytes = %lld is too small for comm.reduce_scatter = "
                          "\"mpi\" on %d ranks; use at least %zu",
                          (long long)segment, size, (size_t)size * sizeof(float));
        goto agree;
    }
    /* Both reduce-scatter implementations stage data, so every communicator
     * that can reduce (size > 1) holds exactly comm.segment_bytes. */
    if (size > 1) {
        st->staging_bytes = (size_t)segment;
        status = zs__mem_host_alloc(mem, ZS_MEM_COMM, st->staging_bytes, (void **)&st->staging);
        if (status != ZS_OK) {
            st->staging_bytes = 0;
            goto agree;
        }
    }
    status = zs__comm_new(&mpi_ops, st, rank, size, settings, mem, out);

agree:
    /* What failed on one rank (memory, above all) fails every rank here,
     * before the first collective on the new communicator. */
    {
        const zs_status agreed =
            zs__comm_agree_startup(dup, settings, status, "zs_create (communicator)");
        if (agreed == ZS_OK) {
            zs__comm_set_host(*out, st->comm);
            ZS_DEBUG("comm: created on %d ranks; reduce_scatter=%s all_gather=%s "
                     "segment_bytes=%lld", size, rs == ZS_COMM_IMPL_RING ? "ring" : "mpi",
                     ag == ZS_COMM_IMPL_RING ? "ring" : ag == ZS_COMM_IMPL_MPI ? "mpi" : "auto",
                     (long long)segment);
            return ZS_OK;
        }
        if (status == ZS_OK) { /* another rank failed: this one's communicator goes */
            zs__comm_destroy(*out);
            *out = NULL;
        } else if (st) {
            free_state(st, mem, 0);
        } else {
            MPI_Comm_free(&dup);
        }
        return agreed;
    }
}

zs_status zs__comm_stage_through(zs__comm *comm, zs__backend *backend, size_t staging_bytes) {
    if (comm->ops != &mpi_ops)
        return zs__fail(ZS_ERR_INTERNAL, "zs__comm_stage_through: the '%s' communicator has no "
                        "host staging", comm->ops->name);
    mpi_state *st = comm->state;
    if (st->world)
        return zs__fail(ZS_ERR_INTERNAL, "zs__comm_stage_through: stage the world; its groups "
                        "(%s) stage through its buffers", comm->where);
    if (st->stage.backend || st->device)
        return zs__fail(ZS_ERR_INTERNAL, "zs__comm_stage_through: staging is already set up");
    st->device = backend;
    /* No data collective moves anything at size 1 (an all-to-all copies its
     * own block with the backend's copy). */
    if (comm->size == 1) return ZS_OK;
    ZS_CHECK(zs__staging_create(&st->stage, backend, comm->mem, staging_bytes, comm->size));
    /* The ring adds staged pieces on the host: with the CPU's kernels. */
    zs__comm_use_backend(comm, st->stage.host_adder ? st->stage.host_adder : backend);
    ZS_DEBUG("comm: collectives staged through %zu bytes of host memory (backend %s)",
             staging_bytes, backend->ops->name);
    return ZS_OK;
}
