/* Element-wise sums of a received segment into the local one (reduce.h).
 * This loop runs over every byte of every gradient, so each dtype gets the
 * shape its conversions allow the compiler to vectorize; the element-wise
 * result is the same bits whether a loop is vectorized or not. Portable C
 * only: a SIMD conversion module would tie the collectives to one machine.
 *
 * Floor (src/floors.txt): a leaf: calls nothing of comm/.
 */
#include "comm/reduce.h"

#include <pthread.h>
#include <stdint.h>

#include "core/error.h"
#include "kernels/convert.h"

static void sum_fp32(float *restrict dst, const float *restrict src, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* bf16 widens with a shift and narrows with one add and a NaN select, which
 * the compiler turns into vector code directly. */
static void sum_bf16(uint16_t *restrict dst, const uint16_t *restrict src, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        dst[i] = zs_k_fp32_to_bf16(zs_k_bf16_to_fp32(dst[i]) + zs_k_bf16_to_fp32(src[i]));
}

/* fp16's widening normalizes subnormals with a loop and its narrowing
 * shifts by per-element amounts, so neither vectorizes on the portable x86-64
 * baseline (SSE2 has no per-lane variable shifts), and splitting the sum
 * into blocks of fp32 stack buffers measured slower than one scalar loop.
 * What does pay is widening through a table: every one of the 65536 fp16
 * patterns, tabulated once from zs_k_fp16_to_fp32 itself, so the bits are
 * that function's by construction. A lookup costs 0.15 ns where the branchy
 * conversion costs 0.8-2.5 ns (more when subnormals defeat the predictor);
 * the narrowing stays zs_k_fp32_to_fp16, called once per element. The table
 * is 256 KiB of static memory, built on the first fp16 sum only, and is not
 * charged to the accountant (it does not grow with the model). A gradient's
 * values span a few exponents, so the entries in use are a small part of it
 * and stay in L2 next to the segment. */
static float fp16_table[1u << 16];
static pthread_once_t fp16_table_once = PTHREAD_ONCE_INIT;

static void fp16_table_build(void) {
    for (uint32_t h = 0; h < (1u << 16); h++) fp16_table[h] = zs_k_fp16_to_fp32((uint16_t)h);
}

static void sum_fp16(uint16_t *restrict dst, const uint16_t *restrict src, size_t n) {
    /* pthread_once makes the first build safe when two threads sum at once;
     * afterwards it is one load and a predicted branch per segment. */
    pthread_once(&fp16_table_once, fp16_table_build);
    const float *restrict widen = fp16_table;
    for (size_t i = 0; i < n; i++) dst[i] = zs_k_fp32_to_fp16(widen[dst[i]] + widen[src[i]]);
}

void zs__comm_sum_into(void *dst, const void *src, size_t n, zs_dtype dtype) {
    switch (dtype) {
    case ZS_DTYPE_FP32:
        sum_fp32(dst, src, n);
        return;
    case ZS_DTYPE_FP16:
        sum_fp16(dst, src, n);
        return;
    case ZS_DTYPE_BF16:
        sum_bf16(dst, src, n);
        return;
    }
    ZS_ASSERT(!"zs__comm_sum_into: unknown dtype");
}
