/* Throughput of the CPU backend's block quantization (kernels/quantize.h),
 * per SIMD level, against a parallel memcpy in the same run.
 *
 * Each op streams its arrays once, so it is compared by the bytes it moves
 * (reads plus writes) per second with memcpy's (which reads and writes each
 * byte once), on the same OpenMP threads:
 *   quantize:            reads count x the source size, writes the integers
 *                        (count or count / 2 bytes) and 4 bytes per block
 *   dequantize -> bf16:  reads integers and scales, writes 2 bytes per value
 *                        (the weight gather's dequantize into the compute dtype)
 *   dequantize += fp32:  reads integers, scales and the fp32 accumulator,
 *                        writes it (the gradient reduction's add)
 * The table gives GB/s of each and op / memcpy; a ratio near 1 means the op
 * runs at memory speed. Formats: int8 and int4 (the quantized collectives)
 * and NF4 (the frozen base's, whose "dequantize -> bf16" llama_train runs
 * on every base matrix before its products, forward and backward).
 *
 *   build/bench/comm/bench_quantize [--n 33554432] [--block 256] [--reps 5]
 *   OMP_NUM_THREADS overrides the default of 2 threads. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_isa.h"
#include "../lib/options.h"
#include "../lib/stats.h"
#include "kernels/convert.h"
#include "kernels/init.h"

static void *alloc_or_die(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "bench_quantize: out of memory allocating %zu bytes; try a smaller --n\n",
                bytes);
        exit(1);
    }
    return p;
}

static void check(zs_status st, const char *what) {
    if (st == ZS_OK) return;
    fprintf(stderr, "bench_quantize: %s: %s: %s\n", what, zs_status_name(st), zs_last_error());
    exit(1);
}

/* memcpy of `bytes` split across the threads as the kernels split theirs. */
static void parallel_copy(void *dst, const void *src, size_t bytes) {
    const int64_t pieces = 64;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < pieces; k++) {
        const size_t begin = bytes / (size_t)pieces * (size_t)k;
        const size_t end = k == pieces - 1 ? bytes : bytes / (size_t)pieces * (size_t)(k + 1);
        memcpy((char *)dst + begin, (const char *)src + begin, end - begin);
    }
}

typedef struct arrays {
    float *x32, *acc;
    uint16_t *x16, *out16;
    uint8_t *q;
    float *scales;
    unsigned char *copy_src, *copy_dst;
} arrays;

enum { OP_QUANTIZE, OP_DEQUANTIZE_BF16, OP_DEQUANTIZE_ADD, OP_COUNT };
static const char *op_names[OP_COUNT] = {"quantize", "dequantize -> bf16", "dequantize += fp32"};

/* Bytes one op moves (reads + writes). */
static double op_bytes(int op, zs_dtype sd, int64_t n, int64_t block, int bits) {
    const double ints = (double)zs_k_quant_value_bytes(n, bits);
    const double scales = 4.0 * (double)zs_k_quant_blocks(n, block);
    switch (op) {
    case OP_QUANTIZE: return (double)n * (double)zs_dtype_size(sd) + ints + scales;
    case OP_DEQUANTIZE_BF16: return ints + scales + 2.0 * (double)n;
    default: return ints + scales + 8.0 * (double)n;
    }
}

static double run_op(zs__backend *be, arrays *a, int op, zs_dtype sd, int64_t n, int64_t block,
                     int bits) {
    const double t0 = omp_get_wtime();
    const void *src = sd == ZS_DTYPE_FP32 ? (const void *)a->x32 : (const void *)a->x16;
    switch (op) {
    case OP_QUANTIZE:
        check(be->ops->quantize(be, a->q, a->scales, src, sd, n, block, bits), "quantize");
        break;
    case OP_DEQUANTIZE_BF16:
        check(be->ops->dequantize(be, a->out16, ZS_DTYPE_BF16, 0, a->q, a->scales, n, block, bits),
              "dequantize");
        break;
    default:
        check(be->ops->dequantize(be, a->acc, ZS_DTYPE_FP32, 1, a->q, a->scales, n, block, bits),
              "dequantize");
        break;
    }
    return omp_get_wtime() - t0;
}

int main(int argc, char **argv) {
    int64_t n = (int64_t)1 << 25, block = 256, reps = 5;
    const bench_option options[] = {
        {"--n", BENCH_OPT_SIZE, 1, (int64_t)1 << 34, &n},
        {"--block", BENCH_OPT_INT, 1, INT64_MAX, &block},
        {"--reps", BENCH_OPT_INT, 1, 1000, &reps},
    };
    if (bench_options_read("bench_quantize", argc, argv, options, 3)) return 2;
    if (!getenv("OMP_NUM_THREADS")) omp_set_num_threads(2);

    arrays a;
    a.x32 = alloc_or_die(4 * (size_t)n);
    a.acc = alloc_or_die(4 * (size_t)n);
    a.x16 = alloc_or_die(2 * (size_t)n);
    a.out16 = alloc_or_die(2 * (size_t)n);
    a.q = alloc_or_die((size_t)n);
    a.scales = alloc_or_die(4 * (size_t)zs_k_quant_blocks(n, block));
    a.copy_src = alloc_or_die(8 * (size_t)n + 2 * (size_t)n);
    a.copy_dst = alloc_or_die(8 * (size_t)n + 2 * (size_t)n);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const uint64_t h = zs_k_mix64((uint64_t)i);
        const float u = (float)((h >> 40) * 0x1.0p-24) - 0.5f;
        a.x32[i] = 1e-2f * u * (float)(1 + (i / block) % 7);
        a.x16[i] = zs_k_fp32_to_bf16(a.x32[i]);
        a.acc[i] = 0.0f;
        a.out16[i] = 0;
        a.q[i] = 0;
    }
    memset(a.copy_src, 1, 10 * (size_t)n);
    memset(a.copy_dst, 0, 10 * (size_t)n);

    zs__mem mem;
    memset(&mem, 0, sizeof mem);
    zs__backend *be = NULL;
    check(zs__cpu_backend_create(&mem, &be), "creating the cpu backend");
    printf("bench_quantize: N = %lld values, block %lld, %d OpenMP threads, median of %lld\n\n",
           (long long)n, (long long)block, omp_get_max_threads(), (long long)reps);
    printf("%-7s %-5s %-5s %-19s %10s %11s %11s %7s\n", "level", "src", "bits", "op", "ms",
           "op GB/s", "memcpy GB/s", "ratio");
    double *times = malloc(sizeof(double) * (size_t)reps);
    double *copies = malloc(sizeof(double) * (size_t)reps);
    if (!times || !copies) return 1;
    const zs_dtype srcs[2] = {ZS_DTYPE_FP32, ZS_DTYPE_BF16};
    /* The collectives' int8 and int4, and the frozen base's NF4 (issue 43). */
    const int formats[3] = {8, 4, ZS_K_QUANT_NF4};
    const char *const format_names[3] = {"int8", "int4", "nf4"};
    for (int level = 0; level < ZS_CPU_ISA_COUNT; level++) {
        if (!zs__cpu_isa_supported((zs__cpu_isa)level)) continue;
        check(zs__cpu_set_isa((zs__cpu_isa)level), "choosing the level");
        for (int s = 0; s < 2; s++)
            for (int f = 0; f < 3; f++)
                for (int op = 0; op < OP_COUNT; op++) {
                    const int bits = formats[f];
                    if (op != OP_QUANTIZE && s == 1) continue; /* does not read the source */
                    const double bytes = op_bytes(op, srcs[s], n, block, bits);
                    (void)run_op(be, &a, OP_QUANTIZE, srcs[s], n, block, bits); /* warm, and q */
                    for (int r = 0; r < reps; r++) {
                        times[r] = run_op(be, &a, op, srcs[s], n, block, bits);
                        const double t0 = omp_get_wtime();
                        parallel_copy(a.copy_dst, a.copy_src, (size_t)(bytes / 2));
                        copies[r] = omp_get_wtime() - t0;
                    }
                    const double t = bench_median(times, (int)reps);
                    const double c = bench_median(copies, (int)reps);
                    printf("%-7s %-5s %-5s %-19s %10.2f %11.2f %11.2f %7.2f\n",
                           zs__cpu_isa_name((zs__cpu_isa)level), zs_dtype_name(srcs[s]),
                           format_names[f], op_names[op], 1e3 * t, bytes / t * 1e-9,
                           bytes / c * 1e-9, c / t);
                }
    }
    check(zs__cpu_set_isa(ZS_CPU_ISA_AUTO), "restoring the level");
    zs__backend_destroy(be);
    free(times);
    free(copies);
    return 0;
}
