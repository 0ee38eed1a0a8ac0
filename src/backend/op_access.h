/* The bytes each backend op reads and writes, as the stream-order check
 * (stream_check.h) is told them: written once for the sim device (which
 * declares them at every enqueue) and the checked wrapper of a GPU backend
 * (checked.c, ZS_STREAM_CHECK=1 on CUDA). Each builder fills out[] and
 * returns how many ranges it wrote (at most ZS__ACCESS_MAX). */
#ifndef ZS_BACKEND_OP_ACCESS_H
#define ZS_BACKEND_OP_ACCESS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/stream_check.h"

#define ZS__ACCESS_MAX 5

static inline zs__stream_check_range zs__access_read(const void *p, size_t bytes) {
    return (zs__stream_check_range){(uintptr_t)p, p ? bytes : 0, 0};
}

static inline zs__stream_check_range zs__access_write(const void *p, size_t bytes) {
    return (zs__stream_check_range){(uintptr_t)p, p ? bytes : 0, 1};
}

static inline size_t zs__access_bytes(int64_t count, zs_dtype dtype) {
    return count > 0 ? (size_t)count * zs_dtype_size(dtype) : 0;
}

static inline int zs__access_copy(zs__stream_check_range *out, void *dst, const void *src,
                                  size_t bytes) {
    out[0] = zs__access_read(src, bytes);
    out[1] = zs__access_write(dst, bytes);
    return 2;
}

static inline int zs__access_convert(zs__stream_check_range *out, void *dst, zs_dtype dst_dtype,
                                     const void *src, zs_dtype src_dtype, int64_t count) {
    out[0] = zs__access_read(src, zs__access_bytes(count, src_dtype));
    out[1] = zs__access_write(dst, zs__access_bytes(count, dst_dtype));
    return 2;
}

static inline int zs__access_quantize(zs__stream_check_range *out, void *q, float *scales,
                                      const void *src, zs_dtype src_dtype, int64_t count,
                                      int64_t block, int bits) {
    out[0] = zs__access_read(src, zs__access_bytes(count, src_dtype));
    out[1] = zs__access_write(q, (size_t)zs_k_quant_value_bytes(count, bits));
    out[2] = zs__access_write(scales, (size_t)zs_k_quant_blocks(count, block) * sizeof(float));
    return 3;
}

static inline int zs__access_dequantize(zs__stream_check_range *out, void *dst, zs_dtype dst_dtype,
                                        const void *q, const float *scales, int64_t count,
                                        int64_t block, int bits) {
    out[0] = zs__access_read(q, (size_t)zs_k_quant_value_bytes(count, bits));
    out[1] = zs__access_read(scales, (size_t)zs_k_quant_blocks(count, block) * sizeof(float));
    out[2] = zs__access_write(dst, zs__access_bytes(count, dst_dtype));
    return 3;
}

static inline int zs__access_update(zs__stream_check_range *out, const zs__update_args *u) {
    int k = 0;
    out[k++] = zs__access_read(u->grad, zs__access_bytes(u->count, u->grad_dtype));
    out[k++] = zs__access_write(u->master, zs__access_bytes(u->count, ZS_DTYPE_FP32));
    if (u->param) out[k++] = zs__access_write(u->param, zs__access_bytes(u->count, u->param_dtype));
    if (u->m) out[k++] = zs__access_write(u->m, zs__access_bytes(u->count, ZS_DTYPE_FP32));
    if (u->v) out[k++] = zs__access_write(u->v, zs__access_bytes(u->count, ZS_DTYPE_FP32));
    return k;
}

#endif
