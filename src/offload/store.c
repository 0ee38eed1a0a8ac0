/* The optimizer state store (store.h). */
#include "offload/store.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

/* Host floats per round when a memory tier is read for a digest. */
#define ZS_STORE_ROUND ((int64_t)1 << 16)

const char *zs__tier_name(zs__tier tier) {
    switch (tier) {
    case ZS_TIER_DEVICE: return "device";
    case ZS_TIER_HOST: return "host";
    case ZS_TIER_NVME: return "nvme";
    }
    return "?";
}

static const char *array_name(zs__state_array a) {
    return a == ZS_STATE_MASTER ? "master weights" : a == ZS_STATE_M ? "first moments"
                                                                      : "second moments";
}

int zs__store_keeps(const zs__store *s, zs__state_array array) {
    if (array == ZS_STATE_MASTER) return s->has_master;
    return (int)array <= s->moments;
}

zs_status zs__store_create(zs__store *s, const zs__store_spec *spec) {
    memset(s, 0, sizeof *s);
    s->tier = spec->tier;
    s->numel = spec->numel;
    s->moments = spec->moments;
    s->has_master = spec->has_master;
    s->runner = spec->tier == ZS_TIER_DEVICE ? spec->device : spec->host;
    if (spec->tier == ZS_TIER_NVME) {
        zs_status st = zs__nvme_state_create(spec->nvme_dir, spec->rank, spec->nvme_runid,
                                             spec->nvme_layout, spec->mem, &s->nvme);
        if (st != ZS_OK) memset(s, 0, sizeof *s);
        return st;
    }
    const zs_mem_tag tag = spec->tier == ZS_TIER_HOST ? ZS_MEM_HOST_STATE : ZS_MEM_MASTER;
    for (int a = 0; a < 3; a++) {
        if (!zs__store_keeps(s, (zs__state_array)a)) continue;
        const zs_mem_tag t = a == 0 ? tag : spec->tier == ZS_TIER_HOST ? tag : ZS_MEM_OPTIM;
        zs_status st;
        if (spec->tier == ZS_TIER_DEVICE)
            st = zs__buf_alloc(spec->device, &s->array[a], t, ZS_DTYPE_FP32, s->numel);
        else if (spec->pin)
            st = zs__buf_alloc_pinned(spec->device, spec->host, &s->array[a], t, ZS_DTYPE_FP32,
                                      s->numel);
        else
            st = zs__buf_alloc(spec->host, &s->array[a], t, ZS_DTYPE_FP32, s->numel);
        if (st != ZS_OK) {
            zs__store_destroy(s);
            return st;
        }
    }
    return ZS_OK;
}

void zs__store_destroy(zs__store *s) {
    for (int a = 0; a < 3; a++) zs__buf_free(&s->array[a]);
    zs__nvme_state_destroy(s->nvme);
    memset(s, 0, sizeof *s);
}

float *zs__store_at(const zs__store *s, zs__state_array array, int64_t index) {
    if (s->nvme || !s->array[array].ptr) return NULL;
    return zs__buf_at(&s->array[array], index);
}

/* The nvme sweep's chunks, clipped to the caller's range. */
typedef struct clip_ctx {
    int64_t first, end;
    zs__store_visit visit;
    void *ctx;
    zs__backend *runner;
} clip_ctx;

static zs_status visit_clipped(void *p, int64_t first, int64_t count, float *const *arrays) {
    const clip_ctx *c = p;
    const int64_t lo = first > c->first ? first : c->first;
    const int64_t hi = first + count < c->end ? first + count : c->end;
    if (lo >= hi) return ZS_OK;
    zs__state_chunk chunk = {.first = lo, .count = hi - lo, .runner = c->runner};
    for (int a = 0; a < 3; a++) chunk.array[a] = arrays[a] ? arrays[a] + (lo - first) : NULL;
    return c->visit(c->ctx, &chunk);
}

zs_status zs__store_each(zs__store *s, int64_t first, int64_t end, int write_back,
                         zs__store_visit visit, void *ctx) {
    if (first < 0) first = 0;
    if (end > s->numel) end = s->numel;
    if (first >= end) return ZS_OK;
    if (s->nvme) {
        clip_ctx c = {first, end, visit, ctx, s->runner};
        return zs__nvme_state_sweep(s->nvme, first, end, write_back, visit_clipped, &c);
    }
    zs__state_chunk chunk = {.first = first, .count = end - first, .runner = s->runner};
    for (int a = 0; a < 3; a++) chunk.array[a] = zs__store_at(s, (zs__state_array)a, first);
    return visit(ctx, &chunk);
}

static zs_status check_range(const zs__store *s, zs__state_array array, int64_t index,
                             int64_t count) {
    if (!zs__store_keeps(s, array))
        return zs__fail(ZS_ERR_INTERNAL, "optimizer state: the %s are not kept in this "
                        "configuration", array_name(array));
    if (index < 0 || count < 0 || index + count > s->numel)
        return zs__fail(ZS_ERR_INTERNAL, "optimizer state: %s [%lld, %lld) outside [0, %lld)",
                        array_name(array), (long long)index, (long long)(index + count),
                        (long long)s->numel);
    return ZS_OK;
}

zs_status zs__store_read(zs__store *s, zs__state_array array, int64_t index, int64_t count,
                         float *host) {
    if (count <= 0) return ZS_OK;
    ZS_CHECK(check_range(s, array, index, count));
    if (s->nvme) return zs__nvme_state_get(s->nvme, (int)array, index, count, host);
    return s->runner->ops->download(s->runner, host, zs__store_at(s, array, index),
                                    (size_t)count * sizeof(float));
}

zs_status zs__store_write(zs__store *s, zs__state_array array, int64_t index, int64_t count,
                          const float *host) {
    if (count <= 0) return ZS_OK;
    ZS_CHECK(check_range(s, array, index, count));
    if (s->nvme) return zs__nvme_state_put(s->nvme, (int)array, index, count, host);
    return s->runner->ops->upload(s->runner, zs__store_at(s, array, index), host,
                                  (size_t)count * sizeof(float));
}

zs_status zs__store_flush(zs__store *s) {
    return s->nvme ? zs__nvme_state_flush(s->nvme) : ZS_OK;
}

zs_status zs__store_reset(zs__store *s) {
    if (s->nvme) return zs__nvme_state_reset(s->nvme);
    for (int a = 0; a < 3; a++)
        if (s->array[a].ptr)
            ZS_CHECK(s->runner->ops->zero(s->runner, s->array[a].ptr,
                                          (size_t)s->numel * sizeof(float)));
    return ZS_OK;
}

zs_status zs__store_digest(zs__store *s, XXH3_state_t *state) {
    /* Array by array, in rounds through host memory (so a device tier and
     * the nvme tier hash the same bytes a host tier does). */
    const int64_t round = ZS_STORE_ROUND;
    float *buf = zs__malloc((size_t)round * sizeof(float));
    if (!buf) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "optimizer state digest: out of host memory");
    zs_status st = ZS_OK;
    for (int a = 0; a < 3 && st == ZS_OK; a++) {
        if (!zs__store_keeps(s, (zs__state_array)a)) continue;
        for (int64_t at = 0; at < s->numel && st == ZS_OK; at += round) {
            const int64_t n = s->numel - at < round ? s->numel - at : round;
            st = zs__store_read(s, (zs__state_array)a, at, n, buf);
            if (st == ZS_OK) XXH3_64bits_update(state, buf, (size_t)n * sizeof(float));
        }
    }
    free(buf);
    return st;
}
