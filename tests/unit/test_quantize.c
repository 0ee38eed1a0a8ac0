/* Block quantization (kernels/quantize.h) and the CPU backend's quantize and
 * dequantize ops.
 *
 * 1. The element math: rounding to nearest even against nearbyintf, the
 *    int4 nibbles on known bytes, the sizes.
 * 2. A scalar reference written here independently of the kernels (fabsf
 *    and isfinite for the block maximum, nearbyintf after the division,
 *    clamping after rounding, nibbles by shifts) against the backend at
 *    every instruction-set level this machine supports, bit for bit: every
 *    input dtype, int8 and int4, blocks from 1 to more than a chunk and a
 *    task, counts that leave a partial block, odd counts, misaligned
 *    pointers, every output dtype written and added, 1 and 2 threads; guard
 *    bytes after every output stay untouched.
 * 3. Properties: blocks of very different magnitude side by side (a scale
 *    taken from the wrong block breaks the bound), zeros, one huge value
 *    among tiny ones, FLT_MAX, Inf and NaN (NaN scale, NaN out, the other
 *    blocks unaffected), subnormal and underflowing scales, ties, and the
 *    error bound of kernels/quantize.h plus the rounding to the output
 *    dtype, derived below and asserted for every element.
 * 4. Argument checks. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_isa.h"
#include "kernels/convert.h"
#include "kernels/init.h"
#include "kernels/quantize.h"
#include "test_util.h"

static zs__backend *be;

/* SplitMix64 (kernels/init.h's finalizer). */
static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void) { return zs_k_mix64(rng += 0x9e3779b97f4a7c15ULL); }
/* Uniform in [-1, 1). */
static float rnd_unit(void) { return (float)((double)(rnd() >> 11) * 0x1.0p-52 - 1.0); }


/* Bit patterns of fp32 values (kernels/convert.h). */
static uint32_t bits_of(float f) { return zs_k_f32_bits(f); }
static float from_bits(uint32_t u) { return zs_k_f32_from_bits(u); }

static const zs_dtype dtypes[3] = {ZS_DTYPE_FP32, ZS_DTYPE_FP16, ZS_DTYPE_BF16};

/* ------------------------------------------------------------- reference */

static float get(const void *a, zs_dtype d, int64_t i) {
    if (d == ZS_DTYPE_FP32) return ((const float *)a)[i];
    uint16_t h = ((const uint16_t *)a)[i];
    return d == ZS_DTYPE_FP16 ? zs_k_fp16_to_fp32(h) : zs_k_bf16_to_fp32(h);
}

static void put(void *a, zs_dtype d, int64_t i, float v) {
    if (d == ZS_DTYPE_FP32) ((float *)a)[i] = v;
    else if (d == ZS_DTYPE_FP16) ((uint16_t *)a)[i] = zs_k_fp32_to_fp16(v);
    else ((uint16_t *)a)[i] = zs_k_fp32_to_bf16(v);
}

static int64_t ref_value_bytes(int64_t n, int bits) { return bits == 8 ? n : (n + 1) / 2; }

/* The integer of element i of a quantized array, by shifts. */
static int ref_int(const uint8_t *q, int64_t i, int bits) {
    if (bits == 8) return (int)(int8_t)q[i];
    int nibble = (q[i / 2] >> (4 * (i % 2))) & 0xf;
    return nibble >= 8 ? nibble - 16 : nibble;
}

static void ref_quantize(uint8_t *q, float *scales, const void *src, zs_dtype d, int64_t n,
                         int64_t block, int bits) {
    const int qmax = bits == 8 ? 127 : 7;
    memset(q, 0, (size_t)ref_value_bytes(n, bits));
    for (int64_t b = 0; b * block < n; b++) {
        const int64_t begin = b * block, end = begin + block < n ? begin + block : n;
        int finite = 1;
        float amax = 0.0f;
        for (int64_t i = begin; i < end; i++) {
            float x = get(src, d, i);
            if (!isfinite(x)) finite = 0;
            else if (fabsf(x) > amax) amax = fabsf(x);
        }
        const float scale = finite ? amax / (float)qmax : from_bits(0x7fc00000u);
        scales[b] = scale;
        for (int64_t i = begin; i < end; i++) {
            int v = 0;
            if (finite && scale > 0.0f) {
                float r = nearbyintf(get(src, d, i) / scale); /* round, then clamp */
                if (r > (float)qmax) r = (float)qmax;
                if (r < (float)-qmax) r = (float)-qmax;
                v = (int)r;
            }
            if (bits == 8) q[i] = (uint8_t)(int8_t)v;
            else q[i / 2] |= (uint8_t)((v & 0xf) << (4 * (i % 2)));
        }
    }
}

static void ref_dequantize(void *dst, zs_dtype d, int accumulate, const uint8_t *q,
                           const float *scales, int64_t n, int64_t block, int bits) {
    for (int64_t i = 0; i < n; i++) {
        const float scale = scales[i / block];
        float y = (float)ref_int(q, i, bits) * scale;
        if (accumulate) y = get(dst, d, i) + y;
        if (isnan(y)) y = from_bits(0x7fc00000u); /* one NaN pattern */
        put(dst, d, i, y);
    }
}

/* ------------------------------------------------------- element checks */

static void test_elements(void) {
    /* Rounding to nearest even: halves (ties), their neighbours, random. */
    int bad = 0;
    for (int k = -4096; k <= 4096; k++) {
        const float half = (float)k * 0.5f;
        const float tries[3] = {half, nextafterf(half, -INFINITY), nextafterf(half, INFINITY)};
        for (int t = 0; t < 3; t++)
            if (bits_of(zs_k_quant_rne(tries[t]) + 0.0f) !=
                bits_of(nearbyintf(tries[t]) + 0.0f))
                bad++;
    }
    for (int k = 0; k < 200000; k++) {
        const float v = rnd_unit() * (k % 2 ? 130.0f : 4194304.0f); /* up to 2^22 */
        if (zs_k_quant_rne(v) != nearbyintf(v)) bad++;
    }
    ZT_CHECK_MSG(bad == 0, "zs_k_quant_rne differs from nearbyintf on %d values", bad);
    ZT_CHECK(zs_k_quant_rne(2.5f) == 2.0f && zs_k_quant_rne(3.5f) == 4.0f);
    ZT_CHECK(zs_k_quant_rne(-2.5f) == -2.0f && zs_k_quant_rne(-3.5f) == -4.0f);
    ZT_CHECK(zs_k_quant_rne(4194304.5f) == 4194304.0f);
    ZT_CHECK(zs_k_quant_rne(-4194303.5f) == -4194304.0f);

    /* Nibbles: two's complement, low nibble first. */
    ZT_EQ_INT(zs_k_int4_pack(1, -1), 0xf1);
    ZT_EQ_INT(zs_k_int4_pack(7, -7), 0x97);
    ZT_EQ_INT(zs_k_int4_pack(-7, 0), 0x09);
    for (int lo = -8; lo <= 7; lo++)
        for (int hi = -8; hi <= 7; hi++) {
            uint8_t byte = zs_k_int4_pack(lo, hi);
            ZT_CHECK_MSG(zs_k_int4_low(byte) == lo && zs_k_int4_high(byte) == hi,
                         "pack(%d, %d) = 0x%02x reads back %d, %d", lo, hi, byte,
                         zs_k_int4_low(byte), zs_k_int4_high(byte));
        }

    /* Sizes. */
    ZT_EQ_INT(zs_k_quant_blocks(0, 7), 0);
    ZT_EQ_INT(zs_k_quant_blocks(1, 7), 1);
    ZT_EQ_INT(zs_k_quant_blocks(14, 7), 2);
    ZT_EQ_INT(zs_k_quant_blocks(15, 7), 3);
    ZT_EQ_INT(zs_k_quant_value_bytes(5, 8), 5);
    ZT_EQ_INT(zs_k_quant_value_bytes(5, 4), 3);
    ZT_EQ_INT(zs_k_quant_value_bytes(6, 4), 3);
    ZT_EQ_INT(zs__quant_bytes(1000, 256, 8), 1000 + 4 * 4);
    ZT_EQ_INT(zs__quant_bytes(1001, 256, 4), 501 + 4 * 4);
    ZT_EQ_INT(zs__quant_bytes(0, 256, 4), 0);

    /* The scale of a block: amax / qmax; 0 for zeros; NaN for Inf/NaN. */
    ZT_CHECK(zs_k_quant_scale(bits_of(254.0f), 8) == 2.0f);
    ZT_CHECK(zs_k_quant_scale(bits_of(14.0f), 4) == 2.0f);
    ZT_CHECK(bits_of(zs_k_quant_scale(0, 8)) == 0);
    ZT_EQ_U64(bits_of(zs_k_quant_scale(0x7f800000u, 8)), ZS_K_QUANT_NAN_BITS);
    ZT_EQ_U64(bits_of(zs_k_quant_scale(0x7fc12345u, 4)), ZS_K_QUANT_NAN_BITS);
    ZT_EQ_U64(bits_of(zs_k_dequant_value(5, from_bits(0x7fc00000u))), ZS_K_QUANT_NAN_BITS);
    ZT_EQ_U64(bits_of(zs_k_dequant_add(from_bits(0xffc00001u), 5, from_bits(0x7fc00000u))),
              ZS_K_QUANT_NAN_BITS); /* the accumulator's NaN does not leak through */
    ZT_EQ_U64(bits_of(zs_k_dequant_add(from_bits(0xffc0abcdu), 5, 1.0f)), ZS_K_QUANT_NAN_BITS);
    ZT_CHECK(zs_k_dequant_add(1.0f, -3, 0.5f) == -0.5f);
}

/* --------------------------------------------- the backend vs reference */

/* Bytes of guard after every output, which the kernels must not touch. */
#define GUARD 16
#define GUARD_BYTE 0xa5

static void *guarded(size_t bytes) {
    unsigned char *p = malloc(bytes + GUARD + 8);
    ZT_REQUIRE(p != NULL);
    memset(p, GUARD_BYTE, bytes + GUARD + 8);
    return p;
}

static int guard_intact(const void *p, size_t bytes) {
    const unsigned char *g = (const unsigned char *)p + bytes;
    for (int i = 0; i < GUARD; i++)
        if (g[i] != GUARD_BYTE) return 0;
    return 1;
}

/* n values for a case: random magnitudes per block (so neighbouring blocks
 * differ by up to 2^30), a few exact ties, zeros, rarely an Inf or a NaN;
 * within fp16's range when the dtype is fp16. */
static void fill(void *src, zs_dtype d, int64_t n, int64_t block) {
    const int fp16 = d == ZS_DTYPE_FP16;
    float mag = 1.0f;
    for (int64_t i = 0; i < n; i++) {
        if (i % block == 0) mag = ldexpf(1.0f, (int)(rnd() % (fp16 ? 24 : 60)) - (fp16 ? 14 : 30));
        float x;
        switch (rnd() % 16) {
        case 0: x = 0.0f; break;
        case 1: x = mag * (float)((int)(rnd() % 255) - 127) * 0.5f; break; /* ties */
        case 2: /* now and then an Inf or a NaN (with a payload and a sign) */
            x = rnd() % 32 ? mag : rnd() % 2 ? -INFINITY : from_bits(0xffc01234u);
            break;
        default: x = mag * rnd_unit(); break;
        }
        put(src, d, i, x);
    }
}

typedef struct tally {
    long calls, mismatches;
} tally;

/* One quantize and every dequantize of n values against the reference,
 * with the values at byte offset `mis` from an 8-aligned address (the
 * pointers need no alignment). */
static void compare_case(tally *t, const char *level, zs_dtype sd, int64_t n, int64_t block,
                         int bits, int mis) {
    const size_t ssize = zs_dtype_size(sd);
    const int64_t vbytes = ref_value_bytes(n, bits), nscales = zs_k_quant_blocks(n, block);
    unsigned char *src_base = guarded((size_t)n * ssize);
    void *src = src_base;
    fill(src, sd, n, block);
    unsigned char *q_base = guarded((size_t)vbytes + 1), *rq = guarded((size_t)vbytes);
    uint8_t *q = q_base + mis; /* any alignment */
    float *scales = guarded((size_t)nscales * 4), *rs = guarded((size_t)nscales * 4);
    ZT_OK(be->ops->quantize(be, q, scales, src, sd, n, block, bits));
    ref_quantize(rq, rs, src, sd, n, block, bits);
    t->calls++;
    int64_t at = -1;
    for (int64_t i = 0; i < vbytes && at < 0; i++)
        if (q[i] != rq[i]) at = i;
    for (int64_t b = 0; b < nscales && at < 0; b++)
        if (bits_of(scales[b]) != bits_of(rs[b])) at = vbytes + b;
    if (at >= 0) {
        t->mismatches++;
        ZT_CHECK_MSG(0, "%s: quantize %s n=%lld block=%lld int%d: %s %lld differs (got 0x%x, "
                     "reference 0x%x)", level, zs_dtype_name(sd), (long long)n, (long long)block,
                     bits, at < vbytes ? "value byte" : "scale",
                     (long long)(at < vbytes ? at : at - vbytes),
                     at < vbytes ? q[at] : bits_of(scales[at - vbytes]),
                     at < vbytes ? rq[at] : bits_of(rs[at - vbytes]));
    }
    ZT_CHECK_MSG(guard_intact(q, (size_t)vbytes) && guard_intact(scales, (size_t)nscales * 4),
                 "%s: quantize n=%lld block=%lld int%d wrote past its outputs", level,
                 (long long)n, (long long)block, bits);
    for (int dd = 0; dd < 3; dd++) {
        const zs_dtype d = dtypes[dd];
        const size_t dbytes = (size_t)n * zs_dtype_size(d);
        for (int acc = 0; acc < 2; acc++) {
            unsigned char *out_base = guarded(dbytes + 2), *ref = guarded(dbytes);
            void *out = out_base + (mis & ~(zs_dtype_size(d) - 1)); /* element-aligned */
            for (int64_t i = 0; i < n; i++) /* now and then a NaN already in the sum */
                put(ref, d, i,
                    !acc ? 0.0f : rnd() % 512 ? 0.25f * rnd_unit() : from_bits(0xffc0abcdu));
            memcpy(out, ref, dbytes);
            ZT_OK(be->ops->dequantize(be, out, d, acc, q, scales, n, block, bits));
            ref_dequantize(ref, d, acc, rq, rs, n, block, bits);
            t->calls++;
            if (memcmp(out, ref, dbytes) != 0) {
                int64_t i = 0;
                const size_t esize = zs_dtype_size(d);
                while (i < n - 1 &&
                       memcmp((char *)out + i * esize, (char *)ref + i * esize, esize) == 0)
                    i++;
                t->mismatches++;
                ZT_CHECK_MSG(0, "%s: dequantize%s %s -> %s n=%lld block=%lld int%d: element "
                             "%lld is %.9g, reference %.9g", level, acc ? "-add" : "",
                             zs_dtype_name(sd), zs_dtype_name(d), (long long)n,
                             (long long)block, bits, (long long)i, get(out, d, i), get(ref, d, i));
            }
            ZT_CHECK_MSG(guard_intact(out, dbytes), "%s: dequantize n=%lld wrote past dst",
                         level, (long long)n);
            free(out_base);
            free(ref);
        }
    }
    free(src_base);
    free(q_base);
    free(rq);
    free(scales);
    free(rs);
}

static void test_against_reference(const char *level) {
    static const int64_t blocks[] = {1, 2, 3, 7, 32, 33, 255, 256, 511, 512, 513, 1000, 4099};
    tally t = {0, 0};
    for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
        const int64_t block = blocks[bi];
        const int64_t counts[] = {0, 1, 2, 5, block - 1 > 0 ? block - 1 : 3, block, block + 1,
                                  3 * block + 1, 1537 + (int64_t)(rnd() % 977)};
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
            for (int sd = 0; sd < 3; sd++)
                for (int bits = 4; bits <= 8; bits += 4)
                    compare_case(&t, level, dtypes[sd], counts[ci], block, bits, (int)(rnd() % 8));
    }
    /* Blocks longer than a chunk (two passes per block), and more than one
     * OpenMP task with 1 and 2 threads: whole blocks per task, an even
     * number of elements per int4 task. */
    static const int64_t big[][2] = {{200003, 40001}, {140001, 600}, {131072 + 77, 255},
                                     {100000, 100000}, {70001, 1}};
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        for (size_t k = 0; k < sizeof big / sizeof big[0]; k++)
            for (int bits = 4; bits <= 8; bits += 4)
                compare_case(&t, level, dtypes[k % 3], big[k][0], big[k][1], bits, (int)k);
    }
    omp_set_num_threads(1);
    printf("level %s: %ld quantize/dequantize calls, %ld differ from the reference\n", level,
           t.calls, t.mismatches);
}

/* --------------------------------------------------------- properties */

/* The bound of kernels/quantize.h before any output rounding. */
static double bound_fp32(float scale, int bits) {
    const int qmax = bits == 8 ? 127 : 7;
    return (double)scale * (0.5 + 0x1p-16) + (qmax + 1) * 0x1p-150;
}

/* What rounding x' to the output dtype adds: RNE has relative error at
 * most 2^-p (p: the significand bits, 8 for bf16, 11 for fp16) in the
 * normal range, and half the subnormal spacing below it (fp16 2^-25, bf16
 * the fp32 2^-150, 2^-134 taken here). fp32 adds nothing. */
static double bound_round(double xprime, zs_dtype d) {
    if (d == ZS_DTYPE_FP32) return 0.0;
    if (d == ZS_DTYPE_BF16) return fabs(xprime) * 0x1p-8 + 0x1p-134;
    return fabs(xprime) * 0x1p-11 + 0x1p-25;
}

/* Quantizes x[0..n) (fp32 values, converted to sd first) in blocks of
 * `block`, dequantizes into every dtype and checks the bound for every
 * element against its own block's scale, which must be amax / qmax of that
 * block (computed here). Non-finite blocks: NaN scale and NaN out. Returns
 * the scales in scales_out (optional). */
static void round_trip(const char *what, const float *x32, zs_dtype sd, int64_t n, int64_t block,
                       int bits, float *scales_out) {
    const int qmax = bits == 8 ? 127 : 7;
    void *src = malloc((size_t)n * 4 + 1);
    uint8_t *q = malloc((size_t)n + 1);
    const int64_t nb = zs_k_quant_blocks(n, block);
    float *scales = malloc((size_t)nb * 4 + 4), *y32 = malloc((size_t)n * 4 + 4);
    uint16_t *y16 = malloc((size_t)n * 2 + 2);
    ZT_REQUIRE(src && q && scales && y32 && y16);
    for (int64_t i = 0; i < n; i++) put(src, sd, i, x32[i]);
    ZT_OK(be->ops->quantize(be, q, scales, src, sd, n, block, bits));
    ZT_OK(be->ops->dequantize(be, y32, ZS_DTYPE_FP32, 0, q, scales, n, block, bits));
    int64_t worst = -1;
    double worst_ratio = 0;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t begin = b * block, end = begin + block < n ? begin + block : n;
        int finite = 1;
        float amax = 0;
        for (int64_t i = begin; i < end; i++) {
            const float x = get(src, sd, i);
            if (!isfinite(x)) finite = 0;
            else amax = fmaxf(amax, fabsf(x));
        }
        if (!finite) {
            ZT_CHECK_MSG(bits_of(scales[b]) == ZS_K_QUANT_NAN_BITS, "%s: block %lld holds Inf "
                         "or NaN: scale 0x%08x, want the NaN 0x7fc00000", what, (long long)b,
                         bits_of(scales[b]));
            for (int64_t i = begin; i < end; i++)
                ZT_CHECK_MSG(bits_of(y32[i]) == ZS_K_QUANT_NAN_BITS, "%s: element %lld of a "
                             "non-finite block is %g, want NaN", what, (long long)i, y32[i]);
            continue;
        }
        ZT_CHECK_MSG(bits_of(scales[b]) == bits_of(amax / (float)qmax), "%s: block %lld: "
                     "scale %.9g, want amax / %d = %.9g", what, (long long)b, scales[b], qmax,
                     amax / (float)qmax);
        for (int64_t i = begin; i < end; i++) {
            const double err = fabs((double)y32[i] - (double)get(src, sd, i));
            const double lim = bound_fp32(scales[b], bits);
            if (isinf(y32[i]) && amax == FLT_MAX) continue; /* documented: 127 * scale > FLT_MAX */
            if (!(err <= lim) && (worst < 0 || err / lim > worst_ratio)) {
                worst = i;
                worst_ratio = err / lim;
            }
            if (amax == 0.0f)
                ZT_CHECK_MSG(bits_of(y32[i]) == 0, "%s: zero block element %lld came back %g",
                             what, (long long)i, y32[i]);
        }
    }
    ZT_CHECK_MSG(worst < 0, "%s: element %lld: |x' - x| = %.6g exceeds the bound by a factor "
                 "%.3g (x %.9g, x' %.9g, scale %.9g)", what, (long long)worst,
                 worst >= 0 ? fabs((double)y32[worst] - get(src, sd, worst)) : 0.0, worst_ratio,
                 worst >= 0 ? get(src, sd, worst) : 0.0, worst >= 0 ? y32[worst] : 0.0,
                 worst >= 0 ? scales[worst / block] : 0.0);
    /* 16-bit outputs: the fp32 value rounded by kernels/convert.h, and the
     * bound plus that rounding. */
    for (int dd = 1; dd < 3; dd++) {
        const zs_dtype d = dtypes[dd];
        ZT_OK(be->ops->dequantize(be, y16, d, 0, q, scales, n, block, bits));
        int64_t bad_round = -1, bad_bound = -1;
        for (int64_t i = 0; i < n; i++) {
            const uint16_t want =
                d == ZS_DTYPE_FP16 ? zs_k_fp32_to_fp16(y32[i]) : zs_k_fp32_to_bf16(y32[i]);
            if (y16[i] != want && bad_round < 0) bad_round = i;
            const float scale = scales[i / block];
            if (isnan(scale) || isinf(y32[i])) continue;
            /* Beyond the format's largest finite value (fp16 65504, bf16
             * 0x7f7f): rounding may overflow to Inf, which is then the
             * rounded value checked above. */
            const float largest = d == ZS_DTYPE_FP16 ? 65504.0f : from_bits(0x7f7f0000u);
            if (fabsf(y32[i]) > largest && isinf(get(y16, d, i))) continue;
            const double y = get(y16, d, i), x = get(src, sd, i);
            if (!(fabs(y - x) <= bound_fp32(scale, bits) + bound_round(y32[i], d)) && bad_bound < 0)
                bad_bound = i;
        }
        ZT_CHECK_MSG(bad_round < 0, "%s: %s output element %lld is not the fp32 value rounded",
                     what, zs_dtype_name(d), (long long)bad_round);
        ZT_CHECK_MSG(bad_bound < 0, "%s: %s output element %lld: %.9g for x = %.9g exceeds the "
                     "bound", what, zs_dtype_name(d), (long long)bad_bound,
                     bad_bound >= 0 ? get(y16, d, bad_bound) : 0.0,
                     bad_bound >= 0 ? get(src, sd, bad_bound) : 0.0);
    }
    /* Accumulate: acc + x' in fp32, bit for bit. */
    float *acc = malloc((size_t)n * 4 + 4);
    ZT_REQUIRE(acc != NULL);
    for (int64_t i = 0; i < n; i++) acc[i] = (float)(i % 7) - 3.0f;
    ZT_OK(be->ops->dequantize(be, acc, ZS_DTYPE_FP32, 1, q, scales, n, block, bits));
    int64_t bad_acc = -1;
    for (int64_t i = 0; i < n && bad_acc < 0; i++) {
        const float want = isnan(scales[i / block]) ? from_bits(ZS_K_QUANT_NAN_BITS)
                                                    : ((float)(i % 7) - 3.0f) + y32[i];
        if (bits_of(acc[i]) != bits_of(want)) bad_acc = i;
    }
    ZT_CHECK_MSG(bad_acc < 0, "%s: accumulate element %lld is %.9g, want acc + x'", what,
                 (long long)bad_acc, bad_acc >= 0 ? acc[bad_acc] : 0.0);
    if (scales_out) memcpy(scales_out, scales, (size_t)nb * 4);
    free(acc);
    free(src);
    free(q);
    free(scales);
    free(y32);
    free(y16);
}

static void test_properties(void) {
    const int64_t n = 64 * 26 + 37; /* 26 whole blocks of 64 and a partial one */
    float *x = malloc(sizeof(float) * (size_t)n);
    ZT_REQUIRE(x != NULL);
    for (int sd = 0; sd < 3; sd++)
        for (int bits = 4; bits <= 8; bits += 4) {
            const zs_dtype d = dtypes[sd];
            const int fp16 = d == ZS_DTYPE_FP16;
            char what[96];
            /* Side by side: block k has magnitude 2^(e_k), alternating
             * large and small steps, so a neighbour's scale is off by
             * orders of magnitude; block 3 is zeros, block 4 is -0.0s,
             * block 5 one huge value among tiny ones; the last block is
             * partial. */
            for (int64_t i = 0; i < n; i++) {
                const int64_t b = i / 64;
                const int e = fp16 ? (int)((b * 7) % 24) - 12 : (int)((b * 37) % 200) - 100;
                x[i] = ldexpf(rnd_unit(), e);
                if (b == 3) x[i] = 0.0f;
                if (b == 4) x[i] = -0.0f;
                if (b == 5) x[i] = i % 64 == 17 ? (fp16 ? 60000.0f : 3e30f) : 1e-3f * rnd_unit();
            }
            snprintf(what, sizeof what, "magnitudes side by side, %s int%d", zs_dtype_name(d),
                     bits);
            float *clean_scales = malloc(sizeof(float) * 27);
            float *dirty_scales = malloc(sizeof(float) * 27);
            ZT_REQUIRE(clean_scales && dirty_scales);
            round_trip(what, x, d, n, 64, bits, clean_scales);
            /* Inf and NaN in blocks 2, 7 and 9; the others must come back
             * exactly as when quantized without them. */
            x[2 * 64 + 5] = INFINITY;
            x[7 * 64 + 63] = -INFINITY;
            x[9 * 64] = NAN;
            snprintf(what, sizeof what, "Inf and NaN, %s int%d", zs_dtype_name(d), bits);
            round_trip(what, x, d, n, 64, bits, dirty_scales);
            for (int b = 0; b < 27; b++) {
                const int spoiled = b == 2 || b == 7 || b == 9;
                ZT_CHECK_MSG(spoiled ? isnan(dirty_scales[b])
                                     : bits_of(dirty_scales[b]) == bits_of(clean_scales[b]),
                             "%s: block %d's scale %g (was %g)", what, b, dirty_scales[b],
                             clean_scales[b]);
            }
            free(clean_scales);
            free(dirty_scales);
            /* Random blocks of every size that leave a partial block. */
            for (int64_t block = 1; block <= 700; block = block * 3 + 1) {
                for (int64_t i = 0; i < n; i++)
                    x[i] = ldexpf(rnd_unit(),
                                  fp16 ? (int)(rnd() % 20) - 10 : (int)(rnd() % 80) - 40);
                snprintf(what, sizeof what, "random, block %lld, %s int%d", (long long)block,
                         zs_dtype_name(d), bits);
                round_trip(what, x, d, n, block, bits, NULL);
            }
            if (d == ZS_DTYPE_FP16) continue;
            /* Subnormal and underflowing scales, and FLT_MAX. */
            for (int64_t i = 0; i < n; i++) {
                const int64_t b = i / 64;
                x[i] = b % 3 == 0 ? ldexpf(rnd_unit(), -130 - (int)(b % 20))
                     : b % 3 == 1 ? ldexpf(rnd_unit(), -146)
                                  : (i % 64 == 0 ? FLT_MAX : rnd_unit() * 1e37f);
            }
            snprintf(what, sizeof what, "subnormal scales and FLT_MAX, %s int%d",
                     zs_dtype_name(d), bits);
            round_trip(what, x, d, n, 64, bits, NULL);
        }
    free(x);
}

/* Known bytes: the layout of int8 and int4 (low nibble first), an odd count
 * leaving the last high nibble 0, and the sizes. */
static void test_known_bytes(void) {
    const float x4[5] = {1, -1, 7, -7, 3}; /* amax 7: int4 scale 1 */
    uint8_t q[8];
    float s[2];
    memset(q, 0xee, sizeof q);
    ZT_OK(be->ops->quantize(be, q, s, x4, ZS_DTYPE_FP32, 5, 5, 4));
    ZT_CHECK(s[0] == 1.0f);
    ZT_CHECK_MSG(q[0] == 0xf1 && q[1] == 0x97 && q[2] == 0x03 && q[3] == 0xee,
                 "int4 bytes %02x %02x %02x %02x, want f1 97 03 and ee untouched", q[0], q[1], q[2],
                 q[3]);
    /* Odd blocks: block 1 of [1, -1, 7 | -7, 3, 0] starts in a high nibble. */
    const float x6[6] = {1, -1, 7, -7, 3, 0};
    memset(q, 0xee, sizeof q);
    ZT_OK(be->ops->quantize(be, q, s, x6, ZS_DTYPE_FP32, 6, 3, 4));
    ZT_CHECK(s[0] == 1.0f && s[1] == 1.0f);
    ZT_CHECK_MSG(q[0] == 0xf1 && q[1] == 0x97 && q[2] == 0x03 && q[3] == 0xee,
                 "int4 bytes (block 3) %02x %02x %02x", q[0], q[1], q[2]);
    const float x8[5] = {127, -127, 1, -1, 0};
    memset(q, 0xee, sizeof q);
    ZT_OK(be->ops->quantize(be, q, s, x8, ZS_DTYPE_FP32, 5, 8, 8));
    ZT_CHECK(s[0] == 1.0f);
    ZT_CHECK_MSG(q[0] == 0x7f && q[1] == 0x81 && q[2] == 0x01 && q[3] == 0xff && q[4] == 0x00 &&
                 q[5] == 0xee, "int8 bytes %02x %02x %02x %02x %02x", q[0], q[1], q[2], q[3], q[4]);
    /* Ties go to even: 2.5 and -0.5 with scale 1. */
    const float ties[4] = {2.5f, -0.5f, 127.0f, 1.5f};
    ZT_OK(be->ops->quantize(be, q, s, ties, ZS_DTYPE_FP32, 4, 4, 8));
    ZT_CHECK_MSG((int8_t)q[0] == 2 && (int8_t)q[1] == 0 && (int8_t)q[3] == 2,
                 "ties: %d %d %d", (int8_t)q[0], (int8_t)q[1], (int8_t)q[3]);
    float y[5];
    ZT_OK(be->ops->dequantize(be, y, ZS_DTYPE_FP32, 0, q, s, 4, 4, 8));
    ZT_CHECK(y[0] == 2.0f && bits_of(y[1]) == 0 && y[2] == 127.0f && y[3] == 2.0f);
}

static void test_arguments(void) {
    float x[4] = {0}, s[4];
    uint8_t q[4];
    ZT_FAILS_WITH(be->ops->quantize(be, q, s, x, ZS_DTYPE_FP32, 4, 0, 8), ZS_ERR_INVALID_ARGUMENT,
                  "block >= 1");
    ZT_FAILS_WITH(be->ops->quantize(be, q, s, x, ZS_DTYPE_FP32, 4, 2, 5), ZS_ERR_INVALID_ARGUMENT,
                  "bits 8, 4 or -4 (NF4)");
    ZT_FAILS_WITH(be->ops->quantize(be, q, s, x, (zs_dtype)7, 4, 2, 8), ZS_ERR_INVALID_ARGUMENT,
                  "dtype 7");
    ZT_FAILS_WITH(be->ops->quantize(be, q, s, x, ZS_DTYPE_FP32, -1, 2, 8), ZS_ERR_INVALID_ARGUMENT,
                  ">= 0");
    ZT_FAILS_WITH(be->ops->quantize(be, q, NULL, x, ZS_DTYPE_FP32, 4, 2, 8),
                  ZS_ERR_INVALID_ARGUMENT, "scales");
    ZT_FAILS_WITH(be->ops->dequantize(be, x, ZS_DTYPE_FP32, 1, q, s, 4, -3, 4),
                  ZS_ERR_INVALID_ARGUMENT, "dequantize-and-add");
    ZT_OK(be->ops->quantize(be, NULL, NULL, NULL, ZS_DTYPE_FP32, 0, 1, 4));
    ZT_OK(be->ops->dequantize(be, NULL, ZS_DTYPE_BF16, 0, NULL, NULL, 0, 1, 8));
    /* A block longer than the array is one block. */
    const float y[3] = {1, 2, -4};
    ZT_OK(be->ops->quantize(be, q, s, y, ZS_DTYPE_FP32, 3, INT64_MAX, 4));
    ZT_CHECK(bits_of(s[0]) == bits_of(4.0f / 7.0f));
}

int main(void) {
    omp_set_num_threads(1);
    zs__mem mem;
    memset(&mem, 0, sizeof mem);
    ZT_OK(zs__cpu_backend_create(&mem, &be));
    ZT_REQUIRE(be != NULL);
    test_elements();
    int tested = 0;
    for (int level = 0; level < ZS_CPU_ISA_COUNT; level++) {
        const char *name = zs__cpu_isa_name((zs__cpu_isa)level);
        if (!zs__cpu_isa_supported((zs__cpu_isa)level)) {
            printf("level %s: not supported by this CPU, skipped\n", name);
            continue;
        }
        ZT_OK(zs__cpu_set_isa((zs__cpu_isa)level));
        test_against_reference(name);
        test_known_bytes();
        tested++;
    }
    ZT_CHECK(tested >= 1);
    ZT_OK(zs__cpu_set_isa(ZS_CPU_ISA_AUTO));
    test_properties();
    test_arguments();
    zs__backend_destroy(be);
    return zt_finish("test_quantize");
}
