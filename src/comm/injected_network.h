/* The injected network of the benchmarks: ZS_COMM_DELAY_US and
 * ZS_COMM_DELAY_GBPS make every op of the comm engine take at least
 * latency + bytes / bandwidth, by sleeping on the comm thread after the op
 * (which costs no CPU), so the overlap benchmark measures on a 2-core
 * machine what a network would show. Kept out of the engine, which only
 * offers the hooks it runs in.
 *
 * Per link kind: ZS_COMM_DELAY_US_INTER and ZS_COMM_DELAY_GBPS_INTER give
 * the links between nodes (the topology of zs_create: simulated nodes with
 * comm.ranks_per_node) a latency and bandwidth of their own, so one machine
 * can sweep the bandwidth between nodes (1, 10, 100 Gbit/s) while ranks of
 * a node talk at the other figures. An op's bytes are then split between
 * the two links in the proportion this rank really sent on each during the
 * op (the byte counters by link of its communicators), each part charged
 * at its link's bandwidth, and the op pays the cross-node latency when it
 * sent anything across nodes, the other latency otherwise:
 *
 *   at least  latency(link) + bytes * intra_share / bandwidth
 *                           + bytes * inter_share / bandwidth_inter
 *
 * An unset _INTER variable takes the value of its plain twin, so with
 * neither set the formula is the one above without links, exactly. A
 * bandwidth of 0 means no limit. */
#ifndef ZS_COMM_INJECTED_NETWORK_H
#define ZS_COMM_INJECTED_NETWORK_H

#include <stdint.h>

#include "comm/engine.h"

typedef struct zs__comm zs__comm;

typedef struct {
    double latency_s;
    double bytes_per_s;       /* 0: no bandwidth limit */
    double latency_inter_s;
    double bytes_per_s_inter; /* 0: no bandwidth limit */
    int per_link;             /* an _INTER variable is set */
    /* The world whose counters (its groups' included) tell the links an op
     * used, and their totals when the op began; read and written on the
     * engine's thread only, around ops. */
    const zs__comm *world;
    uint64_t intra_before, inter_before;
} zs__injected_network;

/* Reads the four variables; 1 when a delay is asked for (logged at INFO),
 * 0 when not (or when a value is not a non-negative number: a warning). */
int zs__injected_network_from_env(zs__injected_network *net);

/* The communicator whose counters split an op's bytes by link (NULL: every
 * byte on the intra-node link). */
void zs__injected_network_watch(zs__injected_network *net, const zs__comm *world);

/* The engine's hooks (ctx: the zs__injected_network). */
void zs__injected_network_before_op(void *ctx, const zs__engine_op *op);
void zs__injected_network_after_op(void *ctx, const zs__engine_op *op);

/* The seconds an op of `bytes` should take at least, when this rank sent
 * `sent_intra` and `sent_inter` bytes during it (pure; unit tested). */
double zs__injected_network_want_s(const zs__injected_network *net, uint64_t bytes,
                                   uint64_t sent_intra, uint64_t sent_inter);

#endif
