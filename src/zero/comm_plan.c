/* Bytes per step by link (comm_plan.h): the collectives a steady step runs,
 * each counted as comm.c counts it and split as the transport sends it.
 *
 * Floor (src/floors.txt): Owns nothing; calls the memory plan and the
 * partition plan below it.
 */
#include "zero/comm_plan.h"

#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/alloc.h"
#include "core/error.h"
#include "zero/memory_plan.h"
#include "zero/plan.h"
#include "zero/quant_record.h"

/* The topology as the formula needs it, derived from node_of[] alone. */
typedef struct nodes {
    int world, rank;
    const int *node_of;
    int count;        /* nodes */
    int size;         /* ranks on this rank's node */
    int equal;        /* every node has `size` ranks */
    int local;        /* this rank's index on its node (rank order) */
} nodes;

static zs_status nodes_make(const zs__comm_plan_input *in, int rank, nodes *t) {
    memset(t, 0, sizeof *t);
    t->world = in->world;
    t->rank = rank;
    t->node_of = in->node_of;
    int *sizes = zs__calloc((size_t)in->world, sizeof *sizes);
    if (!sizes) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "bytes per step: out of host memory");
    for (int r = 0; r < in->world; r++) {
        const int n = in->node_of[r];
        if (n < 0 || n >= in->world) {
            free(sizes);
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "bytes per step: rank %d is on node %d of "
                            "at most %d", r, n, in->world);
        }
        if (r < rank && n == in->node_of[rank]) t->local++;
        if (sizes[n]++ == 0) t->count++;
    }
    t->size = sizes[in->node_of[rank]];
    t->equal = 1;
    for (int n = 0; n < in->world; n++)
        if (sizes[n] != 0 && sizes[n] != t->size) t->equal = 0;
    free(sizes);
    return ZS_OK;
}

static int across(const nodes *t, int peer) { return t->node_of[peer] != t->node_of[t->rank]; }

static void add(zs__step_bytes *out, zs_comm_op op, int inter, uint64_t bytes) {
    if (inter) out->inter[op] += bytes;
    else out->intra[op] += bytes;
}

/* The groups a ring runs over. */
typedef enum ring_group { RING_WORLD, RING_NODE, RING_CROSS } ring_group;

/* A ring collective that sends `steps` x `chunk_bytes` (reduce-scatter and
 * all-gather: size - 1 steps; all-reduce: 2 (size - 1)), all of it to the
 * next rank of the group. */
static void ring(const nodes *t, zs__step_bytes *out, zs_comm_op op, ring_group g, int size,
                 int per_step, uint64_t chunk_bytes, uint64_t times) {
    if (size < 2) return;
    const uint64_t bytes = (uint64_t)per_step * (uint64_t)(size - 1) * chunk_bytes * times;
    const int inter = g == RING_CROSS ? 1 : g == RING_NODE ? 0 : across(t, (t->rank + 1) % t->world);
    add(out, op, inter, bytes);
}

/* An agreement: zs__comm_all_reduce_scalars of `doubles` values over the
 * world, counted as 2 (n - 1) / n of their bytes rounded down and split in
 * the proportion its exchange (mpi_host.c: Bruck's all-gather, round d
 * sending min(d, n - d) pieces to rank - d) really sent on each link. */
static void agreement(const nodes *t, zs__step_bytes *out, int doubles, uint64_t times) {
    const int n = t->world;
    if (n < 2) return;
    const uint64_t bytes = (uint64_t)doubles * sizeof(double);
    const uint64_t counted = 2 * (uint64_t)(n - 1) * bytes / (uint64_t)n;
    uint64_t intra = 0, inter = 0;
    for (int dist = 1; dist < n; dist *= 2) {
        const uint64_t sent = (uint64_t)(dist < n - dist ? dist : n - dist) * bytes;
        if (across(t, (t->rank - dist + n) % n)) inter += sent;
        else intra += sent;
    }
    const uint64_t share = zs__comm_inter_share(counted, intra, inter);
    out->inter[ZS_COMM_ALL_REDUCE] += share * times;
    out->intra[ZS_COMM_ALL_REDUCE] += (counted - share) * times;
}

zs_status zs__comm_plan_rank(const zs__comm_plan_input *in, int rank, zs__step_bytes *out) {
    memset(out, 0, sizeof *out);
    const zs__settings *s = in->settings;
    const zs__plan *plan = in->plan;
    if (in->world < 1 || rank < 0 || rank >= in->world || !in->node_of ||
        plan->world_size * plan->replicas != in->world)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "bytes per step: rank %d of %d ranks, a plan "
                        "for %d x %d ranks", rank, in->world, plan->world_size, plan->replicas);
    if (in->world == 1) return ZS_OK;
    nodes t;
    ZS_CHECK(nodes_make(in, rank, &t));
    const int stage = s->zero.stage;
    const int hybrid = plan->replicas > 1 || s->zero.shard_group == ZS_SHARD_GROUP_NODE;
    /* As the memory plan decides them (memory_plan.c). */
    const zs__zeropp_use use = zs__zeropp_use_of(s, in->world);
    const int weight_bits = use.weight_bits, grad_bits = use.grad_bits;
    const char *needs = zs__zeropp_needs_equal_nodes(s, in->world);
    if ((hybrid || needs) && !t.equal)
        return zs__fail(ZS_ERR_CONFIG, "bytes per step: %s needs nodes of equal size",
                        hybrid ? "zero.shard_group = \"node\"" : needs);
    if (hybrid && (plan->world_size != t.size || plan->replicas != t.count))
        return zs__fail(ZS_ERR_CONFIG, "bytes per step: hybrid sharding's plan is laid out for "
                        "%d ranks x %d replicas, the nodes are %d of %d ranks", plan->world_size,
                        plan->replicas, t.count, t.size);

    const size_t elem = zs_dtype_size(s->precision.dtype);
    const size_t reduce_elem =
        s->precision.reduce_dtype == ZS_REDUCE_DTYPE_FP32 && !grad_bits ? 4 : elem;
    const uint64_t micro = (uint64_t)s->gradient_accumulation_steps;
    /* Reductions per step: every micro-step in stages 2-3, once in 0-1. */
    const uint64_t reductions = stage >= 2 ? micro : 1;
    const ring_group shard_ring = hybrid ? RING_NODE : RING_WORLD;
    const int n = plan->world_size; /* the shard group's ranks */
    const int64_t block = s->comm.quant_block;

    for (int u = 0; u < plan->unit_count; u++) {
        const zs__plan_unit *pu = &plan->units[u];
        const uint64_t S = (uint64_t)pu->shard_numel;
        /* The gradient (a frozen unit has none, and its parameters never
         * change: only stage 3's gathers move it). */
        if (!pu->frozen) {
            if (stage == 0) {
                ring(&t, out, ZS_COMM_ALL_REDUCE, RING_WORLD, t.world, 2, S * reduce_elem, 1);
            } else if (grad_bits) {
                /* qgZ: hop 1 sends `nodes` records to each other rank of the
                 * node, hop 2 one record to each other node's rank. */
                const uint64_t record =
                    (uint64_t)zs__quant_record_bytes((int64_t)S, block, grad_bits);
                add(out, ZS_COMM_ALL_TO_ALL, 0,
                    (uint64_t)(t.size - 1) * (uint64_t)t.count * record * reductions);
                add(out, ZS_COMM_ALL_TO_ALL, 1, (uint64_t)(t.count - 1) * record * reductions);
            } else {
                ring(&t, out, ZS_COMM_REDUCE_SCATTER, shard_ring, n, 1, S * reduce_elem,
                     reductions);
                /* Hybrid: each slice all-reduced between its replicas, in
                 * chunks of S / replicas (zs__replica_all_reduce). */
                if (plan->replicas > 1)
                    ring(&t, out, ZS_COMM_ALL_REDUCE, RING_CROSS, plan->replicas, 2,
                         S / (uint64_t)plan->replicas * reduce_elem, reductions);
            }
        }
        /* The parameters. */
        if ((stage == 1 || stage == 2) && !pu->frozen) {
            ring(&t, out, ZS_COMM_ALL_GATHER, shard_ring, n, 1, S * elem, 1);
        } else if (stage == 3) {
            const uint64_t gathers = (uint64_t)in->gathers_per_micro * micro;
            /* A quantized frozen unit moves its own records (frozen_store.h),
             * whatever qwZ does to the others. */
            const uint64_t chunk =
                pu->quantized ? (uint64_t)pu->record_bytes
                : weight_bits ? (uint64_t)zs__quant_record_bytes((int64_t)S, block, weight_bits)
                              : S * elem;
            /* hpZ: one gather over the shard group fills the node slices,
             * the others go round the node with them. */
            const uint64_t wide = use.secondary && gathers > 0 ? 1 : gathers;
            ring(&t, out, ZS_COMM_ALL_GATHER, shard_ring, n, 1, chunk, wide);
            ring(&t, out, ZS_COMM_ALL_GATHER, RING_NODE, t.size, 1,
                 (uint64_t)pu->padded_numel / (uint64_t)t.size * elem, gathers - wide);
        }
    }
    /* zs_step's agreement after every micro-step (norm, failures, the
     * job's votes: 4 doubles), and the optimizer step's own (zs__agree_
     * status: 1). */
    agreement(&t, out, 4, micro);
    agreement(&t, out, 1, 1);
    return ZS_OK;
}

uint64_t zs__step_bytes_intra(const zs__step_bytes *b) {
    uint64_t sum = 0;
    for (int op = 0; op < ZS_COMM_OP_COUNT; op++) sum += b->intra[op];
    return sum;
}

uint64_t zs__step_bytes_inter(const zs__step_bytes *b) {
    uint64_t sum = 0;
    for (int op = 0; op < ZS_COMM_OP_COUNT; op++) sum += b->inter[op];
    return sum;
}

zs_status zs__comm_plan_estimate(const zs__settings *s, int world, int unit_count,
                                 const int *params_per_unit, const int64_t *param_numel,
                                 const unsigned *param_flags, int gathers_per_micro,
                                 zs__step_bytes *job, zs__step_bytes *busiest) {
    memset(job, 0, sizeof *job);
    memset(busiest, 0, sizeof *busiest);
    if (world < 1) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "bytes per step: %d ranks", world);
    /* comm.ranks_per_node's nodes (topology.h): consecutive ranks, the last
     * node possibly smaller; one node without it. */
    int per_node = world;
    ZS_CHECK(zs__estimate_node_size(s, world, &per_node));
    int shard = world, replicas = 1;
    if (s->zero.shard_group == ZS_SHARD_GROUP_NODE) {
        if (world % per_node != 0)
            return zs__fail(ZS_ERR_CONFIG, "bytes per step: zero.shard_group = \"node\" needs "
                            "nodes of equal size; %d ranks in nodes of %d do not make them",
                            world, per_node);
        shard = per_node;
        replicas = world / per_node;
    }
    int *node_of = zs__calloc((size_t)world, sizeof *node_of);
    if (!node_of) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "bytes per step: out of host memory");
    for (int r = 0; r < world; r++) node_of[r] = r / per_node;
    zs__plan *plan = NULL;
    zs_status st = zs__plan_of_settings(s, shard, replicas, unit_count, params_per_unit,
                                        param_numel, param_flags, NULL, NULL, &plan);
    const zs__comm_plan_input in = {s, plan, world, node_of, gathers_per_micro};
    uint64_t most = 0;
    for (int r = 0; r < world && st == ZS_OK; r++) {
        zs__step_bytes b;
        st = zs__comm_plan_rank(&in, r, &b);
        if (st != ZS_OK) break;
        for (int op = 0; op < ZS_COMM_OP_COUNT; op++) {
            job->intra[op] += b.intra[op];
            job->inter[op] += b.inter[op];
        }
        if (r == 0 || zs__step_bytes_inter(&b) > most) {
            most = zs__step_bytes_inter(&b);
            *busiest = b;
        }
    }
    zs__plan_destroy(plan);
    free(node_of);
    return st;
}
