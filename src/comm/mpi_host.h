/* MPI operations on host memory, shared by the communicators: the MPI one
 * (src/comm/mpi.c) uses them for everything that is not a ring, and the
 * device one (src/comm/nccl/) for its host-side agreements. They run on the
 * communicator's host MPI communicator (comm->host, wait.h).
 *
 * The small host collectives (all-gather of bytes, all-reduce of scalars,
 * broadcast, barrier) are built on point-to-point messages rather than on
 * MPI's blocking collectives, for one reason: every wait then has a deadline
 * and knows the rank it waits for, so a stopped or departed peer becomes a
 * report that names it instead of a hang. Each reports a failure with the
 * collective's name, sequence number, label and rank.
 *
 * Ranks in the arguments are the communicator's own; a group's are mapped
 * to the world ranks of comm->host (zs__comm_host_rank) at each MPI call. */
#ifndef ZS_COMM_MPI_HOST_H
#define ZS_COMM_MPI_HOST_H

#include <mpi.h>
#include <stddef.h>

#include "comm/comm_impl.h"
#include "comm/wait.h"

/* One exchange with two peers (ranks of `comm`): receive `recv_bytes` from
 * `from` into `into` while sending `send_bytes` to `to`, both under `tag`,
 * with the deadline; the send is counted by link. */
zs_status zs__mpi_swap(zs__comm *comm, const zs__comm_call *call, int tag, const void *out,
                       size_t send_bytes, int to, void *into, size_t recv_bytes, int from);

/* All-gather of `bytes` from every rank into `all` (rank order), by
 * dissemination (Bruck): ceil(log2 size) rounds, in round k each rank sends
 * what it has gathered to rank - 2^k and receives from rank + 2^k. Large
 * payloads go in pieces of about comm.segment_bytes / size per rank, so the
 * scratch buffer (charged to ZS_MEM_COMM while the call runs) stays near
 * comm.segment_bytes. `mine` and `all` must not overlap. */
zs_status zs__mpi_all_gather_bytes(zs__comm *comm, const void *mine, size_t bytes, void *all,
                                   const zs__comm_call *call);
/* The same under message tags of `kind` (every other host collective is
 * built on it, each with its own kind). */
zs_status zs__mpi_exchange(zs__comm *comm, const zs__comm_call *call, zs__tag_kind kind,
                           const void *mine, size_t bytes, void *all);
/* All-reduce of n doubles: every rank gathers all values and combines them
 * in rank order, so every rank gets the same bits, whatever the algorithm. */
zs_status zs__mpi_all_reduce_scalars(zs__comm *comm, double *values, int n, zs__reduce_op op,
                                     const zs__comm_call *call);
/* Binomial-tree broadcast from root in pieces of at most comm.segment_bytes. */
zs_status zs__mpi_broadcast(zs__comm *comm, void *buf, size_t bytes, int root,
                            const zs__comm_call *call);
/* A dissemination barrier (an all-gather of one byte). */
zs_status zs__mpi_barrier(zs__comm *comm, const zs__comm_call *call);

/* In-place all-gather with MPI's own algorithm (MPI_Iallgather, polled with
 * the deadline), in pieces of at most `piece` bytes so counts fit an int:
 * piece [off, off+len) of every chunk is one call whose receive type is `len`
 * bytes with an extent of one chunk, so pieces land in place. */
zs_status zs__mpi_all_gather_native(zs__comm *comm, unsigned char *all, size_t chunk_bytes,
                                    size_t piece, const zs__comm_call *call);

#endif
