/* The moves of the model's state that several entry points share (state_io.h):
 * checkpoints, imports, tests and digests reach the state only through here
 * and the store (offload/store.h), so no tier is a special case for them.
 * Above the optimizer pass (it waits for it first) and the residency room
 * (a load starts a new micro-step); below checkpoints, import and the step. */
#include <string.h>
#include <xxhash.h>

#include "core/error.h"
#include "zero/agree.h"
#include "zero/frozen_store.h"
#include "zero/full_params.h"
#include "zero/ground.h"
#include "zero/residency.h"
#include "zero/state_io.h"
#include "zero/state_layout.h"
#include "zero/update.h"
#include "zero/zeropp.h"

/* Host floats per round when state passes through host memory. */
#define ZS_STATE_ROUND ((int64_t)1 << 16)

/* fp32 without a separate master: the parameters are the master. */
static int params_are_master(const zs_ctx *zs, zs__state_array array) {
    return array == ZS_STATE_MASTER && !zs->store.has_master;
}

/* Frozen parameters have no optimizer state (their values are the
 * parameters': zs__frozen_write). */
static zs_status no_state(const zs_ctx *zs, int param, const char *what) {
    return zs__fail(ZS_ERR_INTERNAL, "%s: parameter '%s' is frozen and has no optimizer state",
                    what, zs->params[param]->name);
}

zs_status zs__state_read(zs_ctx *zs, zs__state_array array, int param, int64_t first,
                         int64_t count, float *dst) {
    if (count <= 0) return ZS_OK;
    if (zs->params[param]->flags & ZS_PARAM_FROZEN) return no_state(zs, param, "state read");
    ZS_CHECK(zs__update_finish(zs));
    if (params_are_master(zs, array)) {
        const zs__buf *p = zs->settings.zero.stage < 3 ? &zs->params_full : &zs->params_shard;
        return p->be->ops->download(p->be, dst, zs__param_at(zs, param, first),
                                    (size_t)count * sizeof(float));
    }
    return zs__store_read(&zs->store, array, zs__state_index(zs, param, first), count, dst);
}

zs_status zs__state_write(zs_ctx *zs, zs__state_array array, int param, int64_t first,
                          int64_t count, const float *src) {
    if (count <= 0) return ZS_OK;
    if (zs->params[param]->flags & ZS_PARAM_FROZEN) return no_state(zs, param, "state write");
    ZS_CHECK(zs__update_finish(zs));
    zs__params_changed(zs); /* hpZ: gathers go across nodes again */
    if (params_are_master(zs, array)) {
        const zs__buf *p = zs->settings.zero.stage < 3 ? &zs->params_full : &zs->params_shard;
        return p->be->ops->upload(p->be, zs__param_at(zs, param, first), src,
                                  (size_t)count * sizeof(float));
    }
    return zs__store_write(&zs->store, array, zs__state_index(zs, param, first), count, src);
}

/* A frozen parameter's elements [first, first + count) set from `in`
 * (rounded to nearest even) or, with in NULL, read into `out` (widened
 * exactly), through fp32 host memory in bounded rounds. */
static zs_status frozen_move(zs_ctx *zs, int param, int64_t first, int64_t count, const float *in,
                             float *out) {
    const int write = in != NULL;
    if (count <= 0) return ZS_OK;
    ZS_CHECK(zs__update_finish(zs));
    if (write) zs__params_changed(zs); /* hpZ: gathers go across nodes again */
    const zs__buf *p = zs->settings.zero.stage < 3 ? &zs->params_full : &zs->params_shard;
    zs__backend *be = p->be;
    char *at_param = zs__param_at(zs, param, first);
    if (p->dtype == ZS_DTYPE_FP32)
        return write ? be->ops->upload(be, at_param, in, (size_t)count * sizeof(float))
                     : be->ops->download(be, out, at_param, (size_t)count * sizeof(float));
    const size_t elem = zs_dtype_size(p->dtype);
    const int64_t round = count < ZS_STATE_ROUND ? count : ZS_STATE_ROUND;
    void *narrow = NULL;
    ZS_CHECK(zs__mem_host_alloc(&zs->mem, ZS_MEM_SCRATCH, (size_t)round * elem, &narrow));
    zs_status st = ZS_OK;
    for (int64_t at = 0; at < count && st == ZS_OK; at += round) {
        const int64_t n = count - at < round ? count - at : round;
        char *dev = at_param + (size_t)at * elem;
        if (write) {
            st = zs_convert(narrow, p->dtype, in + at, ZS_DTYPE_FP32, n);
            if (st == ZS_OK) st = be->ops->upload(be, dev, narrow, (size_t)n * elem);
        } else {
            st = be->ops->download(be, narrow, dev, (size_t)n * elem);
            if (st == ZS_OK) st = zs_convert(out + at, ZS_DTYPE_FP32, narrow, p->dtype, n);
        }
    }
    zs__mem_host_free(&zs->mem, ZS_MEM_SCRATCH, narrow, (size_t)round * elem);
    return st;
}

/* 1 when the parameter lives in the frozen store, quantized. */
static int quantized(const zs_ctx *zs, int param) {
    return zs->plan->units[zs->plan->params[param].unit].quantized;
}

zs_status zs__frozen_write(zs_ctx *zs, int param, int64_t first, int64_t count,
                           const float *src) {
    if (quantized(zs, param)) {
        ZS_CHECK(zs__update_finish(zs));
        return zs__frozen_store_write(zs, param, first, count, src);
    }
    return frozen_move(zs, param, first, count, src, NULL);
}

zs_status zs__frozen_read(zs_ctx *zs, int param, int64_t first, int64_t count, float *dst) {
    if (quantized(zs, param)) return zs__frozen_store_read(zs, param, first, count, dst);
    return frozen_move(zs, param, first, count, NULL, dst);
}

/* One unit's owned parameters from its master: rounded on the backend that
 * computes on the parameters, the master brought over in rounds through
 * host memory where it lives elsewhere (host tier, nvme). */
typedef struct round_ctx {
    zs__buf *params;
    int64_t delta; /* parameter buffer index - state index */
    float *host;   /* ZS_STATE_ROUND floats of host memory, then as many rounded values */
} round_ctx;

static zs_status round_chunk(void *p, const zs__state_chunk *c) {
    round_ctx *r = p;
    zs__backend *pbe = r->params->be;
    for (int64_t at = 0; at < c->count;) {
        const int64_t first = c->first + at;
        void *dst = zs__buf_at(r->params, first + r->delta);
        if (c->runner == pbe) { /* the same memory: one conversion */
            ZS_CHECK(pbe->ops->convert(pbe, dst, r->params->dtype, c->array[ZS_STATE_MASTER] + at,
                                       ZS_DTYPE_FP32, c->count - at));
            return ZS_OK;
        }
        const int64_t n = c->count - at < ZS_STATE_ROUND ? c->count - at : ZS_STATE_ROUND;
        ZS_CHECK(c->runner->ops->download(c->runner, r->host, c->array[ZS_STATE_MASTER] + at,
                                          (size_t)n * sizeof(float)));
        /* Rounded on the host (round to nearest even, as the device
         * would), then onto the parameters' side. */
        void *rounded = r->host + ZS_STATE_ROUND;
        ZS_CHECK(zs_convert(rounded, r->params->dtype, r->host, ZS_DTYPE_FP32, n));
        ZS_CHECK(pbe->ops->upload(pbe, dst, rounded, (size_t)n * zs_dtype_size(r->params->dtype)));
        at += n;
    }
    return ZS_OK;
}

zs_status zs__params_from_master(zs_ctx *zs) {
    ZS_CHECK(zs__update_finish(zs));
    zs__params_changed(zs); /* hpZ: gathers go across nodes again */
    if (zs->store.has_master && !zs->params_on_nvme) {
        float *host = NULL;
        const size_t bytes = 2 * ZS_STATE_ROUND * sizeof(float);
        ZS_CHECK(zs__mem_host_alloc(&zs->mem, ZS_MEM_SCRATCH, bytes, (void **)&host));
        zs_status st = ZS_OK;
        for (int u = 0; u < zs->unit_count && st == ZS_OK; u++) {
            int64_t at, first, end;
            zs__buf *params = zs__unit_owned_params(zs, u, &at);
            if (!params || zs->plan->units[u].frozen) continue; /* frozen: no master */
            zs__unit_state_range(zs, u, &first, &end);
            round_ctx r = {params, at - first, host};
            st = zs__store_each(&zs->store, first, end, 0, round_chunk, &r);
        }
        zs__mem_host_free(&zs->mem, ZS_MEM_SCRATCH, host, bytes);
        ZS_CHECK(st);
    }
    return ZS_OK;
}

zs_status zs__state_loaded(zs_ctx *zs) {
    const int stage = zs->settings.zero.stage;
    /* Stage 0 keeps everything whole on every rank, which loaded its owned
     * chunk: the other chunks come from their owners (the memory tiers;
     * stage 0 refuses nvme). */
    for (int u = 0; stage == 0 && u < zs->unit_count; u++) {
        const zs__plan_unit *pu = &zs->plan->units[u];
        const char *name = zs->units[u]->name;
        if (pu->frozen) continue; /* no state; its parameters were written whole */
        for (int a = 0; a < 3; a++) {
            float *at = zs__store_at(&zs->store, (zs__state_array)a, pu->grad_full_offset);
            if (at)
                ZS_CHECK(zs__comm_all_gather(zs->comm, at, (size_t)pu->shard_numel,
                                             ZS_DTYPE_FP32, name));
        }
        if (!zs->store.has_master)
            ZS_CHECK(zs__comm_all_gather(zs->comm, zs__buf_at(&zs->params_full, pu->full_offset),
                                         (size_t)pu->shard_numel, zs->compute_dtype, name));
    }
    ZS_CHECK(zs__agree_status(zs, zs__params_from_master(zs), "parameters from the master weights"));
    ZS_CHECK(zs__gather_full_params(zs));
    /* Training resumes at a step boundary: no gradient of a step that
     * failed (or was cut short) may leak into the next one, and no unit is
     * still marked ready from it. */
    zs__grads_new_micro_step(zs);
    return zs__agree_status(zs, zs__reset_gradients(zs, 1), "gradient reset");
}

zs_status zs__reset_gradients(zs_ctx *zs, int host_too) {
    zs__buf *bufs[3] = {zs->settings.zero.stage < 2 ? &zs->grads_full : &zs->grads_shard,
                        &zs->grads_host, &zs->grads_landing};
    for (int i = 0; i < 3; i++) {
        zs__buf *b = bufs[i];
        if (!b->ptr || (!host_too && b->be == zs->host_backend && zs->host_backend != zs->backend))
            continue;
        ZS_CHECK(b->be->ops->zero(b->be, b->ptr, (size_t)b->count * zs_dtype_size(b->dtype)));
    }
    return ZS_OK;
}

uint64_t zs__state_digest(zs_ctx *zs) {
    if (zs__update_finish(zs) != ZS_OK) return 0;
    XXH3_state_t *state = XXH3_createState();
    if (!state) return 0;
    XXH3_64bits_reset(state);
    /* The parameters (host-accessible memory: the CPU backend, for tests)
     * and the quantized frozen units' records, then the store's arrays. */
    const zs__buf none = {0};
    const zs__buf *records = zs__frozen_store_buf(zs);
    const zs__buf *bufs[] = {&zs->params_full, &zs->params_shard, records ? records : &none};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]->ptr && bufs[i]->be->ops->host_accessible)
            XXH3_64bits_update(state, bufs[i]->ptr,
                               (size_t)bufs[i]->count * zs_dtype_size(bufs[i]->dtype));
    /* An unreadable state has no digest: make it differ from any. */
    if (zs__store_digest(&zs->store, state) != ZS_OK) XXH3_64bits_update(state, "unreadable", 10);
    XXH3_64bits_update(state, &zs->step, sizeof zs->step);
    uint64_t digest = XXH3_64bits_digest(state);
    XXH3_freeState(state);
    return digest;
}
