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
 * NF4 (QLoRA's 4-bit NormalFloat; bits = ZS_K_QUANT_NF4, frozen.storage =
 * "nf4", issue 43) is a third format of the same blocks: the values are
 * not a uniform grid but the 16 levels of zs_k_nf4_level (the QLoRA paper's
 * table, as bitsandbytes defines them: seven negative, an exact 0, eight
 * positive, -1 and 1 at the ends), and the scale is the block's absmax
 * itself (qmax 1). A value is normalized the way bitsandbytes does it,
 * n = x * (1 / amax) (two correctly rounded operations, the same bits on
 * every backend; x / amax where 1 / amax overflows, below 2^-128), and
 * stored as the index of its nearest level: the number of midpoints
 * between consecutive levels that n exceeds (zs_k_nf4_index; a value
 * exactly on a midpoint takes the lower level, as bitsandbytes'
 * comparisons x > midpoint do). The midpoints are bitsandbytes' own
 * constants: the shortest decimal of each double halfway between two
 * float levels, read as a float literal (for four of them that float is
 * one ulp from the double's own rounding; tests/unit/test_quantize.c
 * checks which). Dequantized: level * amax, one fp32 multiplication. Zero
 * blocks store level 0 (index 7) and dequantize to +0; non-finite blocks
 * get the NaN scale as above. The index c is stored as the int4 nibble of
 * c - 8, so NF4 packs (and unpacks, zs_k_int4_low/high + 8) exactly like
 * int4. The error of a finite value is at most half the widest gap
 * between levels times amax (the gap 0.3038 between -1 and -0.6962:
 * 0.1519 * amax, attained), plus the fp32 roundings (a few 2^-24 * amax).
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

/* The `bits` of NF4: four bits a value, stored as int4 is, but mapped to
 * the levels of zs_k_nf4_level. */
#define ZS_K_QUANT_NF4 (-4)

/* The NF4 index of 0.0 (zero blocks store it). */
#define ZS_K_NF4_ZERO_INDEX 7

/* The scale of a block holding an Inf or a NaN, and every value dequantized
 * from it: the positive quiet NaN with no payload. */
#define ZS_K_QUANT_NAN_BITS 0x7fc00000u

/* 1 when `bits` is a supported format (8: int8, 4: int4, ZS_K_QUANT_NF4). */
ZS_HD int zs_k_quant_bits_valid(int bits) {
    return bits == 8 || bits == 4 || bits == ZS_K_QUANT_NF4;
}

/* 1 when the format stores two values a byte (int4 and NF4). */
ZS_HD int zs_k_quant_nibbles(int bits) { return bits != 8; }

/* qmax of a format: the scale is amax / qmax (NF4: the amax itself). */
ZS_HD int zs_k_quant_qmax(int bits) {
    return bits == 4 ? ZS_K_QUANT_INT4_MAX : bits == ZS_K_QUANT_NF4 ? 1 : ZS_K_QUANT_INT8_MAX;
}

/* The 16 NF4 levels, index 0 .. 15 (the QLoRA paper's table), chosen by
 * the index's bits in a tree of selects rather than looked up: constants
 * and selects only, so the CPU's dequantize loops vectorize (blends) and
 * CUDA needs no table in memory. */
ZS_HD float zs_k_nf4_level(int index) {
    const int b0 = index & 1, b1 = index & 2, b2 = index & 4, b3 = index & 8;
    const float l01 = b0 ? -0.6961928009986877f : -1.0f;
    const float l23 = b0 ? -0.39491748809814453f : -0.5250730514526367f;
    const float l45 = b0 ? -0.18477343022823334f : -0.28444138169288635f;
    const float l67 = b0 ? 0.0f : -0.09105003625154495f;
    const float l89 = b0 ? 0.16093020141124725f : 0.07958029955625534f;
    const float l1011 = b0 ? 0.33791524171829224f : 0.24611230194568634f;
    const float l1213 = b0 ? 0.5626170039176941f : 0.44070982933044434f;
    const float l1415 = b0 ? 1.0f : 0.7229568362236023f;
    const float l03 = b1 ? l23 : l01, l47 = b1 ? l67 : l45;
    const float l811 = b1 ? l1011 : l89, l1215 = b1 ? l1415 : l1213;
    const float l07 = b2 ? l47 : l03, l815 = b2 ? l1215 : l811;
    return b3 ? l815 : l07;
}

/* The index of the NF4 level nearest n (normalized, in [-1, 1]): how many
 * of the 15 midpoints n exceeds. Branch-free sums, so the CPU's loops
 * vectorize; a NaN exceeds none (index 0, but non-finite blocks never get
 * here). */
ZS_HD int32_t zs_k_nf4_index(float n) {
    return (int32_t)(n > -0.8480964004993439f) + (int32_t)(n > -0.6106329262256622f) +
           (int32_t)(n > -0.4599952697753906f) + (int32_t)(n > -0.33967943489551544f) +
           (int32_t)(n > -0.23460740596055984f) + (int32_t)(n > -0.13791173323988914f) +
           (int32_t)(n > -0.045525018125772476f) + (int32_t)(n > 0.03979014977812767f) +
           (int32_t)(n > 0.1202552504837513f) + (int32_t)(n > 0.2035212516784668f) +
           (int32_t)(n > 0.2920137718319893f) + (int32_t)(n > 0.3893125355243683f) +
           (int32_t)(n > 0.5016634166240692f) + (int32_t)(n > 0.6427869200706482f) +
           (int32_t)(n > 0.8614784181118011f);
}

/* Blocks, and so scales, of `count` values in blocks of `block` (>= 1):
 * ceil(count / block). */
ZS_HD int64_t zs_k_quant_blocks(int64_t count, int64_t block) {
    return count <= 0 ? 0 : (count + block - 1) / block;
}

/* Bytes that `count` values occupy quantized to `bits`: count for int8,
 * ceil(count / 2) for int4 and NF4. */
ZS_HD int64_t zs_k_quant_value_bytes(int64_t count, int bits) {
    return count <= 0 ? 0 : zs_k_quant_nibbles(bits) ? (count + 1) / 2 : count;
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

/* x normalized by its block's scale (> 0): x * (1 / scale), as
 * bitsandbytes computes it, or x / scale where 1 / scale overflows (a
 * subnormal amax below 2^-128, whose reciprocal is Inf: 0 * Inf would be a
 * NaN, and every other value +-Inf). A select, not a branch, so the CPU's
 * loops vectorize. */
ZS_HD float zs_k_nf4_normalized(float x, float scale) {
    const float inverse = 1.0f / scale;
    return inverse <= 3.40282346638528859811704183484516925e38f ? x * inverse : x / scale;
}

/* The stored integer of x for NF4: the nibble value index - 8 (in
 * [-8, 7]); zero and non-finite blocks store level 0. */
ZS_HD int32_t zs_k_nf4_value(float x, float scale) {
    if (!(scale > 0.0f)) return ZS_K_NF4_ZERO_INDEX - 8;
    return zs_k_nf4_index(zs_k_nf4_normalized(x, scale)) - 8;
}

/* The stored integer of x in any format (qmax: zs_k_quant_qmax as a float). */
ZS_HD int32_t zs_k_quant_code(float x, float scale, float qmax, int bits) {
    return bits == ZS_K_QUANT_NF4 ? zs_k_nf4_value(x, scale) : zs_k_quant_value(x, scale, qmax);
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

/* The value a stored integer q stands for before scaling: q itself, or
 * the NF4 level of nibble q (index q + 8). */
ZS_HD float zs_k_quant_unit(int32_t q, int bits) {
    return bits == ZS_K_QUANT_NF4 ? zs_k_nf4_level(q + 8) : (float)q;
}

/* The dequantized value of q in any format. */
ZS_HD float zs_k_dequant_code(int32_t q, float scale, int bits) {
    return zs_k_quant_nan_fixed(zs_k_quant_unit(q, bits) * scale);
}

/* acc + the dequantized value of q in any format. */
ZS_HD float zs_k_dequant_code_add(float acc, int32_t q, float scale, int bits) {
    return zs_k_quant_nan_fixed(acc + zs_k_quant_unit(q, bits) * scale);
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
