/* Block quantization on the CPU (kernels/quantize.h): the backend's quantize
 * and dequantize ops, which check their arguments and split the blocks
 * across the OpenMP threads; the kernels of the active instruction-set level
 * (cpu_kernels_impl.h) do the work.
 *
 * Work is split into tasks of whole blocks, each task's kernel seeing its
 * blocks counted from its own first element, so a block never straddles two
 * threads and its scale is computed once. For int4 each task also starts on
 * an even element: two values share a byte, and a byte must have one
 * writer. Every value and scale is a function of its own block alone, so the
 * bits do not depend on the split or on the thread count. */
#include <stdint.h>

#include "backend/cpu_isa.h"
#include "backend/cpu_ops.h"
#include "core/error.h"
#include "kernels/quantize.h"

/* Blocks per task: whole blocks of about ZS_CPU_TASK elements, an even
 * number of them when int4 blocks are odd (so that each task starts on a
 * byte of the packed values). */
static int64_t blocks_per_task(int64_t block, int bits) {
    int64_t per = ZS_CPU_TASK / block;
    if (per < 1) per = 1;
    if (zs_k_quant_nibbles(bits) && (block & 1) && (per & 1)) per++;
    return per;
}

/* The argument checks of both ops on both backends (the CUDA backend calls
 * this too, so the rules and messages are the same); `backend` and `what`
 * name the backend and the op in the message. */
zs_status zs__quant_check(const char *backend, const char *what, const void *q,
                          const void *scales, const void *data, zs_dtype dtype, int64_t count,
                          int64_t block, int bits) {
    if (!zs__cpu_dtype_valid(dtype) || count < 0 || block < 1 || !zs_k_quant_bits_valid(bits))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s backend: %s of %lld elements of dtype %d "
                        "in blocks of %lld to %d bits: the count must be >= 0, the block >= 1 "
                        "(comm.quant_block), the bits 8, 4 or -4 (NF4) and the dtype fp32, fp16 or "
                        "bf16",
                        backend, what, (long long)count, (int)dtype, (long long)block, bits);
    if (count > 0 && (!q || !scales || !data))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s backend: %s of %lld elements: the %s "
                        "pointer is NULL", backend, what, (long long)count,
                        !q ? "quantized values'" : !scales ? "scales'" : "data");
    return ZS_OK;
}

/* Runs the active level's kernel over every task: quantize (data is the
 * source, only read) or dequantize (q and scales are only read), one loop
 * for both so that the two split the work alike. */
static void run_tasks(int quantize, void *q, float *scales, void *data, zs_dtype dtype,
                      int accumulate, int64_t count, int64_t block, int bits) {
    if (block > count) block = count; /* one block either way; keeps per * block small */
    const zs__cpu_kernels *k = zs__cpu_kernels_get();
    const size_t size = zs_dtype_size(dtype);
    const int64_t per = blocks_per_task(block, bits);
    const int64_t blocks = zs_k_quant_blocks(count, block);
    const int64_t tasks = (blocks + per - 1) / per;
#pragma omp parallel for schedule(static) if (count > ZS_CPU_PARALLEL_MIN && tasks > 1)
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t first = t * per * block;
        const int64_t n = count - first < per * block ? count - first : per * block;
        char *values = (char *)q + zs_k_quant_value_bytes(first, bits);
        char *elements = (char *)data + (size_t)first * size;
        if (quantize)
            k->quantize(values, scales + t * per, elements, dtype, n, block, bits);
        else
            k->dequantize(elements, dtype, accumulate, values, scales + t * per, n, block, bits);
    }
}

zs_status zs__cpu_quantize(zs__backend *be, void *q, float *scales, const void *src,
                           zs_dtype src_dtype, int64_t count, int64_t block, int bits) {
    (void)be;
    ZS_CHECK(zs__quant_check("cpu", "quantize", q, scales, src, src_dtype, count, block, bits));
    if (count > 0)
        run_tasks(1, q, scales, (void *)(uintptr_t)src, src_dtype, 0, count, block, bits);
    return ZS_OK;
}

zs_status zs__cpu_dequantize(zs__backend *be, void *dst, zs_dtype dst_dtype, int accumulate,
                             const void *q, const float *scales, int64_t count, int64_t block,
                             int bits) {
    (void)be;
    ZS_CHECK(zs__quant_check("cpu", accumulate ? "dequantize-and-add" : "dequantize", q, scales,
                             dst, dst_dtype, count, block, bits));
    if (count > 0)
        run_tasks(0, (void *)(uintptr_t)q, (float *)(uintptr_t)scales, dst, dst_dtype,
                  accumulate != 0, count, block, bits);
    return ZS_OK;
}
