/* The stream-order check around a GPU backend (ZS_STREAM_CHECK=1 on CUDA):
 * a backend that forwards every op to the one it wraps and tells the check
 * (stream_check.h) what each op reads and writes (op_access.h, the same
 * declarations as the sim device's), every wait, fence and declared host
 * access, so a CUDA run reports the ordering mistakes a sim run would.
 * Metadata only: it sees the backend's own ops, not the program's kernels
 * nor NCCL's, and it cannot guard page-locked pages as the sim device does
 * (a host access is checked only where the runtime declares it). One lock
 * keeps the check's record in the order the ops reach the stream. The sim
 * device does not need it: it checks inside, with the pages guarded too. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/op_access.h"
#include "core/alloc.h"
#include "core/error.h"

typedef struct checked {
    zs__backend *inner;
    zs__stream_check *check;
    pthread_mutex_t lock;
    zs__backend_ops ops; /* the inner backend's table with the ops below */
} checked;

static checked *of(zs__backend *be) { return be->impl; }
static zs__backend *in(zs__backend *be) { return of(be)->inner; }

/* One stream-ordered op and its declaration, under the lock. */
#define ENQUEUE(be, name, call, ranges, n)                                              \
    do {                                                                                \
        checked *k_ = of(be);                                                           \
        pthread_mutex_lock(&k_->lock);                                                  \
        zs_status s_ = (call);                                                          \
        if (s_ == ZS_OK)                                                                \
            s_ = zs__stream_check_enqueue(k_->check, 0, (name), NULL, (ranges), (n), NULL); \
        pthread_mutex_unlock(&k_->lock);                                                \
        return s_;                                                                      \
    } while (0)

static zs_status c_zero(zs__backend *be, void *ptr, size_t bytes) {
    const zs__stream_check_range r = zs__access_write(ptr, bytes);
    ENQUEUE(be, "zero", in(be)->ops->zero(in(be), ptr, bytes), &r, 1);
}

static zs_status c_copy(zs__backend *be, void *dst, const void *src, size_t bytes) {
    zs__stream_check_range r[2];
    const int n = zs__access_copy(r, dst, src, bytes);
    ENQUEUE(be, "copy", in(be)->ops->copy(in(be), dst, src, bytes), r, n);
}

static zs_status c_upload(zs__backend *be, void *dst, const void *host, size_t bytes) {
    const zs__stream_check_range r = zs__access_write(dst, bytes);
    ENQUEUE(be, "upload", in(be)->ops->upload(in(be), dst, host, bytes), &r, 1);
}

static zs_status c_init_fill(zs__backend *be, void *dst, zs_dtype dtype, int64_t first,
                             int64_t count, zs_k_init_kind kind, double a, double b, uint64_t key) {
    const zs__stream_check_range r = zs__access_write(dst, zs__access_bytes(count, dtype));
    ENQUEUE(be, "init_fill",
            in(be)->ops->init_fill(in(be), dst, dtype, first, count, kind, a, b, key), &r, 1);
}

static zs_status c_convert(zs__backend *be, void *dst, zs_dtype dd, const void *src, zs_dtype sd,
                           int64_t count) {
    zs__stream_check_range r[2];
    const int n = zs__access_convert(r, dst, dd, src, sd, count);
    ENQUEUE(be, "convert", in(be)->ops->convert(in(be), dst, dd, src, sd, count), r, n);
}

static zs_status c_accumulate(zs__backend *be, void *dst, zs_dtype dd, const void *src,
                              zs_dtype sd, int64_t count) {
    zs__stream_check_range r[2];
    const int n = zs__access_convert(r, dst, dd, src, sd, count);
    ENQUEUE(be, "accumulate", in(be)->ops->accumulate(in(be), dst, dd, src, sd, count), r, n);
}

static zs_status c_update(zs__backend *be, const zs__update_args *u) {
    zs__stream_check_range r[ZS__ACCESS_MAX];
    const int n = zs__access_update(r, u);
    ENQUEUE(be, "optimizer_update", in(be)->ops->optimizer_update(in(be), u), r, n);
}

static zs_status c_quantize(zs__backend *be, void *q, float *scales, const void *src,
                            zs_dtype sd, int64_t count, int64_t block, int bits) {
    zs__stream_check_range r[3];
    const int n = zs__access_quantize(r, q, scales, src, sd, count, block, bits);
    ENQUEUE(be, "quantize", in(be)->ops->quantize(in(be), q, scales, src, sd, count, block, bits),
            r, n);
}

static zs_status c_dequantize(zs__backend *be, void *dst, zs_dtype dd, int accumulate,
                              const void *q, const float *scales, int64_t count, int64_t block,
                              int bits) {
    zs__stream_check_range r[3];
    const int n = zs__access_dequantize(r, dst, dd, q, scales, count, block, bits);
    ENQUEUE(be, "dequantize",
            in(be)->ops->dequantize(in(be), dst, dd, accumulate, q, scales, count, block, bits), r,
            n);
}

/* The ops that wait for themselves (and so for everything before them on
 * the stream): declared, then the wait told as a synchronize. */
static zs_status waited(zs__backend *be, const char *name, zs_status st,
                        const zs__stream_check_range *r, int n) {
    checked *k = of(be);
    if (st != ZS_OK) return st;
    ZS_CHECK(zs__stream_check_enqueue(k->check, 0, name, NULL, r, n, NULL));
    return zs__stream_check_synchronize(k->check, 0);
}

static zs_status c_download(zs__backend *be, void *host, const void *src, size_t bytes) {
    const zs__stream_check_range r = zs__access_read(src, bytes);
    checked *k = of(be);
    pthread_mutex_lock(&k->lock);
    const zs_status st =
        waited(be, "download", in(be)->ops->download(in(be), host, src, bytes), &r, 1);
    pthread_mutex_unlock(&k->lock);
    return st;
}

static zs_status c_sum_squares_many(zs__backend *be, int n, const void *const *ptrs,
                                    const zs_dtype *dtypes, const int64_t *counts, double *out) {
    zs__stream_check_range *r = zs__calloc(n > 0 ? (size_t)n : 1, sizeof *r);
    if (!r) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "stream-order check: out of host memory");
    for (int i = 0; i < n; i++) r[i] = zs__access_read(ptrs[i], zs__access_bytes(counts[i], dtypes[i]));
    checked *k = of(be);
    pthread_mutex_lock(&k->lock);
    const zs_status st =
        waited(be, "sum_squares",
               in(be)->ops->sum_squares_many(in(be), n, ptrs, dtypes, counts, out), r, n);
    pthread_mutex_unlock(&k->lock);
    free(r);
    return st;
}

static zs_status c_sum_squares(zs__backend *be, const void *x, zs_dtype dtype, int64_t count,
                               double *out) {
    return c_sum_squares_many(be, 1, &x, &dtype, &count, out);
}

static zs_status c_synchronize(zs__backend *be) {
    ZS_CHECK(in(be)->ops->synchronize(in(be)));
    return zs__stream_check_synchronize(of(be)->check, 0);
}

static zs_status c_fence_create(zs__backend *be, void **out) {
    return zs__fence_create(in(be), out);
}

static void c_fence_destroy(zs__backend *be, void *fence) {
    (void)zs__stream_check_forget_key(of(be)->check, fence);
    zs__fence_destroy(in(be), fence);
}

static zs_status c_fence_record(zs__backend *be, void *fence) {
    checked *k = of(be);
    pthread_mutex_lock(&k->lock);
    zs_status st = zs__fence_record(in(be), fence);
    if (st == ZS_OK) st = zs__stream_check_fence_record(k->check, 0, fence);
    pthread_mutex_unlock(&k->lock);
    return st;
}

static zs_status c_fence_wait(zs__backend *be, void *fence) {
    ZS_CHECK(zs__fence_wait(in(be), fence));
    return zs__stream_check_fence_wait(of(be)->check, fence);
}

static void c_free(zs__backend *be, zs_mem_tag tag, void *ptr, size_t bytes) {
    in(be)->ops->free(in(be), tag, ptr, bytes); /* waits for the work on it */
    if (ptr) (void)zs__stream_check_forget(of(be)->check, (uintptr_t)ptr, bytes);
}

static void c_host_free(zs__backend *be, zs_mem_tag tag, void *ptr, size_t bytes) {
    in(be)->ops->host_free(in(be), tag, ptr, bytes);
    if (ptr) (void)zs__stream_check_forget(of(be)->check, (uintptr_t)ptr, bytes);
}

static zs_status c_host_access(zs__backend *be, const void *ptr, size_t bytes, int write,
                               const char *what) {
    return zs__stream_check_host_access(of(be)->check, (uintptr_t)ptr, bytes, write, what);
}

static void c_order_release(zs__backend *be, const void *key) {
    (void)zs__stream_check_release(of(be)->check, key);
}

static void c_order_acquire(zs__backend *be, const void *key) {
    (void)zs__stream_check_acquire(of(be)->check, key);
}

/* Forwarded as they are. */
static zs_status c_alloc(zs__backend *be, zs_mem_tag tag, size_t bytes, void **out) {
    return in(be)->ops->alloc(in(be), tag, bytes, out);
}
static zs_status c_host_alloc(zs__backend *be, zs_mem_tag tag, size_t bytes, void **out) {
    return in(be)->ops->host_alloc(in(be), tag, bytes, out);
}
static void *c_get_stream(zs__backend *be) {
    return in(be)->ops->get_stream ? in(be)->ops->get_stream(in(be)) : NULL;
}
static zs_status c_set_stream(zs__backend *be, void *stream) {
    return in(be)->ops->set_stream(in(be), stream);
}
static void c_device_identity(zs__backend *be, char *out, size_t cap) {
    in(be)->ops->device_identity(in(be), out, cap);
}
static void c_set_health_check(zs__backend *be, zs__health_fn fn, void *ctx) {
    in(be)->ops->set_health_check(in(be), fn, ctx);
}
static uint64_t c_blocking_waits(const zs__backend *be) {
    return zs__backend_blocking_waits(((const checked *)be->impl)->inner);
}

static void c_destroy(zs__backend *be) {
    checked *k = of(be);
    zs__backend_destroy(k->inner);
    zs__stream_check_destroy(k->check);
    pthread_mutex_destroy(&k->lock);
    free(k);
    free(be);
}

zs_status zs__backend_checked_create(zs__backend *inner, const zs__stream_check_options *options,
                                     zs__backend **out) {
    *out = NULL;
    zs__backend *be = zs__calloc(1, sizeof *be);
    checked *k = zs__calloc(1, sizeof *k);
    if (!be || !k) {
        free(be);
        free(k);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "stream-order check: out of host memory");
    }
    zs_status st = zs__stream_check_create(options, &k->check);
    if (st != ZS_OK) {
        free(be);
        free(k);
        return st;
    }
    pthread_mutex_init(&k->lock, NULL);
    k->inner = inner;
    zs__backend_ops o = *inner->ops; /* name, properties */
    o.alloc = c_alloc;
    o.free = c_free;
    o.zero = c_zero;
    o.copy = c_copy;
    o.init_fill = c_init_fill;
    o.convert = c_convert;
    o.accumulate = c_accumulate;
    o.sum_squares = c_sum_squares;
    o.sum_squares_many = c_sum_squares_many;
    o.optimizer_update = c_update;
    o.quantize = c_quantize;
    o.dequantize = c_dequantize;
    o.host_alloc = c_host_alloc;
    o.host_free = c_host_free;
    o.download = c_download;
    o.upload = c_upload;
    o.synchronize = c_synchronize;
    o.fence_create = inner->ops->fence_create ? c_fence_create : NULL;
    o.fence_destroy = inner->ops->fence_destroy ? c_fence_destroy : NULL;
    o.fence_record = inner->ops->fence_record ? c_fence_record : NULL;
    o.fence_wait = inner->ops->fence_wait ? c_fence_wait : NULL;
    o.get_stream = c_get_stream;
    o.set_stream = c_set_stream;
    o.device_identity = c_device_identity;
    o.set_health_check = c_set_health_check;
    o.blocking_waits = c_blocking_waits;
    o.host_access = c_host_access;
    o.order_release = c_order_release;
    o.order_acquire = c_order_acquire;
    o.destroy = c_destroy;
    k->ops = o;
    be->ops = &k->ops;
    be->mem = inner->mem;
    be->impl = k;
    *out = be;
    return ZS_OK;
}

zs__backend *zs__backend_unwrapped(zs__backend *be) {
    return be && be->ops->destroy == c_destroy ? of(be)->inner : be;
}

zs__stream_check *zs__backend_checked_check(zs__backend *be) {
    return be && be->ops->destroy == c_destroy ? of(be)->check : NULL;
}
