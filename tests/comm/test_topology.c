/* Topology, node and cross-node communicators, all-to-all and the byte
 * counters by link (src/comm/topology.h, comm.h).
 *
 *   mpirun -np W test_topology simulated N   nodes of N consecutive ranks
 *   mpirun -np W test_topology detect K      nodes from host identities:
 *                                             expect K nodes of W/K ranks
 *
 * simulated: the topology of comm.ranks_per_node = N (unequal nodes when N
 * does not divide W, refused by zs__topology_require_equal with the nodes
 * and sizes); the groups' membership; every collective on the node and
 * cross-node communicators (and the world) with exact sums and placement;
 * the all-to-all's placement, in pieces and not; the counters: calls and
 * bytes as comm.h says, and the bytes by link equal to what this rank sent
 * to peers on its node and on other nodes, computed here from the
 * algorithms' send patterns (ring: the next rank; all-to-all: every peer;
 * dissemination all-gather: rank - 2^k); one node (ranks_per_node = W) shows
 * 0 bytes across nodes; groups staged through host staging give the
 * unstaged bits and charge no second buffer; a node collective that one
 * rank skips times out on the others naming the op, the group and the
 * silent world rank, and the whole family refuses afterwards;
 * comm.check_collectives catches ranks out of step on a cross-node group.
 *
 * detect: run by tests/multihost (2 simulated hosts of
 * scripts/netns-hosts.sh, which share a host name and a kernel): 4 ranks,
 * 2 per namespace, are 2 nodes; 2 ranks in one namespace are 1. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "comm/engine.h"
#include "comm/injected_network.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/trace.h"
#include "test_util.h"

static int g_rank, g_size;

/* ------------------------------------------------------------ set-up */

static zs__settings settings_for(int64_t segment, int64_t timeout_s, int check) {
    zs__settings s;
    memset(&s, 0, sizeof s);
    s.comm.reduce_scatter = ZS_COMM_IMPL_RING;
    s.comm.all_gather = ZS_COMM_IMPL_RING;
    s.comm.segment_bytes = segment;
    s.comm.timeout_s = timeout_s;
    s.comm.on_timeout = ZS_TIMEOUT_RETURN;
    s.comm.check_collectives = check;
    return s;
}

typedef struct family {
    zs__mem mem;
    zs__settings settings;
    zs__topology *t;
    zs__comm *world, *node, *cross;
} family;

/* A world communicator with the topology of `ranks_per_node` and both
 * groups, as zs_create makes them. */
static void family_create(family *f, int64_t ranks_per_node, int64_t segment, int64_t timeout_s,
                          int check) {
    memset(f, 0, sizeof *f);
    f->settings = settings_for(segment, timeout_s, check);
    ZT_OK(zs__comm_create_mpi(MPI_COMM_WORLD, &f->settings, &f->mem, &f->world));
    ZT_REQUIRE(f->world != NULL);
    ZT_OK(zs__topology_create(g_size, g_rank, ranks_per_node, &f->t));
    ZT_REQUIRE(f->t != NULL);
    ZT_OK(zs__topology_agree(f->t, f->world));
    zs__comm_set_topology(f->world, f->t);
}

static void family_groups(family *f) {
    ZT_OK(zs__comm_create_group(f->world, ZS_COMM_KIND_NODE, &f->node));
    ZT_OK(zs__comm_create_group(f->world, ZS_COMM_KIND_CROSS, &f->cross));
    ZT_OK(zs__comm_connect_groups(f->world));
    ZT_REQUIRE(f->node && f->cross);
    ZT_CHECK(zs__comm_group(f->world, ZS_COMM_KIND_NODE) == f->node);
    ZT_CHECK(zs__comm_group(f->world, ZS_COMM_KIND_CROSS) == f->cross);
}

static void family_destroy(family *f) {
    zs__comm_destroy(f->world); /* and its groups */
    zs__topology_destroy(f->t);
}

/* The node of world rank r under `ranks_per_node` (the expectation, from
 * the definition, not from the topology under test). */
static int node_of(int r, int n) { return r / n; }

/* The world ranks of a communicator's members, gathered through it. */
static void members_of(zs__comm *comm, int *out) {
    int32_t mine = g_rank, all[64];
    ZT_REQUIRE(zs__comm_size(comm) <= 64);
    ZT_OK(zs__comm_all_gather_bytes(comm, &mine, sizeof mine, all, "members"));
    for (int i = 0; i < zs__comm_size(comm); i++) out[i] = all[i];
}

/* ------------------------------------------------------- expectations */

/* Rank w's contribution to element i: an integer times a power of two, so
 * every summation order is exact. */
static float exact_value(int w, size_t i) {
    int k = (int)((i * 7 + (size_t)w * 13) % 17) - 8;
    return ldexpf((float)k, -(int)(i % 5));
}

static unsigned char pattern(int from, int to, size_t b) {
    return (unsigned char)(b * 31 + (size_t)from * 7 + (size_t)to * 101 + 1);
}

/* What a call should add to the counters: one call of `op`, `bytes`, and
 * its split by link. */
typedef struct expect {
    zs_comm_op op;
    uint64_t bytes, intra, inter;
} expect;

static void check_counters(const char *what, zs__comm *comm, const zs_comm_stats *before,
                           expect e) {
    zs_comm_stats after;
    zs__comm_stats(comm, &after);
    for (int o = 0; o < ZS_COMM_OP_COUNT; o++) {
        const int is = o == (int)e.op;
        const uint64_t calls = after.calls[o] - before->calls[o];
        const uint64_t bytes = after.bytes[o] - before->bytes[o];
        const uint64_t intra = after.bytes_intra[o] - before->bytes_intra[o];
        const uint64_t inter = after.bytes_inter[o] - before->bytes_inter[o];
        ZT_CHECK_MSG(calls == (is ? 1u : 0u), "%s (%s): %s calls +%llu", what,
                     zs__comm_where(comm), zs_comm_op_name((zs_comm_op)o),
                     (unsigned long long)calls);
        ZT_CHECK_MSG(bytes == (is ? e.bytes : 0u) && intra == (is ? e.intra : 0u) &&
                         inter == (is ? e.inter : 0u),
                     "%s (%s) on rank %d: %s bytes +%llu (intra %llu, inter %llu), want +%llu "
                     "(intra %llu, inter %llu)",
                     what, zs__comm_where(comm), g_rank, zs_comm_op_name((zs_comm_op)o),
                     (unsigned long long)bytes, (unsigned long long)intra,
                     (unsigned long long)inter, (unsigned long long)(is ? e.bytes : 0),
                     (unsigned long long)(is ? e.intra : 0), (unsigned long long)(is ? e.inter : 0));
    }
}

/* Only the total and the sum rule (host collectives split in proportion). */
static void check_sum_rule(const char *what, zs__comm *comm, const zs_comm_stats *before,
                           zs_comm_op op, uint64_t bytes, int never_across, int always_across) {
    zs_comm_stats after;
    zs__comm_stats(comm, &after);
    const uint64_t b = after.bytes[op] - before->bytes[op];
    const uint64_t intra = after.bytes_intra[op] - before->bytes_intra[op];
    const uint64_t inter = after.bytes_inter[op] - before->bytes_inter[op];
    ZT_CHECK_MSG(b == bytes && intra + inter == b, "%s (%s): bytes +%llu (want %llu) = intra "
                 "%llu + inter %llu", what, zs__comm_where(comm), (unsigned long long)b,
                 (unsigned long long)bytes, (unsigned long long)intra, (unsigned long long)inter);
    if (never_across) ZT_CHECK_MSG(inter == 0, "%s (%s): %llu bytes across nodes", what,
                                   zs__comm_where(comm), (unsigned long long)inter);
    if (always_across) ZT_CHECK_MSG(intra == 0, "%s (%s): %llu bytes inside the node", what,
                                    zs__comm_where(comm), (unsigned long long)intra);
}

/* The link of a send from this rank to world rank `to`. */
static void add_send(expect *e, int to, int n, uint64_t bytes) {
    if (node_of(to, n) == node_of(g_rank, n)) e->intra += bytes;
    else e->inter += bytes;
}

/* ------------------------------------------------------------ the ops */

/* Every collective on `comm` (members: world ranks in rank order), with
 * exact results and counters by link. */
static void check_ops(zs__comm *comm, const int *members, int rpn) {
    const int n = zs__comm_size(comm), me = zs__comm_rank(comm);
    const int right = members[(me + 1) % n];
    zs_comm_stats before;
    const size_t counts[] = {1, 1000, 5003};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        const size_t count = counts[c], total = count * (size_t)n;
        float *buf = malloc(total * sizeof *buf);
        ZT_REQUIRE(buf != NULL);
        /* Reduce-scatter: this rank's chunk is the members' exact sum. */
        for (size_t i = 0; i < total; i++) buf[i] = exact_value(g_rank, i);
        zs__comm_stats(comm, &before);
        ZT_OK(zs__comm_reduce_scatter(comm, buf, count, ZS_DTYPE_FP32, "rs"));
        expect e = {ZS_COMM_REDUCE_SCATTER, (uint64_t)(n - 1) * count * 4, 0, 0};
        if (n > 1) add_send(&e, right, rpn, e.bytes);
        check_counters("reduce_scatter", comm, &before, e);
        size_t bad = 0;
        for (size_t i = (size_t)me * count; i < (size_t)(me + 1) * count; i++) {
            double sum = 0;
            for (int k = 0; k < n; k++) sum += exact_value(members[k], i);
            bad += buf[i] != (float)sum;
        }
        ZT_CHECK_MSG(bad == 0, "reduce_scatter %s count %zu: %zu wrong sums", zs__comm_where(comm),
                     count, bad);

        /* All-reduce: every chunk is the sum. */
        for (size_t i = 0; i < total; i++) buf[i] = exact_value(g_rank, i);
        zs__comm_stats(comm, &before);
        ZT_OK(zs__comm_all_reduce(comm, buf, count, ZS_DTYPE_FP32, "ar"));
        e = (expect){ZS_COMM_ALL_REDUCE, 2 * (uint64_t)(n - 1) * count * 4, 0, 0};
        if (n > 1) add_send(&e, right, rpn, e.bytes);
        check_counters("all_reduce", comm, &before, e);
        bad = 0;
        for (size_t i = 0; i < total; i++) {
            double sum = 0;
            for (int k = 0; k < n; k++) sum += exact_value(members[k], i);
            bad += buf[i] != (float)sum;
        }
        ZT_CHECK_MSG(bad == 0, "all_reduce %s count %zu: %zu wrong sums", zs__comm_where(comm),
                     count, bad);

        /* All-gather: every member's chunk in its place. */
        unsigned char *bytes = (unsigned char *)buf;
        const size_t chunk = count * 4;
        memset(bytes, 0xA5, total * 4);
        for (size_t b = 0; b < chunk; b++) bytes[(size_t)me * chunk + b] = pattern(g_rank, 0, b);
        zs__comm_stats(comm, &before);
        ZT_OK(zs__comm_all_gather(comm, buf, count, ZS_DTYPE_FP32, "ag"));
        e = (expect){ZS_COMM_ALL_GATHER, (uint64_t)(n - 1) * chunk, 0, 0};
        if (n > 1) add_send(&e, right, rpn, e.bytes);
        check_counters("all_gather", comm, &before, e);
        bad = 0;
        for (int k = 0; k < n; k++)
            for (size_t b = 0; b < chunk; b++)
                bad += bytes[(size_t)k * chunk + b] != pattern(members[k], 0, b);
        ZT_CHECK_MSG(bad == 0, "all_gather %s count %zu: %zu wrong bytes", zs__comm_where(comm),
                     count, bad);
        free(buf);
    }

    /* All-to-all: block j goes to member j; blocks of one byte, of several
     * segments (4096 bytes here) and with a short last piece. */
    const size_t blocks[] = {1, 999, 9000};
    for (size_t k = 0; k < sizeof blocks / sizeof blocks[0]; k++) {
        const size_t block = blocks[k], total = block * (size_t)n;
        unsigned char *send = malloc(total), *recv = malloc(total);
        ZT_REQUIRE(send && recv);
        for (int j = 0; j < n; j++)
            for (size_t b = 0; b < block; b++) send[(size_t)j * block + b] = pattern(g_rank, members[j], b);
        memset(recv, 0x5A, total);
        zs__comm_stats(comm, &before);
        ZT_OK(zs__comm_all_to_all(comm, send, recv, block, "a2a"));
        expect e = {ZS_COMM_ALL_TO_ALL, (uint64_t)(n - 1) * block, 0, 0};
        for (int j = 0; j < n; j++)
            if (j != me) add_send(&e, members[j], rpn, block);
        check_counters("all_to_all", comm, &before, e);
        size_t bad = 0;
        for (int j = 0; j < n; j++)
            for (size_t b = 0; b < block; b++)
                bad += recv[(size_t)j * block + b] != pattern(members[j], g_rank, b);
        ZT_CHECK_MSG(bad == 0, "all_to_all %s block %zu: %zu wrong bytes", zs__comm_where(comm),
                     block, bad);
        free(send);
        free(recv);
    }
    /* Overlapping buffers are refused before anything is numbered. */
    unsigned char one[256];
    ZT_FAILS_WITH(zs__comm_all_to_all(comm, one, one + 1, 2, "overlap"), ZS_ERR_INVALID_ARGUMENT,
                  "overlap");

    /* All-gather of bytes (dissemination): round k sends what it holds,
     * min(2^k, n - 2^k) blocks, to member me - 2^k. */
    const size_t nbytes = 5000; /* more than segment / n: several pieces */
    unsigned char *mine = malloc(nbytes), *all = malloc(nbytes * (size_t)n);
    ZT_REQUIRE(mine && all);
    for (size_t b = 0; b < nbytes; b++) mine[b] = pattern(g_rank, 1, b);
    zs__comm_stats(comm, &before);
    ZT_OK(zs__comm_all_gather_bytes(comm, mine, nbytes, all, "bytes"));
    expect e = {ZS_COMM_ALL_GATHER, (uint64_t)(n - 1) * nbytes, 0, 0};
    for (int dist = 1; dist < n; dist *= 2) {
        const int blocks_sent = dist < n - dist ? dist : n - dist;
        add_send(&e, members[(me - dist + n) % n], rpn, (uint64_t)blocks_sent * nbytes);
    }
    check_counters("all_gather_bytes", comm, &before, e);
    size_t bad = 0;
    for (int k = 0; k < n; k++)
        for (size_t b = 0; b < nbytes; b++) bad += all[(size_t)k * nbytes + b] != pattern(members[k], 1, b);
    ZT_CHECK_MSG(bad == 0, "all_gather_bytes %s: %zu wrong bytes", zs__comm_where(comm), bad);

    /* Broadcast from the last member. */
    for (size_t b = 0; b < nbytes; b++) mine[b] = me == n - 1 ? pattern(7, 7, b) : 0;
    zs__comm_stats(comm, &before);
    ZT_OK(zs__comm_broadcast(comm, mine, nbytes, n - 1, "bcast"));
    const zs__comm_kind kind = zs__comm_kind_of(comm);
    check_sum_rule("broadcast", comm, &before, ZS_COMM_BROADCAST,
                   me == n - 1 && n > 1 ? nbytes : 0, kind == ZS_COMM_KIND_NODE,
                   kind == ZS_COMM_KIND_CROSS);
    bad = 0;
    for (size_t b = 0; b < nbytes; b++) bad += mine[b] != pattern(7, 7, b);
    ZT_CHECK_MSG(bad == 0, "broadcast %s: %zu wrong bytes", zs__comm_where(comm), bad);
    free(mine);
    free(all);

    /* Scalars: sum and max over the members. */
    double v[2] = {g_rank + 1.0, (double)g_rank};
    zs__comm_stats(comm, &before);
    ZT_OK(zs__comm_all_reduce_scalars(comm, v, 2, ZS_REDUCE_SUM, "sum"));
    check_sum_rule("all_reduce_scalars", comm, &before, ZS_COMM_ALL_REDUCE,
                   2 * (uint64_t)(n - 1) * 2 * 8 / (uint64_t)n, kind == ZS_COMM_KIND_NODE,
                   kind == ZS_COMM_KIND_CROSS);
    double sum = 0, top = 0;
    for (int k = 0; k < n; k++) {
        sum += members[k] + 1.0;
        if (members[k] > top) top = members[k];
    }
    ZT_CHECK_MSG(v[0] == sum, "all_reduce_scalars %s: %g, want %g", zs__comm_where(comm), v[0], sum);
    double m = g_rank;
    ZT_OK(zs__comm_all_reduce_scalars(comm, &m, 1, ZS_REDUCE_MAX, "max"));
    ZT_CHECK_MSG(m == top, "max %s: %g, want %g", zs__comm_where(comm), m, top);

    zs__comm_stats(comm, &before);
    ZT_OK(zs__comm_barrier(comm, "barrier"));
    check_counters("barrier", comm, &before, (expect){ZS_COMM_BARRIER, 0, 0, 0});
}

/* ----------------------------------------------------------- the parts */

static void check_topology(const zs__topology *t, int rpn) {
    const int nodes = (g_size + rpn - 1) / rpn;
    ZT_EQ_INT(t->node_count, nodes);
    ZT_EQ_INT(t->node, node_of(g_rank, rpn));
    ZT_EQ_INT(t->local_rank, g_rank % rpn);
    for (int r = 0; r < g_size; r++) {
        ZT_EQ_INT(t->node_of[r], node_of(r, rpn));
        ZT_EQ_INT(t->local_of[r], r % rpn);
        ZT_EQ_INT(zs__topology_rank_of(t, r / rpn, r % rpn), r);
    }
    for (int k = 0; k < nodes; k++) {
        const int size = k < nodes - 1 || g_size % rpn == 0 ? rpn : g_size % rpn;
        ZT_EQ_INT(t->node_sizes[k], size);
        ZT_EQ_INT(t->node_first[k], k * rpn);
    }
    ZT_EQ_INT(zs__topology_rank_of(t, nodes, 0), -1);
    ZT_EQ_INT(t->equal, g_size % rpn == 0 || nodes == 1);
    if (t->equal) {
        ZT_OK(zs__topology_require_equal(t, "zero.shard_group = \"node\""));
    } else {
        /* np 5, 2 per node: nodes of 2, 2 and 1, named with their ranks. */
        char want[128];
        snprintf(want, sizeof want, "node %d (rank%s %d", nodes - 1, g_size % rpn == 1 ? "" : "s",
                 (nodes - 1) * rpn);
        ZT_FAILS_WITH(zs__topology_require_equal(t, "zero.shard_group = \"node\""), ZS_ERR_CONFIG,
                      "zero.shard_group = \"node\" needs nodes with equal numbers of ranks");
        ZT_FAILS_WITH(zs__topology_require_equal(t, "x"), ZS_ERR_CONFIG, want);
        ZT_FAILS_WITH(zs__topology_require_equal(t, "x"), ZS_ERR_CONFIG, "node 0 (ranks 0-1): 2 ranks");
    }
}

static void check_groups(family *f, int rpn) {
    const zs__topology *t = f->t;
    int members[64];
    /* The node: its ranks in rank order. */
    ZT_EQ_INT(zs__comm_size(f->node), t->node_size);
    ZT_EQ_INT(zs__comm_rank(f->node), t->local_rank);
    members_of(f->node, members);
    for (int i = 0; i < zs__comm_size(f->node); i++) {
        ZT_EQ_INT(members[i], t->node * rpn + i);
        ZT_EQ_INT(zs__comm_world_rank(f->node, i), members[i]);
    }
    char where[64];
    snprintf(where, sizeof where, "node %d of %d", t->node, t->node_count);
    ZT_CHECK_MSG(strcmp(zs__comm_where(f->node), where) == 0, "node where '%s'",
                 zs__comm_where(f->node));
    ZT_CHECK(strcmp(zs__comm_group_name(f->node), "node") == 0);
    ZT_CHECK(zs__comm_group_name(f->world) == NULL && zs__comm_where(f->world)[0] == '\0');
    check_ops(f->node, members, rpn);

    /* The cross-node group: this local rank on every node that has it. */
    int want = 0;
    for (int k = 0; k < t->node_count; k++)
        if (t->local_rank < t->node_sizes[k]) want++;
    ZT_EQ_INT(zs__comm_size(f->cross), want);
    ZT_EQ_INT(zs__comm_rank(f->cross), t->node);
    members_of(f->cross, members);
    for (int i = 0; i < zs__comm_size(f->cross); i++) ZT_EQ_INT(members[i], i * rpn + t->local_rank);
    snprintf(where, sizeof where, "cross-node (local rank %d)", t->local_rank);
    ZT_CHECK_MSG(strcmp(zs__comm_where(f->cross), where) == 0, "cross where '%s'",
                 zs__comm_where(f->cross));
    check_ops(f->cross, members, rpn);

    /* The world with the topology: the ring's segments and the
     * all-to-all's blocks counted by the link they took. */
    for (int r = 0; r < g_size; r++) members[r] = r;
    check_ops(f->world, members, rpn);

    /* The totals sum the family. */
    zs_comm_stats w, n, c, total;
    zs__comm_stats(f->world, &w);
    zs__comm_stats(f->node, &n);
    zs__comm_stats(f->cross, &c);
    zs__comm_stats_total(f->world, &total);
    for (int op = 0; op < ZS_COMM_OP_COUNT; op++) {
        ZT_EQ_U64(total.calls[op], w.calls[op] + n.calls[op] + c.calls[op]);
        ZT_EQ_U64(total.bytes_inter[op], w.bytes_inter[op] + n.bytes_inter[op] + c.bytes_inter[op]);
        ZT_EQ_U64(total.bytes[op], total.bytes_intra[op] + total.bytes_inter[op]);
    }
}

/* Groups run independently: the ranks of node 0 finish a node collective
 * while the others already wait in a world collective of the same label
 * and number, and vice versa; tags keep their messages apart. */
static void check_independence(family *f) {
    const int first = f->t->node == 0;
    int32_t mine = g_rank, all_node[64], all_world[64];
    for (int pass = 0; pass < 2; pass++) {
        if (first == pass) ZT_OK(zs__comm_all_gather_bytes(f->world, &mine, 4, all_world, "same"));
        ZT_OK(zs__comm_all_gather_bytes(f->node, &mine, 4, all_node, "same"));
        if (first != pass) ZT_OK(zs__comm_all_gather_bytes(f->world, &mine, 4, all_world, "same"));
    }
    for (int r = 0; r < g_size; r++) ZT_EQ_INT(all_world[r], r);
    for (int i = 0; i < zs__comm_size(f->node); i++) ZT_EQ_INT(all_node[i], f->t->node_first[f->t->node] + i);
}

/* One node: nothing crosses, whatever the op. */
static void check_one_node(void) {
    family f;
    family_create(&f, g_size, 4096, 600, 0);
    family_groups(&f);
    ZT_EQ_INT(f.t->node_count, 1);
    ZT_EQ_INT(zs__comm_size(f.node), g_size);
    ZT_EQ_INT(zs__comm_size(f.cross), 1);
    int members[64];
    for (int r = 0; r < g_size; r++) members[r] = r;
    check_ops(f.world, members, g_size);
    check_ops(f.node, members, g_size);
    members[0] = g_rank;
    check_ops(f.cross, members, g_size);
    zs_comm_stats total;
    zs__comm_stats_total(f.world, &total);
    for (int op = 0; op < ZS_COMM_OP_COUNT; op++)
        ZT_CHECK_MSG(total.bytes_inter[op] == 0 && total.bytes_intra[op] == total.bytes[op],
                     "one node: %s sent %llu bytes across nodes",
                     zs_comm_op_name((zs_comm_op)op), (unsigned long long)total.bytes_inter[op]);
    family_destroy(&f);
}

/* Host staging: the world stages through the CPU backend (comm.host_staging),
 * groups made afterwards stage through the world's buffers: the same bits as
 * unstaged groups, and no second buffer is charged. */
static void check_staged(family *plain, int rpn) {
    family f;
    zs__mem be_mem;
    memset(&be_mem, 0, sizeof be_mem);
    zs__backend *be = NULL;
    ZT_OK(zs__cpu_backend_create(&be_mem, &be));
    family_create(&f, rpn, 4096, 600, 0);
    const size_t staging = 64 * (size_t)g_size; /* pieces of 16 floats per rank */
    ZT_OK(zs__comm_stage_through(f.world, be, staging));
    family_groups(&f);
    ZT_EQ_U64(f.mem.current[ZS_MEM_COMM], g_size > 1 ? 4096 : 0);
    ZT_EQ_U64(be_mem.current[ZS_MEM_COMM], g_size > 1 ? staging : 0);
    ZT_FAILS_WITH(zs__comm_stage_through(f.node, be, staging), ZS_ERR_INTERNAL, "stage the world");
    zs__comm *pairs[2][2] = {{plain->node, f.node}, {plain->cross, f.cross}};
    for (int g = 0; g < 2; g++) {
        zs__comm *a = pairs[g][0], *b = pairs[g][1];
        const int n = zs__comm_size(a);
        const size_t count = 1001, total = count * (size_t)n;
        float *x = malloc(total * 4), *y = malloc(total * 4);
        ZT_REQUIRE(x && y);
        for (size_t i = 0; i < total; i++)
            x[i] = y[i] = 0.5f + (float)((i * 2654435761u + (size_t)g_rank * 40503u) % 1000) / 997.0f;
        ZT_OK(zs__comm_reduce_scatter(a, x, count, ZS_DTYPE_FP32, "unstaged"));
        ZT_OK(zs__comm_reduce_scatter(b, y, count, ZS_DTYPE_FP32, "staged"));
        const size_t own = (size_t)zs__comm_rank(a) * count;
        ZT_CHECK_MSG(memcmp(x + own, y + own, count * 4) == 0,
                     "staged reduce_scatter on %s differs from the unstaged one", zs__comm_where(b));
        ZT_OK(zs__comm_all_gather(a, x, count, ZS_DTYPE_FP32, "unstaged"));
        ZT_OK(zs__comm_all_gather(b, y, count, ZS_DTYPE_FP32, "staged"));
        ZT_CHECK_MSG(memcmp(x, y, total * 4) == 0, "staged all_gather on %s differs",
                     zs__comm_where(b));
        /* All-to-all in pieces of half the staging. */
        unsigned char *send = malloc(total), *ra = malloc(total), *rb = malloc(total);
        ZT_REQUIRE(send && ra && rb);
        for (size_t i = 0; i < total; i++) send[i] = pattern(g_rank, (int)(i / count), i);
        ZT_OK(zs__comm_all_to_all(a, send, ra, count, "unstaged"));
        ZT_OK(zs__comm_all_to_all(b, send, rb, count, "staged"));
        ZT_CHECK_MSG(memcmp(ra, rb, total) == 0, "staged all_to_all on %s differs",
                     zs__comm_where(b));
        free(send);
        free(ra);
        free(rb);
        free(x);
        free(y);
    }
    family_destroy(&f);
    ZT_EQ_U64(f.mem.current[ZS_MEM_COMM], 0);
    ZT_EQ_U64(be_mem.current[ZS_MEM_COMM], 0);
    zs__backend_destroy(be);
}

/* The deadline of a group: world rank 1 (local rank 1 of node 0) skips a
 * node barrier; the other ranks of node 0 time out naming the op, the group
 * and rank 1, and then every communicator of their family refuses. */
static void check_deadline(int rpn) {
    if (rpn < 2 || g_size < 2) return; /* world rank 1 must be on node 0 */
    family f;
    family_create(&f, rpn, 4096, 1, 0);
    family_groups(&f);
    if (f.t->node == 0 && g_rank != 1) {
        ZT_FAILS_WITH(zs__comm_barrier(f.node, "skipped"), ZS_ERR_TIMEOUT,
                      "of 'skipped' in node 0 of");
        const char *message = zs_last_error();
        ZT_CHECK_MSG(strstr(message, "barrier #") && strstr(message, "no report from rank 1") &&
                         strstr(message, "comm.timeout_s = 1"),
                     "the timeout does not name the op and the silent world rank: %s", message);
        char on[32];
        snprintf(on, sizeof on, "on rank %d timed out", g_rank);
        ZT_CHECK_MSG(strstr(message, on) != NULL, "the timeout does not name this world rank: %s",
                     message);
        ZT_EQ_INT(zs__comm_failed(f.world), ZS_ERR_TIMEOUT);
        ZT_FAILS_WITH(zs__comm_barrier(f.cross, "after"), ZS_ERR_TIMEOUT,
                      "the node 0 of");
        ZT_FAILS_WITH(zs__comm_barrier(f.world, "after"), ZS_ERR_TIMEOUT, "failed earlier");
    }
    /* Rank 1 stays away until the others have given up. */
    MPI_Barrier(MPI_COMM_WORLD);
    family_destroy(&f);
}

/* comm.check_collectives on a group: the member of node 1 in the
 * cross-node group of local rank 0 runs another label; every member of that
 * group fails with ZS_ERR_MISMATCH naming the group, before data moves. */
static void check_fingerprints(int rpn) {
    family f;
    family_create(&f, rpn, 4096, 600, 1);
    family_groups(&f);
    int32_t mine = g_rank, all[64];
    if (f.t->local_rank == 0 && f.t->node_count > 1) {
        const char *label = f.t->node == 1 ? "b" : "a";
        ZT_FAILS_WITH(zs__comm_all_gather_bytes(f.cross, &mine, 4, all, label), ZS_ERR_MISMATCH,
                      "ranks are out of step (comm.check_collectives) in cross-node (local rank 0)");
        char other[48];
        snprintf(other, sizeof other, "rank %d is about to run", f.t->node == 1 ? 0 : rpn);
        ZT_CHECK_MSG(strstr(zs_last_error(), other) != NULL, "the mismatch does not name world "
                     "rank %d: %s", f.t->node == 1 ? 0 : rpn, zs_last_error());
        ZT_FAILS_WITH(zs__comm_barrier(f.node, "after"), ZS_ERR_MISMATCH, "failed earlier");
    } else {
        ZT_OK(zs__comm_all_gather_bytes(f.cross, &mine, 4, all, "a"));
    }
    family_destroy(&f);
}

/* ---------------------------------------------- the injected network */

static int near(double a, double b) { return fabs(a - b) <= 1e-12 + 1e-9 * fabs(b); }

/* The formula (injected_network.h), and the variables that set it. */
static void check_network_formula(void) {
    zs__injected_network net = {.latency_s = 10e-6, .bytes_per_s = 1e9 / 8};
    ZT_CHECK(near(zs__injected_network_want_s(&net, 1000, 300, 100), 10e-6 + 8000 / 1e9));
    net.per_link = 1;
    net.latency_inter_s = 100e-6;
    net.bytes_per_s_inter = 1e9 / 8;
    net.bytes_per_s = 100e9 / 8;
    /* What this rank sent on each link, each at its rate (not the op's
     * payload), and the cross-node latency because something crossed. */
    ZT_CHECK(near(zs__injected_network_want_s(&net, 1000, 300, 100),
                  100e-6 + 300 / (100e9 / 8) + 100 / (1e9 / 8)));
    ZT_CHECK(near(zs__injected_network_want_s(&net, 1000, 400, 0), 10e-6 + 400 / (100e9 / 8)));
    ZT_CHECK(near(zs__injected_network_want_s(&net, 1000, 0, 0), 10e-6)); /* sent nothing */
    net.bytes_per_s = 0; /* no limit inside the node */
    ZT_CHECK(near(zs__injected_network_want_s(&net, 1000, 0, 50), 100e-6 + 50 / (1e9 / 8)));
    ZT_CHECK(near(zs__injected_network_want_s(&net, 1000, 900, 0), 10e-6));

    setenv("ZS_COMM_DELAY_GBPS_INTER", "10", 1);
    unsetenv("ZS_COMM_DELAY_US_INTER");
    setenv("ZS_COMM_DELAY_US", "5", 1);
    unsetenv("ZS_COMM_DELAY_GBPS");
    zs__injected_network env;
    ZT_EQ_INT(zs__injected_network_from_env(&env), 1);
    ZT_EQ_INT(env.per_link, 1);
    ZT_CHECK(near(env.bytes_per_s_inter, 10e9 / 8) && env.bytes_per_s == 0);
    ZT_CHECK(near(env.latency_inter_s, 5e-6) && near(env.latency_s, 5e-6));
    unsetenv("ZS_COMM_DELAY_GBPS_INTER");
    unsetenv("ZS_COMM_DELAY_US");
    ZT_EQ_INT(zs__injected_network_from_env(&env), 0);
}

typedef struct gather_op {
    zs__engine_op op; /* first: the engine hands it back */
    zs__comm *comm;
    float *buf;
    size_t count;
} gather_op;

static zs_status run_gather(zs__engine_op *op) {
    gather_op *g = (gather_op *)op;
    return zs__comm_all_gather(g->comm, g->buf, g->count, ZS_DTYPE_FP32, "delayed");
}

/* Through the engine's hooks: an op whose ring segments cross nodes takes
 * at least the bytes this rank sent at the cross-node bandwidth (not the
 * op's payload, which is W / (W - 1) times more); inside a node nothing is
 * limited here. */
static void check_network_by_link(family *f, int rpn) {
    zs__injected_network net = {.per_link = 1, .bytes_per_s_inter = 0.002e9 / 8};
    zs__injected_network_watch(&net, f->world);
    zs__engine *engine = NULL;
    ZT_OK(zs__engine_create(0, NULL, &engine));
    zs__engine_set_hooks(engine, zs__injected_network_before_op, zs__injected_network_after_op,
                         &net);
    gather_op g = {.comm = f->world, .count = 256};
    g.buf = calloc(g.count * (size_t)g_size, sizeof(float));
    ZT_REQUIRE(g.buf != NULL);
    g.op.run = run_gather;
    g.op.name = "all_gather";
    g.op.label = "delayed";
    g.op.bytes = g.count * (size_t)g_size * sizeof(float);
    /* The ring sends W - 1 segments to rank + 1: 12.3 ms at np 4. */
    const double want = (double)(g.count * (size_t)(g_size - 1) * sizeof(float)) /
                        net.bytes_per_s_inter;
    const double start = zs__clock_s();
    zs__engine_submit(engine, &g.op);
    ZT_OK(zs__engine_wait(engine, &g.op));
    const double took = zs__clock_s() - start;
    const int crosses = g_size > 1 && node_of((g_rank + 1) % g_size, rpn) != node_of(g_rank, rpn);
    if (crosses)
        ZT_CHECK_MSG(took >= 0.99 * want, "an all-gather sending across nodes took %.4f s, want "
                     "at least %.4f s", took, want);
    zs__engine_destroy(engine);
    free(g.buf);
}

typedef struct a2a_op {
    zs__engine_op op;
    zs__comm *comm;
    unsigned char *send, *recv;
} a2a_op;

static zs_status run_a2a(zs__engine_op *op) {
    a2a_op *a = (a2a_op *)op;
    return zs__comm_all_to_all(a->comm, a->send, a->recv, 16, "traced");
}

/* Traces: a group's collective on the comm track names its group, and the
 * all-to-all is an op of its own. */
static void check_trace(family *f) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/zs-test-topology-%ld-%%r.json", (long)getpid());
    zs__trace *tr = NULL;
    ZT_OK(zs__trace_create(path, g_rank, 64, &tr));
    ZT_REQUIRE(tr != NULL);
    zs__engine *engine = NULL;
    ZT_OK(zs__engine_create(0, tr, &engine));
    const int n = zs__comm_size(f->node);
    a2a_op a = {.comm = f->node, .send = calloc((size_t)n, 16), .recv = calloc((size_t)n, 16)};
    ZT_REQUIRE(a.send && a.recv);
    a.op.run = run_a2a;
    a.op.name = "all_to_all";
    a.op.label = "traced";
    a.op.group = zs__comm_group_name(f->node);
    a.op.bytes = 16 * (uint64_t)n;
    zs__engine_submit(engine, &a.op);
    ZT_OK(zs__engine_wait(engine, &a.op));
    zs__engine_destroy(engine);
    char file[512];
    snprintf(file, sizeof file, "%s", zs__trace_path(tr));
    zs__trace_destroy(tr); /* writes the file */
    char text[8192];
    zt_read_text(file, text, sizeof text);
    ZT_CHECK_MSG(strstr(text, "\"name\":\"all_to_all\"") && strstr(text, "\"op\":\"all_to_all\"") &&
                     strstr(text, "\"group\":\"node\"") && strstr(text, "\"unit\":\"traced\""),
                     "the trace does not show the node group's all_to_all: %s", text);
    remove(file);
    free(a.send);
    free(a.recv);
}

static void simulated(int rpn) {
    family f;
    family_create(&f, rpn, 4096, 600, 0);
    check_topology(f.t, rpn);
    family_groups(&f);
    check_groups(&f, rpn);
    check_independence(&f);
    check_network_by_link(&f, rpn);
    check_trace(&f);
    check_one_node();
    check_staged(&f, rpn);
    family_destroy(&f);
    check_fingerprints(rpn);
    check_deadline(rpn);
}

/* Nodes from host identities: `nodes` of equal size, consecutive by slot. */
static void detect(int nodes) {
    family f;
    family_create(&f, 0, 4096, 600, 0);
    char line[1024];
    zs__topology_describe(f.t, line, sizeof line);
    if (g_rank == 0) fprintf(stderr, "test_topology detect: %s\n", line);
    ZT_EQ_INT(f.t->node_count, nodes);
    ZT_CHECK(f.t->equal);
    const int per = g_size / nodes;
    for (int r = 0; r < g_size; r++) ZT_EQ_INT(f.t->node_of[r], r / per);
    /* The simulated hosts share the host name: the namespace told them apart. */
    for (int r = 1; r < g_size; r++)
        ZT_CHECK_MSG(strcmp(f.t->identities[r].host, f.t->identities[0].host) == 0,
                     "rank %d runs on host '%s', rank 0 on '%s'", r, f.t->identities[r].host,
                     f.t->identities[0].host);
    if (nodes > 1)
        ZT_CHECK(f.t->identities[0].netns_ino != f.t->identities[g_size - 1].netns_ino);
    family_groups(&f);
    int members[64];
    members_of(f.node, members);
    for (int i = 0; i < zs__comm_size(f.node); i++) ZT_EQ_INT(members[i], f.t->node * per + i);
    family_destroy(&f);
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    zt_rank = g_rank;
    /* INFO on rank 0 only, as in a context (ZS_LOG_LEVEL still wins). */
    zs__log_configure(g_rank, ZS_LOG_INFO, "");
    ZT_REQUIRE(argc == 3 && (strcmp(argv[1], "simulated") == 0 || strcmp(argv[1], "detect") == 0));
    const int value = atoi(argv[2]);
    ZT_REQUIRE(value >= 1 && g_size <= 64);
    if (strcmp(argv[1], "simulated") == 0) {
        check_network_formula();
        simulated(value);
    }
    else detect(value);
    int failed = zt_finish("test_topology");
    /* A timed-out communicator leaves unmatched messages behind; every rank
     * is alive, so MPI_Finalize still completes. */
    MPI_Finalize();
    return failed;
}
