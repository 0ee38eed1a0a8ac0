/* bench_optimizer --backend cuda: the runtime's CUDA kernels (kernels/cuda_*.cu,
 * called through kernels/cuda_launch.h exactly as the CUDA backend calls them)
 * against the bandwidth the same device reaches copying memory, in the same run.
 *
 * Every kernel here streams memory, so its bound is a device-to-device
 * cudaMemcpyAsync that moves the same bytes: a copy of B bytes reads B and
 * writes B, so the reference of a kernel that moves M bytes (reads + writes)
 * copies M / 2 bytes. Each repetition times the kernel and then its copy with
 * CUDA events on one stream, so a change in the device's clocks affects both;
 * the first round is an untimed warm-up and the table gives the median of the
 * others: bytes moved, GB/s (1e9 bytes per second) and kernel / copy (target:
 * >= 0.85).
 *
 * Bytes per element (reads + writes):
 *   AdamW, fp32 (master = param):   p, m, v, g read; p, m, v written          28
 *   AdamW, bf16 param + bf16 grad:  master, m, v, g (2) read; master, m, v,
 *                                   param (2) written                         28
 *   convert fp32 -> bf16, bf16 -> fp32                                        6
 *   accumulate fp32 += fp32 / bf16 += bf16 / fp32 += bf16              12 / 6 / 10
 *   sum of squares fp32 / bf16: x read (+ 8 bytes of partial per 4096)     4 / 2
 * The "+ fold" rows add what sum_squares_many runs after the block kernel for
 * each array: one device thread adding the block partials in block order.
 *
 *   build/bench/optimizer/bench_optimizer --backend cuda [--n 268435456] [--reps 10]
 * The default n (2^28 elements) shrinks by halves until the arrays fit the
 * device; the fp32 arrays alone are then 4 GiB. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "../lib/stats.h"
#include "bench_cuda.h"
#include "kernels/cuda_launch.h"

#define DEFAULT_N ((int64_t)1 << 28)
#define SMALLEST_N ((int64_t)1 << 20)
/* Share of the device's free memory the benchmark may take. */
#define MEMORY_SHARE 0.9
/* Bytes the largest case moves per element; the copy buffers hold half of it. */
#define MAX_BYTES_PER_EL 28

typedef struct bench {
    zs__cuda_launch launch;
    cudaEvent_t ev[3];
    int64_t n;
    float *p, *m, *v, *g32;     /* fp32: parameters or master, moments, gradient */
    uint16_t *g16, *param16;    /* bf16: gradient, parameter copy */
    double *partials;           /* [n / 4096 rounded up] block partials, then 1 total */
    unsigned char *copy_src, *copy_dst;
    size_t copy_bytes;          /* of each copy buffer */
} bench;

enum {
    ADAMW_FP32,
    ADAMW_BF16,
    CONVERT_TO_BF16,
    CONVERT_TO_FP32,
    ACCUMULATE_FP32,
    ACCUMULATE_BF16,
    ACCUMULATE_FP32_BF16,
    SUMSQ_FP32,
    SUMSQ_FP32_FOLD,
    SUMSQ_BF16,
    SUMSQ_BF16_FOLD,
    CASE_COUNT
};

static const struct {
    const char *name;
    double bytes_per_el;
} cases[CASE_COUNT] = {
    [ADAMW_FP32] = {"AdamW fp32 (master = param)", 28.0},
    [ADAMW_BF16] = {"AdamW bf16 param + bf16 grad", 28.0},
    [CONVERT_TO_BF16] = {"convert fp32 -> bf16", 6.0},
    [CONVERT_TO_FP32] = {"convert bf16 -> fp32", 6.0},
    [ACCUMULATE_FP32] = {"accumulate fp32 += fp32", 12.0},
    [ACCUMULATE_BF16] = {"accumulate bf16 += bf16", 6.0},
    [ACCUMULATE_FP32_BF16] = {"accumulate fp32 += bf16", 10.0},
    [SUMSQ_FP32] = {"sum of squares fp32", 4.0 + 8.0 / ZS_CUDA_NORM_BLOCK},
    [SUMSQ_FP32_FOLD] = {"  + fold", 4.0 + 16.0 / ZS_CUDA_NORM_BLOCK},
    [SUMSQ_BF16] = {"sum of squares bf16", 2.0 + 8.0 / ZS_CUDA_NORM_BLOCK},
    [SUMSQ_BF16_FOLD] = {"  + fold", 2.0 + 16.0 / ZS_CUDA_NORM_BLOCK},
};

static int failed(cudaError_t e, const char *call) {
    fprintf(stderr, "bench_optimizer --backend cuda: %s failed: %s (%s)\n", call,
            cudaGetErrorString(e), cudaGetErrorName(e));
    return 1;
}

#define TRY(call)                                              \
    do {                                                       \
        cudaError_t try_e_ = (call);                           \
        if (try_e_ != cudaSuccess) return failed(try_e_, #call); \
    } while (0)

static int64_t norm_blocks(int64_t n) { return (n + ZS_CUDA_NORM_BLOCK - 1) / ZS_CUDA_NORM_BLOCK; }

/* Device bytes the benchmark allocates for n elements. */
static size_t bytes_needed(int64_t n) {
    return (size_t)n * (4 * sizeof(float) + 2 * sizeof(uint16_t)) +
           2 * ((size_t)n * MAX_BYTES_PER_EL / 2) + ((size_t)norm_blocks(n) + 1) * sizeof(double);
}

/* One kernel call of case c. */
static cudaError_t run_case(bench *b, int c) {
    const int64_t n = b->n;
    const zs_k_optim_scalars s = zs_k_optim_scalars_for_step(
        ZS_K_OPTIM_ADAMW, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.0, 0, 10, 1.0, 1.0);
    zs__cuda_fold fold = {.count = 1};
    fold.seg[0] = (zs__cuda_fold_segment){.first = 0, .blocks = norm_blocks(n), .slot = 0,
                                          .cont = 0};
    double *total = b->partials + norm_blocks(n);
    cudaError_t e = cudaSuccess;
    switch (c) {
    case ADAMW_FP32:
        return zs__cuda_launch_update(b->launch, ZS_K_OPTIM_ADAMW, b->p, NULL, ZS_DTYPE_FP32,
                                      b->g32, ZS_DTYPE_FP32, b->m, b->v, n, s);
    case ADAMW_BF16:
        return zs__cuda_launch_update(b->launch, ZS_K_OPTIM_ADAMW, b->p, b->param16,
                                      ZS_DTYPE_BF16, b->g16, ZS_DTYPE_BF16, b->m, b->v, n, s);
    case CONVERT_TO_BF16:
        return zs__cuda_launch_convert(b->launch, b->param16, ZS_DTYPE_BF16, b->g32,
                                       ZS_DTYPE_FP32, n);
    case CONVERT_TO_FP32:
        /* Into v, whose values no later case needs to stay moments. */
        return zs__cuda_launch_convert(b->launch, b->v, ZS_DTYPE_FP32, b->g16, ZS_DTYPE_BF16, n);
    case ACCUMULATE_FP32:
        return zs__cuda_launch_accumulate(b->launch, b->m, ZS_DTYPE_FP32, b->g32, ZS_DTYPE_FP32,
                                          n);
    case ACCUMULATE_BF16:
        return zs__cuda_launch_accumulate(b->launch, b->param16, ZS_DTYPE_BF16, b->g16,
                                          ZS_DTYPE_BF16, n);
    case ACCUMULATE_FP32_BF16:
        return zs__cuda_launch_accumulate(b->launch, b->m, ZS_DTYPE_FP32, b->g16, ZS_DTYPE_BF16,
                                          n);
    case SUMSQ_FP32:
    case SUMSQ_FP32_FOLD:
    case SUMSQ_BF16:
    case SUMSQ_BF16_FOLD: {
        const int fp32 = c == SUMSQ_FP32 || c == SUMSQ_FP32_FOLD;
        e = zs__cuda_launch_sum_squares(b->launch, b->partials, fp32 ? (void *)b->g32 : b->g16,
                                        fp32 ? ZS_DTYPE_FP32 : ZS_DTYPE_BF16, n, 0,
                                        norm_blocks(n));
        if (e == cudaSuccess && (c == SUMSQ_FP32_FOLD || c == SUMSQ_BF16_FOLD))
            e = zs__cuda_launch_sum_squares_fold(b->launch, total, b->partials, &fold);
        return e;
    }
    }
    return cudaErrorInvalidValue;
}

/* Allocates and fills the arrays: values like a real step's (no zeros or
 * subnormals that could favour one kernel), drawn on the device. */
static int setup(bench *b) {
    const size_t n = (size_t)b->n;
    float **fp32[4] = {&b->p, &b->m, &b->v, &b->g32};
    for (int k = 0; k < 4; k++) TRY(cudaMalloc((void **)fp32[k], n * sizeof(float)));
    TRY(cudaMalloc((void **)&b->g16, n * sizeof(uint16_t)));
    TRY(cudaMalloc((void **)&b->param16, n * sizeof(uint16_t)));
    TRY(cudaMalloc((void **)&b->partials, ((size_t)norm_blocks(b->n) + 1) * sizeof(double)));
    b->copy_bytes = n * MAX_BYTES_PER_EL / 2;
    TRY(cudaMalloc((void **)&b->copy_src, b->copy_bytes));
    TRY(cudaMalloc((void **)&b->copy_dst, b->copy_bytes));
    TRY(cudaMemsetAsync(b->copy_src, 1, b->copy_bytes, b->launch.stream));
    const struct {
        float *dst;
        double lo, hi;
    } fills[4] = {{b->p, -0.01, 0.01}, {b->m, -1e-3, 1e-3}, {b->v, 1e-7, 2e-6},
                  {b->g32, -1e-2, 1e-2}};
    for (int k = 0; k < 4; k++)
        TRY(zs__cuda_launch_init_fill(b->launch, fills[k].dst, 0, b->n, ZS_K_INIT_UNIFORM,
                                      fills[k].lo, fills[k].hi, 0x5eed0000u + (unsigned)k));
    TRY(zs__cuda_launch_convert(b->launch, b->g16, ZS_DTYPE_BF16, b->g32, ZS_DTYPE_FP32, b->n));
    TRY(zs__cuda_launch_convert(b->launch, b->param16, ZS_DTYPE_BF16, b->p, ZS_DTYPE_FP32,
                                b->n));
    TRY(cudaStreamSynchronize(b->launch.stream));
    return 0;
}

static void teardown(bench *b) {
    void *ptrs[] = {b->p, b->m, b->v, b->g32, b->g16, b->param16, b->partials, b->copy_src,
                    b->copy_dst};
    for (size_t k = 0; k < sizeof ptrs / sizeof ptrs[0]; k++)
        if (ptrs[k]) cudaFree(ptrs[k]);
    for (int k = 0; k < 3; k++)
        if (b->ev[k]) cudaEventDestroy(b->ev[k]);
    if (b->launch.stream) cudaStreamDestroy(b->launch.stream);
}

/* Median kernel and copy times (ms) of case c over reps repetitions. */
static int time_case(bench *b, int c, int reps, double *kernel_ms, double *copy_ms) {
    double *kt = malloc(sizeof(double) * (size_t)reps), *ct = malloc(sizeof(double) * (size_t)reps);
    if (!kt || !ct) {
        free(kt);
        free(ct);
        fprintf(stderr, "bench_optimizer --backend cuda: out of host memory\n");
        return 1;
    }
    const size_t copy = (size_t)(cases[c].bytes_per_el * (double)b->n / 2.0);
    int rc = 0;
    for (int r = 0; r <= reps && rc == 0; r++) {
        float k_ms = 0.0f, c_ms = 0.0f;
        cudaError_t e = cudaEventRecord(b->ev[0], b->launch.stream);
        if (e == cudaSuccess) e = run_case(b, c);
        if (e == cudaSuccess) e = cudaEventRecord(b->ev[1], b->launch.stream);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(b->copy_dst, b->copy_src, copy, cudaMemcpyDeviceToDevice,
                                b->launch.stream);
        if (e == cudaSuccess) e = cudaEventRecord(b->ev[2], b->launch.stream);
        if (e == cudaSuccess) e = cudaEventSynchronize(b->ev[2]);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&k_ms, b->ev[0], b->ev[1]);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&c_ms, b->ev[1], b->ev[2]);
        if (e != cudaSuccess) {
            fprintf(stderr, "bench_optimizer --backend cuda: case '%s':\n", cases[c].name);
            rc = failed(e, "the timed kernel or copy");
        } else if (r > 0) {
            kt[r - 1] = k_ms;
            ct[r - 1] = c_ms;
        }
    }
    if (rc == 0) {
        *kernel_ms = bench_median(kt, reps);
        *copy_ms = bench_median(ct, reps);
    }
    free(kt);
    free(ct);
    return rc;
}

int bench_optimizer_cuda(int64_t n, int reps) {
    int devices = 0;
    cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) {
        printf("bench_optimizer --backend cuda: skipped: no usable CUDA device (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices");
        return 0;
    }
    struct cudaDeviceProp prop;
    TRY(cudaGetDeviceProperties(&prop, 0));
    TRY(cudaSetDevice(0));
    size_t free_bytes = 0, total_bytes = 0;
    TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t budget = (size_t)((double)free_bytes * MEMORY_SHARE);
    if (n == 0) {
        n = DEFAULT_N;
        while (n > SMALLEST_N && bytes_needed(n) > budget) n /= 2;
    }
    if (bytes_needed(n) > budget) {
        fprintf(stderr, "bench_optimizer --backend cuda: %lld elements need %.2f GB of device "
                "memory, but %s has %.2f GB free; pass a smaller --n\n", (long long)n,
                (double)bytes_needed(n) / 1e9, prop.name, (double)free_bytes / 1e9);
        return 1;
    }

    bench b;
    memset(&b, 0, sizeof b);
    b.n = n;
    b.launch.max_blocks = prop.multiProcessorCount * ZS_CUDA_BLOCKS_PER_SM;
    int rc = 0;
    e = cudaStreamCreateWithFlags(&b.launch.stream, cudaStreamNonBlocking);
    for (int k = 0; k < 3 && e == cudaSuccess; k++) e = cudaEventCreate(&b.ev[k]);
    if (e != cudaSuccess) rc = failed(e, "creating the stream and events");
    if (rc == 0) rc = setup(&b);
    if (rc == 0) {
        printf("bench_optimizer --backend cuda: %s (%d SMs, %.1f GB), N = %lld elements, "
               "median of %d, each kernel against a device-to-device copy of the same bytes "
               "moved\n\n", prop.name, prop.multiProcessorCount, (double)total_bytes / 1e9,
               (long long)n, reps);
        printf("%-30s %6s %10s %10s %11s %11s %12s\n", "case", "B/el", "moved GB", "kernel ms",
               "kernel GB/s", "copy GB/s", "kernel/copy");
    }
    for (int c = 0; c < CASE_COUNT && rc == 0; c++) {
        double k_ms = 0, c_ms = 0;
        rc = time_case(&b, c, reps, &k_ms, &c_ms);
        if (rc != 0) break;
        const double moved = cases[c].bytes_per_el * (double)n;
        /* The copy moved 2 x floor(moved / 2) bytes. */
        const double copied = 2.0 * (double)(size_t)(moved / 2.0);
        const double k_gbs = moved / (k_ms * 1e-3) / 1e9, c_gbs = copied / (c_ms * 1e-3) / 1e9;
        printf("%-30s %6.2f %10.2f %10.3f %11.1f %11.1f %12.2f\n", cases[c].name,
               cases[c].bytes_per_el, moved / 1e9, k_ms, k_gbs, c_gbs, k_gbs / c_gbs);
        fflush(stdout);
    }
    teardown(&b);
    return rc;
}
