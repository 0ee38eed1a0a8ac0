/* The comm engine (DESIGN §9): one per rank. Collectives enter a queue in
 * program order and one communication thread runs them, so they progress
 * while the program computes (Open MPI here has no asynchronous progress of
 * its own: without a thread, nothing moves between calls).
 *
 * Program order is the queue order on every rank, and each op runs the same
 * synchronous collective it would run without the engine, so results are
 * identical to synchronous mode bit for bit; that equality is the test.
 *
 * An op is a closure: the caller embeds a zs__engine_op in storage it owns,
 * sets `run` (called once, on the communication thread, or inline in
 * synchronous mode) and the fields that describe it for traces, submits it,
 * and later waits for it. Ops complete in submission order.
 *
 * Rules that keep the rest of the runtime single-threaded:
 *   - only `run` touches the communicator while ops are queued; the owner
 *     calls zs__engine_drain before any direct collective (checked: comm.c
 *     asserts that no two collectives run at once);
 *   - `run` allocates nothing and touches only buffers its op names; the
 *     owner frees or reuses them only after zs__engine_wait on that op;
 *   - a failure inside `run` is kept with the op (status and message) and
 *     raised on the owner's thread by the wait.
 *
 * Every wait is bounded: the collectives inside an op carry comm.timeout_s
 * (wait.c), so an op whose peer is gone fails (or aborts the job) and the
 * wait returns with its message.
 *
 * Injected network (benchmarks): ZS_COMM_DELAY_US=latency and
 * ZS_COMM_DELAY_GBPS=bandwidth make each op take at least latency +
 * bytes / bandwidth by sleeping after it runs; sleeping costs no CPU, so a
 * 2-core machine can measure overlap as a network would show it.
 * ZS_COMM_DELAY_US_INTER and ZS_COMM_DELAY_GBPS_INTER give the links
 * between nodes their own (comm/injected_network.h). */
#ifndef ZS_COMM_ENGINE_H
#define ZS_COMM_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

typedef struct zs__engine zs__engine;
typedef struct zs__trace zs__trace;

typedef struct zs__engine_op {
    /* Set by the owner before zs__engine_submit. */
    zs_status (*run)(struct zs__engine_op *op);
    const char *name;        /* "reduce_scatter", "all_gather", "all_to_all", ... (traces) */
    const char *label;       /* the unit, or what is moved (traces, messages) */
    const char *group;       /* the communicator's group for traces: NULL for the world, or
                                zs__comm_group_name(comm) ("node", "cross") */
    uint64_t bytes;          /* payload on this rank (traces, injected delay) */
    /* Set by the engine. */
    uint64_t ticket;         /* 1, 2, ... in submission order */
    uint64_t enqueue_ns, start_ns, end_ns;
    zs_status status;
    char message[1024];      /* zs_last_error() of a failed run */
    int done;                /* read and written under the engine's lock */
    struct zs__engine_op *next;
} zs__engine_op;

/* threaded = 1 starts the communication thread; 0 runs every op inline at
 * submission (synchronous mode, same results). trace may be NULL. */
zs_status zs__engine_create(int threaded, zs__trace *trace, zs__engine **out);
/* Waits for every op, then stops the thread. NULL is a no-op. */
void zs__engine_destroy(zs__engine *engine);
int zs__engine_threaded(const zs__engine *engine);

/* Hooks run on the engine's thread just before each op runs and after it,
 * before the op counts as done (the injected network of the benchmarks,
 * comm/injected_network.h); set before the first submit. Either may be
 * NULL. */
typedef void (*zs__engine_hook)(void *ctx, const zs__engine_op *op);
typedef zs__engine_hook zs__engine_after_op;
void zs__engine_set_hooks(zs__engine *engine, zs__engine_hook before, zs__engine_hook after,
                          void *ctx);
/* The after hook alone (before: none). */
void zs__engine_set_after_op(zs__engine *engine, zs__engine_after_op hook, void *ctx);

void zs__engine_submit(zs__engine *engine, zs__engine_op *op);
/* Waits until `op` (and so every op before it) has run; returns its status,
 * with its message as this thread's last error. */
zs_status zs__engine_wait(zs__engine *engine, zs__engine_op *op);
/* Waits for every submitted op; returns the first failure among them (each
 * failure is returned once). */
zs_status zs__engine_drain(zs__engine *engine);
/* The first failure of an op that already ran, without waiting and without
 * clearing it (a drain still returns it): ZS_OK, or its status with its
 * message as this thread's last error. Lets the next runtime call report a
 * failed background collective at once. */
zs_status zs__engine_check(zs__engine *engine);

#endif
