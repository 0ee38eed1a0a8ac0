/* What every backend shares above its ops table: the kinds' properties,
 * the calls that an ops table may leave out (host access, order edges,
 * fences), typed buffers. The lowest floor of backend/: the backends and
 * the checked wrapper call it; the choice of a backend (backend_select.c)
 * stands above them all. */
#include "backend/backend.h"

#include <string.h>

#include "core/error.h"

int zs__backend_kind_host_accessible(zs__backend_kind kind) { return kind == ZS_BACKEND_CPU; }

int zs__backend_kind_device_collectives(zs__backend_kind kind) { return kind == ZS_BACKEND_CUDA; }

uint64_t zs__backend_blocking_waits(const zs__backend *be) {
    return be && be->ops->blocking_waits ? be->ops->blocking_waits(be) : 0;
}

zs_status zs__backend_host_access(zs__backend *be, const void *ptr, size_t bytes, int write,
                                  const char *what) {
    return be && be->ops->host_access && bytes ? be->ops->host_access(be, ptr, bytes, write, what)
                                                : ZS_OK;
}

void zs__backend_order_release(zs__backend *be, const void *key) {
    if (be && be->ops->order_release) be->ops->order_release(be, key);
}

void zs__backend_order_acquire(zs__backend *be, const void *key) {
    if (be && be->ops->order_acquire) be->ops->order_acquire(be, key);
}

zs_status zs__buf_host_access(const zs__buf *buf, int64_t first, int64_t count, int write,
                              const char *what) {
    if (!buf->pinned || !buf->ptr || count <= 0) return ZS_OK;
    const size_t elem = zs_dtype_size(buf->dtype);
    return zs__backend_host_access(buf->owner, (const char *)buf->ptr + (size_t)first * elem,
                                   (size_t)count * elem, write, what);
}

void zs__backend_destroy(zs__backend *be) {
    if (be) be->ops->destroy(be);
}

static zs_status buf_bytes(zs__buf *buf, int64_t count, size_t *bytes) {
    if (count < 0 || !zs__mul_size((size_t)count, zs_dtype_size(buf->dtype), bytes))
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "buffer of %lld %s elements for '%s' is too large",
                        (long long)count, zs_dtype_name(buf->dtype), zs_mem_tag_name(buf->tag));
    return ZS_OK;
}

zs_status zs__buf_alloc(zs__backend *be, zs__buf *buf, zs_mem_tag tag, zs_dtype dtype,
                        int64_t count) {
    *buf = (zs__buf){.dtype = dtype, .tag = tag, .be = be, .owner = be};
    size_t bytes;
    ZS_CHECK(buf_bytes(buf, count, &bytes));
    ZS_CHECK(be->ops->alloc(be, tag, bytes, &buf->ptr));
    buf->count = count;
    return ZS_OK;
}

zs_status zs__buf_alloc_pinned(zs__backend *owner, zs__backend *runner, zs__buf *buf,
                               zs_mem_tag tag, zs_dtype dtype, int64_t count) {
    *buf = (zs__buf){.dtype = dtype, .tag = tag, .be = runner, .owner = owner, .pinned = 1};
    size_t bytes;
    ZS_CHECK(buf_bytes(buf, count, &bytes));
    ZS_CHECK(owner->ops->host_alloc(owner, tag, bytes, &buf->ptr));
    buf->count = count;
    return ZS_OK;
}

void zs__buf_free(zs__buf *buf) {
    if (buf->ptr) {
        const size_t bytes = (size_t)buf->count * zs_dtype_size(buf->dtype);
        if (buf->pinned) buf->owner->ops->host_free(buf->owner, buf->tag, buf->ptr, bytes);
        else buf->owner->ops->free(buf->owner, buf->tag, buf->ptr, bytes);
    }
    buf->ptr = NULL;
    buf->count = 0;
}

void *zs__buf_at(const zs__buf *buf, int64_t index) {
    return (char *)buf->ptr + (size_t)index * zs_dtype_size(buf->dtype);
}

zs_status zs__fence_create(zs__backend *be, void **out) {
    *out = NULL;
    return be->ops->fence_create ? be->ops->fence_create(be, out) : ZS_OK;
}

void zs__fence_destroy(zs__backend *be, void *fence) {
    if (fence && be->ops->fence_destroy) be->ops->fence_destroy(be, fence);
}

zs_status zs__fence_record(zs__backend *be, void *fence) {
    return fence && be->ops->fence_record ? be->ops->fence_record(be, fence) : ZS_OK;
}

zs_status zs__fence_wait(zs__backend *be, void *fence) {
    return fence && be->ops->fence_wait ? be->ops->fence_wait(be, fence) : ZS_OK;
}
