/* The host backend of a device context, declaring what it touches.
 *
 * With offload, the zero layer computes on host memory through a CPU
 * backend of its own (model.c: the host backend), and that memory is the
 * device backend's page-locked memory (host_alloc), which queued copies
 * read and write. A device that checks stream order (the sim device;
 * ZS_STREAM_CHECK on CUDA) must know every host access to it, and must let
 * OpenMP's worker threads, which the check does not know, through. This
 * backend is the CPU backend with one step added to every op: the bytes
 * the op reads and writes are declared to the device backend's host_access
 * by the calling thread first (which checks them and opens the pages), so
 * a host optimizer pass over a buffer that a queued copy still reads is a
 * reported race, and an ordered one runs at full speed. */
#include <pthread.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "backend/cpu_ops.h"
#include "core/alloc.h"
#include "core/error.h"

/* Where the declarations go: the device backend. */
static zs__backend *device_of(zs__backend *be) { return be->impl; }

static zs_status use(zs__backend *be, const void *p, size_t bytes, int write, const char *what) {
    return p ? zs__backend_host_access(device_of(be), p, bytes, write, what) : ZS_OK;
}

static size_t bytes_of(int64_t count, zs_dtype dtype) {
    return count > 0 ? (size_t)count * zs_dtype_size(dtype) : 0;
}

static zs_status g_zero(zs__backend *be, void *ptr, size_t bytes) {
    ZS_CHECK(use(be, ptr, bytes, 1, "host zero"));
    return zs__cpu_backend_ops()->zero(be, ptr, bytes);
}

static zs_status g_copy(zs__backend *be, void *dst, const void *src, size_t bytes) {
    ZS_CHECK(use(be, src, bytes, 0, "host copy (read)"));
    ZS_CHECK(use(be, dst, bytes, 1, "host copy (write)"));
    return zs__cpu_backend_ops()->copy(be, dst, src, bytes);
}

static zs_status g_init_fill(zs__backend *be, void *dst, zs_dtype dtype, int64_t first,
                             int64_t count, zs_k_init_kind kind, double a, double b, uint64_t key) {
    ZS_CHECK(use(be, dst, bytes_of(count, dtype), 1, "host init_fill"));
    return zs__cpu_init_fill(be, dst, dtype, first, count, kind, a, b, key);
}

static zs_status g_convert(zs__backend *be, void *dst, zs_dtype dst_dtype, const void *src,
                           zs_dtype src_dtype, int64_t count) {
    ZS_CHECK(use(be, src, bytes_of(count, src_dtype), 0, "host convert (read)"));
    ZS_CHECK(use(be, dst, bytes_of(count, dst_dtype), 1, "host convert (write)"));
    return zs__cpu_convert(be, dst, dst_dtype, src, src_dtype, count);
}

static zs_status g_accumulate(zs__backend *be, void *dst, zs_dtype dst_dtype, const void *src,
                              zs_dtype src_dtype, int64_t count) {
    ZS_CHECK(use(be, src, bytes_of(count, src_dtype), 0, "host accumulate (read)"));
    ZS_CHECK(use(be, dst, bytes_of(count, dst_dtype), 1, "host accumulate (write)"));
    return zs__cpu_accumulate(be, dst, dst_dtype, src, src_dtype, count);
}

static zs_status g_sum_squares_many(zs__backend *be, int n, const void *const *ptrs,
                                    const zs_dtype *dtypes, const int64_t *counts, double *out) {
    for (int i = 0; i < n; i++)
        ZS_CHECK(use(be, ptrs[i], bytes_of(counts[i], dtypes[i]), 0, "host sum of squares"));
    return zs__cpu_sum_squares_many(be, n, ptrs, dtypes, counts, out);
}

static zs_status g_sum_squares(zs__backend *be, const void *x, zs_dtype dtype, int64_t count,
                               double *out) {
    return g_sum_squares_many(be, 1, &x, &dtype, &count, out);
}

static zs_status g_optimizer_update(zs__backend *be, const zs__update_args *u) {
    const size_t n = u->count > 0 ? (size_t)u->count : 0;
    const char *what = "host optimizer";
    ZS_CHECK(use(be, u->grad, n * zs_dtype_size(u->grad_dtype), 0, what));
    ZS_CHECK(use(be, u->master, n * sizeof(float), 1, what));
    ZS_CHECK(use(be, u->param, n * zs_dtype_size(u->param_dtype), 1, what));
    ZS_CHECK(use(be, u->m, n * sizeof(float), 1, what));
    ZS_CHECK(use(be, u->v, n * sizeof(float), 1, what));
    return zs__cpu_optimizer_update(be, u);
}

static zs_status g_quantize(zs__backend *be, void *q, float *scales, const void *src,
                            zs_dtype src_dtype, int64_t count, int64_t block, int bits) {
    ZS_CHECK(use(be, src, bytes_of(count, src_dtype), 0, "host quantize"));
    ZS_CHECK(use(be, q, (size_t)zs_k_quant_value_bytes(count, bits), 1, "host quantize"));
    ZS_CHECK(use(be, scales, (size_t)zs_k_quant_blocks(count, block) * sizeof(float), 1,
                 "host quantize"));
    return zs__cpu_quantize(be, q, scales, src, src_dtype, count, block, bits);
}

static zs_status g_dequantize(zs__backend *be, void *dst, zs_dtype dst_dtype, int accumulate,
                              const void *q, const float *scales, int64_t count, int64_t block,
                              int bits) {
    ZS_CHECK(use(be, q, (size_t)zs_k_quant_value_bytes(count, bits), 0, "host dequantize"));
    ZS_CHECK(use(be, scales, (size_t)zs_k_quant_blocks(count, block) * sizeof(float), 0,
                 "host dequantize"));
    ZS_CHECK(use(be, dst, bytes_of(count, dst_dtype), 1, "host dequantize"));
    return zs__cpu_dequantize(be, dst, dst_dtype, accumulate, q, scales, count, block, bits);
}

static zs_status g_download(zs__backend *be, void *host, const void *src, size_t bytes) {
    return g_copy(be, host, src, bytes);
}

static zs_status g_upload(zs__backend *be, void *dst, const void *host, size_t bytes) {
    return g_copy(be, dst, host, bytes);
}

static void g_destroy(zs__backend *be) { free(be); }

static zs__backend_ops guarded_ops;
static pthread_once_t guarded_once = PTHREAD_ONCE_INIT;

/* The CPU's table with the kernels wrapped: everything else (memory,
 * synchronize, streams) is the CPU backend's. Filled once; every guarded
 * backend shares it. */
static void fill_guarded_ops(void) {
    {
        zs__backend_ops o = *zs__cpu_backend_ops();
        o.name = "cpu (guarded)";
        o.zero = g_zero;
        o.copy = g_copy;
        o.init_fill = g_init_fill;
        o.convert = g_convert;
        o.accumulate = g_accumulate;
        o.sum_squares = g_sum_squares;
        o.sum_squares_many = g_sum_squares_many;
        o.optimizer_update = g_optimizer_update;
        o.quantize = g_quantize;
        o.dequantize = g_dequantize;
        o.download = g_download;
        o.upload = g_upload;
        o.destroy = g_destroy;
        guarded_ops = o;
    }
}

zs_status zs__cpu_backend_create_guarded(zs__mem *mem, zs__backend *device, zs__backend **out) {
    *out = NULL;
    if (!device || !device->ops->host_access) return zs__cpu_backend_create(mem, out);
    pthread_once(&guarded_once, fill_guarded_ops);
    zs__backend *be = NULL;
    ZS_CHECK(zs__cpu_backend_create(mem, &be));
    be->ops = &guarded_ops;
    be->impl = device;
    *out = be;
    return ZS_OK;
}
