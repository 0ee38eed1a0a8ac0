/* The CPU backend: host memory and OpenMP loops over the shared element math
 * of kernels/ headers. It is a product, not a mock: CPU clusters train with it, and
 * every test of the orchestration runs on it.
 *
 * This file holds memory, initialization and the ops table. The mixed-precision
 * kernels (conversion, accumulation, sums of squares, the fused optimizer pass,
 * block quantization) are in cpu_convert.c, cpu_accumulate.c, cpu_reduce.c,
 * cpu_update.c and cpu_quantize.c, which dispatch at run time to SIMD kernels
 * for the CPU's instruction-set level (cpu_isa.h, cpu_kernels_*.c). */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_isa.h"
#include "backend/cpu_ops.h"
#include "core/alloc.h"
#include "core/error.h"

static zs_status cpu_alloc(zs__backend *be, zs_mem_tag tag, size_t bytes, void **out) {
    /* The simulated device: device state past device_memory_bytes fails as
     * it would on a GPU, so "does not fit on one device" is testable here. */
    const zs__mem *mem = be->mem;
    if (mem->device_cap > 0 && zs__mem_tag_on_device(tag) && mem->device_current + bytes > mem->device_cap) {
        *out = NULL;
        return zs__fail(ZS_ERR_OUT_OF_MEMORY,
                        "device memory: %zu bytes for '%s' do not fit device_memory_bytes = %llu "
                        "(%llu bytes held on the device already); shard more (zero.stage, more "
                        "ranks) or offload (offload.optimizer = \"host\")",
                        bytes, zs_mem_tag_name(tag), (unsigned long long)mem->device_cap,
                        (unsigned long long)mem->device_current);
    }
    return zs__mem_host_alloc(be->mem, tag, bytes, out);
}

static void cpu_free(zs__backend *be, zs_mem_tag tag, void *ptr, size_t bytes) {
    zs__mem_host_free(be->mem, tag, ptr, bytes);
}

static zs_status cpu_zero(zs__backend *be, void *ptr, size_t bytes) {
    (void)be;
    if (bytes) memset(ptr, 0, bytes);
    return ZS_OK;
}

static zs_status cpu_copy(zs__backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes && dst != src) memmove(dst, src, bytes);
    return ZS_OK;
}

zs_status zs__cpu_init_fill(zs__backend *be, void *dst, zs_dtype dtype, int64_t first,
                            int64_t count, zs_k_init_kind kind, double a, double b,
                            uint64_t key) {
    (void)be;
    if (dtype != ZS_DTYPE_FP32)
        return zs__fail(ZS_ERR_UNSUPPORTED, "cpu backend: initializing %s tensors is not "
                        "supported in this version", zs_dtype_name(dtype));
    float *out = dst;
#pragma omp parallel for schedule(static) if (count > ZS_CPU_PARALLEL_MIN)
    for (int64_t j = 0; j < count; j++)
        out[j] = zs_k_init_value(kind, a, b, key, (uint64_t)(first + j));
    return ZS_OK;
}

/* Host memory is what the CPU backend has anyway. */
static zs_status cpu_host_alloc(zs__backend *be, zs_mem_tag tag, size_t bytes, void **out) {
    return zs__mem_host_alloc(be->mem, tag, bytes, out);
}

static void cpu_device_identity(zs__backend *be, char *out, size_t cap) {
    (void)be;
    if (cap > 0) out[0] = '\0';
}

static zs_status cpu_download(zs__backend *be, void *host, const void *src, size_t bytes) {
    return cpu_copy(be, host, src, bytes);
}

static zs_status cpu_upload(zs__backend *be, void *dst, const void *host, size_t bytes) {
    return cpu_copy(be, dst, host, bytes);
}

/* Every CPU op has finished when it returns. */
static zs_status cpu_synchronize(zs__backend *be) {
    (void)be;
    return ZS_OK;
}

/* The CPU backend has no streams: its ops run on the calling thread. */
static void *cpu_get_stream(zs__backend *be) {
    (void)be;
    return NULL;
}

static zs_status cpu_set_stream(zs__backend *be, void *stream) {
    (void)be;
    (void)stream;
    return zs__fail(ZS_ERR_UNSUPPORTED, "the cpu backend has no streams");
}

/* Nothing on the CPU blocks on another party, so there is nothing to check. */
static void cpu_set_health_check(zs__backend *be, zs__health_fn fn, void *ctx) {
    (void)be;
    (void)fn;
    (void)ctx;
}

static void cpu_destroy(zs__backend *be) { free(be); }

static const zs__backend_ops cpu_ops = {
    .name = "cpu",
    .host_accessible = 1,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .init_fill = zs__cpu_init_fill,
    .convert = zs__cpu_convert,
    .accumulate = zs__cpu_accumulate,
    .sum_squares = zs__cpu_sum_squares,
    .sum_squares_many = zs__cpu_sum_squares_many,
    .optimizer_update = zs__cpu_optimizer_update,
    .quantize = zs__cpu_quantize,
    .dequantize = zs__cpu_dequantize,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_free,
    .download = cpu_download,
    .upload = cpu_upload,
    .synchronize = cpu_synchronize,
    .get_stream = cpu_get_stream,
    .set_stream = cpu_set_stream,
    .device_identity = cpu_device_identity,
    .set_health_check = cpu_set_health_check,
    .destroy = cpu_destroy,
};

const zs__backend_ops *zs__cpu_backend_ops(void) { return &cpu_ops; }

zs_status zs__cpu_backend_create(zs__mem *mem, zs__backend **out) {
    zs__backend *be = zs__calloc(1, sizeof *be);
    if (!be) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "cpu backend: out of host memory");
    be->ops = &cpu_ops;
    be->mem = mem;
    /* Choose the SIMD level now, so it is logged at start-up (ZS_LOG_LEVEL=debug)
     * rather than in the middle of the first step. */
    (void)zs__cpu_kernels_get();
    *out = be;
    return ZS_OK;
}
