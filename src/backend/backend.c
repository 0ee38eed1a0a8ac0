#include "backend/backend.h"

#include "core/error.h"

zs_status zs__backend_create(const zs__settings *settings, zs__mem *mem, int local_rank,
                             zs__backend **out) {
    switch (settings->backend) {
    case ZS_BACKEND_CPU:
        return zs__cpu_backend_create(mem, out);
    case ZS_BACKEND_CUDA:
        return zs__cuda_backend_create(settings, mem, local_rank, out);
    }
    return zs__fail(ZS_ERR_INVALID_ARGUMENT, "unknown backend %d", (int)settings->backend);
}

void zs__backend_destroy(zs__backend *be) {
    if (be) be->ops->destroy(be);
}

zs_status zs__buf_alloc(zs__backend *be, zs__buf *buf, zs_mem_tag tag, zs_dtype dtype,
                        int64_t count) {
    size_t bytes;
    *buf = (zs__buf){.ptr = NULL, .count = 0, .dtype = dtype, .tag = tag};
    if (count < 0 || !zs__mul_size((size_t)count, zs_dtype_size(dtype), &bytes))
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "buffer of %lld %s elements for '%s' is too large",
                        (long long)count, zs_dtype_name(dtype), zs_mem_tag_name(tag));
    ZS_CHECK(be->ops->alloc(be, tag, bytes, &buf->ptr));
    buf->count = count;
    return ZS_OK;
}

void zs__buf_free(zs__backend *be, zs__buf *buf) {
    if (buf->ptr) be->ops->free(be, buf->tag, buf->ptr, (size_t)buf->count * zs_dtype_size(buf->dtype));
    buf->ptr = NULL;
    buf->count = 0;
}

void *zs__buf_at(const zs__buf *buf, int64_t index) {
    return (char *)buf->ptr + (size_t)index * zs_dtype_size(buf->dtype);
}
