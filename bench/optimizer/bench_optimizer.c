/* Throughput of the fused AdamW pass of the CPU backend, per SIMD level,
 * against the memory bandwidth this machine reaches in the same run.
 *
 * The fused step streams every array once: it is memory-bound when the
 * element math is vectorized, so the bound is a streaming kernel that moves
 * the same bytes per parameter (reads and writes counted separately):
 *   fp32:       reads p, m, v, g (16 B), writes p, m, v (12 B)              = 28 B
 *   fp16/bf16:  reads master, m, v (12 B) + grad (2 B), writes master, m, v
 *               (12 B) + the 16-bit parameter copy (2 B)                    = 28 B
 * Both kernels run on the same arrays with the same OpenMP threads; the table
 * gives bytes/s of each and fused / bound (target: >= 0.75 with 2 threads).
 *
 *   build/bench/optimizer/bench_optimizer [--n 67108864] [--reps 10]
 *   OMP_NUM_THREADS overrides the default of 2 threads.
 *
 * --backend cuda measures the runtime's CUDA kernels (fused update, convert,
 * accumulate, sum of squares) on the device instead, each against a
 * device-to-device copy of the same bytes (bench_optimizer_cuda.c; a build
 * or machine without CUDA says so and exits 0). There --reps is the number
 * of timed repetitions whose median is shown, and --n defaults to 2^28
 * elements, or as many as fit the device.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_isa.h"
#include "bench_cuda.h"
#include "core/number.h"
#include "kernels/convert.h"

typedef struct arrays {
    float *p, *m, *v, *g32; /* fp32 master (or parameters), moments, fp32 gradient */
    uint16_t *g16, *param16; /* 16-bit gradient and parameter copy */
} arrays;

static void *alloc_or_die(size_t bytes) {
    /* Rounded up to the alignment, as aligned_alloc requires. */
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "bench_optimizer: out of memory allocating %zu bytes; try a smaller --n\n", bytes);
        exit(1);
    }
    return p;
}

/* Values like those of a real step: no zeros or subnormals that could make one
 * kernel faster than another. First touch in parallel, as the kernels read. */
static void fill(arrays *a, int64_t n, zs_dtype grad16_dtype) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        uint64_t h = zs_k_mix64((uint64_t)i);
        float u = (float)((h >> 40) * 0x1.0p-24) - 0.5f;   /* [-0.5, 0.5) */
        float w = (float)(((h >> 16) & 0xffffff) * 0x1.0p-24) + 0.5f; /* [0.5, 1.5) */
        a->p[i] = 0.02f * u;
        a->m[i] = 1e-3f * u;
        a->v[i] = 1e-6f * w;
        a->g32[i] = 1e-2f * u * w + 1e-4f;
        a->g16[i] = grad16_dtype == ZS_DTYPE_FP16 ? zs_k_fp32_to_fp16(a->g32[i])
                                                   : zs_k_fp32_to_bf16(a->g32[i]);
        a->param16[i] = 0;
    }
}

/* The bandwidth bounds: same bytes per element as the fused step, trivial
 * math (the scale keeps values from drifting into subnormals or overflow).
 * Compiled for the baseline and for AVX-512 (via the template below); the
 * bound is the faster of the two, so no level of the fused step is compared
 * with a handicapped bound. */
#define STREAM_KERNELS(suffix, target)                                               \
    target static void stream_fp32_##suffix(arrays *a, int64_t n) {                  \
        float *restrict p = a->p, *restrict m = a->m, *restrict v = a->v;             \
        const float *restrict g = a->g32;                                             \
        const float c = 1e-30f;                                                       \
        _Pragma("omp parallel for simd schedule(static)")                             \
        for (int64_t i = 0; i < n; i++) {                                             \
            float x = g[i] * c;                                                       \
            p[i] += x;                                                                \
            m[i] += x;                                                                \
            v[i] += x;                                                                \
        }                                                                             \
    }                                                                                 \
    target static void stream_16_##suffix(arrays *a, int64_t n) {                    \
        float *restrict p = a->p, *restrict m = a->m, *restrict v = a->v;             \
        const uint16_t *restrict g = a->g16;                                          \
        uint16_t *restrict q = a->param16;                                            \
        const float c = 1e-30f;                                                       \
        _Pragma("omp parallel for simd schedule(static)")                             \
        for (int64_t i = 0; i < n; i++) {                                             \
            float x = (float)g[i] * c;                                                \
            p[i] += x;                                                                \
            m[i] += x;                                                                \
            v[i] += x;                                                                \
            q[i] = (uint16_t)(g[i] ^ 1u);                                             \
        }                                                                             \
    }

STREAM_KERNELS(base, )
#if ZS_CPU_X86
STREAM_KERNELS(avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx2"))))
#endif

typedef struct bench_case {
    const char *name;
    zs_dtype grad_dtype;  /* fp32, or the 16-bit dtype */
    zs_dtype param_dtype; /* fp32 means no separate copy (master = param) */
} bench_case;

static double now(void) { return omp_get_wtime(); }

/* Seconds of one fused step. */
static double run_fused(zs__backend *be, zs__cpu_isa level, const zs__update_args *args) {
    if (zs__cpu_set_isa(level) != ZS_OK) exit(1);
    double t0 = now();
    zs_status st = be->ops->optimizer_update(be, args);
    double t = now() - t0;
    if (st != ZS_OK) {
        fprintf(stderr, "bench_optimizer: optimizer_update: %s: %s\n", zs_status_name(st), zs_last_error());
        exit(1);
    }
    return t;
}

/* Seconds of one pass of the streaming bound: the faster of its variants. */
static double run_stream(arrays *a, int64_t n, int sixteen) {
    double t0 = now();
    if (sixteen) stream_16_base(a, n);
    else stream_fp32_base(a, n);
    double best = now() - t0;
#if ZS_CPU_X86
    if (zs__cpu_isa_supported(ZS_CPU_ISA_AVX512)) {
        t0 = now();
        if (sixteen) stream_16_avx512(a, n);
        else stream_fp32_avx512(a, n);
        double t = now() - t0;
        if (t < best) best = t;
    }
#endif
    return best;
}

int main(int argc, char **argv) {
    int64_t n = 0; /* 0: each half's default */
    int reps = 10, usage = argc % 2 == 0;
    const char *backend = "cpu";
    for (int i = 1; i + 1 < argc; i += 2) {
        zs_status st = ZS_OK;
        if (strcmp(argv[i], "--n") == 0) {
            st = zs__number_option_int64(argv[i], argv[i + 1], 1, INT64_MAX / 16, &n);
        } else if (strcmp(argv[i], "--reps") == 0) {
            st = zs__number_option_int(argv[i], argv[i + 1], 1, INT32_MAX, &reps);
        } else if (strcmp(argv[i], "--backend") == 0) {
            backend = argv[i + 1];
        } else {
            usage = 1;
        }
        if (st != ZS_OK) {
            fprintf(stderr, "bench_optimizer: %s\n", zs_last_error());
            return 2;
        }
    }
    const int cuda = strcmp(backend, "cuda") == 0;
    if (usage || reps <= 0 || (!cuda && strcmp(backend, "cpu") != 0)) {
        fprintf(stderr, "usage: bench_optimizer [--backend cpu|cuda] [--n parameters] "
                        "[--reps repetitions]\n");
        return 2;
    }
    if (cuda) return bench_optimizer_cuda(n, reps);
    if (n == 0) n = (int64_t)1 << 26;
    if (!getenv("OMP_NUM_THREADS")) omp_set_num_threads(2);
    const int threads = omp_get_max_threads();

    arrays a;
    a.p = alloc_or_die(sizeof(float) * (size_t)n);
    a.m = alloc_or_die(sizeof(float) * (size_t)n);
    a.v = alloc_or_die(sizeof(float) * (size_t)n);
    a.g32 = alloc_or_die(sizeof(float) * (size_t)n);
    a.g16 = alloc_or_die(sizeof(uint16_t) * (size_t)n);
    a.param16 = alloc_or_die(sizeof(uint16_t) * (size_t)n);

    zs__mem mem;
    memset(&mem, 0, sizeof mem);
    zs__backend *be = NULL;
    if (zs__cpu_backend_create(&mem, &be) != ZS_OK) return 1;

    printf("bench_optimizer: fused AdamW step, N = %lld parameters, %d OpenMP threads, best of %d\n",
           (long long)n, threads, reps);
    printf("kernels built with -fno-math-errno (vectorized sqrtf): %s; best level on this CPU: %s\n\n",
           zs__cpu_kernels_scalar.math_errno_off ? "yes" : "no (add cmake/ZsSimd.cmake)",
           zs__cpu_isa_name(zs__cpu_isa_best()));
    printf("%-26s %5s %11s  %-7s %10s %11s %11s %8s\n", "case", "B/el", "bound GB/s", "level",
           "step ms", "Gparam/s", "fused GB/s", "ratio");

    const bench_case cases[] = {
        {"fp32 (master = param)", ZS_DTYPE_FP32, ZS_DTYPE_FP32},
        {"fp16 param + fp32 master", ZS_DTYPE_FP16, ZS_DTYPE_FP16},
        {"bf16 param + fp32 master", ZS_DTYPE_BF16, ZS_DTYPE_BF16},
    };
    const double bytes_per_el = 28.0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const bench_case *bc = &cases[c];
        const int sixteen = bc->grad_dtype != ZS_DTYPE_FP32;
        fill(&a, n, sixteen ? bc->grad_dtype : ZS_DTYPE_FP16);
        zs__update_args args = {
            .kind = ZS_K_OPTIM_ADAMW,
            .master = a.p,
            .param = sixteen ? (void *)a.param16 : NULL,
            .param_dtype = bc->param_dtype,
            .grad = sixteen ? (const void *)a.g16 : (const void *)a.g32,
            .grad_dtype = bc->grad_dtype,
            .m = a.m,
            .v = a.v,
            .count = n,
            .scalars = zs_k_optim_scalars_for_step(ZS_K_OPTIM_ADAMW, 1e-3, 0.9, 0.999, 1e-8,
                                                   0.01, 0.0, 0, 10, 1.0, 1.0),
        };
        /* The bound and every level take turns within each repetition, so a
         * change in the machine's load during the run affects all of them
         * alike; the first round is an untimed warm-up. Best of reps. */
        double bound_s = INFINITY, level_s[ZS_CPU_ISA_COUNT];
        for (int level = 0; level < ZS_CPU_ISA_COUNT; level++) level_s[level] = INFINITY;
        for (int r = 0; r <= reps; r++) {
            double t = run_stream(&a, n, sixteen);
            if (r > 0 && t < bound_s) bound_s = t;
            for (int level = 0; level < ZS_CPU_ISA_COUNT; level++) {
                if (!zs__cpu_isa_supported((zs__cpu_isa)level)) continue;
                t = run_fused(be, (zs__cpu_isa)level, &args);
                if (r > 0 && t < level_s[level]) level_s[level] = t;
            }
        }
        const double bound_bps = bytes_per_el * (double)n / bound_s;
        for (int level = 0; level < ZS_CPU_ISA_COUNT; level++) {
            if (!zs__cpu_isa_supported((zs__cpu_isa)level)) continue;
            const double s = level_s[level], bps = bytes_per_el * (double)n / s;
            printf("%-26s %5.0f %11.2f  %-7s %10.2f %11.3f %11.2f %8.2f\n", level == 0 ? bc->name : "",
                   bytes_per_el, bound_bps / 1e9, zs__cpu_isa_name((zs__cpu_isa)level), 1e3 * s,
                   (double)n / s / 1e9, bps / 1e9, bps / bound_bps);
        }
        fflush(stdout);
    }
    zs__cpu_set_isa(ZS_CPU_ISA_AUTO);
    zs__backend_destroy(be);
    free(a.p); free(a.m); free(a.v); free(a.g32); free(a.g16); free(a.param16);
    return 0;
}
