/* Gradient accumulation on the CPU: dst[i] = round_to_dst(float(dst[i]) +
 * float(src[i])), one fp32 addition and one rounding per element, used to
 * add micro-step gradients into a gradient shard (usually fp32 += fp16/bf16). */
#include "backend/cpu_isa.h"
#include "backend/cpu_ops.h"
#include "core/error.h"

zs_status zs__cpu_accumulate(zs__backend *be, void *dst, zs_dtype dst_dtype, const void *src,
                             zs_dtype src_dtype, int64_t count) {
    (void)be;
    if (!zs__cpu_dtype_valid(dst_dtype) || !zs__cpu_dtype_valid(src_dtype) || count < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "cpu backend: accumulate of %lld elements of "
                        "dtype %d into dtype %d: the count must be >= 0 and the dtypes fp32, "
                        "fp16 or bf16", (long long)count, (int)src_dtype, (int)dst_dtype);
    const zs__cpu_kernels *k = zs__cpu_kernels_get();
    const size_t dsize = zs_dtype_size(dst_dtype), ssize = zs_dtype_size(src_dtype);
    const int64_t tasks = (count + ZS_CPU_TASK - 1) / ZS_CPU_TASK;
#pragma omp parallel for schedule(static) if (count > ZS_CPU_PARALLEL_MIN)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t begin = t * ZS_CPU_TASK;
        int64_t n = count - begin < ZS_CPU_TASK ? count - begin : ZS_CPU_TASK;
        k->accumulate((char *)dst + (size_t)begin * dsize, dst_dtype,
                      (const char *)src + (size_t)begin * ssize, src_dtype, n);
    }
    return ZS_OK;
}
