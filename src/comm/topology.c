/* Topology: which ranks share a node (topology.h).
 *
 * Floor (src/floors.txt): owns the topology; calls the front (comm.c) and
 * the communicator below it.
 */
#include "comm/topology.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "core/process_identity.h"
#include "core/text_append.h"

void zs__host_identity_get(zs__host_identity *out) {
    memset(out, 0, sizeof *out);
    if (gethostname(out->host, sizeof out->host - 1) != 0) out->host[0] = '\0';
    out->host[sizeof out->host - 1] = '\0';
    zs__node_identity_read(out->boot_id, sizeof out->boot_id, &out->netns_dev,
                           &out->netns_ino);
}

/* One allocation: the struct, then the arrays (and the identities when
 * detecting), so a failure has one message and destroy one free. */
zs_status zs__topology_create(int world_size, int rank, int64_t ranks_per_node,
                              zs__topology **out) {
    *out = NULL;
    if (world_size < 1 || rank < 0 || rank >= world_size || ranks_per_node < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "zs__topology_create: rank %d of %d ranks, ranks_per_node %lld", rank,
                        world_size, (long long)ranks_per_node);
    const size_t n = (size_t)world_size;
    /* node_of, local_of, node_sizes, node_first, node_offset, by_node */
    const size_t ints = 6 * n;
    const size_t ids = ranks_per_node > 0 ? 0 : n;
    const size_t bytes = sizeof(zs__topology) + ints * sizeof(int) + ids * sizeof(zs__host_identity);
    unsigned char *block = zs__calloc(1, bytes);
    if (!block)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY,
                        "zs_create: out of host memory for the topology of %d ranks (%zu bytes)",
                        world_size, bytes);
    zs__topology *t = (zs__topology *)(void *)block;
    int *arrays = (int *)(void *)(block + sizeof *t);
    t->world_size = world_size;
    t->rank = rank;
    t->ranks_per_node = ranks_per_node;
    t->node_of = arrays;
    t->local_of = arrays + n;
    t->node_sizes = arrays + 2 * n;
    t->node_first = arrays + 3 * n;
    t->node_offset = arrays + 4 * n;
    t->by_node = arrays + 5 * n;
    if (ids) {
        /* The struct holds pointers and 6n ints are 24n bytes: the
         * identities (uint64_t members) start 8-byte aligned. */
        size_t offset = sizeof *t + ints * sizeof(int);
        t->identities = (zs__host_identity *)(void *)(block + offset);
        zs__host_identity_get(&t->identities[rank]);
    }
    *out = t;
    return ZS_OK;
}

/* Fills the arrays from node_of (nodes already numbered by lowest rank). */
static void derive(zs__topology *t) {
    const int n = t->world_size;
    t->node_count = 0;
    for (int r = 0; r < n; r++)
        if (t->node_of[r] + 1 > t->node_count) t->node_count = t->node_of[r] + 1;
    for (int k = 0; k < t->node_count; k++) {
        t->node_sizes[k] = 0;
        t->node_first[k] = -1;
    }
    for (int r = 0; r < n; r++) {
        const int k = t->node_of[r];
        if (t->node_first[k] < 0) t->node_first[k] = r;
        t->local_of[r] = t->node_sizes[k]++;
    }
    for (int k = 0, at = 0; k < t->node_count; k++) {
        t->node_offset[k] = at;
        at += t->node_sizes[k];
    }
    for (int r = 0; r < n; r++) t->by_node[t->node_offset[t->node_of[r]] + t->local_of[r]] = r;
    t->node = t->node_of[t->rank];
    t->local_rank = t->local_of[t->rank];
    t->node_size = t->node_sizes[t->node];
    t->max_node_size = 0;
    t->equal = 1;
    for (int k = 0; k < t->node_count; k++) {
        if (t->node_sizes[k] > t->max_node_size) t->max_node_size = t->node_sizes[k];
        if (t->node_sizes[k] != t->node_sizes[0]) t->equal = 0;
    }
}

/* "ranks 0-3", "rank 4", "ranks 0, 2, 4-5" (truncated with "...").
 * Appends to out[*used..capacity). */
static void append_ranks(const zs__topology *t, int node, char *out, size_t capacity,
                         size_t *used) {
    zs__text_append(out, capacity, used, "%s", t->node_sizes[node] == 1 ? "rank " : "ranks ");
    int runs = 0;
    for (int r = 0; r < t->world_size; r++) {
        if (t->node_of[r] != node || (r > 0 && t->node_of[r - 1] == node)) continue;
        int end = r;
        while (end + 1 < t->world_size && t->node_of[end + 1] == node) end++;
        if (runs == 6) {
            zs__text_append(out, capacity, used, ", ...");
            return;
        }
        if (end == r) zs__text_append(out, capacity, used, "%s%d", runs ? ", " : "", r);
        else zs__text_append(out, capacity, used, "%s%d-%d", runs ? ", " : "", r, end);
        runs++;
    }
}

void zs__topology_describe(const zs__topology *t, char *out, size_t capacity) {
    size_t used = 0;
    if (capacity == 0) return;
    out[0] = '\0';
    zs__text_append(out, capacity, &used, "%d rank%s on %d node%s", t->world_size,
           t->world_size == 1 ? "" : "s", t->node_count, t->node_count == 1 ? "" : "s");
    if (t->equal) zs__text_append(out, capacity, &used, " of %d", t->node_size);
    else zs__text_append(out, capacity, &used, " of unequal size");
    if (t->ranks_per_node > 0)
        zs__text_append(out, capacity, &used, " (comm.ranks_per_node = %lld)", (long long)t->ranks_per_node);
    else
        zs__text_append(out, capacity, &used, " (detected from host name, boot id and network namespace)");
    for (int k = 0; k < t->node_count; k++) {
        if (k == 8) {
            zs__text_append(out, capacity, &used, "; ...");
            break;
        }
        zs__text_append(out, capacity, &used, "%s node %d = ", k ? ";" : ":", k);
        append_ranks(t, k, out, capacity, &used);
        if (!t->equal) zs__text_append(out, capacity, &used, " (%d)", t->node_sizes[k]);
        if (t->identities) {
            const zs__host_identity *id = &t->identities[t->node_first[k]];
            zs__text_append(out, capacity, &used, " on %s (net ns %" PRIu64 ")",
                   id->host[0] ? id->host : "?", id->netns_ino);
        }
    }
}

zs_status zs__topology_agree(zs__topology *t, zs__comm *world) {
    if (zs__comm_size(world) != t->world_size || zs__comm_rank(world) != t->rank)
        return zs__fail(ZS_ERR_INTERNAL,
                        "zs__topology_agree: the communicator is rank %d of %d, the topology "
                        "rank %d of %d", zs__comm_rank(world), zs__comm_size(world), t->rank,
                        t->world_size);
    if (t->ranks_per_node > 0) {
        for (int r = 0; r < t->world_size; r++)
            t->node_of[r] = (int)((int64_t)r / t->ranks_per_node);
    } else {
        /* In place: this rank's entry is already in the array (the host
         * collectives accept `all` holding `mine`'s block at its place). */
        zs__host_identity mine = t->identities[t->rank];
        ZS_CHECK(zs__comm_all_gather_bytes(world, &mine, sizeof mine, t->identities,
                                           "host identities"));
        for (int r = 0; r < t->world_size; r++) {
            t->identities[r].host[sizeof t->identities[r].host - 1] = '\0';
            t->identities[r].boot_id[sizeof t->identities[r].boot_id - 1] = '\0';
        }
        /* Nodes numbered by their lowest rank: rank r joins the node of the
         * first rank with its identity. Quadratic in the worst case (every
         * rank its own node); a few million comparisons at 2000 ranks, once. */
        int nodes = 0;
        for (int r = 0; r < t->world_size; r++) {
            t->node_of[r] = -1;
            for (int q = 0; q < r; q++)
                if (t->local_of[q] == 0 &&
                    memcmp(&t->identities[q], &t->identities[r], sizeof t->identities[r]) == 0) {
                    t->node_of[r] = t->node_of[q];
                    break;
                }
            /* local_of marks first ranks of nodes while scanning. */
            t->local_of[r] = t->node_of[r] < 0 ? 0 : 1;
            if (t->node_of[r] < 0) t->node_of[r] = nodes++;
        }
    }
    derive(t);
    if (zs__log_enabled(ZS_LOG_INFO)) {
        char line[1024];
        zs__topology_describe(t, line, sizeof line);
        ZS_INFO("topology: %s", line);
    }
    return ZS_OK;
}

zs_status zs__topology_require_equal(const zs__topology *t, const char *what) {
    if (t->equal) return ZS_OK;
    char nodes[768];
    size_t used = 0;
    nodes[0] = '\0';
    for (int k = 0; k < t->node_count; k++) {
        if (k == 12) {
            zs__text_append(nodes, sizeof nodes, &used, "; ...");
            break;
        }
        zs__text_append(nodes, sizeof nodes, &used, "%snode %d (", k ? "; " : "", k);
        append_ranks(t, k, nodes, sizeof nodes, &used);
        zs__text_append(nodes, sizeof nodes, &used, "): %d rank%s", t->node_sizes[k],
               t->node_sizes[k] == 1 ? "" : "s");
    }
    return zs__fail(ZS_ERR_CONFIG,
                    "%s needs nodes with equal numbers of ranks, but the %d ranks form %d nodes "
                    "of unequal size: %s; launch the same number of ranks on every node%s",
                    what ? what : "this setting", t->world_size, t->node_count, nodes,
                    t->ranks_per_node > 0
                        ? " (comm.ranks_per_node should divide the number of ranks)"
                        : " (mpirun --map-by ppr:N:node), or set comm.ranks_per_node");
}

int zs__topology_rank_of(const zs__topology *t, int node, int local) {
    if (node < 0 || node >= t->node_count || local < 0 || local >= t->node_sizes[node]) return -1;
    return t->by_node[t->node_offset[node] + local];
}

void zs__topology_destroy(zs__topology *t) { free(t); }
