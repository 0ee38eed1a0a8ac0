/* Floor (src/floors.txt): owns nothing; calls the communicator's counters
 * (communicator.c) and the waits (wait.c) below it.
 */
#include "comm/mpi_host.h"

#include <stdio.h>
#include <string.h>

#include "comm/wait.h"
#include "core/error.h"

#define HOST_CHECK(comm, call, function, expr)                                   \
    do {                                                                         \
        int host_check_rc_ = (expr);                                             \
        if (host_check_rc_ != MPI_SUCCESS) {                                     \
            zs__error_breadcrumb(__FILE__, __LINE__);                            \
            return zs__mpi_fail((comm), (call), (function), host_check_rc_);     \
        }                                                                        \
    } while (0)

/* Agreements are small (a few scalars per rank), and one of them is how a
 * rank tells the others it ran out of memory: their scratch comes from the
 * stack up to this size, so that they allocate nothing on jobs of up to 256
 * ranks and an allocation that fails on one rank cannot leave the others in
 * the agreement that would report it. Larger scratch is heap memory,
 * charged to ZS_MEM_COMM while the call runs. */
#define SMALL_SCRATCH_BYTES 4096

typedef struct {
    _Alignas(16) unsigned char bytes[SMALL_SCRATCH_BYTES];
} small_scratch;

static zs_status scratch_take(zs__comm *comm, small_scratch *small, size_t bytes, void **out) {
    if (bytes <= sizeof small->bytes) {
        *out = small->bytes;
        return ZS_OK;
    }
    return zs__mem_host_alloc(comm->mem, ZS_MEM_COMM, bytes, out);
}

static void scratch_give(zs__comm *comm, small_scratch *small, void *ptr, size_t bytes) {
    if (ptr != small->bytes) zs__mem_host_free(comm->mem, ZS_MEM_COMM, ptr, bytes);
}

zs_status zs__mpi_swap(zs__comm *comm, const zs__comm_call *call, int tag, const void *out,
                       size_t send_bytes, int to, void *into, size_t recv_bytes, int from) {
    zs__pending p[2] = {{MPI_REQUEST_NULL, from, 1}, {MPI_REQUEST_NULL, to, 0}};
    HOST_CHECK(comm, call, "MPI_Irecv",
               MPI_Irecv(into, (int)recv_bytes, MPI_BYTE, zs__comm_host_rank(comm, from), tag,
                         comm->host, &p[0].request));
    int rc = MPI_Isend(out, (int)send_bytes, MPI_BYTE, zs__comm_host_rank(comm, to), tag,
                       comm->host, &p[1].request);
    if (rc != MPI_SUCCESS) {
        MPI_Cancel(&p[0].request);
        MPI_Request_free(&p[0].request);
        zs__error_breadcrumb(__FILE__, __LINE__);
        return zs__mpi_fail(comm, call, "MPI_Isend", rc);
    }
    zs__comm_count_sent(comm, to, send_bytes);
    ZS_CHECK(zs__comm_wait(comm, call, p, 2));
    return ZS_OK;
}

static void reverse(unsigned char *p, size_t n) {
    for (size_t i = 0, j = n; i + 1 < j; i++, j--) {
        const unsigned char t = p[i];
        p[i] = p[j - 1];
        p[j - 1] = t;
    }
}

/* Rotates n bytes right by k in place (three reversals): no scratch. */
static void rotate_right(unsigned char *p, size_t n, size_t k) {
    if (n == 0 || k % n == 0) return;
    k %= n;
    reverse(p, n);
    reverse(p, k);
    reverse(p + k, n - k);
}

/* Bruck's all-gather of one piece: `len` bytes at offset `off` of every
 * rank's contribution. tmp holds size * len bytes; after round k it holds
 * the pieces of ranks rank, rank+1, ..., rank+2^(k+1)-1 (mod size). */
static zs_status exchange_piece(zs__comm *comm, const zs__comm_call *call, int tag,
                                const unsigned char *mine, unsigned char *all, size_t bytes,
                                size_t off, size_t len, unsigned char *tmp) {
    const int n = comm->size, r = comm->rank;
    memmove(tmp, mine + off, len);
    for (int dist = 1; dist < n; dist *= 2) {
        const int blocks = dist < n - dist ? dist : n - dist;
        ZS_CHECK(zs__mpi_swap(comm, call, tag, tmp, (size_t)blocks * len, (r - dist + n) % n,
                              tmp + (size_t)dist * len, (size_t)blocks * len, (r + dist) % n));
    }
    if (tmp == all) { /* one piece, gathered in place: rank r's block is first */
        rotate_right(all, (size_t)n * bytes, (size_t)r * bytes);
        return ZS_OK;
    }
    for (int i = 0; i < n; i++)
        memcpy(all + (size_t)((r + i) % n) * bytes + off, tmp + (size_t)i * len, len);
    return ZS_OK;
}

zs_status zs__mpi_exchange(zs__comm *comm, const zs__comm_call *call, zs__tag_kind kind,
                           const void *mine, size_t bytes, void *all) {
    const size_t n = (size_t)comm->size;
    size_t piece = comm->segment_bytes / n;
    if (piece == 0) piece = 1;
    if (piece > bytes) piece = bytes;
    size_t tmp_bytes = piece * n;
    unsigned char *tmp = NULL;
    small_scratch small;
    /* Everything in one piece: the rounds run in `all` itself and one
     * rotation puts the blocks in rank order, so no scratch is needed. */
    if (piece == bytes) tmp = all;
    else ZS_CHECK(scratch_take(comm, &small, tmp_bytes, (void **)&tmp));
    const int tag = zs__comm_tag(comm, kind, call);
    zs_status st = ZS_OK;
    for (size_t off = 0; off < bytes && st == ZS_OK; off += piece) {
        size_t len = bytes - off < piece ? bytes - off : piece;
        st = exchange_piece(comm, call, tag, mine, all, bytes, off, len, tmp);
    }
    if (tmp != all) scratch_give(comm, &small, tmp, tmp_bytes);
    return st;
}

zs_status zs__mpi_all_gather_bytes(zs__comm *comm, const void *mine, size_t bytes, void *all,
                                   const zs__comm_call *call) {
    return zs__mpi_exchange(comm, call, ZS_TAG_EXCHANGE, mine, bytes, all);
}

zs_status zs__mpi_all_reduce_scalars(zs__comm *comm, double *values, int n, zs__reduce_op op,
                                     const zs__comm_call *call) {
    const size_t bytes = (size_t)n * sizeof(double);
    double *all = NULL;
    const size_t all_bytes = bytes * (size_t)comm->size;
    small_scratch small;
    ZS_CHECK(scratch_take(comm, &small, all_bytes, (void **)&all));
    zs_status st = zs__mpi_exchange(comm, call, ZS_TAG_SCALARS, values, bytes, all);
    if (st == ZS_OK) {
        /* Rank order, the same on every rank: the result is identical
         * everywhere, and a sum does not depend on the exchange's shape. */
        for (int i = 0; i < n; i++) {
            double v = all[i];
            for (int r = 1; r < comm->size; r++) {
                double x = all[(size_t)r * (size_t)n + (size_t)i];
                if (op == ZS_REDUCE_SUM) v += x;
                else if (x > v || x != x) v = x; /* max; a NaN wins, as in a sum */
            }
            values[i] = v;
        }
    }
    scratch_give(comm, &small, all, all_bytes);
    return st;
}

zs_status zs__mpi_broadcast(zs__comm *comm, void *buf, size_t bytes, int root,
                            const zs__comm_call *call) {
    const int n = comm->size;
    const int vr = (comm->rank - root + n) % n;        /* rank relative to the root */
    const int low = vr == 0 ? 1 << 30 : vr & -vr;      /* lowest set bit: the subtree size */
    const int parent = vr == 0 ? -1 : ((vr - low) + root) % n;
    const int tag = zs__comm_tag(comm, ZS_TAG_BROADCAST, call);
    zs__pending p[32];
    for (size_t off = 0; off < bytes; off += comm->segment_bytes) {
        const size_t len = bytes - off < comm->segment_bytes ? bytes - off : comm->segment_bytes;
        unsigned char *at = (unsigned char *)buf + off;
        if (parent >= 0) {
            MPI_Request request = MPI_REQUEST_NULL;
            HOST_CHECK(comm, call, "MPI_Irecv",
                       MPI_Irecv(at, (int)len, MPI_BYTE, zs__comm_host_rank(comm, parent), tag,
                                 comm->host, &request));
            ZS_CHECK(zs__comm_wait_one(comm, call, &request, parent, 1));
        }
        int children = 0;
        for (int step = 1; step < low && vr + step < n; step *= 2) {
            const int child = (vr + step + root) % n;
            p[children] = (zs__pending){MPI_REQUEST_NULL, child, 0};
            int rc = MPI_Isend(at, (int)len, MPI_BYTE, zs__comm_host_rank(comm, child), tag,
                               comm->host, &p[children].request);
            if (rc != MPI_SUCCESS) {
                for (int i = 0; i < children; i++) MPI_Request_free(&p[i].request);
                zs__error_breadcrumb(__FILE__, __LINE__);
                return zs__mpi_fail(comm, call, "MPI_Isend", rc);
            }
            zs__comm_count_sent(comm, child, len);
            children++;
        }
        ZS_CHECK(zs__comm_wait(comm, call, p, children));
    }
    return ZS_OK;
}

zs_status zs__mpi_barrier(zs__comm *comm, const zs__comm_call *call) {
    unsigned char mine = 1, *all = NULL;
    const size_t all_bytes = (size_t)comm->size;
    small_scratch small;
    ZS_CHECK(scratch_take(comm, &small, all_bytes, (void **)&all));
    zs_status st = zs__mpi_exchange(comm, call, ZS_TAG_BARRIER, &mine, 1, all);
    scratch_give(comm, &small, all, all_bytes);
    return st;
}

zs_status zs__mpi_all_gather_native(zs__comm *comm, unsigned char *all, size_t chunk_bytes,
                                    size_t piece, const zs__comm_call *call) {
    /* MPI's own collective runs over all of comm->host: the world only. */
    ZS_ASSERT(comm->world_of == NULL);
    for (size_t off = 0; off < chunk_bytes; off += piece) {
        size_t len = chunk_bytes - off < piece ? chunk_bytes - off : piece;
        MPI_Datatype contiguous, strided;
        HOST_CHECK(comm, call, "MPI_Type_contiguous",
                   MPI_Type_contiguous((int)len, MPI_BYTE, &contiguous));
        int rc = MPI_Type_create_resized(contiguous, 0, (MPI_Aint)chunk_bytes, &strided);
        MPI_Type_free(&contiguous);
        if (rc != MPI_SUCCESS) return zs__mpi_fail(comm, call, "MPI_Type_create_resized", rc);
        rc = MPI_Type_commit(&strided);
        MPI_Request request = MPI_REQUEST_NULL;
        if (rc == MPI_SUCCESS)
            rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_BYTE, all + off, 1, strided, comm->host,
                                &request);
        /* The type may be freed while the operation runs (MPI keeps it). */
        MPI_Type_free(&strided);
        if (rc != MPI_SUCCESS) return zs__mpi_fail(comm, call, "MPI_Iallgather", rc);
        ZS_CHECK(zs__comm_wait_one(comm, call, &request, -1, 1));
    }
    return ZS_OK;
}
