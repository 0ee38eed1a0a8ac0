/* Every kernel op of the sim device against the CPU backend, bit for bit,
 * on the same inputs at odd offsets and lengths (what tests/cuda's
 * test_cuda_kernels and test_cuda_quantize check on a GPU): convert between
 * every pair of dtypes, accumulate, sums of squares, the fused optimizer
 * update (AdamW, a bf16 parameter copy, an fp16 gradient), block
 * quantization and dequantization (int8, int4 and NF4, written and added),
 * initialization, zero, and an overlapping copy (memmove semantics). The
 * sim device runs the CPU's kernels on its own thread through its own view
 * of device memory, so equal bits show the plumbing (addresses, sizes, the
 * order of ops) right; the ops that do not hand a value back never block
 * the host (the backend's blocking waits), and the stream-order check,
 * on, finds nothing. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/config.h"
#include "core/memory.h"
#include "test_util.h"

static zs__mem g_mem;
static zs__backend *g_sim, *g_cpu;

/* A device buffer holding a copy of host[0..bytes). */
static void *to_device(const void *host, size_t bytes) {
    void *d = NULL;
    ZT_OK(g_sim->ops->alloc(g_sim, ZS_MEM_SCRATCH, bytes, &d));
    ZT_OK(g_sim->ops->upload(g_sim, d, host, bytes));
    return d;
}

static void from_device(void *host, const void *d, size_t bytes) {
    ZT_OK(g_sim->ops->download(g_sim, host, d, bytes));
}

static void drop(void *d, size_t bytes) { g_sim->ops->free(g_sim, ZS_MEM_SCRATCH, d, bytes); }

/* Reproducible values with every kind of float: normal, tiny, huge, signed
 * zeros, now and then an infinity and a NaN when `specials`. */
static void fill(float *x, int64_t n, uint32_t seed, int specials) {
    uint32_t s = seed * 2654435761u + 12345u;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        const float u = (float)(s >> 8) / (float)(1u << 24) - 0.5f;
        x[i] = u * (i % 7 == 0 ? 1e-30f : i % 11 == 0 ? 1e20f : 3.0f);
        if (i % 13 == 0) x[i] = i % 2 ? -0.0f : 0.0f;
        if (specials && i % 97 == 5) x[i] = i % 3 ? INFINITY : NAN;
    }
}

static void same(const void *a, const void *b, size_t bytes, const char *what) {
    size_t first = bytes;
    for (size_t i = 0; i < bytes && first == bytes; i++)
        if (((const unsigned char *)a)[i] != ((const unsigned char *)b)[i]) first = i;
    ZT_CHECK_MSG(first == bytes, "%s: the sim device and the cpu differ at byte %zu of %zu", what,
                 first, bytes);
}

static const zs_dtype dtypes[3] = {ZS_DTYPE_FP32, ZS_DTYPE_FP16, ZS_DTYPE_BF16};

static void convert_and_accumulate(int64_t n) {
    float *src32 = malloc((size_t)n * 4);
    fill(src32, n, (uint32_t)n, 1);
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            const size_t sa = zs_dtype_size(dtypes[a]), sb = zs_dtype_size(dtypes[b]);
            unsigned char *src = malloc((size_t)n * sa), *dst = malloc((size_t)n * sb),
                          *want = malloc((size_t)n * sb), *got = malloc((size_t)n * sb);
            ZT_OK(g_cpu->ops->convert(g_cpu, src, dtypes[a], src32, ZS_DTYPE_FP32, n));
            fill((float *)dst, (int64_t)((size_t)n * sb / 4), 7, 0);
            for (int acc = 0; acc < 2; acc++) {
                memcpy(want, dst, (size_t)n * sb);
                void *ds = to_device(src, (size_t)n * sa), *dd = to_device(dst, (size_t)n * sb);
                const uint64_t waits = zs__backend_blocking_waits(g_sim);
                if (acc) {
                    ZT_OK(g_cpu->ops->accumulate(g_cpu, want, dtypes[b], src, dtypes[a], n));
                    ZT_OK(g_sim->ops->accumulate(g_sim, dd, dtypes[b], ds, dtypes[a], n));
                } else {
                    ZT_OK(g_cpu->ops->convert(g_cpu, want, dtypes[b], src, dtypes[a], n));
                    ZT_OK(g_sim->ops->convert(g_sim, dd, dtypes[b], ds, dtypes[a], n));
                }
                ZT_CHECK_MSG(zs__backend_blocking_waits(g_sim) == waits,
                             "%s blocked the host", acc ? "accumulate" : "convert");
                from_device(got, dd, (size_t)n * sb);
                char what[96];
                snprintf(what, sizeof what, "%s %s -> %s, %lld elements",
                         acc ? "accumulate" : "convert", zs_dtype_name(dtypes[a]),
                         zs_dtype_name(dtypes[b]), (long long)n);
                same(got, want, (size_t)n * sb, what);
                drop(ds, (size_t)n * sa);
                drop(dd, (size_t)n * sb);
            }
            free(src);
            free(dst);
            free(want);
            free(got);
        }
    free(src32);
}

static void sums(int64_t n) {
    float *x = malloc((size_t)n * 4);
    fill(x, n, 99, 0);
    void *d[3];
    const void *h[3];
    zs_dtype dt[3];
    int64_t counts[3];
    unsigned char *conv[3];
    for (int k = 0; k < 3; k++) {
        conv[k] = malloc((size_t)n * zs_dtype_size(dtypes[k]));
        ZT_OK(g_cpu->ops->convert(g_cpu, conv[k], dtypes[k], x, ZS_DTYPE_FP32, n));
        d[k] = to_device(conv[k], (size_t)n * zs_dtype_size(dtypes[k]));
        h[k] = conv[k];
        dt[k] = dtypes[k];
        counts[k] = n - k;
    }
    double want[3], got[3];
    ZT_OK(g_cpu->ops->sum_squares_many(g_cpu, 3, h, dt, counts, want));
    const uint64_t waits = zs__backend_blocking_waits(g_sim);
    ZT_OK(g_sim->ops->sum_squares_many(g_sim, 3, (const void *const *)d, dt, counts, got));
    ZT_CHECK_MSG(zs__backend_blocking_waits(g_sim) - waits <= 1,
                 "the sums of squares of three arrays blocked the host more than once");
    same(got, want, sizeof want, "sum_squares_many");
    for (int k = 0; k < 3; k++) {
        drop(d[k], (size_t)n * zs_dtype_size(dtypes[k]));
        free(conv[k]);
    }
    free(x);
}

static void update(int64_t n) {
    float *master = malloc((size_t)n * 4), *m = malloc((size_t)n * 4), *v = malloc((size_t)n * 4);
    float *g32 = malloc((size_t)n * 4);
    uint16_t *grad = malloc((size_t)n * 2), *param = calloc((size_t)n, 2);
    fill(master, n, 3, 0);
    fill(m, n, 4, 0);
    fill(v, n, 5, 0);
    for (int64_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    fill(g32, n, 6, 0);
    ZT_OK(g_cpu->ops->convert(g_cpu, grad, ZS_DTYPE_FP16, g32, ZS_DTYPE_FP32, n));
    void *dm = to_device(master, (size_t)n * 4), *dmm = to_device(m, (size_t)n * 4),
         *dv = to_device(v, (size_t)n * 4), *dg = to_device(grad, (size_t)n * 2),
         *dp = to_device(param, (size_t)n * 2);
    zs__update_args a = {0};
    a.kind = ZS_K_OPTIM_ADAMW;
    a.param_dtype = ZS_DTYPE_BF16;
    a.grad_dtype = ZS_DTYPE_FP16;
    a.count = n;
    a.scalars = zs_k_optim_scalars_for_step(ZS_K_OPTIM_ADAMW, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.0,
                                            0, 3, 2.0, 0.5);
    zs__update_args h = a;
    h.master = master;
    h.m = m;
    h.v = v;
    h.grad = grad;
    h.param = param;
    ZT_OK(g_cpu->ops->optimizer_update(g_cpu, &h));
    a.master = dm;
    a.m = dmm;
    a.v = dv;
    a.grad = dg;
    a.param = dp;
    const uint64_t waits = zs__backend_blocking_waits(g_sim);
    ZT_OK(g_sim->ops->optimizer_update(g_sim, &a));
    ZT_CHECK_MSG(zs__backend_blocking_waits(g_sim) == waits, "the update blocked the host");
    float *got = malloc((size_t)n * 4);
    uint16_t *gotp = malloc((size_t)n * 2);
    from_device(got, dm, (size_t)n * 4);
    same(got, master, (size_t)n * 4, "optimizer_update: master");
    from_device(got, dmm, (size_t)n * 4);
    same(got, m, (size_t)n * 4, "optimizer_update: m");
    from_device(got, dv, (size_t)n * 4);
    same(got, v, (size_t)n * 4, "optimizer_update: v");
    from_device(gotp, dp, (size_t)n * 2);
    same(gotp, param, (size_t)n * 2, "optimizer_update: bf16 parameter");
    drop(dm, (size_t)n * 4);
    drop(dmm, (size_t)n * 4);
    drop(dv, (size_t)n * 4);
    drop(dg, (size_t)n * 2);
    drop(dp, (size_t)n * 2);
    free(master);
    free(m);
    free(v);
    free(g32);
    free(grad);
    free(param);
    free(got);
    free(gotp);
}

static const char *fmt_name(int bits) { return bits == 8 ? "int8" : bits == 4 ? "int4" : "nf4"; }

/* Quantizes n values in blocks of `block` on both, and dequantizes the
 * result every way; `specials`: now and then an Inf or a NaN (fill). */
static void quantization(int64_t n, int64_t block, int bits, int specials) {
    float *x = malloc((size_t)n * 4);
    fill(x, n, (uint32_t)(n + bits), specials);
    const size_t qb = (size_t)zs_k_quant_value_bytes(n, bits);
    const size_t sb = (size_t)zs_k_quant_blocks(n, block) * 4;
    unsigned char *q = malloc(qb + 1), *gq = malloc(qb + 1);
    float *sc = malloc(sb + 4), *gsc = malloc(sb + 4);
    ZT_OK(g_cpu->ops->quantize(g_cpu, q, sc, x, ZS_DTYPE_FP32, n, block, bits));
    void *dx = to_device(x, (size_t)n * 4), *dq = NULL, *ds = NULL;
    ZT_OK(g_sim->ops->alloc(g_sim, ZS_MEM_SCRATCH, qb, &dq));
    ZT_OK(g_sim->ops->alloc(g_sim, ZS_MEM_SCRATCH, sb, &ds));
    const uint64_t waits = zs__backend_blocking_waits(g_sim);
    ZT_OK(g_sim->ops->quantize(g_sim, dq, ds, dx, ZS_DTYPE_FP32, n, block, bits));
    ZT_CHECK_MSG(zs__backend_blocking_waits(g_sim) == waits, "quantize blocked the host");
    from_device(gq, dq, qb);
    from_device(gsc, ds, sb);
    char what[96];
    snprintf(what, sizeof what, "quantize %s, block %lld, %lld elements", fmt_name(bits),
             (long long)block, (long long)n);
    same(gq, q, qb, what);
    same(gsc, sc, sb, what);
    for (int d = 0; d < 3; d++)
        for (int acc = 0; acc < 2; acc++) {
            const size_t eb = zs_dtype_size(dtypes[d]);
            unsigned char *want = malloc((size_t)n * eb), *got = malloc((size_t)n * eb);
            fill((float *)want, (int64_t)((size_t)n * eb / 4), 8, 0);
            void *dd = to_device(want, (size_t)n * eb);
            ZT_OK(g_cpu->ops->dequantize(g_cpu, want, dtypes[d], acc, q, sc, n, block, bits));
            ZT_OK(g_sim->ops->dequantize(g_sim, dd, dtypes[d], acc, dq, ds, n, block, bits));
            from_device(got, dd, (size_t)n * eb);
            snprintf(what, sizeof what, "dequantize %s into %s%s", fmt_name(bits),
                     zs_dtype_name(dtypes[d]), acc ? " (added)" : "");
            same(got, want, (size_t)n * eb, what);
            drop(dd, (size_t)n * eb);
            free(want);
            free(got);
        }
    drop(dx, (size_t)n * 4);
    drop(dq, qb);
    drop(ds, sb);
    free(x);
    free(q);
    free(gq);
    free(sc);
    free(gsc);
}

static void fill_zero_copy(int64_t n) {
    float *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    void *d = NULL;
    ZT_OK(g_sim->ops->alloc(g_sim, ZS_MEM_SCRATCH, (size_t)n * 4, &d));
    ZT_OK(g_cpu->ops->init_fill(g_cpu, want, ZS_DTYPE_FP32, 17, n, ZS_K_INIT_NORMAL, 0.0, 0.3, 77));
    ZT_OK(g_sim->ops->init_fill(g_sim, d, ZS_DTYPE_FP32, 17, n, ZS_K_INIT_NORMAL, 0.0, 0.3, 77));
    from_device(got, d, (size_t)n * 4);
    same(got, want, (size_t)n * 4, "init_fill");
    /* Overlapping: elements [0, n - 5) moved 5 to the right, as memmove. */
    memmove(want + 5, want, (size_t)(n - 5) * 4);
    ZT_OK(g_sim->ops->copy(g_sim, (float *)d + 5, d, (size_t)(n - 5) * 4));
    from_device(got, d, (size_t)n * 4);
    same(got, want, (size_t)n * 4, "an overlapping device copy");
    ZT_OK(g_sim->ops->zero(g_sim, (float *)d + 3, (size_t)(n - 7) * 4));
    memset(want + 3, 0, (size_t)(n - 7) * 4);
    from_device(got, d, (size_t)n * 4);
    same(got, want, (size_t)n * 4, "zero");
    drop(d, (size_t)n * 4);
    free(want);
    free(got);
}

int main(void) {
    zs__settings s;
    memset(&s, 0, sizeof s);
    s.backend = ZS_BACKEND_SIM;
    ZT_OK(zs__sim_backend_create(&s, &g_mem, &g_sim));
    ZT_OK(zs__cpu_backend_create(&g_mem, &g_cpu));
    /* Odd lengths, one above the CPU's parallel threshold (65536). */
    const int64_t lengths[] = {1, 13, 1000, 70001};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        convert_and_accumulate(lengths[i]);
        sums(lengths[i] + 3);
        update(lengths[i]);
        fill_zero_copy(lengths[i] + 8);
        quantization(lengths[i], 48, 8, 1);
        quantization(lengths[i], 33, 4, 1);
        /* NF4 in QLoRA's blocks of 64, with and without Inf and NaN, and
         * in odd blocks (a block starting in a high nibble). */
        quantization(lengths[i], 64, ZS_K_QUANT_NF4, 1);
        quantization(lengths[i], 64, ZS_K_QUANT_NF4, 0);
        quantization(lengths[i], 7, ZS_K_QUANT_NF4, 1);
    }
    ZT_OK(g_sim->ops->synchronize(g_sim));
    zs__backend_destroy(g_sim);
    zs__backend_destroy(g_cpu);
    return zt_finish("test_sim_kernels");
}
