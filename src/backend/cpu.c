/* The CPU backend: host memory and OpenMP loops over the shared element math
 * of kernels/ headers. It is a product, not a mock: CPU clusters train with it, and
 * every test of the orchestration runs on it. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"

/* Below this many elements a parallel region costs more than it saves. */
#define ZS_CPU_PARALLEL_MIN 65536

/* Norm partial sums are taken over blocks of this many elements, then the
 * block sums are added in block order: the result depends on neither the
 * thread count nor the schedule. */
#define ZS_CPU_NORM_BLOCK 4096
#define ZS_CPU_NORM_BATCH 1024 /* blocks whose partials are held at once */

static zs_status cpu_alloc(zs__backend *be, zs_mem_tag tag, size_t bytes, void **out) {
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

static zs_status cpu_init_fill(zs__backend *be, void *dst, zs_dtype dtype, int64_t first,
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

static double block_sum_squares(const float *restrict x, int64_t n) {
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; i++) acc += (double)x[i] * (double)x[i];
    return acc;
}

static zs_status cpu_sum_squares(zs__backend *be, const void *x, zs_dtype dtype, int64_t count,
                                 double *out) {
    (void)be;
    if (dtype != ZS_DTYPE_FP32)
        return zs__fail(ZS_ERR_UNSUPPORTED, "cpu backend: norms of %s tensors are not "
                        "supported in this version", zs_dtype_name(dtype));
    const float *data = x;
    int64_t blocks = (count + ZS_CPU_NORM_BLOCK - 1) / ZS_CPU_NORM_BLOCK;
    double total = 0.0;
    double partial[ZS_CPU_NORM_BATCH];
    for (int64_t first = 0; first < blocks; first += ZS_CPU_NORM_BATCH) {
        int64_t batch = blocks - first < ZS_CPU_NORM_BATCH ? blocks - first : ZS_CPU_NORM_BATCH;
#pragma omp parallel for schedule(static) if (batch * ZS_CPU_NORM_BLOCK > ZS_CPU_PARALLEL_MIN)
        for (int64_t k = 0; k < batch; k++) {
            int64_t begin = (first + k) * ZS_CPU_NORM_BLOCK;
            int64_t n = count - begin < ZS_CPU_NORM_BLOCK ? count - begin : ZS_CPU_NORM_BLOCK;
            partial[k] = block_sum_squares(data + begin, n);
        }
        for (int64_t k = 0; k < batch; k++) total += partial[k];
    }
    *out = total;
    return ZS_OK;
}

/* The loops are specialized per optimizer so each inner loop is branch-free
 * and the compiler can vectorize it. */
static void adam_loop(float *restrict p, float *restrict m, float *restrict v,
                      const float *restrict g, int64_t n, const zs_k_optim_scalars *s,
                      int decoupled) {
    if (decoupled) {
#pragma omp parallel for simd schedule(static) if (n > ZS_CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < n; i++) zs_k_adam_element(&p[i], &m[i], &v[i], g[i], s, 1);
    } else {
#pragma omp parallel for simd schedule(static) if (n > ZS_CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < n; i++) zs_k_adam_element(&p[i], &m[i], &v[i], g[i], s, 0);
    }
}

static void sgd_loop(float *restrict p, float *restrict buf, const float *restrict g, int64_t n,
                     const zs_k_optim_scalars *s) {
    if (buf) {
#pragma omp parallel for simd schedule(static) if (n > ZS_CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < n; i++) zs_k_sgd_element(&p[i], &buf[i], g[i], s);
    } else {
#pragma omp parallel for simd schedule(static) if (n > ZS_CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < n; i++) zs_k_sgd_element(&p[i], NULL, g[i], s);
    }
}

static zs_status cpu_optimizer_update(zs__backend *be, const zs__update_args *args) {
    (void)be;
    if (args->param || args->grad_dtype != ZS_DTYPE_FP32)
        return zs__fail(ZS_ERR_UNSUPPORTED,
                        "cpu backend: optimizer updates of %s parameters with %s gradients "
                        "are not supported in this version",
                        zs_dtype_name(args->param_dtype), zs_dtype_name(args->grad_dtype));
    switch (args->kind) {
    case ZS_K_OPTIM_ADAM:
    case ZS_K_OPTIM_ADAMW:
        adam_loop(args->master, args->m, args->v, args->grad, args->count, &args->scalars,
                  args->kind == ZS_K_OPTIM_ADAMW);
        return ZS_OK;
    case ZS_K_OPTIM_SGD:
        sgd_loop(args->master, args->m, args->grad, args->count, &args->scalars);
        return ZS_OK;
    }
    return zs__fail(ZS_ERR_INTERNAL, "cpu backend: unknown optimizer kind %d", (int)args->kind);
}

static void cpu_destroy(zs__backend *be) { free(be); }

static const zs__backend_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .init_fill = cpu_init_fill,
    .sum_squares = cpu_sum_squares,
    .optimizer_update = cpu_optimizer_update,
    .destroy = cpu_destroy,
};

zs_status zs__cpu_backend_create(zs__mem *mem, zs__backend **out) {
    zs__backend *be = calloc(1, sizeof *be);
    if (!be) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "cpu backend: out of host memory");
    be->ops = &cpu_ops;
    be->mem = mem;
    *out = be;
    return ZS_OK;
}
