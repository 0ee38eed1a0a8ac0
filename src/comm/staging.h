/* Host staging of collectives on memory MPI cannot touch (comm.impl = "mpi"
 * on the CUDA backend; comm.host_staging on the CPU backend, for tests).
 *
 * The data collectives of the MPI path work on host memory. When the
 * buffers live in a backend's memory that the host cannot address, each
 * collective goes through one staging buffer of comm.staging_bytes in
 * host memory allocated with the backend's host_alloc (page-locked on
 * CUDA, so the copies are DMA): piece [off, off + len) of every rank's chunk
 * is copied out with the backend's copy (stream-ordered after the work that
 * wrote it), the backend synchronizes, the host collective runs on the
 * staged piece exactly as it would on host memory (the same ring or MPI
 * algorithm, deadlines, fingerprints and messages), and the result is copied
 * back, stream-ordered before the work that reads it.
 *
 * Bits. The ring reduce-scatter adds every element's contributions in the
 * same order whatever the piece size (comm/mpi.c), so staged results equal
 * unstaged ones bit for bit: the CUDA backend with comm.impl = "mpi" gives
 * the CPU backend's collectives, and comm.host_staging = true changes no bit
 * on the CPU. An all-gather only moves bits. MPI's own reduce-scatter may
 * pick its algorithm by message size, so with comm.reduce_scatter = "mpi"
 * staging can change the last bits.
 *
 * The staging buffer is used by one collective at a time (the comm engine
 * runs collectives one by one); no call allocates. */
#ifndef ZS_COMM_STAGING_H
#define ZS_COMM_STAGING_H

#include <stddef.h>

#include "comm/comm_impl.h"

/* A host collective on `size` chunks of `count` elements at `buf` (host
 * memory): what the MPI path runs on the staged piece. */
typedef zs_status (*zs__host_collective)(zs__comm *comm, void *buf, size_t count,
                                         zs_dtype dtype, zs__comm_impl impl,
                                         const zs__comm_call *call);

typedef struct zs__staging {
    zs__backend *backend;      /* whose memory the collectives' buffers are in */
    unsigned char *host;       /* staging_bytes of host memory from backend->host_alloc */
    size_t bytes;
    zs__backend *host_adder;   /* a CPU backend for the ring's adds on staged pieces when
                                  `backend` is not host-accessible; owned */
} zs__staging;

/* Allocates the staging (charged to ZS_MEM_COMM through the backend). The
 * buffer must hold at least one fp32 element per rank; the check names
 * comm.staging_bytes and gives the same answer on every rank. */
zs_status zs__staging_create(zs__staging *s, zs__backend *backend, zs__mem *mem, size_t bytes,
                             int size);
void zs__staging_destroy(zs__staging *s);

/* Reduce-scatter and all-gather of comm.h's layout on backend memory `buf`,
 * through the staging, with `host` run on every staged piece. */
zs_status zs__staged_reduce_scatter(zs__comm *comm, const zs__staging *s, void *buf,
                                    size_t count, zs_dtype dtype, zs__comm_impl impl,
                                    const zs__comm_call *call, zs__host_collective host);
zs_status zs__staged_all_gather(zs__comm *comm, const zs__staging *s, void *buf, size_t count,
                                zs_dtype dtype, zs__comm_impl impl, const zs__comm_call *call,
                                zs__host_collective host);

/* comm.h's all-to-all on backend memory: the own block is copied on the
 * backend; each piece of every other block passes through the staging's
 * halves (out to the peer from the first, in from the other peer into the
 * second) with zs__mpi_swap under `tag`. */
zs_status zs__staged_all_to_all(zs__comm *comm, const zs__staging *s, const void *send,
                                void *recv, size_t block_bytes, int tag,
                                const zs__comm_call *call);

#endif
