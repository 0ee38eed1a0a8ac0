/* The AVX-512 (F, BW, VL) kernels (see cpu_isa.h and cpu_kernels_impl.h).
 * Conversions work like the AVX2 ones (cpu_kernels_avx2.c says why bf16 is
 * integer SIMD rather than vcvtneps2bf16), 16 lanes at a time; loop tails use
 * masked loads and stores (AVX-512 BW/VL for 16-bit lanes), which touch no
 * memory outside the arrays. */
#include "backend/cpu_isa.h"

#if ZS_CPU_X86
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/convert.h"
#include "kernels/optimizer.h"
#include "kernels/quantize.h"

#define ZS_CPU_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))
#define ZS_CPU_TABLE zs__cpu_kernels_avx512
#define ZS_CPU_LEVEL ZS_CPU_ISA_AVX512

/* The mask of the first r < 16 lanes. */
ZS_CPU_TARGET static inline __mmask16 first_lanes(int64_t r) {
    return (__mmask16)((1u << r) - 1u);
}

ZS_CPU_TARGET static void cvt_fp16_to_fp32(float *dst, const uint16_t *src, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    if (i < n) {
        __mmask16 k = first_lanes(n - i);
        _mm512_mask_storeu_ps(dst + i, k, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, src + i)));
    }
}

ZS_CPU_TARGET static void cvt_fp32_to_fp16(uint16_t *dst, const float *src, int64_t n) {
    const int rounding = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), rounding));
    if (i < n) {
        __mmask16 k = first_lanes(n - i);
        _mm256_mask_storeu_epi16(dst + i, k, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, src + i), rounding));
    }
}

ZS_CPU_TARGET static inline __m512 bf16_widen16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

ZS_CPU_TARGET static void cvt_bf16_to_fp32(float *dst, const uint16_t *src, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, bf16_widen16(_mm256_loadu_si256((const __m256i *)(src + i))));
    if (i < n) {
        __mmask16 k = first_lanes(n - i);
        _mm512_mask_storeu_ps(dst + i, k, bf16_widen16(_mm256_maskz_loadu_epi16(k, src + i)));
    }
}

/* zs_k_fp32_to_bf16 on 16 lanes (see bf16_round8 in cpu_kernels_avx2.c). */
ZS_CPU_TARGET static inline __m256i bf16_round16(__m512i x) {
    const __m512i magnitude = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(magnitude, _mm512_set1_epi32(0x7f800000));
    const __m512i high = _mm512_srli_epi32(x, 16);
    const __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
    const __m512i biased = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb);
    const __m512i rounded = _mm512_srli_epi32(biased, 16);
    const __m512i quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, quiet));
}

ZS_CPU_TARGET static void cvt_fp32_to_bf16(uint16_t *dst, const float *src, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), bf16_round16(_mm512_loadu_si512(src + i)));
    if (i < n) {
        __mmask16 k = first_lanes(n - i);
        _mm256_mask_storeu_epi16(dst + i, k, bf16_round16(_mm512_maskz_loadu_epi32(k, src + i)));
    }
}

#include "backend/cpu_kernels_impl.h"

#endif
