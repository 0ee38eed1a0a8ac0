/* Sums of squares on the CPU (gradient norms, and the overflow check of mixed
 * precision: a non-finite element makes the sum non-finite, since squares are
 * never negative and inf + x = inf, NaN + x = NaN).
 *
 * The order of additions is fixed, so the value depends on neither the thread
 * count nor the instruction-set level: partials over blocks of
 * ZS_CPU_NORM_BLOCK elements (each summed in the lane order of cpu_isa.h) are
 * added in block order. */
#include "backend/cpu_isa.h"
#include "backend/cpu_ops.h"
#include "core/error.h"

#define ZS_CPU_NORM_BLOCK 4096
#define ZS_CPU_NORM_BATCH 1024 /* blocks whose partials are held at once */

zs_status zs__cpu_sum_squares(zs__backend *be, const void *x, zs_dtype dtype, int64_t count,
                              double *out) {
    (void)be;
    if (!zs__cpu_dtype_valid(dtype) || count < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "cpu backend: sum of squares of %lld elements "
                        "of dtype %d: the count must be >= 0 and the dtype fp32, fp16 or bf16",
                        (long long)count, (int)dtype);
    const zs__cpu_kernels *k = zs__cpu_kernels_get();
    const size_t size = zs_dtype_size(dtype);
    const int64_t blocks = (count + ZS_CPU_NORM_BLOCK - 1) / ZS_CPU_NORM_BLOCK;
    double total = 0.0;
    double partial[ZS_CPU_NORM_BATCH];
    for (int64_t first = 0; first < blocks; first += ZS_CPU_NORM_BATCH) {
        int64_t batch = blocks - first < ZS_CPU_NORM_BATCH ? blocks - first : ZS_CPU_NORM_BATCH;
#pragma omp parallel for schedule(static) if (batch * ZS_CPU_NORM_BLOCK > ZS_CPU_PARALLEL_MIN)
        for (int64_t b = 0; b < batch; b++) {
            int64_t begin = (first + b) * ZS_CPU_NORM_BLOCK;
            int64_t n = count - begin < ZS_CPU_NORM_BLOCK ? count - begin : ZS_CPU_NORM_BLOCK;
            partial[b] = k->sum_squares((const char *)x + (size_t)begin * size, dtype, n);
        }
        for (int64_t b = 0; b < batch; b++) total += partial[b];
    }
    *out = total;
    return ZS_OK;
}

/* The CPU never blocks on another party, so many arrays cost no more than
 * one call each: the same loop, the same values. */
zs_status zs__cpu_sum_squares_many(zs__backend *be, int n, const void *const *ptrs,
                                   const zs_dtype *dtypes, const int64_t *counts, double *out) {
    if (n < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "cpu backend: sums of squares of %d arrays; "
                        "the number of arrays must be >= 0", n);
    for (int a = 0; a < n; a++) {
        zs_status st = zs__cpu_sum_squares(be, ptrs[a], dtypes[a], counts[a], &out[a]);
        if (st != ZS_OK) return zs__fail_context(st, "array %d of %d", a, n);
    }
    return ZS_OK;
}
