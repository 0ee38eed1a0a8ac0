/* fp32 <-> fp16 / bf16 conversions of one value, written once for every
 * backend, with IEEE round-to-nearest-even and exact handling of zeros,
 * subnormals, infinities and NaNs:
 *   - fp32 -> fp16: values >= 65520 round to infinity; values below 2^-25
 *     round to zero, 2^-25 itself ties to (even) zero; subnormal results are
 *     rounded, not flushed. NaNs stay NaNs, quieted, keeping the sign and
 *     the top payload bits (what F16C's vcvtps2ph does).
 *   - fp16 -> fp32: exact for every pattern; subnormals are normalized;
 *     NaNs are quieted (what vcvtph2ps does).
 *   - fp32 -> bf16: round to nearest even on the top 16 bits; the largest
 *     finite values round to infinity as RNE requires; NaNs are quieted.
 *   - bf16 -> fp32: exact (a 16-bit shift), NaN bits included.
 * The SIMD paths of the CPU backend are tested bit for bit against these. */
#ifndef ZS_KERNELS_CONVERT_H
#define ZS_KERNELS_CONVERT_H

#include <stdint.h>
#include <string.h>

#include "kernels/hostdevice.h"

ZS_HD uint32_t zs_k_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

ZS_HD float zs_k_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

ZS_HD uint16_t zs_k_fp32_to_fp16(float value) {
    const uint32_t x = zs_k_f32_bits(value);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, keep the top 9 payload bits */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 (including infinity) */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* normal in fp16: >= 2^-14 */
        a += 0x0fffu + ((a >> 13) & 1u); /* round to nearest, ties to even */
        a -= 0x38000000u;                /* exponent bias 127 -> 15 */
        return (uint16_t)(sign | (a >> 13));
    }
    if (a <= 0x33000000u) /* <= 2^-25: zero (2^-25 ties to even zero) */
        return sign;
    /* Subnormal in fp16: the result is m * 2^-24 with m = significand >> shift. */
    const uint32_t exponent = a >> 23;            /* 102 .. 112 */
    const uint32_t significand = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exponent;       /* 14 .. 24 */
    const uint32_t odd = (significand >> shift) & 1u;
    const uint32_t rounded = (significand + (1u << (shift - 1)) - 1u + odd) >> shift;
    return (uint16_t)(sign | rounded);            /* may carry into the smallest normal */
}

ZS_HD float zs_k_fp16_to_fp32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1fu) /* infinity, or NaN (quieted) */
        return zs_k_f32_from_bits(sign | 0x7f800000u | (mantissa << 13) |
                                  (mantissa ? 0x00400000u : 0u));
    if (exponent != 0)
        return zs_k_f32_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
    if (mantissa == 0) return zs_k_f32_from_bits(sign);
    /* Subnormal: shift the leading one into the implicit position. */
    uint32_t e = 113u;
    while (!(mantissa & 0x400u)) {
        mantissa <<= 1;
        e--;
    }
    return zs_k_f32_from_bits(sign | (e << 23) | ((mantissa & 0x3ffu) << 13));
}

ZS_HD uint16_t zs_k_fp32_to_bf16(float value) {
    const uint32_t x = zs_k_f32_bits(value);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, keep the top payload bits */
        return (uint16_t)((x >> 16) | 0x0040u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

ZS_HD float zs_k_bf16_to_fp32(uint16_t b) { return zs_k_f32_from_bits((uint32_t)b << 16); }

#endif
