/* The inside of a communicator, shared by comm.c (checks, numbering,
 * accounting, logging) and the implementations behind zs__comm_ops (mpi.c
 * and nccl/nccl.c). An implementation only moves data: comm.c has already
 * validated the arguments, numbered the call and counted its bytes, so every
 * implementation counts the same way. */
#ifndef ZS_COMM_COMM_IMPL_H
#define ZS_COMM_COMM_IMPL_H

#include "backend/backend.h"
#include "comm/comm.h"

/* What a collective is called in messages: "reduce_scatter #17 of 'block.3'".
 * `op` is the name of the public call (an all-reduce runs its reduce-scatter
 * and all-gather under the all-reduce's name and number). */
typedef struct zs__comm_call {
    const char *op;
    const char *label;
    uint64_t seq;
    uint64_t bytes;  /* the collective's payload on this rank, for messages */
    const char *in;  /* the communicator, for messages: "" for the world, " in node 1 of 2" */
} zs__comm_call;

/* One table per implementation, filled by a static const initializer.
 * Buffers follow comm.h's layout: `size` chunks of `count` elements. The
 * functions receive only well-formed arguments (size > 1, count > 0, a dtype
 * they were asked to support) and must return ZS_ERR_COMM with a message that
 * names call->op, call->label, call->seq and the rank when the transport fails.
 * `impl` is the algorithm the settings chose for this op; an implementation
 * whose library has a single algorithm (NCCL) may ignore it. */
typedef struct zs__comm_ops {
    const char *name;
    zs_status (*reduce_scatter)(zs__comm *comm, void *buf, size_t count, zs_dtype dtype,
                                zs__comm_impl impl, const zs__comm_call *call);
    zs_status (*all_gather)(zs__comm *comm, void *buf, size_t count, zs_dtype dtype,
                            zs__comm_impl impl, const zs__comm_call *call);
    zs_status (*all_reduce_scalars)(zs__comm *comm, double *values, int n, zs__reduce_op op,
                                    const zs__comm_call *call);
    zs_status (*all_gather_bytes)(zs__comm *comm, const void *mine, size_t bytes, void *all,
                                  const zs__comm_call *call);
    zs_status (*broadcast)(zs__comm *comm, void *buf, size_t bytes, int root,
                           const zs__comm_call *call);
    zs_status (*barrier)(zs__comm *comm, const zs__comm_call *call);
    /* comm.h's all-to-all: size > 0, block_bytes > 0, send and recv apart;
     * size 1 copies the own block. */
    zs_status (*all_to_all)(zs__comm *comm, const void *send, void *recv, size_t block_bytes,
                            const zs__comm_call *call);
    /* Makes `group`'s state from its world's (local, no communication):
     * group->rank, size, world_of, kind and host are set. */
    zs_status (*group_state)(zs__comm *world, zs__comm *group);
    /* zs__comm_connect_groups; NULL when groups need no connection. */
    zs_status (*connect_groups)(zs__comm *world);
    /* Releases `state` (the implementation's own part). */
    void (*destroy)(zs__comm *comm);
} zs__comm_ops;

struct zs__comm {
    const zs__comm_ops *ops;
    void *state;                     /* the implementation's own part */
    zs__mem *mem;                    /* the context's accountant (ZS_MEM_COMM) */
    int rank;
    int size;
    /* Groups (comm.h). The host communicator's ranks are the world's: a
     * group's member r is rank world_of[r] there (NULL in the world, where
     * they are the same). */
    zs__comm_kind kind;
    int world_rank;
    int *world_of;
    zs__comm *parent;                      /* a group's world; NULL in the world */
    zs__comm *groups[ZS_COMM_KIND_COUNT];  /* the world's groups by kind ([0] unused) */
    const zs__topology *topology;          /* the world's, once set; borrowed */
    char where[48];                        /* "" or "node 1 of 2" */
    char in[56];                           /* "" or " in node 1 of 2", for messages */
    /* Byte accounting of the call in progress: what it counts, and what
     * the transport reported sending to peers on this node and others
     * (zs__comm_count_sent); split into stats when it returns. */
    zs_comm_op pending_op;
    uint64_t pending_bytes;
    uint64_t sent_intra, sent_inter;
    zs__comm_impl reduce_scatter_impl;
    zs__comm_impl all_gather_impl;
    /* comm.all_gather = "auto": MPI's all-gather for chunks of at least this
     * many bytes per rank, the ring below (SIZE_MAX: always the ring, until
     * measured or configured). */
    size_t all_gather_mpi_from;
    int all_gather_measured;
    size_t segment_bytes;            /* settings->comm.segment_bytes */
    uint64_t seq;                    /* collectives started so far; the Nth is "#N" */
    zs_comm_stats stats;
    /* When set, ring reductions add segments with the backend's accumulate
     * (SIMD conversions on the CPU) instead of the portable loop of reduce.c;
     * both widen to fp32, add and round once, so the bits are the same. */
    zs__backend *backend;

    /* Deadlines (wait.h). `host` is the implementation's MPI communicator,
     * over which timed-out ranks exchange reports and fingerprints travel;
     * tags fold in the sequence number modulo tag_period. */
    MPI_Comm host;
    int tag_period;
    double timeout_s;                /* comm.timeout_s */
    zs__timeout_policy on_timeout;   /* comm.on_timeout */
    int check_collectives;           /* comm.check_collectives */
    /* Set after a timeout or a fingerprint disagreement: every later call
     * fails at once with this status and message (the ranks are out of step
     * and the transport may hold half-finished messages). */
    zs_status failed;
    char failure[2048];
};

/* The rank of member `rank` in comm->host (the world's rank). */
static inline int zs__comm_host_rank(const zs__comm *comm, int rank) {
    return comm->world_of ? comm->world_of[rank] : rank;
}

/* A transport sent `bytes` to member `peer` during the call in progress:
 * counted inside this rank's node or across nodes. Implementations call it
 * at every send of data (not of fingerprints or timeout reports). */
void zs__comm_count_sent(zs__comm *comm, int peer, uint64_t bytes);

/* The world of a communicator (itself for the world). */
static inline zs__comm *zs__comm_root(zs__comm *comm) {
    return comm->parent ? comm->parent : comm;
}

/* zs__comm_all_gather with the algorithm `impl` instead of comm.all_gather
 * (the measurement of "auto"); numbered, checked and counted the same way. */
zs_status zs__comm_all_gather_as(zs__comm *comm, void *buf, size_t count, zs_dtype dtype,
                                 zs__comm_impl impl, const char *label);

/* Allocates a communicator around an implementation's state and copies the
 * settings it needs. Called by an implementation's create function, which
 * owns `state` until this succeeds and the communicator owns it afterwards. */
zs_status zs__comm_new(const zs__comm_ops *ops, void *state, int rank, int size,
                       const zs__settings *settings, zs__mem *mem, zs__comm **out);

/* The first failed communicator of `comm`'s family (its world and the
 * world's groups), `comm` itself first; NULL when none failed
 * (communicator.c; the front refuses calls on it). */
const zs__comm *zs__comm_family_failure(const zs__comm *comm);

#endif
