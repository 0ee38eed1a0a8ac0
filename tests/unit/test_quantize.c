/* Block quantization (kernels/quantize.h) and the CPU backend's quantize and
 * dequantize ops.
 *
 * 1. The element math: rounding to nearest even against nearbyintf, the
 *    int4 nibbles on known bytes, the sizes.
 * 2. A scalar reference written here independently of the kernels (fabsf
 *    and isfinite for the block maximum, nearbyintf after the division,
 *    clamping after rounding, nibbles by shifts) against the backend at
 *    every instruction-set level this machine supports, bit for bit: every
 *    input dtype, int8, int4 and NF4, blocks from 1 to more than a chunk
 *    and a task, counts that leave a partial block, odd counts, misaligned
 *    pointers, every output dtype written and added, 1 and 2 threads; guard
 *    bytes after every output stay untouched.
 * 3. Properties: blocks of very different magnitude side by side (a scale
 *    taken from the wrong block breaks the bound), zeros, one huge value
 *    among tiny ones, FLT_MAX, Inf and NaN (NaN scale, NaN out, the other
 *    blocks unaffected), subnormal and underflowing scales, ties, and the
 *    error bound of kernels/quantize.h plus the rounding to the output
 *    dtype, derived below and asserted for every element.
 * 4. NF4 (QLoRA's 4-bit NormalFloat): the 16 levels against the paper's
 *    table, the midpoints as bitsandbytes writes them (the reference's,
 *    derived here from the levels), the index of any float; at every level,
 *    exact midpoints (the lower level) and the floats either side at
 *    amaxes that are and are not powers of two, the levels times a scale
 *    (back bit for bit), zeros, blocks of one repeated value, Inf and NaN,
 *    blocks whose 1 / amax overflows, known bytes; each against the
 *    reference in every dtype.
 * 5. A part of a quantized array from a block boundary is itself one
 *    (every format).
 * 6. Argument checks. */
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

/* The formats: int8, int4 and NF4 (bits -4). */
static const int formats[3] = {8, 4, ZS_K_QUANT_NF4};
static const char *fmt_name(int bits) { return bits == 8 ? "int8" : bits == 4 ? "int4" : "nf4"; }

/* ------------------------------------------------------------- reference */

/* NF4: the QLoRA paper's 16 levels as bitsandbytes defines them (its
 * dDequantizeNF4 table), typed here, not taken from kernels/quantize.h. */
static const float nf4_table[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};

/* The 15 midpoints the levels are chosen by: the double halfway between two
 * float levels, ((double)L[i] + (double)L[i + 1]) / 2 (exact), as
 * bitsandbytes writes it in its source: the shortest decimal that reads
 * back as that double (Python's repr), which the compiler then rounds to
 * float. Four of these doubles (0, 8, 12, 14) lie exactly halfway between
 * two floats; rounding the double itself to float (ties to even) picks the
 * other neighbour than rounding its shortest decimal does, so the shortest
 * decimal is what makes these bitsandbytes' constants (test_nf4_elements
 * checks that both readings agree except there). */
static float nf4_mid[15];

static double nf4_exact_mid(int i) { return ((double)nf4_table[i] + (double)nf4_table[i + 1]) / 2; }

static float shortest_decimal_as_float(double d) {
    char buf[40];
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, d);
        if (strtod(buf, NULL) == d) break;
    }
    return strtof(buf, NULL);
}

static void nf4_init(void) {
    for (int i = 0; i < 15; i++) nf4_mid[i] = shortest_decimal_as_float(nf4_exact_mid(i));
}

/* The index of the level nearest n: the number of midpoints strictly below
 * n (a value on a midpoint takes the lower level; a NaN exceeds none). */
static int ref_nf4_index(float n) {
    int index = 0;
    for (int i = 0; i < 15; i++) index += nf4_mid[i] < n;
    return index;
}

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

static int ref_qmax(int bits) { return bits == 8 ? 127 : bits == 4 ? 7 : 1; }

/* The integer of element i of a quantized array, by shifts (NF4: the
 * level's index - 8). */
static int ref_int(const uint8_t *q, int64_t i, int bits) {
    if (bits == 8) return (int)(int8_t)q[i];
    int nibble = (q[i / 2] >> (4 * (i % 2))) & 0xf;
    return nibble >= 8 ? nibble - 16 : nibble;
}

static void ref_quantize(uint8_t *q, float *scales, const void *src, zs_dtype d, int64_t n,
                         int64_t block, int bits) {
    const int qmax = ref_qmax(bits);
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
        const float nan = from_bits(0x7fc00000u);
        const float scale = !finite ? nan : bits == ZS_K_QUANT_NF4 ? amax : amax / (float)qmax;
        scales[b] = scale;
        for (int64_t i = begin; i < end; i++) {
            int v = 0;
            if (bits == ZS_K_QUANT_NF4) {
                /* Zero and non-finite blocks store level 0 (index 7); where
                 * 1 / scale overflows (amax < 2^-128) x / scale instead. */
                const float x = get(src, d, i), inverse = 1.0f / scale;
                const float n_x = !(finite && scale > 0.0f) ? 0.0f
                                  : isinf(inverse)           ? x / scale
                                                             : x * inverse;
                v = ref_nf4_index(n_x) - 8;
            } else if (finite && scale > 0.0f) {
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
        const int v = ref_int(q, i, bits);
        float y = (bits == ZS_K_QUANT_NF4 ? nf4_table[v + 8] : (float)v) * scale;
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

/* For NF4 in place of the integer ties: +-mag (mag, a power of two, is then
 * the block's amax and 1 / amax exact), or mag times a midpoint or a
 * neighbouring float of one, so that x * (1 / amax) lands exactly on a
 * midpoint or next to it. */
static float nf4_tie(float mag) {
    const uint64_t r = rnd();
    if (r % 4 == 0) return r % 8 ? mag : -mag;
    const float m = nf4_mid[(r >> 8) % 15];
    const int side = (int)((r >> 16) % 3);
    return mag * (side == 0 ? m : nextafterf(m, side == 1 ? 2.0f : -2.0f));
}

/* n values for a case: random magnitudes per block (so neighbouring blocks
 * differ by up to 2^30), a few exact ties (NF4: midpoints, nf4_tie), zeros,
 * rarely an Inf or a NaN; within fp16's range when the dtype is fp16. */
static void fill(void *src, zs_dtype d, int64_t n, int64_t block, int bits) {
    const int fp16 = d == ZS_DTYPE_FP16;
    float mag = 1.0f;
    for (int64_t i = 0; i < n; i++) {
        if (i % block == 0) mag = ldexpf(1.0f, (int)(rnd() % (fp16 ? 24 : 60)) - (fp16 ? 14 : 30));
        float x;
        switch (rnd() % 16) {
        case 0: x = 0.0f; break;
        case 1: /* ties */
            if (bits == ZS_K_QUANT_NF4) x = nf4_tie(mag);
            else x = mag * (float)((int)(rnd() % 255) - 127) * 0.5f;
            break;
        case 3: /* NF4: twice as many */
            x = bits == ZS_K_QUANT_NF4 ? nf4_tie(mag) : mag * rnd_unit();
            break;
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

/* One quantize and every dequantize of the n values src (of dtype sd)
 * against the reference, with the quantized values at byte offset `mis`
 * from an 8-aligned address (the pointers need no alignment). */
static void compare_src(tally *t, const char *level, const void *src, zs_dtype sd, int64_t n,
                        int64_t block, int bits, int mis) {
    const int64_t vbytes = ref_value_bytes(n, bits), nscales = zs_k_quant_blocks(n, block);
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
        ZT_CHECK_MSG(0, "%s: quantize %s n=%lld block=%lld %s: %s %lld differs (got 0x%x, "
                     "reference 0x%x)", level, zs_dtype_name(sd), (long long)n, (long long)block,
                     fmt_name(bits), at < vbytes ? "value byte" : "scale",
                     (long long)(at < vbytes ? at : at - vbytes),
                     at < vbytes ? q[at] : bits_of(scales[at - vbytes]),
                     at < vbytes ? rq[at] : bits_of(rs[at - vbytes]));
    }
    ZT_CHECK_MSG(guard_intact(q, (size_t)vbytes) && guard_intact(scales, (size_t)nscales * 4),
                 "%s: quantize n=%lld block=%lld %s wrote past its outputs", level,
                 (long long)n, (long long)block, fmt_name(bits));
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
                ZT_CHECK_MSG(0, "%s: dequantize%s %s -> %s n=%lld block=%lld %s: element "
                             "%lld is %.9g, reference %.9g", level, acc ? "-add" : "",
                             zs_dtype_name(sd), zs_dtype_name(d), (long long)n,
                             (long long)block, fmt_name(bits), (long long)i, get(out, d, i),
                             get(ref, d, i));
            }
            ZT_CHECK_MSG(guard_intact(out, dbytes), "%s: dequantize n=%lld wrote past dst",
                         level, (long long)n);
            free(out_base);
            free(ref);
        }
    }
    free(q_base);
    free(rq);
    free(scales);
    free(rs);
}

/* compare_src on random values (fill). */
static void compare_case(tally *t, const char *level, zs_dtype sd, int64_t n, int64_t block,
                         int bits, int mis) {
    void *src = guarded((size_t)n * zs_dtype_size(sd));
    fill(src, sd, n, block, bits);
    compare_src(t, level, src, sd, n, block, bits, mis);
    free(src);
}

static void test_against_reference(const char *level) {
    static const int64_t blocks[] = {1, 2, 3, 7, 32, 33, 64, 255, 256, 511, 512, 513, 1000, 4099};
    tally t = {0, 0};
    for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
        const int64_t block = blocks[bi];
        const int64_t counts[] = {0, 1, 2, 5, block - 1 > 0 ? block - 1 : 3, block, block + 1,
                                  3 * block + 1, 1537 + (int64_t)(rnd() % 977)};
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
            for (int sd = 0; sd < 3; sd++)
                for (int f = 0; f < 3; f++)
                    compare_case(&t, level, dtypes[sd], counts[ci], block, formats[f],
                                 (int)(rnd() % 8));
    }
    /* Blocks longer than a chunk (two passes per block), and more than one
     * OpenMP task with 1 and 2 threads: whole blocks per task, an even
     * number of elements per int4 and NF4 task. */
    static const int64_t big[][2] = {{200003, 40001}, {140001, 600}, {131072 + 77, 255},
                                     {100000, 100000}, {70001, 1}};
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        for (size_t k = 0; k < sizeof big / sizeof big[0]; k++)
            for (int f = 0; f < 3; f++) /* NF4 splits as int4: 2 threads suffice */
                if (formats[f] != ZS_K_QUANT_NF4 || threads == 2)
                    compare_case(&t, level, dtypes[k % 3], big[k][0], big[k][1], formats[f],
                                 (int)k);
    }
    omp_set_num_threads(1);
    printf("level %s: %ld quantize/dequantize calls, %ld differ from the reference\n", level,
           t.calls, t.mismatches);
}

/* --------------------------------------------------------- properties */

/* Half the widest gap between NF4 levels: 0.1519, the gap between -1 and
 * -0.6961928 (0.3038; the widest positive one, 0.7229568 .. 1, is
 * 0.2770). */
static double nf4_half_gap(void) {
    double widest = 0;
    for (int i = 0; i < 15; i++)
        widest = fmax(widest, (double)nf4_table[i + 1] - (double)nf4_table[i]);
    return widest / 2;
}

/* The bound of kernels/quantize.h before any output rounding. NF4 (scale =
 * amax): the nearest level is at most half the widest gap from x / amax,
 * and the fp32 roundings (1 / amax, the product n, the float midpoints,
 * the product level * amax) add a few 2^-24 of amax, up to 2^-21 where
 * 1 / amax is subnormal (amax >= 2^126); 2^-16 covers them all. 2^-149
 * covers a subnormal product level * amax. The bound is attained: a value
 * just below the first midpoint, -0.848 * amax, goes to -amax
 * (test_nf4_cases). */
static double bound_fp32(float scale, int bits) {
    if (bits == ZS_K_QUANT_NF4) return (double)scale * (nf4_half_gap() + 0x1p-16) + 0x1p-149;
    const int qmax = ref_qmax(bits);
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
    const int qmax = ref_qmax(bits);
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
        ZT_CHECK_MSG(bits_of(scales[b]) == bits_of(bits == ZS_K_QUANT_NF4 ? amax
                                                                            : amax / (float)qmax),
                     "%s: block %lld: "
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
        for (int f = 0; f < 3; f++) {
            const int bits = formats[f];
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
            snprintf(what, sizeof what, "magnitudes side by side, %s %s", zs_dtype_name(d),
                     fmt_name(bits));
            float *clean_scales = malloc(sizeof(float) * 27);
            float *dirty_scales = malloc(sizeof(float) * 27);
            ZT_REQUIRE(clean_scales && dirty_scales);
            round_trip(what, x, d, n, 64, bits, clean_scales);
            /* Inf and NaN in blocks 2, 7 and 9; the others must come back
             * exactly as when quantized without them. */
            x[2 * 64 + 5] = INFINITY;
            x[7 * 64 + 63] = -INFINITY;
            x[9 * 64] = NAN;
            snprintf(what, sizeof what, "Inf and NaN, %s %s", zs_dtype_name(d), fmt_name(bits));
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
                snprintf(what, sizeof what, "random, block %lld, %s %s", (long long)block,
                         zs_dtype_name(d), fmt_name(bits));
                round_trip(what, x, d, n, block, bits, NULL);
            }
            if (d == ZS_DTYPE_FP16) continue;
            /* Subnormal and underflowing scales, and FLT_MAX. NF4's scale is
             * amax itself: subnormal values in blocks of amax >= 2^-128
             * (1 / amax finite), 2^-127 pinning it for the tiniest;
             * blocks of amax below that: test_nf4_cases. */
            const int nf4 = bits == ZS_K_QUANT_NF4;
            for (int64_t i = 0; i < n; i++) {
                const int64_t b = i / 64;
                const int e = nf4 ? -120 - (int)(b % 7) : -130 - (int)(b % 20);
                x[i] = b % 3 == 0 ? ldexpf(rnd_unit(), e)
                     : b % 3 == 1 ? (nf4 && i % 64 == 9 ? 0x1p-127f : ldexpf(rnd_unit(), -146))
                                  : (i % 64 == 0 ? FLT_MAX : rnd_unit() * 1e37f);
            }
            snprintf(what, sizeof what, "subnormal scales and FLT_MAX, %s %s",
                     zs_dtype_name(d), fmt_name(bits));
            round_trip(what, x, d, n, 64, bits, NULL);
        }
    free(x);
}

/* ------------------------------------------------------------------ NF4 */

/* kernels/quantize.h's NF4 element functions against the table and the
 * reference: the levels, the midpoints, the index of any float, the
 * format's sizes and scale, the value of every stored integer. */
static void test_nf4_elements(void) {
    /* The levels: bitsandbytes' table, increasing: 7 negative, an exact +0
     * (bits 0), 8 positive, -1 and 1 at the ends. */
    int negative = 0, zeros = 0, positive = 0;
    for (int i = 0; i < 16; i++) {
        const float level = zs_k_nf4_level(i);
        ZT_CHECK_MSG(bits_of(level) == bits_of(nf4_table[i]), "zs_k_nf4_level(%d) = %.9g "
                     "(0x%08x), want %.9g (0x%08x)", i, level, bits_of(level), nf4_table[i],
                     bits_of(nf4_table[i]));
        negative += level < 0.0f;
        zeros += bits_of(level) == 0;
        positive += level > 0.0f;
        if (i > 0) ZT_CHECK(nf4_table[i - 1] < nf4_table[i]);
    }
    ZT_CHECK_MSG(negative == 7 && zeros == 1 && positive == 8, "levels: %d negative, %d +0, %d "
                 "positive; want 7, 1, 8", negative, zeros, positive);
    ZT_CHECK(nf4_table[0] == -1.0f && bits_of(nf4_table[7]) == 0 && nf4_table[15] == 1.0f);
    ZT_EQ_INT(ZS_K_NF4_ZERO_INDEX, 7);

    /* The midpoints: each one of the two floats around the exact double
     * midpoint, the nearer one unless the double is a tie between them;
     * rounding the double itself (ties to even) gives the other float at
     * exactly those ties, 0, 8, 12 and 14. */
    int ties = 0, tie_at[15] = {0};
    for (int i = 0; i < 15; i++) {
        const double exact = nf4_exact_mid(i);
        float lo = (float)exact;
        if ((double)lo > exact) lo = nextafterf(lo, -INFINITY);
        const float hi = nextafterf(lo, INFINITY);
        const double below = exact - (double)lo, above = (double)hi - exact;
        const float nearest = below < above ? lo : hi;
        const int tie = below == above;
        ZT_CHECK_MSG(tie ? bits_of(nf4_mid[i]) == bits_of(lo) || bits_of(nf4_mid[i]) == bits_of(hi)
                         : bits_of(nf4_mid[i]) == bits_of(nearest),
                     "midpoint %d: %.9g is not the float nearest %.17g", i, nf4_mid[i], exact);
        ZT_CHECK(nf4_table[i] < nf4_mid[i] && nf4_mid[i] < nf4_table[i + 1]);
        if (bits_of((float)exact) != bits_of(nf4_mid[i])) {
            ZT_CHECK_MSG(tie, "midpoint %d: the double rounded to float differs without a tie", i);
            if (ties < 15) tie_at[ties] = i;
            ties++;
        }
    }
    ZT_CHECK_MSG(ties == 4 && tie_at[0] == 0 && tie_at[1] == 8 && tie_at[2] == 12 &&
                 tie_at[3] == 14, "midpoints where the shortest decimal rounds otherwise than "
                 "the double: %d of them (want 0, 8, 12, 14)", ties);

    /* The reference's own rule on the midpoints: on one, the lower level;
     * one float above, the upper. */
    for (int i = 0; i < 15; i++) {
        ZT_EQ_INT(ref_nf4_index(nf4_mid[i]), i);
        ZT_EQ_INT(ref_nf4_index(nextafterf(nf4_mid[i], INFINITY)), i + 1);
        ZT_EQ_INT(ref_nf4_index(nextafterf(nf4_mid[i], -INFINITY)), i);
    }

    /* The error bound: half the widest gap, -1 .. -0.6961928, plus the
     * fp32 roundings: 0.1519 of amax (not 0.1385, half of 0.7229568 .. 1). */
    const double half_gap = nf4_half_gap();
    ZT_CHECK_MSG(half_gap > 0.1519 && half_gap + 0x1p-16 <= 0.1520, "half the widest NF4 gap is "
                 "%.9g", half_gap);

    /* zs_k_nf4_index against the reference: every midpoint and the floats
     * two either side, every level, +-0, +-1 and the floats beyond (n may
     * exceed 1 by a rounding), +-Inf, NaN, and random n. */
    int bad = 0;
    float first_bad = 0.0f;
    float tries[15 * 5 + 16 + 9];
    int count = 0;
    for (int i = 0; i < 15; i++) {
        const float m = nf4_mid[i];
        const float up = nextafterf(m, INFINITY), down = nextafterf(m, -INFINITY);
        tries[count++] = m;
        tries[count++] = up;
        tries[count++] = nextafterf(up, INFINITY);
        tries[count++] = down;
        tries[count++] = nextafterf(down, -INFINITY);
    }
    for (int i = 0; i < 16; i++) tries[count++] = nf4_table[i];
    const float special[9] = {-0.0f, 1.0f, -1.0f, nextafterf(1.0f, 2.0f), nextafterf(-1.0f, -2.0f),
                              INFINITY, -INFINITY, NAN, FLT_MIN};
    for (int i = 0; i < 9; i++) tries[count++] = special[i];
    for (int k = 0; k < count + 200000; k++) {
        const float n = k < count ? tries[k] : rnd_unit() * (k % 3 ? 1.0f : 0.1f);
        if (zs_k_nf4_index(n) != ref_nf4_index(n) && bad++ == 0) first_bad = n;
    }
    ZT_CHECK_MSG(bad == 0, "zs_k_nf4_index differs from the reference on %d values, first "
                 "%.9g (0x%08x): %d, want %d", bad, first_bad, bits_of(first_bad),
                 zs_k_nf4_index(first_bad), ref_nf4_index(first_bad));

    /* The format: four bits a value stored as int4 nibbles, qmax 1 (the
     * scale is amax), the scale of special blocks, the integer stored for
     * zero and non-finite blocks (level 0: index 7, nibble value -1), and
     * the value of every stored integer, written and added. */
    ZT_CHECK(zs_k_quant_bits_valid(ZS_K_QUANT_NF4) && zs_k_quant_nibbles(ZS_K_QUANT_NF4));
    ZT_EQ_INT(zs_k_quant_qmax(ZS_K_QUANT_NF4), 1);
    ZT_EQ_INT(zs_k_quant_value_bytes(5, ZS_K_QUANT_NF4), 3);
    ZT_EQ_INT(zs_k_quant_value_bytes(64, ZS_K_QUANT_NF4), 32);
    ZT_EQ_INT(zs__quant_bytes(1001, 64, ZS_K_QUANT_NF4), 501 + 16 * 4);
    ZT_CHECK(bits_of(zs_k_quant_scale(bits_of(3.5f), ZS_K_QUANT_NF4)) == bits_of(3.5f));
    ZT_CHECK(bits_of(zs_k_quant_scale(0, ZS_K_QUANT_NF4)) == 0);
    ZT_EQ_U64(bits_of(zs_k_quant_scale(0x7f800000u, ZS_K_QUANT_NF4)), ZS_K_QUANT_NAN_BITS);
    ZT_EQ_INT(zs_k_nf4_value(0.0f, 0.0f), -1);
    ZT_EQ_INT(zs_k_nf4_value(0.0f, from_bits(ZS_K_QUANT_NAN_BITS)), -1);
    ZT_EQ_INT(zs_k_nf4_value(-3.0f, 3.0f), -8);
    ZT_EQ_INT(zs_k_nf4_value(3.0f, 3.0f), 7);
    for (int v = -8; v <= 7; v++) {
        const float want = nf4_table[v + 8] * 2.5f, acc = 0.25f + want;
        ZT_CHECK_MSG(bits_of(zs_k_dequant_code(v, 2.5f, ZS_K_QUANT_NF4)) == bits_of(want) &&
                     bits_of(zs_k_dequant_code_add(0.25f, v, 2.5f, ZS_K_QUANT_NF4)) ==
                         bits_of(acc) &&
                     bits_of(zs_k_dequant_code(v, from_bits(ZS_K_QUANT_NAN_BITS),
                                               ZS_K_QUANT_NF4)) == ZS_K_QUANT_NAN_BITS &&
                     bits_of(zs_k_dequant_code_add(from_bits(0xffc0abcdu), v, 2.5f,
                                                   ZS_K_QUANT_NF4)) == ZS_K_QUANT_NAN_BITS,
                     "the dequantized value of NF4 integer %d", v);
    }
}

/* NF4 through the backend: x[0..n) (fp32) quantized in blocks of `block`,
 * the indices (the stored integer + 8), the scales and the values
 * dequantized into fp32. */
static void nf4_backend(const float *x, int64_t n, int64_t block, int *index, float *scales,
                        float *y) {
    uint8_t *q = malloc((size_t)ref_value_bytes(n, ZS_K_QUANT_NF4) + 1);
    ZT_REQUIRE(q != NULL);
    ZT_OK(be->ops->quantize(be, q, scales, x, ZS_DTYPE_FP32, n, block, ZS_K_QUANT_NF4));
    ZT_OK(be->ops->dequantize(be, y, ZS_DTYPE_FP32, 0, q, scales, n, block, ZS_K_QUANT_NF4));
    for (int64_t i = 0; i < n; i++) index[i] = ref_int(q, i, ZS_K_QUANT_NF4) + 8;
    free(q);
}

/* compare_src for fp32 values x, converted to every source dtype. */
static void nf4_compare(tally *t, const char *level, const float *x, int64_t n, int64_t block) {
    void *src = malloc((size_t)n * 4 + 4);
    ZT_REQUIRE(src != NULL);
    for (int sd = 0; sd < 3; sd++) {
        for (int64_t i = 0; i < n; i++) put(src, dtypes[sd], i, x[i]);
        compare_src(t, level, src, dtypes[sd], n, block, ZS_K_QUANT_NF4, (int)(rnd() % 8));
    }
    free(src);
}

/* The cases of NF4 at one SIMD level, each checked for known indices and
 * values, and against the reference in every source and output dtype. */
static void test_nf4_cases(const char *level) {
    enum { B = 64, MAXN = 8 * B };
    float x[MAXN], y[MAXN], s[MAXN], x2[MAXN], y2[MAXN], s2[MAXN];
    int index[MAXN], index2[MAXN];
    tally t = {0, 0};

    /* Exact midpoints: amax a power of two (so 1 / amax is exact), x the
     * midpoint times amax and the floats either side of it. On the
     * midpoint: the lower level; one float above: the upper. */
    static const int exps[5] = {0, -20, 7, 100, -100};
    int64_t n = 0;
    for (int e = 0; e < 5; e++) {
        const float scale = ldexpf(1.0f, exps[e]);
        x[n] = e % 2 ? -scale : scale; /* the amax */
        for (int k = 0; k < 15; k++) {
            x[n + 1 + 3 * k] = nf4_mid[k] * scale;
            x[n + 2 + 3 * k] = nextafterf(nf4_mid[k], INFINITY) * scale;
            x[n + 3 + 3 * k] = nextafterf(nf4_mid[k], -INFINITY) * scale;
        }
        for (int64_t i = n + 46; i < n + B; i++) x[i] = 0.0f;
        n += B;
    }
    nf4_backend(x, n, B, index, s, y);
    for (int e = 0; e < 5; e++) {
        const int64_t b0 = (int64_t)e * B;
        ZT_CHECK(s[e] == ldexpf(1.0f, exps[e]) && index[b0] == (e % 2 ? 0 : 15));
        for (int k = 0; k < 15; k++) {
            const int *got = index + b0 + 1 + 3 * k;
            ZT_CHECK_MSG(got[0] == k && got[1] == k + 1 && got[2] == k, "%s: scale 2^%d, "
                         "midpoint %d (%.9g): indices %d (on it), %d (above), %d (below); want "
                         "%d, %d, %d", level, exps[e], k, nf4_mid[k], got[0], got[1], got[2], k,
                         k + 1, k);
            for (int j = 0; j < 3; j++)
                ZT_CHECK(bits_of(y[b0 + 1 + 3 * k + j]) == bits_of(nf4_table[got[j]] * s[e]));
        }
        /* On the first midpoint: -amax, an error of half the widest gap. */
        const double err = fabs((double)y[b0 + 1] - (double)x[b0 + 1]);
        ZT_CHECK_MSG(err > 0.1519 * s[e] && err <= bound_fp32(s[e], ZS_K_QUANT_NF4),
                     "%s: the first midpoint times 2^%d came back %.9g off", level, exps[e], err);
    }
    nf4_compare(&t, level, x, n, B);

    /* Midpoints at amaxes that are not powers of two: x found (near
     * midpoint * amax) such that x * (1 / amax) is the midpoint exactly. */
    static const float amaxes[5] = {3.0f, 0.7f, 1e-3f, 12345.678f, -0.1f};
    int found = 0;
    for (int a = 0; a < 5; a++) {
        const float amax = amaxes[a], r = 1.0f / fabsf(amax);
        int64_t m = 1;
        x[0] = amax;
        for (int k = 0; k < 15; k++) {
            float c = (float)((double)nf4_mid[k] / (double)r);
            for (int step = 0; step < 16 && c * r != nf4_mid[k]; step++)
                c = nextafterf(c, c * r < nf4_mid[k] ? INFINITY : -INFINITY);
            if (c * r != nf4_mid[k]) continue;
            found++;
            x[m++] = c;
            x[m++] = nextafterf(c, INFINITY);
            x[m++] = nextafterf(c, -INFINITY);
        }
        nf4_backend(x, m, m, index, s, y);
        ZT_CHECK(bits_of(s[0]) == bits_of(fabsf(amax)));
        for (int64_t i = 1; i < m; i += 3)
            ZT_CHECK_MSG(index[i] == ref_nf4_index(x[i] * r) && x[i] * r == nf4_mid[index[i]],
                         "%s: amax %.9g: %.9g * (1 / amax) is a midpoint; index %d, want the "
                         "lower level %d", level, amax, x[i], index[i], ref_nf4_index(x[i] * r));
        nf4_compare(&t, level, x, m, m);
    }
    ZT_CHECK_MSG(found >= 30, "%s: only %d exact midpoints found at the amaxes that are not "
                 "powers of two", level, found);

    /* The levels times a scale: amax is the scale (levels -1 and 1), every
     * value maps to its own level and comes back bit for bit. */
    static const float scales[7] = {1.0f, 0.5f, 3.0f, 1e-3f, 7.77e20f, 1e-38f, FLT_MAX};
    for (int c = 0; c < 7; c++)
        for (int i = 0; i < 16; i++) x[16 * c + i] = nf4_table[i] * scales[c];
    nf4_backend(x, 16 * 7, 16, index, s, y);
    for (int64_t i = 0; i < 16 * 7; i++)
        ZT_CHECK_MSG(index[i] == i % 16 && bits_of(y[i]) == bits_of(x[i]), "%s: level %d times "
                     "%.9g: index %d, value %.9g; want %d and %.9g", level, (int)(i % 16),
                     scales[i / 16], index[i], y[i], (int)(i % 16), x[i]);
    nf4_compare(&t, level, x, 16 * 7, 16);

    /* Zeros (+0 and -0 mixed, and a short last block of them): scale 0,
     * level 0 (index 7) stored, +0 back. */
    for (int64_t i = 0; i < B + 13; i++) x[i] = i % 3 ? 0.0f : -0.0f;
    nf4_backend(x, B + 13, B, index, s, y);
    for (int64_t i = 0; i < B + 13; i++)
        ZT_CHECK_MSG(index[i] == 7 && bits_of(y[i]) == 0, "%s: zero %lld: index %d, value "
                     "0x%08x", level, (long long)i, index[i], bits_of(y[i]));
    ZT_CHECK(bits_of(s[0]) == 0 && bits_of(s[1]) == 0);
    nf4_compare(&t, level, x, B + 13, B);

    /* A block of one repeated value: x * (1 / x) is 1 or just below (all
     * the same above the last midpoint), so level 1 or -1 and x itself
     * back; also where 1 / x overflows (a subnormal x). */
    static const float reps[12] = {1.0f, -1.0f, 0.1f, -0.1f, 3.3f, -7.77f, 1e-20f, -123456.7f,
                                   FLT_MAX, -FLT_MIN, 0x1p-140f, -0x1p-149f};
    for (int c = 0; c < 12; c++)
        for (int i = 0; i < 40; i++) x[40 * c + i] = reps[c];
    nf4_backend(x, 40 * 12, 40, index, s, y);
    for (int64_t i = 0; i < 40 * 12; i++)
        ZT_CHECK_MSG(index[i] == (x[i] > 0 ? 15 : 0) && bits_of(y[i]) == bits_of(x[i]), "%s: "
                     "a block of %.9g: index %d, value %.9g", level, x[i], index[i], y[i]);
    nf4_compare(&t, level, x, 40 * 12, 40);

    /* Inf and NaN in blocks 1, 3 and 5 of 7 and a short one: those blocks
     * get the NaN scale, level 0 and the NaN back; the others exactly what
     * they get without them. */
    n = 7 * B + 21;
    for (int64_t i = 0; i < n; i++) x[i] = x2[i] = ldexpf(rnd_unit(), (int)(i / B) * 5 - 15);
    x2[B + 17] = INFINITY;
    x2[3 * B] = from_bits(0xffc01234u); /* a NaN with a sign and a payload */
    x2[5 * B + 63] = -INFINITY;
    x2[7 * B + 20] = NAN;
    nf4_backend(x, n, B, index, s, y);
    nf4_backend(x2, n, B, index2, s2, y2);
    for (int64_t b = 0; b < 8; b++) {
        const int spoiled = b == 1 || b == 3 || b == 5 || b == 7;
        ZT_CHECK_MSG(spoiled ? bits_of(s2[b]) == ZS_K_QUANT_NAN_BITS
                             : bits_of(s2[b]) == bits_of(s[b]),
                     "%s: Inf/NaN: block %lld's scale 0x%08x", level, (long long)b,
                     bits_of(s2[b]));
        for (int64_t i = b * B; i < n && i < (b + 1) * B; i++)
            ZT_CHECK_MSG(spoiled ? index2[i] == 7 && bits_of(y2[i]) == ZS_K_QUANT_NAN_BITS
                                 : index2[i] == index[i] && bits_of(y2[i]) == bits_of(y[i]),
                         "%s: Inf/NaN: element %lld: index %d, value 0x%08x", level, (long long)i,
                         index2[i], bits_of(y2[i]));
    }
    nf4_compare(&t, level, x2, n, B);

    /* The documented bound where 1 / amax overflows (amax < 2^-128, a
     * subnormal block): a 0 among them, small values of either sign. */
    const float tiny[6] = {0.0f, 0x1p-140f, -0x1p-143f, 0x1p-141f, -0.0f, -0x1p-146f};
    nf4_backend(tiny, 6, 6, index, s, y);
    int beyond = 0, at = 0;
    for (int i = 5; i >= 0; i--)
        if (!(fabs((double)y[i] - (double)tiny[i]) <= bound_fp32(s[0], ZS_K_QUANT_NF4))) {
            beyond++;
            at = i;
        }
    ZT_CHECK_MSG(beyond == 0, "%s: a block of amax %.9g (1 / amax = %g): %d of 6 values beyond "
                 "the bound %.3g, first x = %.9g, which came back as %.9g (index %d)", level,
                 s[0], 1.0f / s[0], beyond, bound_fp32(s[0], ZS_K_QUANT_NF4), tiny[at], y[at],
                 index[at]);
    nf4_compare(&t, level, tiny, 6, 6);

    printf("level %s: nf4 cases: %ld quantize/dequantize calls, %ld differ from the reference\n",
           level, t.calls, t.mismatches);
}

/* A part of a quantized array that starts on a block boundary (an even
 * element for the nibble formats) is itself a quantized array: its bytes
 * and scales are a slice of the whole array's, and dequantizing that slice
 * gives the slice of the whole dequantized array. Every format. */
static void test_parts(const char *level) {
    const int64_t n = 64 * 12 + 37;
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4), *yp = malloc((size_t)n * 4);
    float *s = malloc((size_t)n * 4), *sp = malloc((size_t)n * 4);
    uint8_t *q = malloc((size_t)n), *qp = malloc((size_t)n);
    ZT_REQUIRE(x && y && yp && s && sp && q && qp);
    static const int64_t blocks[3] = {64, 33, 7};
    int parts = 0;
    for (int f = 0; f < 3; f++)
        for (int k = 0; k < 3; k++) {
            const int bits = formats[f];
            const int64_t block = blocks[k], nb = zs_k_quant_blocks(n, block);
            fill(x, ZS_DTYPE_FP32, n, block, bits);
            ZT_OK(be->ops->quantize(be, q, s, x, ZS_DTYPE_FP32, n, block, bits));
            ZT_OK(be->ops->dequantize(be, y, ZS_DTYPE_FP32, 0, q, s, n, block, bits));
            for (int64_t b0 = 1; b0 < nb; b0 += 1 + b0 / 3) {
                const int64_t first = b0 * block;
                if (bits != 8 && first % 2) continue;
                const int64_t ends[3] = {b0 + 1, (b0 + nb + 1) / 2, nb};
                for (int e = 0; e < 3; e++) {
                    const int64_t last = ends[e] * block < n ? ends[e] * block : n;
                    if (last <= first || (bits != 8 && last % 2 && last != n)) continue;
                    const int64_t m = last - first, vb = ref_value_bytes(m, bits);
                    const uint8_t *qs = q + ref_value_bytes(first, bits);
                    parts++;
                    ZT_OK(be->ops->dequantize(be, yp, ZS_DTYPE_FP32, 0, qs, s + b0, m, block,
                                              bits));
                    ZT_OK(be->ops->quantize(be, qp, sp, x + first, ZS_DTYPE_FP32, m, block,
                                            bits));
                    ZT_CHECK_MSG(memcmp(yp, y + first, (size_t)m * 4) == 0 &&
                                     memcmp(qp, qs, (size_t)vb) == 0 &&
                                     memcmp(sp, s + b0, 4 * (size_t)zs_k_quant_blocks(m, block)) ==
                                         0,
                                 "%s: %s, block %lld: the part [%lld, %lld) is not a slice of "
                                 "the whole", level, fmt_name(bits), (long long)block,
                                 (long long)first, (long long)last);
                }
            }
        }
    ZT_CHECK(parts > 30);
    free(x);
    free(y);
    free(yp);
    free(s);
    free(sp);
    free(q);
    free(qp);
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
    float y[6];
    ZT_OK(be->ops->dequantize(be, y, ZS_DTYPE_FP32, 0, q, s, 4, 4, 8));
    ZT_CHECK(y[0] == 2.0f && bits_of(y[1]) == 0 && y[2] == 127.0f && y[3] == 2.0f);
    /* NF4, amax 1: indices 15, 0, 7, 12 (0.5 is below the midpoint
     * 0.5016634), 14; nibbles (index - 8) 7, 8, f, 4, 6. */
    const float xn[5] = {1.0f, -1.0f, 0.0f, 0.5f, 0.7229568362236023f};
    memset(q, 0xee, sizeof q);
    ZT_OK(be->ops->quantize(be, q, s, xn, ZS_DTYPE_FP32, 5, 5, ZS_K_QUANT_NF4));
    ZT_CHECK(s[0] == 1.0f);
    ZT_CHECK_MSG(q[0] == 0x87 && q[1] == 0x4f && q[2] == 0x06 && q[3] == 0xee,
                 "nf4 bytes %02x %02x %02x %02x, want 87 4f 06 and ee untouched", q[0], q[1], q[2],
                 q[3]);
    ZT_OK(be->ops->dequantize(be, y, ZS_DTYPE_FP32, 0, q, s, 5, 5, ZS_K_QUANT_NF4));
    ZT_CHECK(y[0] == 1.0f && y[1] == -1.0f && bits_of(y[2]) == 0 &&
             y[3] == 0.44070982933044434f && y[4] == 0.7229568362236023f);
    /* Block 1 of [1, -1, 0.5 | -2, 0, 1] (amax 2) starts in a high nibble:
     * indices 15, 0, 12 | 0, 7, 12. */
    const float xn6[6] = {1.0f, -1.0f, 0.5f, -2.0f, 0.0f, 1.0f};
    memset(q, 0xee, sizeof q);
    ZT_OK(be->ops->quantize(be, q, s, xn6, ZS_DTYPE_FP32, 6, 3, ZS_K_QUANT_NF4));
    ZT_CHECK(s[0] == 1.0f && s[1] == 2.0f);
    ZT_CHECK_MSG(q[0] == 0x87 && q[1] == 0x84 && q[2] == 0x4f && q[3] == 0xee,
                 "nf4 bytes (block 3) %02x %02x %02x", q[0], q[1], q[2]);
    ZT_OK(be->ops->dequantize(be, y, ZS_DTYPE_FP32, 0, q, s, 6, 3, ZS_K_QUANT_NF4));
    ZT_CHECK(y[3] == -2.0f && bits_of(y[4]) == 0 && y[5] == 0.44070982933044434f * 2.0f);
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
    nf4_init();
    test_elements();
    test_nf4_elements();
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
        test_nf4_cases(name);
        test_parts(name);
        tested++;
    }
    ZT_CHECK(tested >= 1);
    ZT_OK(zs__cpu_set_isa(ZS_CPU_ISA_AUTO));
    test_properties();
    test_arguments();
    zs__backend_destroy(be);
    return zt_finish("test_quantize");
}
