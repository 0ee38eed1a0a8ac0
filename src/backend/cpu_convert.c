/* Conversions between fp32, fp16 and bf16 on the CPU: the backend op and the
 * public zs_convert, which needs no context. zs_convert lives here rather than
 * in src/core because it runs the CPU backend's SIMD kernels, and core sits
 * below the backend in the layering. */
#include "backend/cpu_isa.h"
#include "backend/cpu_ops.h"
#include "core/error.h"

int zs__cpu_dtype_valid(zs_dtype dtype) {
    return dtype == ZS_DTYPE_FP32 || dtype == ZS_DTYPE_FP16 || dtype == ZS_DTYPE_BF16;
}

void zs__cpu_elementwise(zs__cpu_elementwise_fn kernel, void *dst, zs_dtype dst_dtype,
                         const void *src, zs_dtype src_dtype, int64_t count) {
    const size_t dsize = zs_dtype_size(dst_dtype), ssize = zs_dtype_size(src_dtype);
    const int64_t tasks = (count + ZS_CPU_TASK - 1) / ZS_CPU_TASK;
#pragma omp parallel for schedule(static) if (count > ZS_CPU_PARALLEL_MIN)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t begin = t * ZS_CPU_TASK;
        int64_t n = count - begin < ZS_CPU_TASK ? count - begin : ZS_CPU_TASK;
        kernel((char *)dst + (size_t)begin * dsize, dst_dtype,
               (const char *)src + (size_t)begin * ssize, src_dtype, n);
    }
}

zs_status zs__cpu_convert(zs__backend *be, void *dst, zs_dtype dst_dtype, const void *src,
                          zs_dtype src_dtype, int64_t count) {
    (void)be;
    if (!zs__cpu_dtype_valid(dst_dtype) || !zs__cpu_dtype_valid(src_dtype) || count < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "cpu backend: convert of %lld elements from "
                        "dtype %d to dtype %d: the count must be >= 0 and the dtypes fp32, "
                        "fp16 or bf16", (long long)count, (int)src_dtype, (int)dst_dtype);
    if (count == 0) return ZS_OK;
    zs__cpu_elementwise(zs__cpu_kernels_get()->convert, dst, dst_dtype, src, src_dtype, count);
    return ZS_OK;
}

zs_status zs_convert(void *dst, zs_dtype dst_dtype, const void *src, zs_dtype src_dtype,
                     int64_t count) {
    if (!zs__cpu_dtype_valid(dst_dtype) || !zs__cpu_dtype_valid(src_dtype))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_convert: dtypes %d -> %d: each must be "
                        "ZS_DTYPE_FP32, ZS_DTYPE_FP16 or ZS_DTYPE_BF16",
                        (int)src_dtype, (int)dst_dtype);
    if (count < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_convert: count is %lld; it must be >= 0",
                        (long long)count);
    if (count > 0 && (!dst || !src))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_convert: %s is NULL with count %lld",
                        !dst ? "dst" : "src", (long long)count);
    if (count == 0) return ZS_OK;
    zs__cpu_elementwise(zs__cpu_kernels_get()->convert, dst, dst_dtype, src, src_dtype, count);
    return ZS_OK;
}
