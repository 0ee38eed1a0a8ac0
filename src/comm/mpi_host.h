/* MPI operations on host memory, shared by the communicators: the MPI one
 * (src/comm/mpi.c) uses them for everything that is not a ring, and the
 * device one (src/comm/nccl/) for its host-side agreements. Each reports a
 * failure with the collective's name, sequence number, label and rank. */
#ifndef ZS_COMM_MPI_HOST_H
#define ZS_COMM_MPI_HOST_H

#include <mpi.h>
#include <stddef.h>

#include "comm/comm_impl.h"

/* The failure message of a collective whose MPI call returned rc. */
zs_status zs__mpi_fail(const zs__comm *comm, const zs__comm_call *call, const char *function,
                       int rc);

/* All-gather of `chunk_bytes` from every rank into `all` (rank order), in
 * pieces of at most `piece` bytes so counts fit an int: piece [off, off+len)
 * of every chunk is one MPI_Allgather whose receive type is `len` bytes with
 * an extent of one chunk, so pieces land in place without packing. `mine`
 * NULL means in place (this rank's chunk already in `all`). */
zs_status zs__mpi_all_gather_pieces(const zs__comm *comm, MPI_Comm mpi, const unsigned char *mine,
                                    unsigned char *all, size_t chunk_bytes, size_t piece,
                                    const zs__comm_call *call);
zs_status zs__mpi_all_reduce_scalars(const zs__comm *comm, MPI_Comm mpi, double *values, int n,
                                     zs__reduce_op op, const zs__comm_call *call);
/* Broadcast in pieces of at most `piece` bytes. */
zs_status zs__mpi_broadcast(const zs__comm *comm, MPI_Comm mpi, void *buf, size_t bytes, int root,
                            size_t piece, const zs__comm_call *call);
zs_status zs__mpi_barrier(const zs__comm *comm, MPI_Comm mpi, const zs__comm_call *call);

#endif
