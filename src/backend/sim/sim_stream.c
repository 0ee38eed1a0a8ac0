/* The simulated device's compute stream (sim_stream.h). */
#include "backend/sim/sim_stream.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"

/* Ops queued at once: room for a step's worth of small ops; a full queue
 * makes the enqueuing thread wait, as CUDA's launch queue does. */
#define QUEUE_OPS 4096

typedef struct sim_op {
    const char *name;
    zs__sim_op_fn fn;
    zs__sim_kind kind;
    size_t bytes;
    uint64_t seq;
    _Alignas(16) unsigned char args[ZS__SIM_OP_ARGS];
} sim_op;

struct zs__sim_stream {
    zs__sim_timing timing;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t queued;   /* an op was enqueued, or stop */
    pthread_cond_t finished; /* an op finished, or room in the queue */
    sim_op *ring;            /* [QUEUE_OPS] */
    uint64_t enqueued;       /* sequence numbers handed out */
    uint64_t done;           /* ops finished (in order: every op <= done) */
    int stop;
    zs_status failure;       /* the first failed op's status */
    char failure_text[2048];
};

/* The simulated time of an op, in nanoseconds. */
static int64_t op_ns(const zs__sim_timing *t, const sim_op *op) {
    if (op->kind == ZS__SIM_MARK) return 0;
    double ns = t->launch_us * 1e3;
    const double gbps = op->kind == ZS__SIM_HOST_COPY     ? t->host_gbps
                        : op->kind == ZS__SIM_DEVICE_COPY ? t->device_gbps
                                                          : 0.0;
    if (gbps > 0) ns += (double)op->bytes / gbps; /* bytes / (GB/s) = ns */
    return (int64_t)ns;
}

/* Waits until the device clock says the op may run: a sleep to an absolute
 * deadline, so that a sleep's overshoot (a relative 20 us nanosleep takes
 * about 110 us on a VM: timer slack and granularity) is not added to every
 * op but absorbed by the next ones; a device that fell behind does not
 * sleep at all. `*ready` is when the device is free again. */
static void pause_until(int64_t *ready, int64_t ns) {
    const int64_t now = (int64_t)zs__clock_ns();
    if (*ready < now) *ready = now;
    *ready += ns;
    if (ns <= 0 || *ready <= now) return;
    struct timespec until = {(time_t)(*ready / 1000000000), (long)(*ready % 1000000000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
    }
}

static void *device_thread(void *arg) {
    zs__sim_stream *s = arg;
    int64_t ready = 0; /* the device clock (zs__clock_ns, CLOCK_MONOTONIC) */
#ifdef __linux__
    /* The kernel may wake a sleeper up to its timer slack late (50 us by
     * default): far too much for a 20 us launch. */
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->stop && s->done == s->enqueued) pthread_cond_wait(&s->queued, &s->lock);
        if (s->done == s->enqueued) break; /* stop, and nothing left */
        sim_op *op = &s->ring[s->done % QUEUE_OPS];
        const int skip = s->failure != ZS_OK;
        pthread_mutex_unlock(&s->lock);
        zs_status st = ZS_OK;
        if (!skip) {
            pause_until(&ready, op_ns(&s->timing, op));
            st = op->fn(op->args);
        }
        pthread_mutex_lock(&s->lock);
        if (st != ZS_OK && s->failure == ZS_OK) {
            s->failure = st;
            snprintf(s->failure_text, sizeof s->failure_text, "sim device: op #%llu \"%s\" failed "
                     "on the device's thread: %s",
                     (unsigned long long)op->seq, op->name, zs_last_error());
        }
        s->done++;
        pthread_cond_broadcast(&s->finished);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

zs_status zs__sim_stream_create(const zs__sim_timing *timing, zs__sim_stream **out) {
    *out = NULL;
    zs__sim_stream *s = zs__calloc(1, sizeof *s);
    sim_op *ring = zs__calloc(QUEUE_OPS, sizeof *ring);
    if (!s || !ring) {
        free(s);
        free(ring);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "sim device: out of host memory for its queue");
    }
    s->timing = *timing;
    s->ring = ring;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->queued, NULL);
    pthread_cond_init(&s->finished, NULL);
    const int rc = pthread_create(&s->thread, NULL, device_thread, s);
    if (rc != 0) {
        pthread_cond_destroy(&s->queued);
        pthread_cond_destroy(&s->finished);
        pthread_mutex_destroy(&s->lock);
        free(ring);
        free(s);
        return zs__fail(ZS_ERR_INTERNAL, "sim device: cannot start the device's thread (%s)",
                        strerror(rc));
    }
    *out = s;
    return ZS_OK;
}

void zs__sim_stream_destroy(zs__sim_stream *s) {
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_broadcast(&s->queued);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->queued);
    pthread_cond_destroy(&s->finished);
    pthread_mutex_destroy(&s->lock);
    free(s->ring);
    free(s);
}

uint64_t zs__sim_stream_enqueue(zs__sim_stream *s, const char *name, zs__sim_op_fn fn,
                                const void *args, size_t args_bytes, zs__sim_kind kind,
                                size_t bytes) {
    ZS_ASSERT(args_bytes <= ZS__SIM_OP_ARGS);
    pthread_mutex_lock(&s->lock);
    while (s->enqueued - s->done >= QUEUE_OPS) pthread_cond_wait(&s->finished, &s->lock);
    sim_op *op = &s->ring[s->enqueued % QUEUE_OPS];
    op->name = name;
    op->fn = fn;
    op->kind = kind;
    op->bytes = bytes;
    op->seq = ++s->enqueued;
    if (args_bytes) memcpy(op->args, args, args_bytes);
    const uint64_t seq = op->seq;
    pthread_cond_signal(&s->queued);
    pthread_mutex_unlock(&s->lock);
    return seq;
}

uint64_t zs__sim_stream_last(zs__sim_stream *s) {
    pthread_mutex_lock(&s->lock);
    const uint64_t last = s->enqueued;
    pthread_mutex_unlock(&s->lock);
    return last;
}

int zs__sim_stream_finished(zs__sim_stream *s, uint64_t seq) {
    pthread_mutex_lock(&s->lock);
    const int finished = s->done >= seq;
    pthread_mutex_unlock(&s->lock);
    return finished;
}

int zs__sim_stream_wait_for(zs__sim_stream *s, uint64_t seq, int64_t timeout_ns) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    const int64_t ns = (int64_t)until.tv_nsec + timeout_ns;
    until.tv_sec += (time_t)(ns / 1000000000);
    until.tv_nsec = (long)(ns % 1000000000);
    pthread_mutex_lock(&s->lock);
    int rc = 0;
    while (s->done < seq && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&s->finished, &s->lock, &until);
    const int finished = s->done >= seq;
    pthread_mutex_unlock(&s->lock);
    return finished;
}

zs_status zs__sim_stream_error(zs__sim_stream *s, char *message, size_t cap) {
    pthread_mutex_lock(&s->lock);
    const zs_status st = s->failure;
    if (st != ZS_OK && cap) snprintf(message, cap, "%s", s->failure_text);
    pthread_mutex_unlock(&s->lock);
    return st;
}
