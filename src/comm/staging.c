/* Host staging of collectives on backend memory (staging.h).
 *
 * Floor (src/floors.txt): owns its staging buffer; calls the host
 * collectives below it.
 */
#include "comm/staging.h"

#include <string.h>

#include "comm/mpi_host.h"
#include "core/error.h"

zs_status zs__staging_create(zs__staging *s, zs__backend *backend, zs__mem *mem, size_t bytes,
                             int size) {
    memset(s, 0, sizeof *s);
    if (bytes / ((size_t)size * sizeof(float)) == 0)
        return zs__fail(ZS_ERR_CONFIG,
                        "comm.staging_bytes = %zu cannot hold one element per rank for %d ranks; "
                        "use at least %zu (the default, 16 MiB, is a good size)",
                        bytes, size, (size_t)size * sizeof(float));
    s->backend = backend;
    s->bytes = bytes;
    if (!backend->ops->host_accessible)
        ZS_CHECK(zs__cpu_backend_create(mem, &s->host_adder));
    zs_status st = backend->ops->host_alloc(backend, ZS_MEM_COMM, bytes, (void **)&s->host);
    if (st != ZS_OK) {
        zs__staging_destroy(s);
        return st;
    }
    return ZS_OK;
}

void zs__staging_destroy(zs__staging *s) {
    if (s->host) s->backend->ops->host_free(s->backend, ZS_MEM_COMM, s->host, s->bytes);
    zs__backend_destroy(s->host_adder);
    memset(s, 0, sizeof *s);
}

/* Elements of each chunk that one pass stages: the buffer holds a piece of
 * every rank's chunk side by side. */
static size_t piece_of(const zs__staging *s, int size, size_t esize, size_t count) {
    const size_t piece = s->bytes / ((size_t)size * esize);
    return piece < count ? piece : count;
}

/* Copies piece [off, off + len) of chunk `first` .. `last` - 1 of the
 * backend buffer into the staging (out = 1), or back (out = 0), skipping
 * chunk `skip` (-1 for none). With the whole chunks in one pass the pieces
 * are contiguous on both sides: one copy, or two around a skipped chunk. */
static zs_status move_pieces(const zs__staging *s, unsigned char *data, size_t count,
                             size_t esize, size_t off, size_t len, int first, int last, int skip,
                             int out) {
    zs__backend *be = s->backend;
    if (len == count) {
        /* Whole chunks: chunks [first, skip) and (skip, last) are each one
         * contiguous range on both sides. */
        const int split = skip >= first && skip < last ? skip : last;
        const int ranges[2][2] = {{first, split}, {split < last ? split + 1 : last, last}};
        for (int k = 0; k < 2; k++) {
            if (ranges[k][1] <= ranges[k][0]) continue;
            unsigned char *device = data + (size_t)ranges[k][0] * count * esize;
            unsigned char *host = s->host + (size_t)ranges[k][0] * len * esize;
            const size_t bytes = (size_t)(ranges[k][1] - ranges[k][0]) * count * esize;
            ZS_CHECK(out ? be->ops->copy(be, host, device, bytes)
                         : be->ops->copy(be, device, host, bytes));
        }
        return ZS_OK;
    }
    for (int j = first; j < last; j++) {
        if (j == skip) continue;
        unsigned char *device = data + ((size_t)j * count + off) * esize;
        unsigned char *host = s->host + (size_t)j * len * esize;
        ZS_CHECK(out ? be->ops->copy(be, host, device, len * esize)
                     : be->ops->copy(be, device, host, len * esize));
    }
    return ZS_OK;
}

/* MPI is about to read and write `bytes` of the staging: declared to the
 * backend (the stream-order check of the sim device checks it against the
 * copies still queued on it, and lets MPI's own reads and writes of those
 * pages through, which fail with EFAULT instead of faulting). */
static zs_status hand_to_mpi(const zs__staging *s, const void *at, size_t bytes) {
    return zs__backend_host_access(s->backend, at, bytes, 1, "MPI (host staging)");
}

/* The staging is written by the host only after a synchronize that follows
 * every earlier copy out of it, and the copies that fill it are ordered on
 * the backend's stream after the copies that emptied it: one buffer serves
 * every pass and every collective. */
zs_status zs__staged_reduce_scatter(zs__comm *comm, const zs__staging *s, void *buf,
                                    size_t count, zs_dtype dtype, zs__comm_impl impl,
                                    const zs__comm_call *call, zs__host_collective host) {
    const size_t esize = zs_dtype_size(dtype);
    const int n = comm->size, r = comm->rank;
    const size_t piece = piece_of(s, n, esize, count);
    for (size_t off = 0; off < count; off += piece) {
        const size_t len = count - off < piece ? count - off : piece;
        ZS_CHECK(move_pieces(s, buf, count, esize, off, len, 0, n, -1, 1));
        ZS_CHECK(s->backend->ops->synchronize(s->backend));
        ZS_CHECK(hand_to_mpi(s, s->host, (size_t)n * len * esize));
        ZS_CHECK(host(comm, s->host, len, dtype, impl, call));
        /* Only this rank's chunk holds a result. */
        ZS_CHECK(move_pieces(s, buf, count, esize, off, len, r, r + 1, -1, 0));
    }
    return ZS_OK;
}

zs_status zs__staged_all_gather(zs__comm *comm, const zs__staging *s, void *buf, size_t count,
                                zs_dtype dtype, zs__comm_impl impl, const zs__comm_call *call,
                                zs__host_collective host) {
    const size_t esize = zs_dtype_size(dtype);
    const int n = comm->size, r = comm->rank;
    const size_t piece = piece_of(s, n, esize, count);
    for (size_t off = 0; off < count; off += piece) {
        const size_t len = count - off < piece ? count - off : piece;
        ZS_CHECK(move_pieces(s, buf, count, esize, off, len, r, r + 1, -1, 1));
        ZS_CHECK(s->backend->ops->synchronize(s->backend));
        ZS_CHECK(hand_to_mpi(s, s->host, (size_t)n * len * esize));
        ZS_CHECK(host(comm, s->host, len, dtype, impl, call));
        /* This rank's own chunk is already in place. */
        ZS_CHECK(move_pieces(s, buf, count, esize, off, len, 0, n, r, 0));
    }
    return ZS_OK;
}

zs_status zs__staged_all_to_all(zs__comm *comm, const zs__staging *s, const void *send,
                                void *recv, size_t block_bytes, int tag,
                                const zs__comm_call *call) {
    zs__backend *be = s->backend;
    const int n = comm->size, r = comm->rank;
    const unsigned char *from_buf = send;
    unsigned char *to_buf = recv;
    ZS_CHECK(be->ops->copy(be, to_buf + (size_t)r * block_bytes,
                           from_buf + (size_t)r * block_bytes, block_bytes));
    /* Half the buffer each way; at least 2 bytes (staging holds one fp32
     * per rank, and a group has at most the world's ranks). */
    const size_t half = s->bytes / 2;
    unsigned char *out = s->host, *in = s->host + half;
    for (int step = 1; step < n; step++) {
        const int to = (r + step) % n, from = (r - step + n) % n;
        for (size_t off = 0; off < block_bytes; off += half) {
            const size_t len = block_bytes - off < half ? block_bytes - off : half;
            ZS_CHECK(be->ops->copy(be, out, from_buf + (size_t)to * block_bytes + off, len));
            /* Also orders the previous piece's copy out of `in` before the
             * exchange writes it again. */
            ZS_CHECK(be->ops->synchronize(be));
            ZS_CHECK(hand_to_mpi(s, s->host, 2 * half));
            ZS_CHECK(zs__mpi_swap(comm, call, tag, out, len, to, in, len, from));
            ZS_CHECK(be->ops->copy(be, to_buf + (size_t)from * block_bytes + off, in, len));
        }
    }
    return ZS_OK;
}
