/* Where each parameter's optimizer state and compute-dtype copy live (ctx.h),
 * and the moves between them that several entry points share: checkpoints,
 * imports, tests and digests reach the state only through here and the store
 * (offload/store.h), so no tier is a special case for them. */
#include <string.h>

#include "core/error.h"
#include "zero/ctx.h"

/* Host floats per round when state passes through host memory. */
#define ZS_STATE_ROUND ((int64_t)1 << 16)

int64_t zs__state_index(const zs_ctx *zs, int param, int64_t element) {
    const zs__plan_param *pp = &zs->plan->params[param];
    const zs__plan_unit *pu = &zs->plan->units[pp->unit];
    if (zs->settings.zero.stage == 0) return pu->full_offset + pp->offset + element;
    return pu->shard_offset + pp->offset + element - (int64_t)zs->shard_rank * pu->shard_numel;
}

void zs__unit_state_range(const zs_ctx *zs, int unit, int64_t *first, int64_t *end) {
    const zs__plan_unit *pu = &zs->plan->units[unit];
    if (zs->settings.zero.stage == 0) {
        *first = pu->full_offset;
        *end = pu->full_offset + pu->padded_numel;
    } else {
        *first = pu->shard_offset;
        *end = pu->shard_offset + pu->shard_numel;
    }
}

void *zs__param_at(const zs_ctx *zs, int param, int64_t element) {
    const zs__plan_param *pp = &zs->plan->params[param];
    const zs__plan_unit *pu = &zs->plan->units[pp->unit];
    if (zs->settings.zero.stage < 3)
        return zs__buf_at(&zs->params_full, pu->full_offset + pp->offset + element);
    if (!zs->params_shard.ptr) return NULL; /* offload.params = "nvme": no shard is kept */
    return zs__buf_at(&zs->params_shard, zs__state_index(zs, param, element));
}

zs__buf *zs__unit_owned_params(zs_ctx *zs, int u, int64_t *at) {
    const zs__plan_unit *pu = &zs->plan->units[u];
    const int stage = zs->settings.zero.stage;
    if (stage == 3) {
        *at = pu->shard_offset;
        return zs->params_shard.ptr ? &zs->params_shard : NULL;
    }
    *at = stage == 0 ? pu->full_offset : pu->full_offset + (int64_t)zs->shard_rank * pu->shard_numel;
    return &zs->params_full;
}

int zs__state_range(const zs_ctx *zs, int param, int64_t *first, int64_t *end) {
    if (zs->settings.zero.stage == 0) {
        *first = 0;
        *end = zs->params[param]->numel;
        return 1;
    }
    return zs__plan_owned_range(zs->plan, param, zs->shard_rank, first, end);
}

/* fp32 without a separate master: the parameters are the master. */
static int params_are_master(const zs_ctx *zs, zs__state_array array) {
    return array == ZS_STATE_MASTER && !zs->store.has_master;
}

zs_status zs__state_read(zs_ctx *zs, zs__state_array array, int param, int64_t first,
                         int64_t count, float *dst) {
    if (count <= 0) return ZS_OK;
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
    ZS_CHECK(zs__update_finish(zs));
    zs__params_changed(zs); /* hpZ: gathers go across nodes again */
    if (params_are_master(zs, array)) {
        const zs__buf *p = zs->settings.zero.stage < 3 ? &zs->params_full : &zs->params_shard;
        return p->be->ops->upload(p->be, zs__param_at(zs, param, first), src,
                                  (size_t)count * sizeof(float));
    }
    return zs__store_write(&zs->store, array, zs__state_index(zs, param, first), count, src);
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
            if (!params) continue;
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
        for (int a = 0; a < 3; a++) {
            float *at = zs__store_at(&zs->store, (zs__state_array)a, pu->full_offset);
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

zs_status zs__gather_unit_params(zs_ctx *zs, int u) {
    const int stage = zs->settings.zero.stage;
    if (stage != 1 && stage != 2) return ZS_OK;
    const zs__plan_unit *pu = &zs->plan->units[u];
    return zs__comm_all_gather(zs->shard_comm, zs__buf_at(&zs->params_full, pu->full_offset),
                               (size_t)pu->shard_numel, zs->compute_dtype, zs->units[u]->name);
}

zs_status zs__gather_full_params(zs_ctx *zs) {
    for (int u = 0; u < zs->unit_count; u++) ZS_CHECK(zs__gather_unit_params(zs, u));
    return ZS_OK;
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
