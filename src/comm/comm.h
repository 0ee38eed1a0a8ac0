/* Collectives used by the runtime, with per-op call and byte counters.
 *
 * All data collectives are in place over one buffer of `size * count`
 * elements, split into `size` equal chunks of `count` elements; rank r's chunk
 * starts at element r * count. This matches the partition plan: a unit's flat
 * buffer is padded so every rank owns one equal chunk.
 *
 * Every call is collective over the communicator and synchronous (returns when
 * the local buffer is final). Every wait for a peer has a deadline,
 * comm.timeout_s without progress (wait.h): past it the call reports the op,
 * its number, label, bytes and the silent peer, then aborts the job or
 * returns ZS_ERR_TIMEOUT (comm.on_timeout). `label` names what is being moved (a unit name,
 * "config hash", ...) so an error message can say which collective failed;
 * every collective also carries a sequence number for the same reason.
 *
 * Implementations sit behind zs__comm_ops (comm_impl.h): MPI and NCCL.
 * This file's functions do the byte accounting, so every implementation counts
 * the same way: the bytes this rank sends under the ring algorithm, split by
 * link (inside this rank's node or across nodes) by what the transport
 * really sent to each peer (zeroshard.h, zs_comm_stats). */
#ifndef ZS_COMM_COMM_H
#define ZS_COMM_COMM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/topology.h"
#include "core/config.h"
#include "core/memory.h"
#include "zeroshard.h"

typedef struct zs__comm zs__comm;
typedef struct zs__backend zs__backend;

typedef enum zs__reduce_op { ZS_REDUCE_SUM = 0, ZS_REDUCE_MAX = 1 } zs__reduce_op;

/* Duplicates `comm` (the runtime's traffic never mixes with the program's),
 * sets MPI_ERRORS_RETURN on the duplicate, and allocates the staging buffer of
 * settings->comm.segment_bytes charged to ZS_MEM_COMM when a ring is used. */
zs_status zs__comm_create_mpi(MPI_Comm comm, const zs__settings *settings, zs__mem *mem,
                              zs__comm **out);
/* The communicator of device-resident backends (src/comm/nccl/): data
 * collectives (reduce_scatter, all_gather, all_reduce) run with NCCL on
 * device memory, on a communication stream ordered after the backend's
 * compute stream with events; the host-side ones (all_reduce_scalars,
 * all_gather_bytes, broadcast, barrier) use MPI on `comm`. The NCCL
 * communicator is bootstrapped by an MPI broadcast of its unique id. Builds
 * without CUDA provide a version that fails with ZS_ERR_UNSUPPORTED. */
zs_status zs__comm_create_nccl(MPI_Comm comm, const zs__settings *settings, zs__mem *mem,
                               zs__backend *backend, zs__comm **out);
void zs__comm_destroy(zs__comm *comm);

/* Lets ring reductions add segments with `backend`'s accumulate op (SIMD on
 * the CPU) instead of the portable loop; results are bit-identical. The
 * backend must outlive the communicator and add host memory (the CPU
 * backend). NULL restores the portable loop. */
void zs__comm_use_backend(zs__comm *comm, zs__backend *backend);

/* MPI communicators only: from now on the buffers of the data collectives
 * (reduce_scatter, all_gather, all_reduce) are `backend`'s memory, which
 * the host may not address; each collective passes through a host staging
 * buffer of `staging_bytes` from the backend's host_alloc, charged to
 * ZS_MEM_COMM (staging.h: comm.impl = "mpi" on CUDA, comm.host_staging on
 * the CPU). Results are the unstaged ones, bit for bit, with the ring
 * reduce-scatter. The backend must outlive the communicator. Every rank
 * gets the same answer (ZS_ERR_CONFIG when staging_bytes cannot hold one
 * element per rank). */
zs_status zs__comm_stage_through(zs__comm *comm, zs__backend *backend, size_t staging_bytes);

/* The algorithm an all-gather of `chunk_bytes` per rank runs with `impl`
 * (comm.all_gather): ring or mpi as configured, or for "auto" MPI's from
 * the communicator's threshold on (comm.all_gather_mpi_from_bytes, or what
 * zs__comm_all_gather_measure found; the ring until either is known). */
zs__comm_impl zs__comm_all_gather_choice(const zs__comm *comm, zs__comm_impl impl,
                                         size_t chunk_bytes);

/* comm.all_gather = "auto" with comm.all_gather_mpi_from_bytes = 0:
 * collective; times ring and MPI all-gathers of each of `n` message sizes
 * (`chunk_bytes[i]` bytes per rank, ascending) on `buf` (the collectives'
 * memory, backend memory on a staged communicator; size * the largest
 * chunk bytes, clobbered), takes each algorithm's time as the slowest
 * rank's, and sets the threshold from which MPI's all-gather runs: the
 * smallest measured size from which MPI's is faster at every larger
 * measured size. Every rank gets the same threshold, logged at INFO by
 * rank 0. The moves are counted like any all-gather. A no-op for other
 * settings, on one rank, and on communicators without a choice (NCCL). */
zs_status zs__comm_all_gather_measure(zs__comm *comm, void *buf, const size_t *chunk_bytes,
                                      int n);
/* The threshold that measurement picks from per-size times (pure; unit
 * tested): SIZE_MAX when MPI's is not faster at the largest size. */
size_t zs__comm_all_gather_threshold(const size_t *chunk_bytes, const double *ring_s,
                                     const double *mpi_s, int n);
/* MPI's all-gather from this many bytes per rank (SIZE_MAX: the ring
 * always), and whether it was measured (1) or configured (0); for logs and
 * tests. */
size_t zs__comm_all_gather_mpi_from(const zs__comm *comm, int *measured);

int zs__comm_rank(const zs__comm *comm);
int zs__comm_size(const zs__comm *comm);

/* Sum reduce-scatter. On entry buf holds this rank's contribution to all
 * size*count elements; on return chunk `rank` holds the sum over ranks. The
 * other chunks are clobbered. For a fixed communicator size, count and
 * implementation the summation order of every element is fixed (bitwise
 * reproducible). dtype is fp32, fp16 or bf16: fp16 and bf16 are added in
 * fp32 and rounded back once per add (round to nearest even), so each hop of
 * the ring rounds once; a sum beyond the dtype's range is an infinity (fp16:
 * above 65504 after rounding), never a saturated value, and NaNs propagate.
 * Sent bytes counted: (size-1) * count * dtype size. */
zs_status zs__comm_reduce_scatter(zs__comm *comm, void *buf, size_t count, zs_dtype dtype,
                                  const char *label);

/* All-gather. On entry chunk `rank` holds this rank's data; on return every
 * chunk holds its owner's data. Counted: (size-1) * count * dtype size. */
zs_status zs__comm_all_gather(zs__comm *comm, void *buf, size_t count, zs_dtype dtype,
                              const char *label);

/* Sum all-reduce of size*count elements, done as reduce_scatter + all_gather
 * with the same implementation, so every element equals what reduce_scatter
 * alone would give its owner, bit for bit (stage 0 relies on this to match
 * stages 1-3). Counted under ZS_COMM_ALL_REDUCE: 2 * (size-1) * count * element size. */
zs_status zs__comm_all_reduce(zs__comm *comm, void *buf, size_t count, zs_dtype dtype,
                              const char *label);

/* All-reduce of a few doubles (norms, flags) with MPI_Allreduce.
 * Counted under ZS_COMM_ALL_REDUCE: 2 * (size-1)/size * n * 8 bytes, rounded down. */
zs_status zs__comm_all_reduce_scalars(zs__comm *comm, double *values, int n, zs__reduce_op op,
                                      const char *label);

/* Every rank contributes `bytes` bytes; `all` receives size * bytes, rank
 * order. Used for agreement checks (config hash, model layout). Counted under
 * ZS_COMM_ALL_GATHER as (size-1) * bytes. */
zs_status zs__comm_all_gather_bytes(zs__comm *comm, const void *mine, size_t bytes, void *all,
                                    const char *label);

/* An all-reduce whose values the caller combines itself (a program's host
 * values, zero/host_collective.c): moves like zs__comm_all_gather_bytes, but
 * is named "all_reduce" in messages, compared by comm.check_collectives with
 * `kind` (what the caller reduces: element type and op) and described by
 * `what`, and counted under ZS_COMM_ALL_REDUCE as 2 * (size-1)/size * bytes,
 * rounded down, as zs__comm_all_reduce_scalars is. */
zs_status zs__comm_all_reduce_gathered(zs__comm *comm, const void *mine, size_t bytes, void *all,
                                       int kind, const char *what, const char *label);

/* All-to-all of equal blocks: `send` holds size blocks of `block_bytes`,
 * block j for rank j; on return block j of `recv` holds what rank j sent
 * this rank (its block `rank`). `send` and `recv` must not overlap (ZS_ERR_
 * INVALID_ARGUMENT otherwise). Pairwise exchange in a fixed order: at step
 * s = 1..size-1 this rank sends to rank + s and receives from rank - s (mod
 * size), in pieces of at most comm.segment_bytes, every wait with the
 * deadline; its own block is copied. Moves bits only: the result does not
 * depend on the order. Buffers are the data collectives' memory (backend
 * memory on a staged or NCCL communicator). Counted under
 * ZS_COMM_ALL_TO_ALL: (size-1) * block_bytes, split by the link each block
 * really took. */
zs_status zs__comm_all_to_all(zs__comm *comm, const void *send, void *recv, size_t block_bytes,
                              const char *label);

/* Broadcast of raw bytes from root. Counted: bytes on the root, 0 elsewhere. */
zs_status zs__comm_broadcast(zs__comm *comm, void *buf, size_t bytes, int root,
                             const char *label);
zs_status zs__comm_barrier(zs__comm *comm, const char *label);

/* ZS_OK, or the status of the failure that made the communicator refuse
 * every call (ZS_ERR_TIMEOUT after a timeout with comm.on_timeout = "return",
 * ZS_ERR_MISMATCH after comm.check_collectives found ranks out of step):
 * its own, or its world's or a group's of that world (see groups below). */
zs_status zs__comm_failed(const zs__comm *comm);

/* Cumulative counters since creation, of this communicator alone. */
void zs__comm_stats(const zs__comm *comm, zs_comm_stats *out);
/* The same summed over `world` and its groups: what zs_comm_report shows. */
void zs__comm_stats_total(const zs__comm *world, zs_comm_stats *out);
/* How a call's `counted` bytes are split by link (the part across nodes is
 * returned, the rest is inside the node), given what the transport sent on
 * each: exactly what it sent across when the count is what it sent, all or
 * nothing when it used one link, else the proportion, rounded down. Pure;
 * the counters use it, and so does the formula that predicts them
 * (zero/comm_plan.c). */
uint64_t zs__comm_inter_share(uint64_t counted, uint64_t sent_intra, uint64_t sent_inter);

/* ------------------------------------------------------------ groups
 *
 * Beside the runtime's communicator (the "world"), the node communicator
 * holds the ranks of this rank's node and the cross-node communicator the
 * ranks with this rank's local rank, one per node (topology.h). They are
 * communicators like the world: every collective above, the same deadlines
 * (comm.timeout_s, comm.on_timeout), timeout reports, fingerprints
 * (comm.check_collectives), their own sequence numbers, and messages that
 * name world ranks and the group ("all_gather #4 of 'block.3' in node 1 of
 * 2 ... on rank 3").
 *
 * How: a group is a view of the world's own duplicated MPI communicator
 * (its ranks map to world ranks) with a tag space of its own, so its
 * messages never match the world's or another group's, and making one
 * calls no MPI function at all: nothing in it can wait. MPI's ways to make
 * a real sub-communicator (MPI_Comm_split, MPI_Comm_create_group,
 * MPI_Comm_split_type) block without a deadline. For the same reason a
 * group's data collectives always run the ring (comm.reduce_scatter and
 * comm.all_gather = "mpi" or "auto" apply to the world only): MPI's own
 * collectives need a communicator of exactly the group's ranks. On NCCL the
 * groups are NCCL communicators split from the world's (ncclCommSplit,
 * non-blocking, with the deadline), on the world's stream and events, with
 * their host-side collectives on the world's MPI duplicate as above.
 *
 * A group shares its world's staging buffers (the ring's segment, host
 * staging): collectives run one at a time across a world and its groups
 * (the comm engine's rule). Groups are owned by their world and destroyed
 * with it. When any of them fails (a timeout, ranks out of step, an NCCL
 * abort) every one refuses later calls with that failure: the ranks no
 * longer agree on what comes next anywhere. */
typedef enum zs__comm_kind {
    ZS_COMM_KIND_WORLD = 0,  /* the runtime's communicator */
    ZS_COMM_KIND_NODE = 1,   /* the ranks of this rank's node, in rank order */
    ZS_COMM_KIND_CROSS = 2,  /* the ranks with this local rank, one per node, in node order */
    ZS_COMM_KIND_COUNT = 3
} zs__comm_kind;

/* The world's topology: which peers are on other nodes (the byte counters
 * by link) and how groups are formed. `t` must outlive the communicator
 * (the context destroys the communicator first). Before it is set every
 * peer counts as on this rank's node. */
void zs__comm_set_topology(zs__comm *world, const zs__topology *t);

/* Creates the `kind` group of `world` for this rank (local: allocations
 * only, no communication; the caller agrees on the outcome across ranks).
 * Needs the topology. On NCCL the group exists but carries data only after
 * zs__comm_connect_groups. *out is owned by `world` (also reachable as
 * zs__comm_group(world, kind)). */
zs_status zs__comm_create_group(zs__comm *world, zs__comm_kind kind, zs__comm **out);
/* Collective over the world, after every rank created the same groups:
 * NCCL splits the world's communicator for each (bounded by comm.timeout_s);
 * nothing on MPI. Returns this rank's outcome: the caller agrees on it. */
zs_status zs__comm_connect_groups(zs__comm *world);
/* The `kind` group of `world`, or NULL; ZS_COMM_KIND_WORLD gives `world`. */
zs__comm *zs__comm_group(const zs__comm *world, zs__comm_kind kind);

zs__comm_kind zs__comm_kind_of(const zs__comm *comm);
/* For traces: NULL for the world, "node" or "cross" (static strings). */
const char *zs__comm_group_name(const zs__comm *comm);
/* For messages: "" for the world, "node 1 of 2", "cross-node (local rank 0)". */
const char *zs__comm_where(const zs__comm *comm);
/* The world rank of this communicator's rank `rank`. */
int zs__comm_world_rank(const zs__comm *comm, int rank);

/* Creation agreement, before the runtime's communicator exists (or on a
 * raw MPI communicator): the ranks of `comm` learn whether any failed
 * (`local`), with the deadline of zs__comm_wait_startup; when one did,
 * every rank returns the lowest failing rank's status, the others with its
 * message and rank. Uses no heap memory, so it works after an allocation
 * failed. */
#define ZS_STARTUP_MESSAGE_BYTES 768
zs_status zs__comm_agree_startup(MPI_Comm comm, const zs__settings *settings, zs_status local,
                                 const char *what);

#endif
