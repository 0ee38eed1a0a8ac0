/* The AVX2 + F16C kernels (see cpu_isa.h and cpu_kernels_impl.h).
 *
 * fp16 uses F16C's vcvtph2ps / vcvtps2ph with round-to-nearest-even given in
 * the instruction (not taken from MXCSR). Both are exact IEEE conversions that
 * keep subnormals and quiet NaNs keeping the top payload bits, which is what
 * kernels/convert.h was written to match; test_convert checks every fp16
 * pattern and millions of fp32 ones against it.
 *
 * bf16 uses integer SIMD that repeats zs_k_fp32_to_bf16 step for step. The
 * hardware vcvtneps2bf16 is not used: it flushes subnormal inputs to zero,
 * which the scalar reference does not. */
#include "backend/cpu_isa.h"

#if ZS_CPU_X86
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/convert.h"
#include "kernels/optimizer.h"
#include "kernels/quantize.h"

#define ZS_CPU_TARGET __attribute__((target("avx2,f16c")))
#define ZS_CPU_TABLE zs__cpu_kernels_avx2
#define ZS_CPU_LEVEL ZS_CPU_ISA_AVX2

ZS_CPU_TARGET static void cvt_fp16_to_fp32(float *dst, const uint16_t *src, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = zs_k_fp16_to_fp32(src[i]);
}

ZS_CPU_TARGET static void cvt_fp32_to_fp16(uint16_t *dst, const float *src, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = zs_k_fp32_to_fp16(src[i]);
}

ZS_CPU_TARGET static void cvt_bf16_to_fp32(float *dst, const uint16_t *src, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(wide, 16));
    }
    for (; i < n; i++) dst[i] = zs_k_bf16_to_fp32(src[i]);
}

/* zs_k_fp32_to_bf16 on 8 lanes, results in the low 16 bits of each lane. The
 * sum x + 0x7fff + lsb wraps only for negative NaNs, whose lanes are replaced
 * by the quieted NaN. */
ZS_CPU_TARGET static inline __m256i bf16_round8(__m256i x) {
    const __m256i magnitude = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
    const __m256i high = _mm256_srli_epi32(x, 16);
    const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
    const __m256i biased = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb);
    const __m256i rounded = _mm256_srli_epi32(biased, 16);
    const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(rounded, quiet, is_nan);
}

ZS_CPU_TARGET static void cvt_fp32_to_bf16(uint16_t *dst, const float *src, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i lo = bf16_round8(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m256i hi = bf16_round8(_mm256_loadu_si256((const __m256i *)(src + i + 8)));
        /* packus works per 128-bit half: [lo0-3 hi0-3 | lo4-7 hi4-7]; the
         * permute puts the quarters back in element order. Lanes hold values
         * <= 0xffff, so the unsigned saturation never changes them. */
        __m256i packed = _mm256_packus_epi32(lo, hi);
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 1, 2, 0)));
    }
    for (; i < n; i++) dst[i] = zs_k_fp32_to_bf16(src[i]);
}

#include "backend/cpu_kernels_impl.h"

#endif
