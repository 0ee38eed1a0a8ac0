/* The portable kernels: conversions are the scalar functions of
 * kernels/convert.h called per element. This is the reference the SIMD levels
 * are tested against, and the level used on CPUs without AVX2 + F16C (or
 * forced with ZS_CPU_ISA=scalar). The compiler may still vectorize the
 * optimizer loops with the baseline SIMD of the target (SSE2 on x86-64). */
#include <stdint.h>
#include <string.h>

#include "backend/cpu_isa.h"
#include "kernels/convert.h"
#include "kernels/optimizer.h"
#include "kernels/quantize.h"

#define ZS_CPU_TARGET
#define ZS_CPU_TABLE zs__cpu_kernels_scalar
#define ZS_CPU_LEVEL ZS_CPU_ISA_SCALAR

static void cvt_fp16_to_fp32(float *dst, const uint16_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = zs_k_fp16_to_fp32(src[i]);
}

static void cvt_bf16_to_fp32(float *dst, const uint16_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = zs_k_bf16_to_fp32(src[i]);
}

static void cvt_fp32_to_fp16(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = zs_k_fp32_to_fp16(src[i]);
}

static void cvt_fp32_to_bf16(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = zs_k_fp32_to_bf16(src[i]);
}

#include "backend/cpu_kernels_impl.h"
