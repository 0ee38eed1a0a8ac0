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
    zs__cpu_elementwise(zs__cpu_kernels_get()->accumulate, dst, dst_dtype, src, src_dtype,
                        count);
    return ZS_OK;
}
