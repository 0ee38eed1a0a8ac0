/* The ground's accessors (ground.h): what the public API reads of a
 * context, the unit size every room computes with, and the allocation of a
 * buffer of the memory plan on the side its tag says. Calls nothing of
 * zero/. */
#include "zero/ground.h"

int zs_rank(const zs_ctx *zs) { return zs->rank; }
const char *zs_backend_name(const zs_ctx *zs) { return zs->backend->ops->name; }
int zs_world_size(const zs_ctx *zs) { return zs->world_size; }
int zs_stage(const zs_ctx *zs) { return zs->settings.zero.stage; }
int64_t zs_step_count(const zs_ctx *zs) { return zs->step; }

float zs_loss_scale(const zs_ctx *zs) { return (float)zs__loss_scaler_scale(&zs->scaler); }

int zs_is_accumulation_boundary(const zs_ctx *zs) {
    return zs->micro + 1 >= zs->settings.gradient_accumulation_steps;
}

size_t zs__unit_bytes(const zs_ctx *zs, const zs_unit *unit) {
    return (size_t)zs__plan_unit_bytes(zs->plan, unit->index, zs_dtype_size(zs->compute_dtype));
}

/* A buffer of the memory plan: device tags in the backend's memory; host
 * tags (offload) in host memory the host backend computes on, page-locked
 * by the device backend when offload.pin_memory says so and the device
 * copies by DMA. */
zs_status zs__plan_buf(zs_ctx *zs, zs__buf *buf, zs_mem_tag tag, zs_dtype dtype, int64_t count) {
    if (count <= 0) return ZS_OK;
    if (zs__mem_tag_on_device(tag) || zs->host_backend == zs->backend)
        return zs__buf_alloc(zs->backend, buf, tag, dtype, count);
    if (zs->settings.offload.pin_memory && !zs->backend->ops->host_accessible)
        return zs__buf_alloc_pinned(zs->backend, zs->host_backend, buf, tag, dtype, count);
    return zs__buf_alloc(zs->host_backend, buf, tag, dtype, count);
}
