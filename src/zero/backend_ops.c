/* zs_backend_convert / zs_backend_accumulate: the runtime's element kernels
 * offered to programs, on the context's backend memory.
 *
 * Floor (src/floors.txt): Public, over the ground's backend; calls nothing
 * of zero/.
 */
#include "core/error.h"
#include "zero/ground.h"

static zs_status check(const zs_ctx *zs, const void *dst, const void *src, zs_dtype dst_dtype,
                       zs_dtype src_dtype, int64_t count, const char *call) {
    if (!zs || (!dst && count > 0) || (!src && count > 0) || count < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: context, buffers and a count >= 0 are "
                        "required", call);
    if ((unsigned)dst_dtype > ZS_DTYPE_BF16 || (unsigned)src_dtype > ZS_DTYPE_BF16)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: unknown dtype", call);
    return ZS_OK;
}

zs_status zs_backend_convert(zs_ctx *zs, void *dst, zs_dtype dst_dtype, const void *src,
                             zs_dtype src_dtype, int64_t count) {
    ZS_CHECK(check(zs, dst, src, dst_dtype, src_dtype, count, "zs_backend_convert"));
    if (count == 0) return ZS_OK;
    return zs->backend->ops->convert(zs->backend, dst, dst_dtype, src, src_dtype, count);
}

zs_status zs_backend_accumulate(zs_ctx *zs, void *dst, zs_dtype dst_dtype, const void *src,
                                zs_dtype src_dtype, int64_t count) {
    ZS_CHECK(check(zs, dst, src, dst_dtype, src_dtype, count, "zs_backend_accumulate"));
    if (count == 0) return ZS_OK;
    return zs->backend->ops->accumulate(zs->backend, dst, dst_dtype, src, src_dtype, count);
}
