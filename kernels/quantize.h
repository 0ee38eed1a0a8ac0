/* Block quantization of one value, written once for every backend: the
 * element math of the quantized collectives (ZeRO++'s int8 weight gather and
 * int8/int4 gradient reduce-scatter, issue 28).
 *
 * An array of `count` values is cut into blocks of `block` elements counted
 * from its element 0 (the last block may be shorter). Each block gets one
 * fp32 scale and each value one signed integer:
 *
 *   amax  = max |x| over the block
 *   scale = amax / qmax                         qmax = 127 (int8), 7 (int4)
 *   q     = rne(clamp(x / scale, -qmax, qmax))   an integer in [-qmax, qmax]
 *   x'    = (float)q * scale                     (dequantized)
 *
 * Both divisions are IEEE divisions, not multiplications by a reciprocal: a
 * correctly rounded quotient is the same bits on the CPU (SSE/AVX divps) and
 * on CUDA (nvcc's default --prec-div=true), where x * (1 / scale) would not
 * be. Clamping before rounding gives the same q as clamping after (qmax is an
 * integer and rounding is monotone) and keeps the rounded value small enough
 * for zs_k_quant_rne.
 *
 * Special blocks:
 *   - amax = 0 (every value +-0): scale 0, every q 0, every x' exactly +0.
 *   - the block holds an Inf or a NaN: the scale is the quiet NaN
 *     ZS_K_QUANT_NAN_BITS, every q 0, and every dequantized value (written or
 *     added) is that same NaN. A non-finite gradient thus survives
 *     quantization as NaNs, the runtime's sum of squares (its overflow check)
 *     becomes NaN on the rank that reduces it, and the step is skipped on
 *     every rank as for any overflow. Every NaN dequantizing writes is that
 *     one pattern (zs_k_quant_nan_fixed), so its bits are the same on every
 *     backend.
 *   - amax so small that the scale underflows to 0 (amax <= qmax * 2^-150,
 *     below 2^-143 for int8): every x' is +0, an error of at most
 *     qmax * 2^-150. Scales below 2^-126 (subnormal) lose relative
 *     precision; the bound below still holds.
 *
 * Error bound (tests/unit/test_quantize.c asserts it): with d = 2^-24 the
 * unit roundoff of fp32, for every finite x of a block,
 *   |x' - x| <= scale * (1/2 + 2^-16) + (qmax + 1) * 2^-150
 * (1/2 from rounding to an integer; the division's and the product's
 * roundings add at most (qmax + 1/2) * d + qmax * d < 2^-16 times the scale;
 * the last term covers subnormal scales, whose quotient and product round
 * in absolute, not relative, terms). Writing x' into bf16 or fp16 adds that
 * format's rounding of x' (relative 2^-8 and 2^-11, fp16 subnormals 2^-25).
 *
 * Storage of the integers ("packing"):
 *   - int8: one signed byte per value, value i at byte i.
 *   - int4: two values per byte, value i in byte i / 2, the low nibble for
 *     even i and the high nibble for odd i, each nibble the 4-bit two's
 *     complement of q (q & 0xf, read back as ((n ^ 8) - 8)); an odd count
 *     leaves the high nibble of the last byte 0. Nibble 8 (-8) is never
 *     written.
 *   bytes of the values: zs_k_quant_value_bytes; scales: zs_k_quant_blocks.
 *
 * Rounding to nearest even, zs_k_quant_rne: (v + 1.5 * 2^23) - 1.5 * 2^23.
 * For |v| <= 2^22 the sum lies in [2^23, 2^24], where floats are the
 * integers, so the addition itself rounds v to an integer, to nearest with
 * ties to even (1.5 * 2^23 is even), and the subtraction is exact. Two IEEE
 * additions in the default rounding mode, the mode every other kernel
 * assumes (CUDA's additions are round-to-nearest by instruction); unlike
 * rintf it needs no libm call and vectorizes at every SIMD level. */
#ifndef ZS_KERNELS_QUANTIZE_H
#define ZS_KERNELS_QUANTIZE_H

#include <stdint.h>

#include "kernels/convert.h"
#include "kernels/hostdevice.h"

/* The largest integer of each width; the integers are symmetric around 0. */
#define ZS_K_QUANT_INT8_MAX 127
#define ZS_K_QUANT_INT4_MAX 7

/* The scale of a block holding an Inf or a NaN, and every value dequantized
 * from it: the positive quiet NaN with no payload. */
#define ZS_K_QUANT_NAN_BITS 0x7fc00000u

/* 1 when `bits` is a supported width (8: int8, 4: int4). */
ZS_HD int zs_k_quant_bits_valid(int bits) { return bits == 8 || bits == 4; }

/* qmax of a width (bits 8 or 4). */
ZS_HD int zs_k_quant_qmax(int bits) {
    return bits == 4 ? ZS_K_QUANT_INT4_MAX : ZS_K_QUANT_INT8_MAX;
}

/* Blocks, and so scales, of `count` values in blocks of `block` (>= 1):
 * ceil(count / block). */
ZS_HD int64_t zs_k_quant_blocks(int64_t count, int64_t block) {
    return count <= 0 ? 0 : (count + block - 1) / block;
}

/* Bytes that `count` values occupy quantized to `bits`: count for int8,
 * ceil(count / 2) for int4. */
ZS_HD int64_t zs_k_quant_value_bytes(int64_t count, int bits) {
    return count <= 0 ? 0 : bits == 4 ? (count + 1) / 2 : count;
}

/* |x| as its bit pattern. For non-negative floats, integer order is value
 * order, Inf (0x7f800000) is above every finite value and NaNs above Inf, so
 * the integer maximum of these over a block is its amax, or shows that the
 * block holds an Inf or a NaN. Integer max is exact and associative: any
 * order of a reduction (SIMD lanes, threads, warps) gives the same bits. */
ZS_HD uint32_t zs_k_quant_magnitude(float x) { return zs_k_f32_bits(x) & 0x7fffffffu; }

/* The scale of a block from the maximum of zs_k_quant_magnitude over it. */
ZS_HD float zs_k_quant_scale(uint32_t amax_bits, int bits) {
    if (amax_bits >= 0x7f800000u) return zs_k_f32_from_bits(ZS_K_QUANT_NAN_BITS);
    return zs_k_f32_from_bits(amax_bits) / (float)zs_k_quant_qmax(bits);
}

/* v rounded to the nearest integer, ties to even; |v| <= 2^22. */
ZS_HD float zs_k_quant_rne(float v) {
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    return (v + magic) - magic;
}

/* The integer of x in a block of scale `scale`. A block whose scale is 0 or
 * NaN (all zeros, or non-finite) stores only 0s; otherwise x is finite and
 * scale > 0. qmax as a float (zs_k_quant_qmax). */
ZS_HD int32_t zs_k_quant_value(float x, float scale, float qmax) {
    if (!(scale > 0.0f)) return 0;
    float v = x / scale;
    v = v < qmax ? v : qmax;
    v = v > -qmax ? v : -qmax;
    return (int32_t)zs_k_quant_rne(v);
}

/* value, or the NaN of ZS_K_QUANT_NAN_BITS when it is a NaN (of any sign
 * and payload): x86 propagates an operand's NaN where CUDA returns its own
 * canonical one, so without this a NaN's bits would depend on the backend.
 * A mask rather than a branch: the compiler may not move a floating-point
 * operation into or out of a branch (it could trap), so a branch here would
 * keep the CPU's loops from vectorizing. */
ZS_HD float zs_k_quant_nan_fixed(float value) {
    const uint32_t nan = 0u - (uint32_t)(value != value); /* all ones for a NaN */
    return zs_k_f32_from_bits((zs_k_f32_bits(value) & ~nan) | (ZS_K_QUANT_NAN_BITS & nan));
}

/* The dequantized value of q in a block of scale `scale`: (float)q * scale,
 * which is NaN exactly when the scale is (then ZS_K_QUANT_NAN_BITS). */
ZS_HD float zs_k_dequant_value(int32_t q, float scale) {
    return zs_k_quant_nan_fixed((float)q * scale);
}

/* acc + the dequantized value, one fp32 multiplication and one fp32 addition
 * (no fused multiply-add: the kernel files are built without contraction);
 * a NaN result (a NaN scale, or a NaN already in acc) is
 * ZS_K_QUANT_NAN_BITS. */
ZS_HD float zs_k_dequant_add(float acc, int32_t q, float scale) {
    return zs_k_quant_nan_fixed(acc + (float)q * scale);
}

/* int4 nibbles: a byte holding lo (the even element) and hi (the odd one),
 * each in [-8, 7]; and the two values of a byte, sign-extended. */
ZS_HD uint8_t zs_k_int4_pack(int32_t lo, int32_t hi) {
    return (uint8_t)(((uint32_t)lo & 0xfu) | (((uint32_t)hi & 0xfu) << 4));
}

ZS_HD int32_t zs_k_int4_low(uint8_t byte) { return (int32_t)((byte & 0xfu) ^ 8u) - 8; }

ZS_HD int32_t zs_k_int4_high(uint8_t byte) { return (int32_t)(((uint32_t)byte >> 4) ^ 8u) - 8; }

#endif
