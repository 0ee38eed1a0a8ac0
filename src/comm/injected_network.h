/* The injected network of the benchmarks: ZS_COMM_DELAY_US and
 * ZS_COMM_DELAY_GBPS make every op of the comm engine take at least
 * latency + bytes / bandwidth, by sleeping on the comm thread after the op
 * (which costs no CPU), so the overlap benchmark measures on a 2-core
 * machine what a network would show. Kept out of the engine, which only
 * offers the after-op hook it runs in. */
#ifndef ZS_COMM_INJECTED_NETWORK_H
#define ZS_COMM_INJECTED_NETWORK_H

#include "comm/engine.h"

typedef struct {
    double latency_s;
    double bytes_per_s; /* 0: no bandwidth limit */
} zs__injected_network;

/* Reads the two variables; 1 when a delay is asked for (logged at INFO),
 * 0 when not (or when a value is not a non-negative number: a warning). */
int zs__injected_network_from_env(zs__injected_network *net);

/* The engine's after-op hook (ctx: the zs__injected_network). */
void zs__injected_network_after_op(void *ctx, const zs__engine_op *op);

#endif
