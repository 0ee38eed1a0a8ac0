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
 * a node talk at the other figures. An op is then charged what this rank
 * really sent on each link during it (the byte counters by link of its
 * communicators), as a network card would be, each part at its link's
 * bandwidth, and it pays the cross-node latency when it sent anything
 * across nodes, the other latency otherwise:
 *
 *   at least  latency(link) + sent_intra / bandwidth
 *                           + sent_inter / bandwidth_inter
 *
 * (Without links, the op's payload stands in for what was sent: for a ring
 * over W ranks that is W / (W - 1) times the bytes a rank sends, a constant
 * the overlap benchmark's ratios do not see; across links it would not be
 * constant, since a quantized op's payload and its records differ and an
 * all-to-all keeps a block at home.) An unset _INTER variable takes the
 * value of its plain twin. An op that sent nothing (a barrier, a rank
 * that only receives) pays its latency alone. A bandwidth of 0 means no
 * limit. */
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

/* The communicator whose counters (its groups' included) tell what an op
 * sent on each link (NULL: nothing is counted, and an op pays its latency
 * alone). */
void zs__injected_network_watch(zs__injected_network *net, const zs__comm *world);

/* The engine's hooks (ctx: the zs__injected_network). */
void zs__injected_network_before_op(void *ctx, const zs__engine_op *op);
void zs__injected_network_after_op(void *ctx, const zs__engine_op *op);

/* The seconds an op of `bytes` should take at least, when this rank sent
 * `sent_intra` and `sent_inter` bytes during it: `bytes` without links,
 * the two sent counts with them (pure; unit tested). */
double zs__injected_network_want_s(const zs__injected_network *net, uint64_t bytes,
                                   uint64_t sent_intra, uint64_t sent_inter);

#endif
