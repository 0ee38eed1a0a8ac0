/* Where each parameter's optimizer state lives, and copies of it to and from
 * host memory whatever the tier (ctx.h): checkpoints, imports, tests and
 * digests reach the state only through here, so the NVMe tier is one case
 * among the others. */
#include <string.h>

#include "core/error.h"
#include "zero/ctx.h"

int64_t zs__state_index(const zs_ctx *zs, int param, int64_t element) {
    const zs__plan_param *pp = &zs->plan->params[param];
    const zs__plan_unit *pu = &zs->plan->units[pp->unit];
    if (zs->settings.zero.stage == 0) return pu->full_offset + pp->offset + element;
    return pu->shard_offset + pp->offset + element - (int64_t)zs->rank * pu->shard_numel;
}

void *zs__param_at(const zs_ctx *zs, int param, int64_t element) {
    const zs__plan_param *pp = &zs->plan->params[param];
    const zs__plan_unit *pu = &zs->plan->units[pp->unit];
    if (zs->settings.zero.stage < 3)
        return zs__buf_at(&zs->params_full, pu->full_offset + pp->offset + element);
    if (!zs->params_shard.ptr) return NULL; /* offload.params = "nvme": no shard is kept */
    return zs__buf_at(&zs->params_shard, zs__state_index(zs, param, element));
}

int zs__state_range(const zs_ctx *zs, int param, int64_t *first, int64_t *end) {
    if (zs->settings.zero.stage == 0) {
        *first = 0;
        *end = zs->params[param]->numel;
        return 1;
    }
    return zs__plan_owned_range(zs->plan, param, zs->rank, first, end);
}

float *zs__state_ptr(const zs_ctx *zs, zs__state_array array, int param, int64_t element) {
    if (zs->nvme) return NULL;
    const zs__buf *buf = array == ZS_STATE_MASTER ? &zs->master
                       : array == ZS_STATE_M      ? &zs->optim_m
                                                  : &zs->optim_v;
    if (buf->ptr) return zs__buf_at(buf, zs__state_index(zs, param, element));
    /* fp32 training: the parameters are the master weights. */
    if (array == ZS_STATE_MASTER && zs->compute_dtype == ZS_DTYPE_FP32)
        return zs__param_at(zs, param, element);
    return NULL;
}

/* The NVMe tier's array number: master, then the moments it keeps. */
static int nvme_array(const zs_ctx *zs, zs__state_array array) {
    const int arrays = zs__nvme_state_layout(zs->nvme)->arrays;
    return (int)array < arrays ? (int)array : -1;
}

static zs_status copy_state(zs_ctx *zs, zs__state_array array, int param, int64_t first,
                            int64_t count, float *dst, const float *src) {
    if (count <= 0) return ZS_OK;
    const size_t bytes = (size_t)count * sizeof(float);
    if (zs->nvme) {
        const int a = nvme_array(zs, array);
        if (a < 0) return zs__fail(ZS_ERR_INTERNAL, "state array %d is not kept", (int)array);
        const int64_t index = zs__state_index(zs, param, first);
        return dst ? zs__nvme_state_get(zs->nvme, a, index, count, dst)
                   : zs__nvme_state_put(zs->nvme, a, index, count, src);
    }
    float *at = zs__state_ptr(zs, array, param, first);
    if (!at) return zs__fail(ZS_ERR_INTERNAL, "state array %d is not kept", (int)array);
    zs__backend *be = zs->backend;
    if (dst) return be->ops->download(be, dst, at, bytes);
    return be->ops->upload(be, at, src, bytes);
}

zs_status zs__state_read(zs_ctx *zs, zs__state_array array, int param, int64_t first,
                         int64_t count, float *dst) {
    return copy_state(zs, array, param, first, count, dst, NULL);
}

zs_status zs__state_write(zs_ctx *zs, zs__state_array array, int param, int64_t first,
                          int64_t count, const float *src) {
    return copy_state(zs, array, param, first, count, NULL, src);
}
