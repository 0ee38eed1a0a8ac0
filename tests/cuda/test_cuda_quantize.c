/* CUDA block quantization against the CPU backend's, bit for bit, in every
 * format (int8, int4, NF4): the integers, the scales and every dequantized
 * value (written into each dtype, and added), NaN bits included (every NaN
 * a dequantize writes is replaced by one pattern, zs_k_quant_nan_fixed, so
 * it is the same bits on both, also where the sum already held a NaN of
 * another sign and payload). The CPU side is itself checked against a
 * scalar reference at every SIMD level by tests/unit/test_quantize.c.
 *
 * The kernels read and write whole vectors when every pointer of a call is
 * aligned for them and element by element otherwise, and pick a warp or a
 * 256-thread block per quantization block by its length; so the cases cover
 * views at odd offsets (aligned and not), counts that leave a short last
 * item and a partial block, blocks from 1 to longer than the array, and
 * arrays large enough for the grid-stride loops to wrap. For NF4 the values
 * include exact midpoints between levels (x * (1 / amax) on one, where the
 * comparisons decide the level) and the floats next to them. Guard bytes
 * around every output view must stay untouched. Neither op may block the host
 * (zs__cuda_backend_waits).
 *
 * Without a usable device: prints SKIP and exits 77 (ctest's skip code). */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "kernels/init.h"
#include "kernels/quantize.h"
#include "test_util.h"

static zs__mem cpu_mem, gpu_mem;
static zs__backend *cpu, *gpu;

/* SplitMix64 (kernels/init.h's finalizer). */
static uint64_t rng = 0x243f6a8885a308d3ULL;
static uint64_t rnd(void) { return zs_k_mix64(rng += 0x9e3779b97f4a7c15ULL); }
static float rnd_unit(void) { return (float)((double)(rnd() >> 11) * 0x1.0p-52 - 1.0); }

static const zs_dtype dtypes[3] = {ZS_DTYPE_FP32, ZS_DTYPE_FP16, ZS_DTYPE_BF16};

/* The formats: int8, int4 and NF4 (bits -4). */
static const int formats[3] = {8, 4, ZS_K_QUANT_NF4};
static const char *fmt_name(int bits) { return bits == 8 ? "int8" : bits == 4 ? "int4" : "nf4"; }

/* ------------------------------------------------ device views with guards */

#define GUARD 64
#define GUARD_BYTE 0x5a

typedef struct view {
    unsigned char *base; /* device allocation */
    size_t total, off, bytes;
} view;

/* A device copy of host[0..bytes) starting `off` bytes into an allocation
 * (cudaMalloc's 256-byte alignment plus off), with guards either side. */
static view view_make(const void *host, size_t bytes, size_t off) {
    view v = {NULL, GUARD + off + bytes + GUARD, GUARD + off, bytes};
    unsigned char *fill = malloc(v.total);
    ZT_REQUIRE(fill != NULL);
    memset(fill, GUARD_BYTE, v.total);
    if (host && bytes) memcpy(fill + v.off, host, bytes);
    void *p = NULL;
    ZT_REQUIRE(gpu->ops->alloc(gpu, ZS_MEM_SCRATCH, v.total, &p) == ZS_OK);
    v.base = p;
    ZT_OK(gpu->ops->upload(gpu, v.base, fill, v.total));
    free(fill);
    return v;
}

static void *view_at(const view *v) { return v->base + v->off; }

/* The view's bytes (malloc'ed), after checking the guards. */
static void *view_read(const view *v, const char *what) {
    unsigned char *all = malloc(v->total);
    ZT_REQUIRE(all != NULL);
    ZT_OK(gpu->ops->download(gpu, all, v->base, v->total));
    size_t touched = 0;
    for (size_t i = 0; i < v->total; i++)
        if ((i < v->off || i >= v->off + v->bytes) && all[i] != GUARD_BYTE) touched++;
    ZT_CHECK_MSG(touched == 0, "%s: %zu bytes outside the view were written", what, touched);
    void *out = malloc(v->bytes + 1);
    ZT_REQUIRE(out != NULL);
    memcpy(out, all + v->off, v->bytes);
    free(all);
    return out;
}

static void view_free(view *v) { gpu->ops->free(gpu, ZS_MEM_SCRATCH, v->base, v->total); }

/* 0 when equal; else prints the first difference and returns 1. */
static int differ(const char *what, const void *want, const void *got, size_t bytes, size_t unit) {
    if (memcmp(want, got, bytes) == 0) return 0;
    size_t i = 0;
    while (i + unit < bytes && memcmp((const char *)want + i, (const char *)got + i, unit) == 0)
        i += unit;
    uint32_t a = 0, b = 0;
    memcpy(&a, (const char *)want + i, unit);
    memcpy(&b, (const char *)got + i, unit);
    ZT_CHECK_MSG(0, "%s: element %zu: cpu 0x%x, cuda 0x%x", what, i / unit, a, b);
    return 1;
}

/* --------------------------------------------------------------- cases */

/* Random values in blocks of random power-of-two magnitude `mag`, with now
 * and then an Inf, a NaN, a zero or a tie: for the integer formats a half
 * integer times mag, for NF4 +-mag (then the block's amax, and 1 / amax
 * exact) or mag times a midpoint between two levels (zs_k_nf4_index's
 * constants, read back from it) or a float next to one. */
static void fill(void *src, zs_dtype d, int64_t n, int64_t block, int bits) {
    float mid[15];
    for (int k = 0; k < 15; k++) { /* the largest float of index k */
        float lo = zs_k_nf4_level(k), hi = zs_k_nf4_level(k + 1);
        while (nextafterf(lo, hi) != hi) {
            const float m = lo + (hi - lo) / 2;
            if (zs_k_nf4_index(m) == k) lo = m;
            else hi = m;
        }
        mid[k] = lo;
    }
    float mag = 1.0f;
    for (int64_t i = 0; i < n; i++) {
        if (i % block == 0)
            mag = ldexpf(1.0f, d == ZS_DTYPE_FP16 ? (int)(rnd() % 24) - 14
                                                  : (int)(rnd() % 80) - 40);
        float x = mag * rnd_unit();
        const uint64_t r = rnd() % 4096;
        if (r == 0) x = INFINITY;
        else if (r == 1) x = -NAN;
        else if (r < 64) x = 0.0f;
        else if (bits != ZS_K_QUANT_NF4) {
            if (r < 256) x = mag * (float)((int)(rnd() % 255) - 127) * 0.5f; /* ties */
        } else if (r < 256) {
            x = r % 2 ? mag : -mag;
        } else if (r < 1024) {
            const float m = mid[rnd() % 15];
            x = mag * (r % 3 == 0 ? m : nextafterf(m, r % 3 == 1 ? 2.0f : -2.0f));
        }
        if (d == ZS_DTYPE_FP32) ((float *)src)[i] = x;
        else zs_convert((uint16_t *)src + i, d, &x, ZS_DTYPE_FP32, 1);
    }
}

/* One case: quantize n values of sd on both backends, then dequantize the
 * result into every dtype, written and added. Offsets in bytes move every
 * device view off its allocation's alignment (src and dst by whole
 * elements). Returns the number of comparisons that differed. */
static int run_case(zs_dtype sd, int64_t n, int64_t block, int bits, size_t src_off,
                    size_t q_off, size_t s_off, size_t dst_off) {
    char what[160];
    snprintf(what, sizeof what, "%s n=%lld block=%lld %s offsets %zu/%zu/%zu/%zu",
             zs_dtype_name(sd), (long long)n, (long long)block, fmt_name(bits), src_off, q_off,
             s_off, dst_off);
    const size_t ss = zs_dtype_size(sd);
    const size_t vbytes = (size_t)zs_k_quant_value_bytes(n, bits);
    const size_t sbytes = 4 * (size_t)zs_k_quant_blocks(n, block);
    void *src = malloc((size_t)n * ss + 1);
    unsigned char *q = malloc(vbytes + 1);
    float *s = malloc(sbytes + 4);
    ZT_REQUIRE(src && q && s);
    fill(src, sd, n, block, bits);
    ZT_OK(cpu->ops->quantize(cpu, q, s, src, sd, n, block, bits));

    view gsrc = view_make(src, (size_t)n * ss, src_off * ss);
    view gq = view_make(NULL, vbytes, q_off), gs = view_make(NULL, sbytes, 4 * s_off);
    view out[3][2];
    void *init[3];
    for (int dd = 0; dd < 3; dd++) {
        const size_t ds = zs_dtype_size(dtypes[dd]);
        init[dd] = malloc((size_t)n * ds + 1);
        ZT_REQUIRE(init[dd] != NULL);
        for (int64_t i = 0; i < n; i++) {
            /* Now and then a NaN (sign, payload) already in the sum. */
            const float nan = -NAN, a = rnd() % 512 ? 0.5f * rnd_unit() : nan;
            if (ds == 4) ((float *)init[dd])[i] = a;
            else zs_convert((uint16_t *)init[dd] + i, dtypes[dd], &a, ZS_DTYPE_FP32, 1);
        }
        for (int acc = 0; acc < 2; acc++)
            out[dd][acc] = view_make(init[dd], (size_t)n * ds, dst_off * ds);
    }
    /* Quantize, then dequantize every way, before reading anything back:
     * none of these may wait. */
    const uint64_t waits = zs__cuda_backend_waits(gpu);
    ZT_OK(gpu->ops->quantize(gpu, view_at(&gq), view_at(&gs), view_at(&gsrc), sd, n, block, bits));
    for (int dd = 0; dd < 3; dd++)
        for (int acc = 0; acc < 2; acc++)
            ZT_OK(gpu->ops->dequantize(gpu, view_at(&out[dd][acc]), dtypes[dd], acc,
                                       view_at(&gq), view_at(&gs), n, block, bits));
    int bad = 0;
    const uint64_t blocked = zs__cuda_backend_waits(gpu) - waits;
    ZT_CHECK_MSG(blocked == 0, "%s: quantize/dequantize blocked the host %llu times", what,
                 (unsigned long long)blocked);
    unsigned char *got_q = view_read(&gq, what);
    float *got_s = view_read(&gs, what);
    char label[200];
    snprintf(label, sizeof label, "%s: integers", what);
    bad += differ(label, q, got_q, vbytes, 1);
    snprintf(label, sizeof label, "%s: scales", what);
    bad += differ(label, s, got_s, sbytes, 4);
    for (int dd = 0; dd < 3; dd++) {
        const size_t ds = zs_dtype_size(dtypes[dd]);
        for (int acc = 0; acc < 2; acc++) {
            void *want = malloc((size_t)n * ds + 1);
            ZT_REQUIRE(want != NULL);
            memcpy(want, init[dd], (size_t)n * ds);
            ZT_OK(cpu->ops->dequantize(cpu, want, dtypes[dd], acc, q, s, n, block, bits));
            snprintf(label, sizeof label, "%s: dequantize%s into %s", what, acc ? "-add" : "",
                     zs_dtype_name(dtypes[dd]));
            void *got = view_read(&out[dd][acc], label);
            bad += differ(label, want, got, (size_t)n * ds, ds);
            free(want);
            free(got);
            view_free(&out[dd][acc]);
        }
        free(init[dd]);
    }
    free(got_q);
    free(got_s);
    view_free(&gsrc);
    view_free(&gq);
    view_free(&gs);
    free(src);
    free(q);
    free(s);
    return bad;
}

int main(void) {
    int devices = 0;
    cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) {
        printf("SKIP: no usable CUDA device: %s\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices");
        return 77;
    }
    zs__settings settings;
    memset(&settings, 0, sizeof settings);
    ZT_REQUIRE(zs__cpu_backend_create(&cpu_mem, &cpu) == ZS_OK);
    zs_status st = zs__cuda_backend_create(&settings, &gpu_mem, 0, &gpu);
    if (st != ZS_OK) fprintf(stderr, "cuda backend: %s\n", zs_last_error());
    ZT_REQUIRE(st == ZS_OK);

    /* Small and odd: every block length class, counts around an item (8)
     * and a block, views aligned and not. */
    static const int64_t blocks[] = {1, 2, 3, 7, 8, 32, 33, 256, 2047, 2048, 4099};
    static const int64_t counts[] = {1, 7, 8, 9, 17, 1000, 4099, 12345};
    static const size_t offs[][4] = {{0, 0, 0, 0}, {1, 1, 1, 1}, {0, 4, 0, 0}, {3, 2, 0, 5},
                                     {8, 8, 4, 8}, {0, 3, 0, 1}};
    int cases = 0, bad = 0;
    for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
            for (int sd = 0; sd < 3; sd++)
                for (int f = 0; f < 3; f++) {
                    const size_t *o = offs[(b + c + (size_t)sd + (size_t)f) % 6];
                    bad += run_case(dtypes[sd], counts[c], blocks[b], formats[f], o[0], o[1], o[2],
                                    o[3]);
                    cases++;
                }
    printf("test_cuda_quantize: %d small cases, %d comparisons differ\n", cases, bad);
    /* Large: the grid-stride loops wrap (grids are capped at 8 blocks per
     * SM); one block as long as the array (a single 256-thread group); a
     * block longer than the array. */
    static const int64_t big[][2] = {{(1 << 24) + 5, 256}, {(1 << 24) + 3, 2048},
                                     {3000001, 3000001}, {1 << 20, 1}, {999999, 1 << 30}};
    for (size_t k = 0; k < sizeof big / sizeof big[0]; k++)
        for (int f = 0; f < 3; f++) {
            bad += run_case(dtypes[k % 3], big[k][0], big[k][1], formats[f], 0, 0, 0, 0);
            bad += run_case(dtypes[(k + 1) % 3], big[k][0], big[k][1], formats[f], 1, 1, 1, 1);
        }
    printf("test_cuda_quantize: large cases done, %d comparisons differ\n", bad);

    /* Argument checks match the CPU backend's. */
    float one = 1.0f;
    ZT_FAILS_WITH(gpu->ops->quantize(gpu, &one, &one, &one, ZS_DTYPE_FP32, 1, 0, 8),
                  ZS_ERR_INVALID_ARGUMENT, "block >= 1");
    ZT_FAILS_WITH(gpu->ops->dequantize(gpu, &one, ZS_DTYPE_FP32, 0, &one, &one, 1, 4, 2),
                  ZS_ERR_INVALID_ARGUMENT, "bits 8, 4 or -4 (NF4)");
    ZT_OK(gpu->ops->synchronize(gpu));
    zs__backend_destroy(gpu);
    zs__backend_destroy(cpu);
    return zt_finish("test_cuda_quantize");
}
