/* fp32 <-> fp16 / bf16 conversions.
 *
 * 1. The scalar functions of kernels/convert.h against references written
 *    independently of them: GCC's _Float16 (this file is compiled without
 *    -mf16c, so GCC converts in software, libgcc's __extendhfsf2 and
 *    __truncsfhf2) and a round-to-nearest-even written in double arithmetic
 *    (the two neighbouring representable values, the nearer one, ties to the
 *    even one). Every fp16 and bf16 pattern, and ~17 million fp32 patterns:
 *    every sign/exponent/top-15-mantissa prefix with random low bits, plus
 *    ties, boundaries, subnormals, zeros, infinities and NaN payloads.
 * 2. The CPU backend's conversions at every instruction-set level this
 *    machine supports (and the scalar level forced) against those scalar
 *    functions, bit for bit, in pieces of odd lengths at misaligned addresses
 *    (loop tails), and in one call split across 2 threads.
 * 3. zs_convert's argument checks, and the ZS_CPU_ISA variable. */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_isa.h"
#include "kernels/convert.h"
#include "test_util.h"

static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------ references */

static float f32(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint32_t bits32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static uint16_t gcc_fp32_to_fp16(float f) {
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, sizeof u);
    return u;
}

static float gcc_fp16_to_fp32(uint16_t u) {
    _Float16 h;
    memcpy(&h, &u, sizeof h);
    return (float)h;
}

/* |f| rounded to nearest even in a binary format with `precision` significand
 * bits (the implicit one included) and smallest normal exponent `emin`; the
 * result as a double, which holds every value of these formats exactly. The
 * caller maps results at or above 2^(emax + 1) to infinity, as IEEE rounding
 * with an unbounded exponent followed by overflow requires. */
static double ref_round_magnitude(double x, int precision, int emin) {
    if (x == 0) return 0;
    int e;
    frexp(x, &e); /* x in [2^(e-1), 2^e) */
    int ulp_exponent = e - precision;
    if (ulp_exponent < emin - precision + 1) ulp_exponent = emin - precision + 1; /* subnormal */
    double ulp = ldexp(1.0, ulp_exponent);
    double k = floor(x / ulp); /* exact: division by a power of two */
    double lo = k * ulp, hi = (k + 1) * ulp;
    if (x - lo < hi - x) return lo;
    if (x - lo > hi - x) return hi;
    return fmod(k, 2.0) == 0 ? lo : hi;
}

/* The reference fp32 -> bf16 (8 significand bits, exponents -126..127).
 * NaN: the sign, the top 7 payload bits, and the quiet bit set. */
static uint16_t ref_fp32_to_bf16(float f) {
    uint32_t u = bits32(f);
    uint16_t sign = (uint16_t)((u >> 31) << 15);
    if (isnan(f)) return (uint16_t)(sign | 0x7f80u | 0x40u | ((u >> 16) & 0x7fu));
    if (isinf(f)) return (uint16_t)(sign | 0x7f80u);
    double r = ref_round_magnitude(fabs((double)f), 8, -126);
    if (r >= ldexp(1.0, 128)) return (uint16_t)(sign | 0x7f80u);
    /* r is an fp32 value whose low 16 bits are zero: its top half is the bf16. */
    return (uint16_t)(sign | (bits32((float)r) >> 16));
}

/* The value of an fp16 pattern, decoded by formula (not by bit shuffling). */
static double fp16_value(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* ---------------------------------------------------------- fp32 samples */

typedef struct sample {
    uint32_t *bits;
    int64_t count, capacity;
} sample;

static void add(sample *s, uint32_t u) {
    if (s->count == s->capacity) {
        s->capacity = s->capacity ? 2 * s->capacity : 1 << 20;
        s->bits = realloc(s->bits, sizeof(uint32_t) * (size_t)s->capacity);
        ZT_REQUIRE(s->bits != NULL);
    }
    s->bits[s->count++] = u;
}

static void add_range(sample *s, uint32_t center, uint32_t radius) {
    for (uint32_t d = 0; d <= 2 * radius; d++) {
        add(s, center - radius + d);
        add(s, (center - radius + d) ^ 0x80000000u);
    }
}

static sample make_fp32_sample(void) {
    sample s = {0};
    uint64_t rng = 2024;
    /* Every 24-bit prefix (sign, exponent, top 15 mantissa bits) once, with
     * random low bits: all exponent ranges, normal and subnormal, and NaNs. */
    for (uint32_t prefix = 0; prefix < (1u << 24); prefix++)
        add(&s, (prefix << 8) | (uint32_t)(next_random(&rng) & 0xffu));
    /* Ties and their neighbours for both formats (fp16 normals round at bit 13,
     * bf16 at bit 16), at every sign/exponent, on random upper mantissas. */
    static const uint32_t low[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000,
                                   0x3000, 0x7fff, 0x8000, 0x8001, 0xffff, 0x17ff, 0x1800};
    for (uint32_t se = 0; se < 512; se++)
        for (int r = 0; r < 24; r++) {
            uint32_t upper = r == 0 ? 0 : r == 1 ? 0x7f0000u : (uint32_t)next_random(&rng) & 0x7f0000u;
            uint32_t upper13 = r < 2 ? (r ? 0x7fe000u : 0) : (uint32_t)next_random(&rng) & 0x7fe000u;
            for (size_t k = 0; k < sizeof low / sizeof low[0]; k++) {
                add(&s, (se << 23) | upper | low[k]);
                add(&s, (se << 23) | upper13 | (low[k] & 0x1fffu));
            }
        }
    /* fp16 subnormal ties (k + 1/2) 2^-24 and their neighbours, both signs. */
    for (int k = 0; k < 1024; k++) {
        uint32_t tie = bits32((float)ldexp(2 * k + 1, -25));
        add_range(&s, tie, 2);
    }
    add_range(&s, 0x477fe000u, 0x4000); /* 65504 (fp16 max) .. 65520 (rounds to inf) */
    add_range(&s, 0x7f7f8000u, 0x10000); /* bf16 max and the first value rounding to inf */
    add_range(&s, 0x33000000u, 0x1000); /* 2^-25: ties to zero */
    add_range(&s, 0x33800000u, 0x1000); /* 2^-24: the smallest fp16 subnormal */
    add_range(&s, 0x38800000u, 0x4000); /* 2^-14: the smallest fp16 normal */
    add_range(&s, 0x00800000u, 0x10000); /* the fp32 normal/subnormal boundary */
    add_range(&s, 0x00000000u, 0x10000); /* zeros and the smallest subnormals */
    add_range(&s, 0x7f800000u, 0x8000); /* infinities and NaNs just above them */
    add_range(&s, 0x7fc00000u, 0x8000); /* quiet NaNs */
    for (int i = 0; i < (1 << 18); i++) /* NaNs with random payloads */
        add(&s, (uint32_t)(next_random(&rng) | 0x7f800001u) & (0xffffffffu));
    for (int i = 0; i < (1 << 20); i++) add(&s, (uint32_t)next_random(&rng));
    return s;
}

/* ------------------------------------- 1. scalar functions vs references */

static void test_scalar_against_references(const sample *s) {
    int64_t bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float got = zs_k_fp16_to_fp32((uint16_t)h), want = gcc_fp16_to_fp32((uint16_t)h);
        double value = fp16_value((uint16_t)h);
        int ok = bits32(got) == bits32(want) && (isnan(value) ? isnan(got) : (double)got == value);
        /* Back to fp16: exact, NaNs quieted. */
        int is_nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
        uint16_t back = zs_k_fp32_to_fp16(got), back_want = (uint16_t)(is_nan ? h | 0x200u : h);
        ok &= back == back_want && back == gcc_fp32_to_fp16(got);
        if (!ok && bad++ < 5)
            ZT_CHECK_MSG(0, "fp16 %04x: to fp32 %08x (gcc %08x), back %04x (want %04x)", h,
                         bits32(got), bits32(want), back, back_want);
    }
    ZT_EQ_INT(bad, 0);

    bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float got = zs_k_bf16_to_fp32((uint16_t)b);
        int is_nan = (b & 0x7f80u) == 0x7f80u && (b & 0x7fu);
        int e = (b >> 7) & 0xff, m = b & 0x7f;
        double value = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
        if (b & 0x8000u) value = -value;
        uint16_t back = zs_k_fp32_to_bf16(got), back_want = (uint16_t)(is_nan ? b | 0x40u : b);
        int ok = (is_nan ? isnan(got) && bits32(got) == b << 16 : (double)got == value) &&
                 back == back_want && back == ref_fp32_to_bf16(got);
        if (!ok && bad++ < 5)
            ZT_CHECK_MSG(0, "bf16 %04x: to fp32 %08x, back %04x (want %04x)", b, bits32(got), back,
                         back_want);
    }
    ZT_EQ_INT(bad, 0);

    int64_t bad16 = 0, bad16_value = 0, bad_bf16 = 0;
    for (int64_t i = 0; i < s->count; i++) {
        float f = f32(s->bits[i]);
        uint16_t h = zs_k_fp32_to_fp16(f), h_want = gcc_fp32_to_fp16(f);
        if (h != h_want && bad16++ < 5)
            ZT_CHECK_MSG(0, "fp32 %08x (%.9g) -> fp16 %04x, gcc's _Float16 gives %04x",
                         s->bits[i], f, h, h_want);
        /* The same by value, against the double-arithmetic rounding. */
        if (!isnan(f)) {
            double r = ref_round_magnitude(fabs((double)f), 11, -14);
            if (r >= 65536.0) r = INFINITY;
            double want = signbit(f) ? -r : r;
            if ((fp16_value(h) != want || !!signbit(fp16_value(h)) != !!signbit(f)) &&
                bad16_value++ < 5)
                ZT_CHECK_MSG(0, "fp32 %08x -> fp16 %04x = %.9g, RNE in double gives %.9g",
                             s->bits[i], h, fp16_value(h), want);
        }
        uint16_t b = zs_k_fp32_to_bf16(f), b_want = ref_fp32_to_bf16(f);
        if (b != b_want && bad_bf16++ < 5)
            ZT_CHECK_MSG(0, "fp32 %08x (%.9g) -> bf16 %04x, reference %04x", s->bits[i], f, b,
                         b_want);
    }
    ZT_EQ_INT(bad16, 0);
    ZT_EQ_INT(bad16_value, 0);
    ZT_EQ_INT(bad_bf16, 0);
    printf("scalar conversions: 65536 fp16, 65536 bf16 and %lld fp32 patterns match the "
           "references\n", (long long)s->count);
}

/* ------------------------------------------ 2. every SIMD level vs scalar */

/* Converts n elements in pieces of lengths 1, 2, ..., 67, 1, ... (odd and
 * even, shorter and longer than every vector), through the backend op. */
static void convert_in_pieces(zs__backend *be, void *dst, zs_dtype dd, const void *src,
                              zs_dtype sd, int64_t n) {
    int64_t off = 0, len = 1;
    while (off < n) {
        int64_t c = n - off < len ? n - off : len;
        ZT_OK(be->ops->convert(be, (char *)dst + off * (int64_t)zs_dtype_size(dd), dd,
                               (const char *)src + off * (int64_t)zs_dtype_size(sd), sd, c));
        off += c;
        len = len == 67 ? 1 : len + 1;
    }
}

/* dst must equal want (n elements of dtype dd) after converting src both in
 * pieces and in one call; dst and src point one element past an aligned
 * address, so no vector load or store is aligned. */
static void check_level(zs__backend *be, const char *level, const char *what, zs_dtype dd,
                        const void *src, zs_dtype sd, int64_t n, const void *want) {
    size_t bytes = (size_t)n * zs_dtype_size(dd);
    char *dbase = malloc(bytes + 64), *sbase = malloc((size_t)n * zs_dtype_size(sd) + 64);
    ZT_REQUIRE(dbase && sbase);
    char *d = dbase + zs_dtype_size(dd), *s = sbase + zs_dtype_size(sd);
    memcpy(s, src, (size_t)n * zs_dtype_size(sd));
    for (int mode = 0; mode < 2; mode++) {
        memset(d, 0xa5, bytes);
        if (mode == 0) {
            convert_in_pieces(be, d, dd, s, sd, n);
        } else {
            omp_set_num_threads(2);
            ZT_OK(zs_convert(d, dd, s, sd, n));
            omp_set_num_threads(1);
        }
        int64_t first = -1;
        for (int64_t i = 0; i < n && first < 0; i++)
            if (memcmp(d + i * (int64_t)zs_dtype_size(dd), (const char *)want + i * (int64_t)zs_dtype_size(dd),
                       zs_dtype_size(dd)) != 0)
                first = i;
        ZT_CHECK_MSG(first < 0, "%s, %s (%s): element %lld differs from the scalar function", level,
                     what, mode ? "one call, 2 threads" : "odd pieces, misaligned", (long long)first);
    }
    free(dbase);
    free(sbase);
}

static void test_levels(const sample *s) {
    zs__mem mem;
    memset(&mem, 0, sizeof mem);
    zs__backend *be = NULL;
    ZT_OK(zs__cpu_backend_create(&mem, &be));

    /* Inputs: every 16-bit pattern; the fp32 sample. Expected outputs from
     * the scalar functions of kernels/convert.h. */
    const int64_t n16 = 65536, n32 = s->count;
    uint16_t *all16 = malloc(sizeof(uint16_t) * n16);
    uint32_t *h_to_f = malloc(sizeof(uint32_t) * n16), *b_to_f = malloc(sizeof(uint32_t) * n16);
    uint16_t *h_to_b = malloc(sizeof(uint16_t) * n16), *b_to_h = malloc(sizeof(uint16_t) * n16);
    uint16_t *f_to_h = malloc(sizeof(uint16_t) * n32), *f_to_b = malloc(sizeof(uint16_t) * n32);
    uint32_t *f_copy = malloc(sizeof(uint32_t) * n32);
    ZT_REQUIRE(all16 && h_to_f && b_to_f && h_to_b && b_to_h && f_to_h && f_to_b && f_copy);
    for (int64_t i = 0; i < n16; i++) {
        all16[i] = (uint16_t)i;
        h_to_f[i] = bits32(zs_k_fp16_to_fp32((uint16_t)i));
        b_to_f[i] = bits32(zs_k_bf16_to_fp32((uint16_t)i));
        h_to_b[i] = zs_k_fp32_to_bf16(zs_k_fp16_to_fp32((uint16_t)i));
        b_to_h[i] = zs_k_fp32_to_fp16(zs_k_bf16_to_fp32((uint16_t)i));
    }
    for (int64_t i = 0; i < n32; i++) {
        f_to_h[i] = zs_k_fp32_to_fp16(f32(s->bits[i]));
        f_to_b[i] = zs_k_fp32_to_bf16(f32(s->bits[i]));
        f_copy[i] = s->bits[i];
    }

    int tested = 0;
    for (int level = 0; level < ZS_CPU_ISA_COUNT; level++) {
        const char *name = zs__cpu_isa_name((zs__cpu_isa)level);
        if (!zs__cpu_isa_supported((zs__cpu_isa)level)) {
            printf("level %s: not supported by this CPU, skipped\n", name);
            ZT_FAILS_WITH(zs__cpu_set_isa((zs__cpu_isa)level), ZS_ERR_UNSUPPORTED, name);
            continue;
        }
        ZT_OK(zs__cpu_set_isa((zs__cpu_isa)level));
        ZT_EQ_INT(zs__cpu_kernels_get()->isa, level);
        check_level(be, name, "fp16 -> fp32, all patterns", ZS_DTYPE_FP32, all16, ZS_DTYPE_FP16, n16, h_to_f);
        check_level(be, name, "bf16 -> fp32, all patterns", ZS_DTYPE_FP32, all16, ZS_DTYPE_BF16, n16, b_to_f);
        check_level(be, name, "fp16 -> bf16, all patterns", ZS_DTYPE_BF16, all16, ZS_DTYPE_FP16, n16, h_to_b);
        check_level(be, name, "bf16 -> fp16, all patterns", ZS_DTYPE_FP16, all16, ZS_DTYPE_BF16, n16, b_to_h);
        check_level(be, name, "fp16 -> fp16 (copy)", ZS_DTYPE_FP16, all16, ZS_DTYPE_FP16, n16, all16);
        check_level(be, name, "fp32 -> fp16, sample", ZS_DTYPE_FP16, s->bits, ZS_DTYPE_FP32, n32, f_to_h);
        check_level(be, name, "fp32 -> bf16, sample", ZS_DTYPE_BF16, s->bits, ZS_DTYPE_FP32, n32, f_to_b);
        check_level(be, name, "fp32 -> fp32 (copy)", ZS_DTYPE_FP32, s->bits, ZS_DTYPE_FP32, n32, f_copy);
        printf("level %s: every conversion matches the scalar functions bit for bit\n", name);
        tested++;
    }
    ZT_CHECK(tested >= 1);
    ZT_OK(zs__cpu_set_isa(ZS_CPU_ISA_AUTO));
    free(all16); free(h_to_f); free(b_to_f); free(h_to_b); free(b_to_h);
    free(f_to_h); free(f_to_b); free(f_copy);
    zs__backend_destroy(be);
    ZT_EQ_U64(mem.total_current, 0);
}

/* ------------------------------------------------ 3. API and ZS_CPU_ISA */

static void test_api(void) {
    float f[3] = {1.0f, -2.5f, 65520.0f};
    uint16_t h[3];
    ZT_OK(zs_convert(h, ZS_DTYPE_FP16, f, ZS_DTYPE_FP32, 3));
    ZT_EQ_U64(h[0], 0x3c00);
    ZT_EQ_U64(h[1], 0xc100);
    ZT_EQ_U64(h[2], 0x7c00);
    ZT_OK(zs_convert(NULL, ZS_DTYPE_FP16, NULL, ZS_DTYPE_FP32, 0));
    ZT_FAILS_WITH(zs_convert(h, ZS_DTYPE_FP16, f, ZS_DTYPE_FP32, -1), ZS_ERR_INVALID_ARGUMENT, ">= 0");
    ZT_FAILS_WITH(zs_convert(h, (zs_dtype)7, f, ZS_DTYPE_FP32, 3), ZS_ERR_INVALID_ARGUMENT, "ZS_DTYPE_FP16");
    ZT_FAILS_WITH(zs_convert(h, ZS_DTYPE_FP16, f, (zs_dtype)-1, 3), ZS_ERR_INVALID_ARGUMENT, "dtypes");
    ZT_FAILS_WITH(zs_convert(NULL, ZS_DTYPE_FP16, f, ZS_DTYPE_FP32, 3), ZS_ERR_INVALID_ARGUMENT, "dst is NULL");

    /* ZS_CPU_ISA is read when the level is resolved (first use, or AUTO). */
    setenv("ZS_CPU_ISA", "scalar", 1);
    ZT_OK(zs__cpu_set_isa(ZS_CPU_ISA_AUTO));
    ZT_EQ_INT(zs__cpu_kernels_get()->isa, ZS_CPU_ISA_SCALAR);
    setenv("ZS_CPU_ISA", "no-such-level", 1); /* warns, then the best level */
    ZT_OK(zs__cpu_set_isa(ZS_CPU_ISA_AUTO));
    ZT_EQ_INT(zs__cpu_kernels_get()->isa, zs__cpu_isa_best());
    unsetenv("ZS_CPU_ISA");
    ZT_OK(zs__cpu_set_isa(ZS_CPU_ISA_AUTO));
    ZT_EQ_INT(zs__cpu_kernels_get()->isa, zs__cpu_isa_best());
    ZT_FAILS_WITH(zs__cpu_set_isa((zs__cpu_isa)9), ZS_ERR_INVALID_ARGUMENT, "level 9");
    printf("best level on this CPU: %s\n", zs__cpu_isa_name(zs__cpu_isa_best()));
}

int main(void) {
    omp_set_num_threads(1);
    sample s = make_fp32_sample();
    test_scalar_against_references(&s);
    test_levels(&s);
    test_api();
    free(s.bits);
    return zt_finish("test_convert");
}
