/* Instruction-set levels of the CPU backend and the table of kernels compiled
 * for each. The library is built for the baseline of its target (no
 * -march=native: a binary must give the same results on every machine it runs
 * on); the SIMD kernels live in their own translation units, each compiled for
 * one level through function target attributes, and the level is chosen at
 * run time from the CPU's features.
 *
 * Every level gives bit-identical results: conversions reproduce
 * kernels/convert.h exactly, the optimizer loops run the element functions of
 * kernels/optimizer.h and kernels/quantize.h (IEEE add, mul, div and sqrt
 * are exactly rounded in vector form too, and nothing is contracted or
 * reassociated), sums of squares use one fixed order of additions at every
 * level, and a quantization block's amax is an integer maximum, exact in
 * any order.
 *
 * The level is process-wide, like the CPU it describes: it is resolved once,
 * on first use, from ZS_CPU_ISA (scalar | avx2 | avx512 | auto; unset means
 * auto, the best level this CPU supports; a level the CPU lacks falls back to
 * the best one below it, with a warning). Tests and benchmarks switch levels
 * with zs__cpu_set_isa(). */
#ifndef ZS_BACKEND_CPU_ISA_H
#define ZS_BACKEND_CPU_ISA_H

#include <stdint.h>

#include "backend/backend.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define ZS_CPU_X86 1
#else
#define ZS_CPU_X86 0
#endif

typedef enum zs__cpu_isa {
    ZS_CPU_ISA_AUTO = -1,  /* the level ZS_CPU_ISA names, else the best supported one */
    ZS_CPU_ISA_SCALAR = 0, /* portable C; the compiler may still use the baseline SIMD (SSE2) */
    ZS_CPU_ISA_AVX2 = 1,   /* AVX2 + F16C */
    ZS_CPU_ISA_AVX512 = 2, /* AVX-512 F, BW and VL (+ AVX2, F16C) */
    ZS_CPU_ISA_COUNT = 3
} zs__cpu_isa;

/* Kernels work through L1-resident chunks of this many elements (converted
 * gradients, fp16/bf16 operands widened to fp32 on the stack). A multiple of
 * every vector width and of the 8 lanes of the sum of squares. */
#define ZS_CPU_CHUNK 512

/* The lanes of a sum of squares: element i of a block is added to lane
 * i mod ZS_CPU_SUMSQ_LANES, and the lanes are combined in a fixed tree, so
 * the order of additions is the same at every level and vector width. */
#define ZS_CPU_SUMSQ_LANES 8

/* The kernels of one level. Each works on one contiguous range on the calling
 * thread; the OpenMP drivers (cpu_convert.c, cpu_accumulate.c, cpu_reduce.c,
 * cpu_update.c, cpu_quantize.c) split the work across threads. Dtypes are valid (checked by
 * the drivers); n >= 0; pointers need no alignment. */
/* An element-wise kernel from src into dst (convert, accumulate). */
typedef void (*zs__cpu_elementwise_fn)(void *dst, zs_dtype dst_dtype, const void *src,
                                       zs_dtype src_dtype, int64_t n);

typedef struct zs__cpu_kernels {
    zs__cpu_isa isa;
    /* 1 when this unit was compiled with -fno-math-errno (cmake/ZsSimd.cmake),
     * which lets the compiler vectorize sqrtf in the Adam loops. */
    int math_errno_off;
    /* dst[i] = src[i] converted; same dtype is a copy (dst == src allowed). */
    zs__cpu_elementwise_fn convert;
    /* dst[i] = round_to_dst_dtype(float(dst[i]) + float(src[i])). */
    zs__cpu_elementwise_fn accumulate;
    /* Sum of squares of x[0..n) in double, in the fixed lane order. */
    double (*sum_squares)(const void *x, zs_dtype dtype, int64_t n);
    /* The fused optimizer pass over elements [begin, begin + n) of args. */
    void (*update)(const zs__update_args *args, int64_t begin, int64_t n);
    /* Block quantization of src[0..n) (kernels/quantize.h): blocks of
     * `block` elements counted from src[0], scales[b] for each, the
     * integers into q (bits 8 or 4; for int4 element 0 is the low nibble
     * of q[0]). */
    void (*quantize)(void *q, float *scales, const void *src, zs_dtype src_dtype, int64_t n,
                     int64_t block, int bits);
    /* dst[0..n) = the dequantized values of q (same layout), written in
     * dst_dtype, or added to dst (accumulate != 0: one fp32 addition per
     * element, rounded once to dst_dtype). */
    void (*dequantize)(void *dst, zs_dtype dst_dtype, int accumulate, const void *q,
                       const float *scales, int64_t n, int64_t block, int bits);
} zs__cpu_kernels;

extern const zs__cpu_kernels zs__cpu_kernels_scalar;
#if ZS_CPU_X86
extern const zs__cpu_kernels zs__cpu_kernels_avx2;
extern const zs__cpu_kernels zs__cpu_kernels_avx512;
#endif

/* "scalar", "avx2", "avx512" ("auto" for ZS_CPU_ISA_AUTO). */
const char *zs__cpu_isa_name(zs__cpu_isa isa);
/* 1 when this build has the level and this CPU (and OS) supports it. */
int zs__cpu_isa_supported(zs__cpu_isa isa);
/* The best level this CPU supports. */
zs__cpu_isa zs__cpu_isa_best(void);
/* The kernels of the active level; resolves it on first use (thread-safe). */
const zs__cpu_kernels *zs__cpu_kernels_get(void);
/* Makes `isa` the active level for the whole process (tests, benchmarks);
 * ZS_CPU_ISA_AUTO resolves it again as on first use. Fails with
 * ZS_ERR_UNSUPPORTED, leaving the level unchanged, when the CPU lacks it.
 * Not to be called while kernels run on other threads. */
zs_status zs__cpu_set_isa(zs__cpu_isa isa);

#endif
