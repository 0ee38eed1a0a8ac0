/* The comm engine: a FIFO of ops and the thread that runs them (engine.h).
 *
 * Floor (src/floors.txt): owns the engine's queue and thread; calls nothing
 * of comm/ (an op's run function is its owner's).
 */
#define _POSIX_C_SOURCE 200809L

#include "comm/engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"

struct zs__engine {
    int threaded;
    zs__trace *trace;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;      /* the thread: an op was queued, or stop */
    pthread_cond_t finished;  /* waiters: an op completed */
    zs__engine_op *head, *tail;
    int stop;
    uint64_t submitted, completed;
    /* The first failure not yet returned by a drain. */
    zs_status failure;
    char failure_message[1024];
    /* Run on the engine's thread around each op (NULL: none). */
    zs__engine_hook before_op;
    zs__engine_hook after_op;
    void *after_op_ctx;
};

static void run_op(zs__engine *e, zs__engine_op *op) {
    if (e->before_op) e->before_op(e->after_op_ctx, op);
    op->start_ns = zs__clock_ns();
    zs__clear_error();
    zs_status st = op->run(op);
    if (e->after_op) e->after_op(e->after_op_ctx, op);
    op->end_ns = zs__clock_ns();
    op->status = st;
    if (e->trace) {
        zs__trace_args args = ZS_TRACE_ARGS_INIT;
        args.unit = op->label;
        args.op = op->name;
        args.group = op->group;
        args.bytes = op->bytes;
        args.queue_wait_ns = op->start_ns - op->enqueue_ns;
        args.has = ZS_TRACE_HAS_BYTES | ZS_TRACE_HAS_QUEUE_WAIT;
        zs__trace_span(e->trace, ZS_TRACE_COMM, op->name, op->start_ns, op->end_ns, &args);
    }
    if (st != ZS_OK) snprintf(op->message, sizeof op->message, "%s", zs_last_error());
}

static void complete(zs__engine *e, zs__engine_op *op) {
    op->done = 1;
    e->completed++;
    if (op->status != ZS_OK && e->failure == ZS_OK) {
        e->failure = op->status;
        snprintf(e->failure_message, sizeof e->failure_message, "%s", op->message);
    }
}

static void *thread_main(void *arg) {
    zs__engine *e = arg;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (!e->head && !e->stop) pthread_cond_wait(&e->wake, &e->lock);
        if (!e->head) break; /* stop, and nothing left */
        zs__engine_op *op = e->head;
        pthread_mutex_unlock(&e->lock);
        run_op(e, op);
        pthread_mutex_lock(&e->lock);
        e->head = op->next;
        if (!e->head) e->tail = NULL;
        complete(e, op);
        pthread_cond_broadcast(&e->finished);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

zs_status zs__engine_create(int threaded, zs__trace *trace, zs__engine **out) {
    zs__engine *e = zs__calloc(1, sizeof *e);
    if (!e) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "comm engine: out of host memory");
    e->threaded = threaded;
    e->trace = trace;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->wake, NULL);
    pthread_cond_init(&e->finished, NULL);
    if (threaded) {
        int rc = pthread_create(&e->thread, NULL, thread_main, e);
        if (rc != 0) {
            pthread_cond_destroy(&e->finished);
            pthread_cond_destroy(&e->wake);
            pthread_mutex_destroy(&e->lock);
            free(e);
            return zs__fail(ZS_ERR_INTERNAL, "comm engine: cannot start its thread (%s)",
                            strerror(rc));
        }
    }
    *out = e;
    return ZS_OK;
}

void zs__engine_destroy(zs__engine *e) {
    if (!e) return;
    if (e->threaded) {
        pthread_mutex_lock(&e->lock);
        e->stop = 1;
        pthread_cond_signal(&e->wake);
        pthread_mutex_unlock(&e->lock);
        pthread_join(e->thread, NULL);
    }
    pthread_cond_destroy(&e->finished);
    pthread_cond_destroy(&e->wake);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

int zs__engine_threaded(const zs__engine *e) { return e->threaded; }

void zs__engine_set_hooks(zs__engine *e, zs__engine_hook before, zs__engine_hook after,
                          void *ctx) {
    e->before_op = before;
    e->after_op = after;
    e->after_op_ctx = ctx;
}

void zs__engine_set_after_op(zs__engine *e, zs__engine_after_op hook, void *ctx) {
    zs__engine_set_hooks(e, NULL, hook, ctx);
}

void zs__engine_submit(zs__engine *e, zs__engine_op *op) {
    op->next = NULL;
    op->done = 0;
    op->status = ZS_OK;
    op->message[0] = '\0';
    op->enqueue_ns = zs__clock_ns();
    if (!e->threaded) {
        op->ticket = ++e->submitted;
        run_op(e, op);
        complete(e, op);
        return;
    }
    pthread_mutex_lock(&e->lock);
    op->ticket = ++e->submitted;
    if (e->tail) e->tail->next = op;
    else e->head = op;
    e->tail = op;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
}

zs_status zs__engine_wait(zs__engine *e, zs__engine_op *op) {
    if (e->threaded) {
        pthread_mutex_lock(&e->lock);
        while (!op->done) pthread_cond_wait(&e->finished, &e->lock);
        pthread_mutex_unlock(&e->lock);
    }
    if (op->status != ZS_OK) return zs__fail(op->status, "%s", op->message);
    return ZS_OK;
}

zs_status zs__engine_check(zs__engine *e) {
    pthread_mutex_lock(&e->lock);
    zs_status st = e->failure;
    char message[sizeof e->failure_message];
    snprintf(message, sizeof message, "%s", e->failure_message);
    pthread_mutex_unlock(&e->lock);
    if (st != ZS_OK) return zs__fail(st, "%s", message);
    return ZS_OK;
}

zs_status zs__engine_drain(zs__engine *e) {
    pthread_mutex_lock(&e->lock);
    while (e->completed < e->submitted) pthread_cond_wait(&e->finished, &e->lock);
    zs_status st = e->failure;
    char message[sizeof e->failure_message];
    snprintf(message, sizeof message, "%s", e->failure_message);
    e->failure = ZS_OK;
    e->failure_message[0] = '\0';
    pthread_mutex_unlock(&e->lock);
    if (st != ZS_OK) return zs__fail(st, "%s", message);
    return ZS_OK;
}
