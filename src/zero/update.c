/* The optimizer pass of zs_step (update.h): every unit's owned
 * state updated with the step's scalars, in forward (unit) order, through
 * the store (offload/store.h), which yields the state in chunks with the
 * backend that computes on them.
 *
 * Device tier: the fused kernel on the device, inside zs_step; the new
 * parameters are written in place.
 *
 * Offloaded (host and nvme tiers): the host backend updates the state from
 * the host copy of the owned gradient (the stage-2/3 shard in host memory,
 * or grads_host in stages 0-1) and writes the new parameters into host
 * memory (params_host; or the master itself in fp32; or the parameter shard
 * when it lives in host memory). With offload.overlap this runs on a worker
 * thread of its own, unit after unit, while zs_step returns and the next
 * forward starts; the main thread copies a unit's new parameters to the
 * device (and gathers it in stages 1-2) when it first needs that unit
 * (zs__update_unit_ready), so a unit's forward waits only for its own
 * update. The worker touches only host memory and the store, computes with
 * the host backend (stateless CPU kernels) and allocates nothing; every
 * device operation and every collective stays on the main thread, in the
 * same order on every rank. Without overlap the same functions run in
 * zs_step, and the results are the same bits either way.
 *
 * Hazards and why they cannot happen: the next step's reductions write the
 * host gradient that the worker reads, but a unit is reduced only after its
 * forward, which waited for its update, and the worker goes in unit order,
 * so every unit up to it is done; zs_step, checkpoints, import, load and
 * destroy wait for the whole pass (zs__update_finish) before they touch the
 * state.
 *
 * Floor (src/floors.txt): Owns struct zs__update (the pass, its pipeline and
 * the host optimizer's thread); calls the state layout, the stage-1/2
 * gathers (full_params.h), hpZ's version (secondary.c) and the step's fault
 * hook, all below it. The unit's collectives and residency call it
 * (zs__update_unit_ready) from above.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "zero/full_params.h"
#include "zero/ground.h"
#include "zero/state_layout.h"
#include "zero/step_fault.h"
#include "zero/update.h"
#include "zero/zeropp.h"

typedef struct zs__update {
    zs_ctx *zs;
    int offloaded;     /* host or nvme tier: the host backend computes */
    int threaded;      /* offload.overlap: a worker thread runs the pass */
    int threads;       /* OpenMP threads of the host update */
    /* The step's number and scalars, set before the pass starts. */
    int64_t step;
    zs_k_optim_kind kind;
    zs_k_optim_scalars with_decay, no_decay;
    /* Progress, under `lock`: units [0, done) updated on the host (or the
     * pass failed and done = unit_count); units [0, ready) copied back and
     * gathered by the main thread. `pending` while a pass is not ready. */
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int pending, done, ready;
    int job, quit;     /* the worker has a pass to run; the worker should exit */
    pthread_t thread;
    int started;
    uint64_t pass_ns;  /* the last whole pass, from its start on the host */
    /* The pass's first failure, and its message (the worker's errors are
     * thread-local, so it is copied here). `reported` once
     * zs__update_finish has returned it: its callers (zs_step, zs_save,
     * import, the state's readers) hand it to the program (zs_step and
     * zs_save agree on it, so every rank fails with it), and zs_destroy
     * need not warn again. */
    zs_status status;
    char message[1024];
    int reported;
} zs__update;

static zs_k_optim_kind kernel_kind(zs__optimizer_kind kind) {
    switch (kind) {
    case ZS_OPTIMIZER_SGD: return ZS_K_OPTIM_SGD;
    case ZS_OPTIMIZER_ADAM: return ZS_K_OPTIM_ADAM;
    case ZS_OPTIMIZER_ADAMW: return ZS_K_OPTIM_ADAMW;
    }
    return ZS_K_OPTIM_ADAMW;
}

/* ------------------------------------------------------------ one unit */

/* One unit's pass: what it reads and writes, as buffers and the deltas
 * from a state index to their indices. */
typedef struct unit_pass {
    zs_ctx *zs;
    const zs__update *up;
    int unit;
    int param;            /* cursor: the first parameter of the unit not finished */
    const zs__buf *grads; /* the gradient read */
    int64_t grad_delta;   /* its index of a state index: state + grad_delta */
    zs__buf *params;      /* the parameters written (NULL: none, or the master is the source) */
    int64_t param_delta;
    int direct_params;    /* the parameters are the master (device tier, fp32) */
    int copy_params;      /* fp32 parameters in host memory: a copy of the new master */
} unit_pass;

/* The pieces of the unit's parameters inside one chunk of the store. A
 * parameter's state range is contiguous and increases with its index, so a
 * cursor finds them. */
static zs_status update_chunk(void *p, const zs__state_chunk *c) {
    unit_pass *u = p;
    zs_ctx *zs = u->zs;
    const int64_t end = c->first + c->count;
    const int last = zs->units[u->unit]->first_param + zs->units[u->unit]->param_count;
    for (; u->param < last; u->param++) {
        const int i = u->param;
        int64_t b, e;
        if (!zs__state_range(zs, i, &b, &e)) continue;
        const int64_t lo_state = zs__state_index(zs, i, b);
        const int64_t hi_state = lo_state + (e - b);
        if (lo_state >= end) break; /* starts in a later chunk */
        const int64_t lo = lo_state > c->first ? lo_state : c->first;
        const int64_t hi = hi_state < end ? hi_state : end;
        if (lo < hi) {
            const int64_t at = lo - c->first;
            /* fp32 on the device: the parameters are the master. */
            float *master = u->direct_params ? zs__param_at(zs, i, b + (lo - lo_state))
                                             : c->array[ZS_STATE_MASTER] + at;
            zs__update_args args = {
                .kind = u->up->kind,
                .master = master,
                .param = u->params && !u->direct_params && !u->copy_params
                             ? zs__buf_at(u->params, lo + u->param_delta)
                             : NULL,
                .param_dtype = zs->compute_dtype,
                .grad = zs__buf_at(u->grads, lo + u->grad_delta),
                .grad_dtype = u->grads->dtype,
                .m = c->array[ZS_STATE_M] ? c->array[ZS_STATE_M] + at : NULL,
                .v = c->array[ZS_STATE_V] ? c->array[ZS_STATE_V] + at : NULL,
                .count = hi - lo,
                .scalars = (zs->params[i]->flags & ZS_PARAM_NO_DECAY) ? u->up->no_decay
                                                                      : u->up->with_decay,
            };
            ZS_CHECK(c->runner->ops->optimizer_update(c->runner, &args));
            if (u->copy_params)
                ZS_CHECK(c->runner->ops->copy(c->runner, zs__buf_at(u->params, lo + u->param_delta),
                                              master, (size_t)(hi - lo) * sizeof(float)));
        }
        if (hi_state > end) break; /* continues in the next chunk */
    }
    return ZS_OK;
}

/* The gradient the pass reads for unit u: where it is in the runner's
 * memory, and the delta from state index to its index. */
static const zs__buf *pass_grads(zs_ctx *zs, int u, int64_t *delta) {
    const zs__plan_unit *pu = &zs->plan->units[u];
    const int stage = zs->settings.zero.stage;
    *delta = 0;
    if (stage >= 2) return &zs->grads_shard; /* state index = shard index */
    if (zs->grads_host.ptr) return &zs->grads_host; /* the owned copy, state layout */
    /* Stages 0-1 on the device: the owned chunk of the full buffer. */
    int64_t first, end;
    zs__unit_state_range(zs, u, &first, &end);
    const int64_t at = stage == 0 ? pu->grad_full_offset
                                  : pu->grad_full_offset + (int64_t)zs->shard_rank * pu->shard_numel;
    *delta = at - first;
    return &zs->grads_full;
}

/* Updates unit u's owned state (the worker's or zs_step's thread). */
static zs_status update_unit(zs__update *up, int u) {
    zs_ctx *zs = up->zs;
    if (up->offloaded) ZS_CHECK(zs__step_fault(zs->rank, up->step, "host"));
    int64_t first, end;
    zs__unit_state_range(zs, u, &first, &end);
    unit_pass pass = {.zs = zs, .up = up, .unit = u, .param = zs->units[u]->first_param};
    pass.grads = pass_grads(zs, u, &pass.grad_delta);
    const int mixed = zs->compute_dtype != ZS_DTYPE_FP32;
    if (!up->offloaded) {
        /* On the device: mixed precision writes the compute-dtype copy in
         * place; fp32 has the parameters as its master. */
        pass.direct_params = !zs->store.has_master;
        if (mixed) pass.params = zs__unit_owned_params(zs, u, &pass.param_delta);
        if (pass.params) pass.param_delta -= first;
    } else if (zs->params_host.ptr) {
        pass.params = &zs->params_host; /* state layout */
    } else if (zs->params_shard.ptr && zs->params_shard.be == zs->host_backend) {
        pass.params = &zs->params_shard; /* offload.params = "host": written in place */
        /* The shard keeps every unit, the state the trainable ones only. */
        int64_t at;
        zs__unit_owned_params(zs, u, &at);
        pass.param_delta = at - first;
        pass.copy_params = !mixed;       /* fp32: the new master, copied */
    }
    /* (fp32 with the master in host memory: the master is the source of the
     * copy back; parameters on NVMe: the gathers read the master.) */
    ZS_CHECK(zs__store_each(&zs->store, first, end, 1, update_chunk, &pass));
    /* Accumulated host gradients start the next window from zero; the unit
     * is done with them. */
    if (up->offloaded && zs->settings.gradient_accumulation_steps > 1 &&
        pass.grads->be == zs->host_backend) {
        zs__backend *hb = zs->host_backend;
        ZS_CHECK(hb->ops->zero(hb, zs__buf_at(pass.grads, first + pass.grad_delta),
                               (size_t)(end - first) * zs_dtype_size(pass.grads->dtype)));
    }
    return ZS_OK;
}

/* ------------------------------------------------------------ the worker */

static void record_failure(zs__update *up, zs_status st) {
    if (up->status != ZS_OK) return;
    up->status = st;
    up->reported = 0;
    snprintf(up->message, sizeof up->message, "%s", zs_last_error());
}

/* The whole pass on the calling thread: units in order, progress published
 * after each; a failure marks every unit done (so that nobody waits for
 * them) and is kept for zs__update_finish. */
static void run_pass(zs__update *up) {
    zs_ctx *zs = up->zs;
    const uint64_t started = zs__clock_ns();
    if (up->offloaded) omp_set_num_threads(up->threads);
    for (int u = 0; u < zs->unit_count; u++) {
        const uint64_t from = zs__trace_clock(zs->trace);
        zs_status st = update_unit(up, u);
        zs__trace_args args = ZS_TRACE_ARGS_INIT;
        args.unit = zs->units[u]->name;
        zs__trace_span(zs->trace, ZS_TRACE_OPTIMIZER, "optimizer update", from,
                       zs__trace_clock(zs->trace), &args);
        pthread_mutex_lock(&up->lock);
        if (st != ZS_OK) {
            record_failure(up, zs__fail_context(st, "optimizer update of unit '%s' (%s tier)",
                                                zs->units[u]->name,
                                                zs__tier_name(zs->store.tier)));
            up->done = zs->unit_count;
        } else {
            up->done = u + 1;
        }
        if (up->done == zs->unit_count) up->pass_ns = zs__clock_ns() - started;
        /* The unit's state and parameters are the main thread's again
         * (for the stream-order check: wait_done acquires). */
        zs__backend_order_release(zs->backend, &up->done);
        pthread_cond_broadcast(&up->changed);
        pthread_mutex_unlock(&up->lock);
        if (st != ZS_OK) return;
    }
}

static void *worker_main(void *p) {
    zs__update *up = p;
    pthread_mutex_lock(&up->lock);
    for (;;) {
        while (!up->job && !up->quit) pthread_cond_wait(&up->changed, &up->lock);
        if (up->quit) break;
        up->job = 0;
        zs__backend_order_acquire(up->zs->backend, &up->job); /* zs__update_start's release */
        pthread_mutex_unlock(&up->lock);
        run_pass(up);
        pthread_mutex_lock(&up->lock);
    }
    pthread_mutex_unlock(&up->lock);
    return NULL;
}

/* The cores this rank may use, shared with the other ranks of its host. */
static int default_threads(const zs_ctx *zs) {
    cpu_set_t set;
    int cores = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
    if (cores < 1) cores = omp_get_num_procs();
    const int share = cores / (zs->ranks_on_host > 0 ? zs->ranks_on_host : 1);
    return share > 0 ? share : 1;
}

zs_status zs__update_create(zs_ctx *zs) {
    zs__update *up = zs__calloc(1, sizeof *up);
    if (!up) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_build: out of host memory (update)");
    up->zs = zs;
    up->offloaded = zs->store.tier != ZS_TIER_DEVICE;
    up->threaded = up->offloaded && zs->settings.offload.overlap;
    up->threads = zs->settings.offload.threads > 0 ? (int)zs->settings.offload.threads
                                                   : default_threads(zs);
    pthread_mutex_init(&up->lock, NULL);
    pthread_cond_init(&up->changed, NULL);
    zs->update = up;
    if (up->threaded) {
        int e = pthread_create(&up->thread, NULL, worker_main, up);
        if (e != 0)
            return zs__fail(ZS_ERR_INTERNAL, "zs_build: cannot start the host optimizer's thread "
                            "(%s); set offload.overlap = false", strerror(e));
        up->started = 1;
    }
    if (up->offloaded)
        ZS_INFO("offload.optimizer = %s: the host update runs on %d OpenMP thread%s%s",
                zs__tier_name(zs->store.tier), up->threads, up->threads == 1 ? "" : "s",
                up->threaded ? ", overlapped with the next forward (offload.overlap)" : "");
    return ZS_OK;
}

void zs__update_destroy(zs_ctx *zs) {
    zs__update *up = zs->update;
    if (!up) return;
    if (up->started) {
        pthread_mutex_lock(&up->lock);
        up->quit = 1;
        pthread_cond_broadcast(&up->changed);
        pthread_mutex_unlock(&up->lock);
        pthread_join(up->thread, NULL);
    }
    /* zs_destroy returns nothing: a failure of the last step's update that
     * no later call reported would otherwise vanish. One that a call did
     * report (zs_step fails with it on every rank) is not told twice. */
    if (up->status != ZS_OK && !up->reported)
        ZS_WARN("zs_destroy: the last optimizer step's update failed and no later call reported "
                "it (the state was never saved after it): %s", up->message);
    pthread_cond_destroy(&up->changed);
    pthread_mutex_destroy(&up->lock);
    free(up);
    zs->update = NULL;
}

/* ------------------------------------------------- the main thread's side */

/* Unit u's new parameters from host memory onto the device (the owned part
 * of the parameter buffer), when they are not computed in place. */
static zs_status copy_back(zs_ctx *zs, int u) {
    if (!zs->update->offloaded) return ZS_OK; /* written in place on the device */
    int64_t first, end, at;
    zs__buf *params = zs__unit_owned_params(zs, u, &at);
    if (!params || params->be == zs->host_backend) return ZS_OK; /* in host memory: in place */
    const void *src = NULL;
    if (zs->params_host.ptr) {
        zs__unit_state_range(zs, u, &first, &end);
        src = zs__buf_at(&zs->params_host, first);
    } else {
        /* fp32, the master in host memory: it is the new parameter. */
        zs__unit_state_range(zs, u, &first, &end);
        src = zs__store_at(&zs->store, ZS_STATE_MASTER, first);
    }
    if (!src || end <= first) return ZS_OK;
    /* Stream-ordered (CUDA: a DMA from page-locked memory), before the
     * unit's gather or kernels; the host buffer is next written by the next
     * pass, which starts after zs_step has waited for the stream. */
    return params->be->ops->copy(params->be, zs__buf_at(params, at), src,
                                 (size_t)(end - first) * zs_dtype_size(params->dtype));
}

/* The main thread waits for the host to finish unit `unit` (no deadline of
 * its own: the host update makes progress unless a disk request is stuck,
 * and those have comm.timeout_s; a failure marks every unit done). */
static int wait_done(zs__update *up, int unit) {
    const uint64_t from = zs__clock_ns();
    pthread_mutex_lock(&up->lock);
    while (up->done <= unit) pthread_cond_wait(&up->changed, &up->lock);
    zs__backend_order_acquire(up->zs->backend, &up->done); /* run_pass's release */
    const int failed = up->status != ZS_OK;
    pthread_mutex_unlock(&up->lock);
    up->zs->times.offload_wait_ns += zs__clock_ns() - from;
    return failed;
}

void zs__update_report(zs_ctx *zs, double *pass_ms, uint64_t *copied_bytes) {
    zs__update *up = zs->update;
    *pass_ms = 0.0;
    *copied_bytes = 0;
    if (!up || !up->offloaded) return;
    pthread_mutex_lock(&up->lock);
    *pass_ms = 1e-6 * (double)up->pass_ns;
    pthread_mutex_unlock(&up->lock);
    /* Each step: the owned gradient down (the stage-2/3 shard, or grads_host
     * in stages 0-1), the new owned parameters up (not when they live in
     * host memory or on NVMe). */
    const zs__buf *g = zs->settings.zero.stage >= 2 ? &zs->grads_shard : &zs->grads_host;
    int64_t first, end, at;
    uint64_t bytes = (uint64_t)g->count * zs_dtype_size(g->dtype);
    for (int u = 0; u < zs->unit_count; u++) {
        const zs__buf *p = zs__unit_owned_params(zs, u, &at);
        if (!p || p->be == zs->host_backend) continue;
        zs__unit_state_range(zs, u, &first, &end);
        bytes += (uint64_t)(end - first) * zs_dtype_size(p->dtype);
    }
    *copied_bytes = bytes;
}

void zs__update_unit_ready(zs_ctx *zs, int unit) {
    zs__update *up = zs->update;
    if (!up || !up->pending) return;
    /* Units are made ready in order, so that the stage-1/2 gathers run in
     * the same order on every rank whatever unit is asked for first. */
    for (int k = up->ready; k <= unit && k < zs->unit_count; k++) {
        const int failed = wait_done(up, k);
        zs_status st = failed ? ZS_OK : copy_back(zs, k);
        /* Collectives run whatever happened here: every rank runs them. */
        /* (A frozen unit's parameters never change: nothing to gather.) */
        if ((zs->settings.zero.stage == 1 || zs->settings.zero.stage == 2) &&
            !zs->plan->units[k].frozen) {
            zs_status g = zs__engine_drain(zs->engine);
            if (g == ZS_OK) g = zs__gather_unit_params(zs, k);
            if (g == ZS_OK) g = zs__step_fault(zs->rank, up->step, "gather");
            if (st == ZS_OK) st = g;
        }
        if (st != ZS_OK) {
            pthread_mutex_lock(&up->lock);
            record_failure(up, zs__fail_context(st, "copying unit '%s''s new parameters back",
                                                zs->units[k]->name));
            pthread_mutex_unlock(&up->lock);
        }
        up->ready = k + 1;
    }
    if (up->ready >= zs->unit_count) up->pending = 0;
}

zs_status zs__update_finish(zs_ctx *zs) {
    zs__update *up = zs->update;
    if (!up) return ZS_OK;
    if (up->pending) zs__update_unit_ready(zs, zs->unit_count - 1);
    pthread_mutex_lock(&up->lock);
    zs_status st = up->status;
    char message[sizeof up->message];
    snprintf(message, sizeof message, "%s", up->message);
    if (st != ZS_OK) up->reported = 1; /* returned below: the caller reports it */
    pthread_mutex_unlock(&up->lock);
    /* A failed pass left the state half updated: the failure stays, and
     * every later step or save reports it, until zs_load replaces the
     * state (zs__update_forget). */
    if (st != ZS_OK) return zs__fail(st, "%s", message);
    return ZS_OK;
}

void zs__update_forget(zs_ctx *zs) {
    zs__update *up = zs->update;
    if (!up) return;
    pthread_mutex_lock(&up->lock);
    up->status = ZS_OK;
    up->message[0] = '\0';
    up->reported = 0;
    pthread_mutex_unlock(&up->lock);
}

zs_status zs__update_run(zs_ctx *zs, double lr, double grad_div, double clip) {
    zs__update *up = zs->update;
    const zs__settings *s = &zs->settings;
    ZS_CHECK(zs__update_finish(zs));
    zs__params_changed(zs); /* hpZ's node slices are stale from here on */
    up->kind = kernel_kind(s->optimizer.kind);
    up->step = zs->step + 1;
    const int64_t t = up->step;
    up->with_decay = zs_k_optim_scalars_for_step(
        up->kind, lr, s->optimizer.beta1, s->optimizer.beta2, s->optimizer.eps,
        s->optimizer.weight_decay, s->optimizer.momentum, s->optimizer.nesterov, t, grad_div, clip);
    up->no_decay = zs_k_optim_scalars_for_step(
        up->kind, lr, s->optimizer.beta1, s->optimizer.beta2, s->optimizer.eps, 0.0,
        s->optimizer.momentum, s->optimizer.nesterov, t, grad_div, clip);
    ZS_CHECK(zs__step_fault(zs->rank, up->step, "update"));
    if (!up->offloaded) {
        /* On the device, in stream order. */
        for (int u = 0; u < zs->unit_count; u++) ZS_CHECK(update_unit(up, u));
        return ZS_OK;
    }
    /* The host reads gradients the device copied into host memory: every
     * copy enqueued so far has landed (zs_step has waited for them already
     * for the norm; this is free then). */
    return zs->backend->ops->synchronize(zs->backend);
}

void zs__update_start(zs_ctx *zs) {
    zs__update *up = zs->update;
    pthread_mutex_lock(&up->lock);
    /* On the device every unit is updated already; the copies back and
     * gathers are what is left. */
    up->done = up->offloaded ? 0 : zs->unit_count;
    up->ready = 0;
    up->pending = 1;
    if (up->threaded) {
        up->job = 1;
        /* The gradients and state are the host optimizer thread's now (for
         * the stream-order check: worker_main acquires). */
        zs__backend_order_release(zs->backend, &up->job);
        pthread_cond_broadcast(&up->changed);
    }
    pthread_mutex_unlock(&up->lock);
    if (!up->offloaded) {
        /* The stage-1/2 gathers now, in unit order; a failure is kept. */
        zs__update_unit_ready(zs, zs->unit_count - 1);
    } else if (!up->threaded) {
        run_pass(up);
        zs__update_unit_ready(zs, zs->unit_count - 1);
    }
}
