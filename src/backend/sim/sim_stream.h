/* The simulated device's compute stream: ops run later, in the order they
 * were enqueued, on the device's own thread.
 *
 * Several host threads enqueue (the program, the comm engine, the host
 * optimizer's thread), as they do onto a CUDA stream; the host learns that
 * an op finished only by waiting for it (zs__sim_stream_wait). Each op
 * first costs its simulated time, a launch latency plus its bytes at the
 * bandwidth of its kind (host <-> device copies, device copies), so the
 * host runs ahead of the device as it does on a GPU; then its function
 * runs on the device's thread. An op that fails records the first failure;
 * every later op is skipped (a failed kernel poisons a CUDA context the same
 * way) and the next wait returns that failure. The queue holds a bounded
 * number of ops: an enqueue onto a full queue waits for room, as a CUDA
 * launch does. */
#ifndef ZS_BACKEND_SIM_STREAM_H
#define ZS_BACKEND_SIM_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

/* The bytes of arguments an op carries (copied at enqueue). */
#define ZS__SIM_OP_ARGS 256

typedef enum zs__sim_kind {
    ZS__SIM_KERNEL = 0,   /* compute: latency only (its own time is real) */
    ZS__SIM_HOST_COPY = 1,   /* host <-> device: latency + bytes at the host link's bandwidth */
    ZS__SIM_DEVICE_COPY = 2, /* device <-> device: latency + bytes at the device's bandwidth */
    ZS__SIM_MARK = 3         /* a fence: no time */
} zs__sim_kind;

/* The simulated time: 0 turns a part off. */
typedef struct zs__sim_timing {
    double launch_us;    /* every op but marks */
    double host_gbps;    /* host <-> device copies, GB/s */
    double device_gbps;  /* device <-> device copies, GB/s */
} zs__sim_timing;

typedef struct zs__sim_stream zs__sim_stream;

/* The op's work, on the device's thread: ZS_OK, or a status with its
 * message (zs__fail) that the next wait reports. */
typedef zs_status (*zs__sim_op_fn)(void *args);

zs_status zs__sim_stream_create(const zs__sim_timing *timing, zs__sim_stream **out);
/* Runs what is queued, stops the thread, frees. NULL is a no-op. */
void zs__sim_stream_destroy(zs__sim_stream *s);

/* Enqueues `fn` with a copy of args[0..args_bytes) (at most ZS__SIM_OP_ARGS)
 * under `name` (static: kept by pointer), of `kind`, moving `bytes`
 * (copies). Returns the op's sequence number (1, 2, ... in queue order).
 * Thread-safe. */
uint64_t zs__sim_stream_enqueue(zs__sim_stream *s, const char *name, zs__sim_op_fn fn,
                                const void *args, size_t args_bytes, zs__sim_kind kind,
                                size_t bytes);
/* The sequence number of the last op enqueued (0: none). */
uint64_t zs__sim_stream_last(zs__sim_stream *s);
/* 1 when op `seq` (and every op before it) has finished. */
int zs__sim_stream_finished(zs__sim_stream *s, uint64_t seq);
/* Waits up to timeout_ns for op `seq` to finish: 1 when it has, 0 when the
 * time ran out (the caller polls its health check between). */
int zs__sim_stream_wait_for(zs__sim_stream *s, uint64_t seq, int64_t timeout_ns);
/* The first failure of an op so far: ZS_OK, or its status with the
 * failure's text (which names the op) in `message`. */
zs_status zs__sim_stream_error(zs__sim_stream *s, char *message, size_t cap);

#endif
