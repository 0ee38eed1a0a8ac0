/* The communicator as an object: creation, the node and cross-node groups,
 * accessors, the all-gather choice and the byte counters by link. The
 * lowest floor of comm/'s collectives: the implementations (mpi.c,
 * nccl/nccl.c), the host collectives (mpi_host.c) and the front (comm.c)
 * all stand on it, and it calls none of them (an implementation's state
 * is reached through the ops table). */
#include "comm/comm_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"

const char *zs_comm_op_name(zs_comm_op op) {
    switch (op) {
#define ZS_COMM_OP_NAME_(name, text) \
    case name:                       \
        return text;
        ZS_COMM_OP_TABLE(ZS_COMM_OP_NAME_)
#undef ZS_COMM_OP_NAME_
    case ZS_COMM_OP_COUNT:
        break;
    }
    return "unknown";
}

zs__comm_impl zs__comm_all_gather_choice(const zs__comm *comm, zs__comm_impl impl,
                                         size_t chunk_bytes) {
    if (impl != ZS_COMM_IMPL_AUTO) return impl;
    return chunk_bytes >= comm->all_gather_mpi_from ? ZS_COMM_IMPL_MPI : ZS_COMM_IMPL_RING;
}

size_t zs__comm_all_gather_mpi_from(const zs__comm *comm, int *measured) {
    if (measured) *measured = comm->all_gather_measured;
    return comm->all_gather_mpi_from;
}

zs_status zs__comm_new(const zs__comm_ops *ops, void *state, int rank, int size,
                       const zs__settings *settings, zs__mem *mem, zs__comm **out) {
    zs__comm *comm = zs__calloc(1, sizeof *comm);
    if (!comm)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "cannot allocate a communicator (%zu bytes)",
                        sizeof *comm);
    comm->ops = ops;
    comm->state = state;
    comm->mem = mem;
    comm->rank = rank;
    comm->size = size;
    comm->reduce_scatter_impl = settings->comm.reduce_scatter;
    comm->all_gather_impl = settings->comm.all_gather;
    comm->all_gather_mpi_from = settings->comm.all_gather_mpi_from_bytes > 0
                                    ? (size_t)settings->comm.all_gather_mpi_from_bytes
                                    : SIZE_MAX;
    comm->segment_bytes = (size_t)settings->comm.segment_bytes;
    comm->host = MPI_COMM_NULL;
    /* The largest tag, 15 + 16 * (2 + 3 * 681), is below 32767, the
     * smallest MPI_TAG_UB allowed (wait.h); zs__comm_set_host raises it. */
    comm->tag_period = 682;
    comm->timeout_s = (double)settings->comm.timeout_s;
    comm->on_timeout = settings->comm.on_timeout;
    comm->check_collectives = settings->comm.check_collectives;
    comm->kind = ZS_COMM_KIND_WORLD;
    comm->world_rank = rank;
    *out = comm;
    return ZS_OK;
}

void zs__comm_destroy(zs__comm *comm) {
    if (!comm) return;
    /* Groups first: they use the world's MPI duplicate, staging and (NCCL)
     * stream, which the world's destroy releases. */
    for (int k = 1; k < ZS_COMM_KIND_COUNT; k++) zs__comm_destroy(comm->groups[k]);
    if (comm->parent) comm->parent->groups[comm->kind] = NULL;
    comm->ops->destroy(comm);
    free(comm->world_of);
    free(comm);
}

void zs__comm_use_backend(zs__comm *comm, zs__backend *backend) {
    comm->backend = backend;
    for (int k = 1; k < ZS_COMM_KIND_COUNT; k++)
        if (comm->groups[k]) comm->groups[k]->backend = backend;
}

int zs__comm_rank(const zs__comm *comm) { return comm->rank; }
int zs__comm_size(const zs__comm *comm) { return comm->size; }

void zs__comm_stats(const zs__comm *comm, zs_comm_stats *out) { *out = comm->stats; }

void zs__comm_stats_total(const zs__comm *world, zs_comm_stats *out) {
    *out = world->stats;
    for (int k = 1; k < ZS_COMM_KIND_COUNT; k++) {
        const zs__comm *g = world->groups[k];
        if (!g) continue;
        for (int op = 0; op < ZS_COMM_OP_COUNT; op++) {
            out->calls[op] += g->stats.calls[op];
            out->bytes[op] += g->stats.bytes[op];
            out->bytes_intra[op] += g->stats.bytes_intra[op];
            out->bytes_inter[op] += g->stats.bytes_inter[op];
        }
    }
}

const zs__comm *zs__comm_family_failure(const zs__comm *comm) {
    if (comm->failed != ZS_OK) return comm;
    const zs__comm *root = comm->parent ? comm->parent : comm;
    if (root->failed != ZS_OK) return root;
    for (int k = 1; k < ZS_COMM_KIND_COUNT; k++)
        if (root->groups[k] && root->groups[k]->failed != ZS_OK) return root->groups[k];
    return NULL;
}

zs_status zs__comm_failed(const zs__comm *comm) {
    const zs__comm *failed = zs__comm_family_failure(comm);
    return failed ? failed->failed : ZS_OK;
}

/* ------------------------------------------------------------ groups */

zs__comm_kind zs__comm_kind_of(const zs__comm *comm) { return comm->kind; }

const char *zs__comm_group_name(const zs__comm *comm) {
    return comm->kind == ZS_COMM_KIND_NODE    ? "node"
           : comm->kind == ZS_COMM_KIND_CROSS ? "cross"
                                              : NULL;
}

const char *zs__comm_where(const zs__comm *comm) { return comm->where; }

int zs__comm_world_rank(const zs__comm *comm, int rank) { return zs__comm_host_rank(comm, rank); }

zs__comm *zs__comm_group(const zs__comm *world, zs__comm_kind kind) {
    if (kind == ZS_COMM_KIND_WORLD) return (zs__comm *)world;
    if (kind <= ZS_COMM_KIND_WORLD || kind >= ZS_COMM_KIND_COUNT) return NULL;
    return world->groups[kind];
}

void zs__comm_set_topology(zs__comm *world, const zs__topology *t) {
    ZS_ASSERT(world->kind == ZS_COMM_KIND_WORLD && t->world_size == world->size &&
              t->rank == world->rank);
    world->topology = t;
}

void zs__comm_count_sent(zs__comm *comm, int peer, uint64_t bytes) {
    int across = 0;
    switch (comm->kind) {
    case ZS_COMM_KIND_NODE:
        across = 0;
        break;
    case ZS_COMM_KIND_CROSS: /* one rank per node: every peer is elsewhere */
        across = peer != comm->rank;
        break;
    default:
        across = comm->topology &&
                 comm->topology->node_of[peer] != comm->topology->node_of[comm->rank];
        break;
    }
    if (across) comm->sent_inter += bytes;
    else comm->sent_intra += bytes;
}

zs_status zs__comm_create_group(zs__comm *world, zs__comm_kind kind, zs__comm **out) {
    *out = NULL;
    const zs__topology *t = world->topology;
    if (world->kind != ZS_COMM_KIND_WORLD || !t ||
        (kind != ZS_COMM_KIND_NODE && kind != ZS_COMM_KIND_CROSS) || world->groups[kind])
        return zs__fail(ZS_ERR_INTERNAL, "zs__comm_create_group: group kind %d of a %s with%s "
                        "topology%s", (int)kind, world->parent ? "group" : "world",
                        t ? "" : "out", world->groups[kind] ? ", which exists already" : "");
    /* Members in group-rank order: a node's ranks by rank; the cross-node
     * group's by node (the nodes that have this local rank). */
    int size = 0, rank = -1;
    for (int r = 0; r < t->world_size; r++) {
        const int member = kind == ZS_COMM_KIND_NODE ? t->node_of[r] == t->node
                                                     : t->local_of[r] == t->local_rank;
        if (!member) continue;
        if (r == t->rank) rank = size;
        size++;
    }
    ZS_ASSERT(rank >= 0);
    zs__comm *g = zs__calloc(1, sizeof *g);
    int *world_of = zs__calloc((size_t)size, sizeof *world_of);
    if (!g || !world_of) {
        free(g);
        free(world_of);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_create: out of host memory for the %s "
                        "communicator (%zu bytes)", kind == ZS_COMM_KIND_NODE ? "node" :
                        "cross-node", sizeof *g + (size_t)size * sizeof *world_of);
    }
    /* Cross-node members in node order: the nodes are numbered by their
     * lowest rank, and so is every local rank's first appearance, so rank
     * order is node order here too. */
    for (int r = 0, i = 0; r < t->world_size; r++)
        if (kind == ZS_COMM_KIND_NODE ? t->node_of[r] == t->node : t->local_of[r] == t->local_rank)
            world_of[i++] = r;
    /* Everything the settings decided is the world's. */
    *g = *world;
    g->state = NULL;
    memset(&g->stats, 0, sizeof g->stats);
    memset(g->groups, 0, sizeof g->groups);
    g->seq = 0;
    g->rank = rank;
    g->size = size;
    g->kind = kind;
    g->world_rank = world->rank;
    g->world_of = world_of;
    g->parent = world;
    g->topology = t;
    /* The ring always (comm.h: MPI's own collectives need a communicator of
     * the group's ranks). */
    g->reduce_scatter_impl = ZS_COMM_IMPL_RING;
    g->all_gather_impl = ZS_COMM_IMPL_RING;
    g->all_gather_mpi_from = SIZE_MAX;
    g->all_gather_measured = 0;
    if (kind == ZS_COMM_KIND_NODE)
        snprintf(g->where, sizeof g->where, "node %d of %d", t->node, t->node_count);
    else
        snprintf(g->where, sizeof g->where, "cross-node (local rank %d)", t->local_rank);
    snprintf(g->in, sizeof g->in, " in %s", g->where);
    zs_status st = world->ops->group_state(world, g);
    if (st != ZS_OK) {
        free(world_of);
        free(g);
        return st;
    }
    world->groups[kind] = g;
    *out = g;
    ZS_DEBUG("comm: %s communicator: rank %d of %d (world ranks %d..%d)", g->where, rank, size,
             world_of[0], world_of[size - 1]);
    return ZS_OK;
}

zs_status zs__comm_connect_groups(zs__comm *world) {
    if (!world->ops->connect_groups) return ZS_OK;
    return world->ops->connect_groups(world);
}
