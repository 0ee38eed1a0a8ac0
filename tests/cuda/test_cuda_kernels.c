/* The CUDA backend against the CPU backend: every kernel runs on both over the
 * same inputs and the results are compared bit for bit (the kernels share the
 * element math of kernels/ headers, nvcc builds them with --fmad=false, and
 * the sum of squares uses the CPU's block and lane order).
 *
 * Two documented exceptions:
 *   - results of arithmetic that are NaN compare as "both NaN": x86 keeps an
 *     operand's NaN payload where the GPU returns the canonical NaN. Pure
 *     conversions (no arithmetic) are compared bitwise, NaN bits included.
 *   - normal initialization evaluates log and cos in double; CUDA's device
 *     libm and glibc may differ in the last double bit, which survives the
 *     rounding to float only rarely; those values may differ by 1 float ulp.
 *
 * Without a usable device: prints SKIP and exits 77 (ctest's skip code). */
#define _POSIX_C_SOURCE 200809L /* nanosleep */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "core/error.h"
#include "test_util.h"

static zs__mem cpu_mem, gpu_mem;
static zs__backend *cpu, *gpu;

static uint64_t rng_state = 0x243f6a8885a308d3ULL;
static uint64_t rnd(void) {
    rng_state += 0x9e3779b97f4a7c15ULL;
    uint64_t z = rng_state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
/* Uniform in [lo, hi). */
static float rndf(float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(rnd() >> 11) * 0x1.0p-53);
}

static size_t dsize(zs_dtype d) { return zs_dtype_size(d); }
static const char *dname(zs_dtype d) { return zs_dtype_name(d); }

/* A device copy of host data. */
static void *to_gpu(const void *host, size_t bytes) {
    void *p = NULL;
    ZT_REQUIRE(gpu->ops->alloc(gpu, ZS_MEM_SCRATCH, bytes, &p) == ZS_OK);
    ZT_OK(gpu->ops->upload(gpu, p, host, bytes));
    return p;
}

static void *from_gpu(const void *dev, size_t bytes) {
    void *h = malloc(bytes ? bytes : 1);
    ZT_REQUIRE(h != NULL);
    ZT_OK(gpu->ops->download(gpu, h, dev, bytes));
    return h;
}

static void gpu_free(void *p, size_t bytes) { gpu->ops->free(gpu, ZS_MEM_SCRATCH, p, bytes); }

static float elem_f32(const void *a, zs_dtype d, int64_t i) {
    float f;
    zs_convert(&f, ZS_DTYPE_FP32, (const char *)a + (size_t)i * dsize(d), d, 1);
    return f;
}

static int is_nan_elem(const void *a, zs_dtype d, int64_t i) { return isnan(elem_f32(a, d, i)); }

/* Compares n elements; nan_equal: NaN results of arithmetic match any NaN.
 * Prints the first few differences; returns the number of mismatches. */
static int64_t compare(const char *what, const void *want, const void *got, zs_dtype d,
                       int64_t n, int nan_equal) {
    const size_t s = dsize(d);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const void *a = (const char *)want + (size_t)i * s, *b = (const char *)got + (size_t)i * s;
        if (memcmp(a, b, s) == 0) continue;
        if (nan_equal && is_nan_elem(want, d, i) && is_nan_elem(got, d, i)) continue;
        if (bad < 5) {
            uint32_t ua = 0, ub = 0;
            memcpy(&ua, a, s);
            memcpy(&ub, b, s);
            fprintf(stderr, "  %s (%s): element %lld: cpu 0x%08x (%.9g), cuda 0x%08x (%.9g)\n",
                    what, dname(d), (long long)i, ua, (double)elem_f32(want, d, i), ub,
                    (double)elem_f32(got, d, i));
        }
        bad++;
    }
    ZT_CHECK_MSG(bad == 0, "%s: %lld of %lld elements differ", what, (long long)bad,
                 (long long)n);
    return bad;
}

/* convert(src_dtype -> dst_dtype) of host data on both backends. */
static void check_convert(const void *src, zs_dtype sd, zs_dtype dd, int64_t n, const char *what) {
    void *want = malloc((size_t)n * dsize(dd));
    ZT_REQUIRE(want != NULL);
    ZT_OK(cpu->ops->convert(cpu, want, dd, src, sd, n));
    void *gs = to_gpu(src, (size_t)n * dsize(sd)), *gd = NULL;
    ZT_REQUIRE(gpu->ops->alloc(gpu, ZS_MEM_SCRATCH, (size_t)n * dsize(dd), &gd) == ZS_OK);
    ZT_OK(gpu->ops->convert(gpu, gd, dd, gs, sd, n));
    void *got = from_gpu(gd, (size_t)n * dsize(dd));
    char label[128];
    snprintf(label, sizeof label, "convert %s %s -> %s", what, dname(sd), dname(dd));
    compare(label, want, got, dd, n, 0);
    gpu_free(gs, (size_t)n * dsize(sd));
    gpu_free(gd, (size_t)n * dsize(dd));
    free(want);
    free(got);
}

static void test_convert(void) {
    /* Every fp16 and bf16 pattern, to each other dtype. */
    uint16_t *all = malloc(65536 * sizeof *all);
    ZT_REQUIRE(all != NULL);
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    const zs_dtype dts[3] = {ZS_DTYPE_FP32, ZS_DTYPE_FP16, ZS_DTYPE_BF16};
    for (int s = 1; s < 3; s++)
        for (int d = 0; d < 3; d++) check_convert(all, dts[s], dts[d], 65536, "all patterns");
    free(all);
    /* fp32 -> 16-bit: random bit patterns (NaNs, infinities, subnormals)
     * plus every value near the fp16 and bf16 rounding boundaries. */
    const int64_t n = (int64_t)1 << 22;
    uint32_t *bits = malloc((size_t)n * sizeof *bits);
    ZT_REQUIRE(bits != NULL);
    int64_t k = 0;
    for (uint32_t h = 0; h < 0x10000u && k + 12 <= n; h++) {
        float f = elem_f32(&h, ZS_DTYPE_FP16, 0);
        uint32_t u;
        memcpy(&u, &f, 4);
        uint32_t mid16 = u + 0x1000u, midb = (h << 16) + 0x8000u; /* fp16 / bf16 ties */
        uint32_t c[6] = {u, mid16 - 1, mid16, mid16 + 1, midb - 1, midb};
        for (int j = 0; j < 6; j++) bits[k++] = c[j];
        bits[k++] = midb + 1;
    }
    for (; k < n; k++) bits[k] = (uint32_t)rnd();
    check_convert(bits, ZS_DTYPE_FP32, ZS_DTYPE_FP16, n, "fp32 sample");
    check_convert(bits, ZS_DTYPE_FP32, ZS_DTYPE_BF16, n, "fp32 sample");
    check_convert(bits, ZS_DTYPE_FP32, ZS_DTYPE_FP32, n, "fp32 sample");
    free(bits);
}

/* Random values of dtype d (through fp32), with a few non-finite ones. */
static void *random_array(zs_dtype d, int64_t n, float lo, float hi, int specials) {
    float *f = malloc((size_t)n * sizeof *f);
    void *out = malloc((size_t)n * dsize(d));
    ZT_REQUIRE(f && out);
    for (int64_t i = 0; i < n; i++) f[i] = rndf(lo, hi);
    if (specials && n > 100) {
        f[3] = INFINITY;
        f[17] = -INFINITY;
        f[42] = NAN;
        f[n - 1] = 1e-40f; /* subnormal */
    }
    ZT_OK(zs_convert(out, d, f, ZS_DTYPE_FP32, n));
    free(f);
    return out;
}

static void test_accumulate(void) {
    const int64_t n = 1000003;
    const zs_dtype dts[3] = {ZS_DTYPE_FP32, ZS_DTYPE_FP16, ZS_DTYPE_BF16};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            zs_dtype dd = dts[a], sd = dts[b];
            void *dst = random_array(dd, n, -100.0f, 100.0f, 1);
            void *src = random_array(sd, n, -100.0f, 100.0f, 0);
            void *gd = to_gpu(dst, (size_t)n * dsize(dd)), *gs = to_gpu(src, (size_t)n * dsize(sd));
            ZT_OK(cpu->ops->accumulate(cpu, dst, dd, src, sd, n));
            ZT_OK(gpu->ops->accumulate(gpu, gd, dd, gs, sd, n));
            void *got = from_gpu(gd, (size_t)n * dsize(dd));
            char label[96];
            snprintf(label, sizeof label, "accumulate %s += %s", dname(dd), dname(sd));
            compare(label, dst, got, dd, n, 1);
            /* x += x: the aliased case. */
            ZT_OK(cpu->ops->accumulate(cpu, dst, dd, dst, dd, n));
            ZT_OK(gpu->ops->accumulate(gpu, gd, dd, gd, dd, n));
            free(got);
            got = from_gpu(gd, (size_t)n * dsize(dd));
            compare("accumulate x += x", dst, got, dd, n, 1);
            free(got);
            free(dst);
            free(src);
            gpu_free(gd, (size_t)n * dsize(dd));
            gpu_free(gs, (size_t)n * dsize(sd));
        }
}

static void check_sumsq(const void *x, zs_dtype d, int64_t n, const char *what) {
    double want = -1.0, got = -2.0;
    ZT_OK(cpu->ops->sum_squares(cpu, x, d, n, &want));
    void *gx = to_gpu(x, (size_t)n * dsize(d));
    ZT_OK(gpu->ops->sum_squares(gpu, gx, d, n, &got));
    int same = memcmp(&want, &got, sizeof want) == 0 || (isnan(want) && isnan(got));
    ZT_CHECK_MSG(same, "sum_squares %s (%s, n=%lld): cpu %.17g, cuda %.17g", what, dname(d),
                 (long long)n, want, got);
    gpu_free(gx, (size_t)n * dsize(d));
}

static void test_sum_squares(void) {
    const zs_dtype dts[3] = {ZS_DTYPE_FP32, ZS_DTYPE_FP16, ZS_DTYPE_BF16};
    const int64_t sizes[] = {0, 1, 7, 8, 9, 4095, 4096, 4097, 3 * 4096 + 5, 1000003};
    for (int a = 0; a < 3; a++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            int64_t n = sizes[s];
            void *x = random_array(dts[a], n, -3.0f, 3.0f, 0);
            check_sumsq(x, dts[a], n, "finite");
            free(x);
        }
    /* Non-finite elements make the result non-finite on both. */
    for (int a = 0; a < 3; a++) {
        void *x = random_array(dts[a], 100000, -3.0f, 3.0f, 1);
        check_sumsq(x, dts[a], 100000, "with inf and NaN");
        free(x);
    }
    /* More blocks than one launch of the CUDA backend holds (2^16 blocks of
     * 4096): the batches must continue the block order. fp16 keeps it at
     * half a GiB. */
    const int64_t big = ((int64_t)1 << 28) + 4096 * 3 + 77;
    void *x = random_array(ZS_DTYPE_FP16, big, -2.0f, 2.0f, 0);
    check_sumsq(x, ZS_DTYPE_FP16, big, "across launch batches");
    free(x);
}

/* One optimizer configuration: several steps on both backends, then every
 * array compared. */
static void check_update(zs_k_optim_kind kind, double momentum, int nesterov, zs_dtype gd,
                         int param_dtype /* -1: none */) {
    const int64_t n = 300007;
    const int has_m = kind != ZS_K_OPTIM_SGD || momentum > 0, has_v = kind != ZS_K_OPTIM_SGD;
    float *master = random_array(ZS_DTYPE_FP32, n, -1.0f, 1.0f, 0);
    float *m = has_m ? random_array(ZS_DTYPE_FP32, n, -0.1f, 0.1f, 0) : NULL;
    float *v = has_v ? random_array(ZS_DTYPE_FP32, n, 0.0f, 0.01f, 0) : NULL;
    const zs_dtype pd = param_dtype < 0 ? ZS_DTYPE_FP32 : (zs_dtype)param_dtype;
    void *param = param_dtype < 0 ? NULL : calloc((size_t)n, dsize(pd));
    float *g_master = to_gpu(master, (size_t)n * 4);
    float *g_m = m ? to_gpu(m, (size_t)n * 4) : NULL, *g_v = v ? to_gpu(v, (size_t)n * 4) : NULL;
    void *g_param = NULL;
    if (param) ZT_REQUIRE(gpu->ops->alloc(gpu, ZS_MEM_SCRATCH, (size_t)n * dsize(pd), &g_param) == ZS_OK);
    for (int t = 1; t <= 3; t++) {
        void *grad = random_array(gd, n, -4000.0f, 4000.0f, 0);
        void *g_grad = to_gpu(grad, (size_t)n * dsize(gd));
        zs__update_args a = {
            .kind = kind, .master = master, .param = param, .param_dtype = pd, .grad = grad,
            .grad_dtype = gd, .m = m, .v = v, .count = n,
            .scalars = zs_k_optim_scalars_for_step(kind, 1e-3, 0.9, 0.999, 1e-8, 0.01,
                                                   momentum, nesterov, t, 3.0 * 1024.0, 0.75)};
        ZT_OK(cpu->ops->optimizer_update(cpu, &a));
        a.master = g_master;
        a.param = g_param;
        a.grad = g_grad;
        a.m = g_m;
        a.v = g_v;
        ZT_OK(gpu->ops->optimizer_update(gpu, &a));
        gpu_free(g_grad, (size_t)n * dsize(gd));
        free(grad);
    }
    char label[128];
    snprintf(label, sizeof label, "update kind %d mom %g nest %d grad %s param %s: ", (int)kind,
             momentum, nesterov, dname(gd), param ? dname(pd) : "none");
    char what[160];
    float *h = from_gpu(g_master, (size_t)n * 4);
    snprintf(what, sizeof what, "%smaster", label);
    compare(what, master, h, ZS_DTYPE_FP32, n, 1);
    free(h);
    if (m) {
        h = from_gpu(g_m, (size_t)n * 4);
        snprintf(what, sizeof what, "%sm", label);
        compare(what, m, h, ZS_DTYPE_FP32, n, 1);
        free(h);
    }
    if (v) {
        h = from_gpu(g_v, (size_t)n * 4);
        snprintf(what, sizeof what, "%sv", label);
        compare(what, v, h, ZS_DTYPE_FP32, n, 1);
        free(h);
    }
    if (param) {
        void *hp = from_gpu(g_param, (size_t)n * dsize(pd));
        snprintf(what, sizeof what, "%sparam", label);
        compare(what, param, hp, pd, n, 1);
        free(hp);
        gpu_free(g_param, (size_t)n * dsize(pd));
    }
    gpu_free(g_master, (size_t)n * 4);
    if (g_m) gpu_free(g_m, (size_t)n * 4);
    if (g_v) gpu_free(g_v, (size_t)n * 4);
    free(master);
    free(m);
    free(v);
    free(param);
}

static void test_update(void) {
    const zs_dtype dts[3] = {ZS_DTYPE_FP32, ZS_DTYPE_FP16, ZS_DTYPE_BF16};
    const int params[4] = {-1, ZS_DTYPE_FP32, ZS_DTYPE_FP16, ZS_DTYPE_BF16};
    for (int g = 0; g < 3; g++)
        for (int p = 0; p < 4; p++) {
            check_update(ZS_K_OPTIM_SGD, 0.0, 0, dts[g], params[p]);
            check_update(ZS_K_OPTIM_SGD, 0.9, 0, dts[g], params[p]);
            check_update(ZS_K_OPTIM_SGD, 0.9, 1, dts[g], params[p]);
            check_update(ZS_K_OPTIM_ADAM, 0.0, 0, dts[g], params[p]);
            check_update(ZS_K_OPTIM_ADAMW, 0.0, 0, dts[g], params[p]);
        }
}

static void test_init_fill(void) {
    const int64_t n = 1000003, first = 123456789;
    const zs_k_init_kind kinds[4] = {ZS_K_INIT_ZEROS, ZS_K_INIT_CONSTANT, ZS_K_INIT_UNIFORM,
                                     ZS_K_INIT_NORMAL};
    float *want = malloc((size_t)n * 4);
    ZT_REQUIRE(want != NULL);
    float *g = NULL;
    ZT_REQUIRE(gpu->ops->alloc(gpu, ZS_MEM_SCRATCH, (size_t)n * 4, (void **)&g) == ZS_OK);
    for (int k = 0; k < 4; k++) {
        ZT_OK(cpu->ops->init_fill(cpu, want, ZS_DTYPE_FP32, first, n, kinds[k], -0.02, 0.5, 0xfeedULL));
        ZT_OK(gpu->ops->init_fill(gpu, g, ZS_DTYPE_FP32, first, n, kinds[k], -0.02, 0.5, 0xfeedULL));
        float *got = from_gpu(g, (size_t)n * 4);
        if (kinds[k] != ZS_K_INIT_NORMAL) {
            compare("init_fill", want, got, ZS_DTYPE_FP32, n, 0);
        } else {
            /* Device log/cos in double may differ from glibc's in the last
             * bit; after rounding to float that shows rarely, as 1 ulp. */
            int64_t exact = 0, far = 0;
            for (int64_t i = 0; i < n; i++) {
                if (memcmp(&want[i], &got[i], 4) == 0) {
                    exact++;
                    continue;
                }
                if (fabsf(want[i] - got[i]) > fabsf(nextafterf(want[i], INFINITY) - want[i])) far++;
            }
            ZT_CHECK_MSG(far == 0, "init normal: %lld values differ by more than 1 ulp", (long long)far);
            ZT_CHECK_MSG(exact >= n - n / 1000, "init normal: only %lld of %lld values are "
                         "bit-identical", (long long)exact, (long long)n);
        }
        free(got);
    }
    ZT_FAILS_WITH(gpu->ops->init_fill(gpu, g, ZS_DTYPE_FP16, 0, 4, ZS_K_INIT_ZEROS, 0, 0, 1),
                  ZS_ERR_UNSUPPORTED, "fp16");
    gpu_free(g, (size_t)n * 4);
    free(want);
}

/* Allocation, zero, copy (overlapping too), accounting. */
static void test_memory(void) {
    const size_t bytes = 10 << 20;
    uint64_t before = gpu_mem.current[ZS_MEM_GRADS];
    unsigned char *p = NULL;
    ZT_OK(gpu->ops->alloc(gpu, ZS_MEM_GRADS, bytes, (void **)&p));
    ZT_EQ_U64(gpu_mem.current[ZS_MEM_GRADS], before + bytes);
    unsigned char *h = from_gpu(p, bytes), *ref = malloc(bytes);
    ZT_REQUIRE(ref != NULL);
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; i++) nonzero += h[i] != 0;
    ZT_EQ_U64(nonzero, 0);
    for (size_t i = 0; i < bytes; i++) ref[i] = (unsigned char)(i * 7 + 3);
    ZT_OK(gpu->ops->upload(gpu, p, ref, bytes));
    /* memmove semantics on overlapping ranges, both directions. */
    memmove(ref + 1000, ref, bytes / 2);
    ZT_OK(gpu->ops->copy(gpu, p + 1000, p, bytes / 2));
    memmove(ref, ref + 333, bytes / 2);
    ZT_OK(gpu->ops->copy(gpu, p, p + 333, bytes / 2));
    ZT_OK(gpu->ops->zero(gpu, p + 5, 77));
    memset(ref + 5, 0, 77);
    free(h);
    h = from_gpu(p, bytes);
    ZT_CHECK_MSG(memcmp(h, ref, bytes) == 0, "copy/zero/upload/download round trip differs");
    gpu->ops->free(gpu, ZS_MEM_GRADS, p, bytes);
    ZT_EQ_U64(gpu_mem.current[ZS_MEM_GRADS], before);
    free(h);
    free(ref);
}

static int health_calls;
static zs_status health_ok(void *ctx) {
    (void)ctx;
    health_calls++;
    return ZS_OK;
}
static zs_status health_bad(void *ctx) {
    (void)ctx;
    return zs__fail(ZS_ERR_COMM, "test: the peer is gone");
}
static void CUDART_CB sleep_on_stream(void *ms) {
    struct timespec t = {0, (long)(intptr_t)ms * 1000000L};
    nanosleep(&t, NULL);
}

/* Streams: the program's stream, ordered switching, and the health check
 * running (and ending the wait) while the backend blocks. */
static void test_streams(void) {
    ZT_FAILS_WITH(gpu->ops->set_stream(gpu, NULL), ZS_ERR_INVALID_ARGUMENT, "NULL");
    cudaStream_t own = gpu->ops->get_stream(gpu), mine;
    ZT_REQUIRE(own != NULL);
    ZT_REQUIRE(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking) == cudaSuccess);
    /* Work on the old stream (a slow host step, then an upload) must be done
     * before an op on the new stream reads its result. */
    const int64_t n = 1 << 20;
    float *x = random_array(ZS_DTYPE_FP32, n, -1.0f, 1.0f, 0), *g = NULL;
    ZT_REQUIRE(gpu->ops->alloc(gpu, ZS_MEM_SCRATCH, (size_t)n * 4, (void **)&g) == ZS_OK);
    ZT_REQUIRE(cudaLaunchHostFunc(own, sleep_on_stream, (void *)(intptr_t)50) == cudaSuccess);
    ZT_OK(gpu->ops->upload(gpu, g, x, (size_t)n * 4));
    ZT_OK(gpu->ops->set_stream(gpu, mine));
    ZT_CHECK(gpu->ops->get_stream(gpu) == (void *)mine);
    double want = 0, got = 1;
    ZT_OK(cpu->ops->sum_squares(cpu, x, ZS_DTYPE_FP32, n, &want));
    ZT_OK(gpu->ops->sum_squares(gpu, g, ZS_DTYPE_FP32, n, &got));
    ZT_CHECK_MSG(want == got, "sum_squares after a stream switch: cpu %.17g, cuda %.17g", want, got);
    /* The health check runs during a long wait... */
    gpu->ops->set_health_check(gpu, health_ok, NULL);
    ZT_REQUIRE(cudaLaunchHostFunc(mine, sleep_on_stream, (void *)(intptr_t)100) == cudaSuccess);
    ZT_OK(gpu->ops->synchronize(gpu));
    ZT_CHECK_MSG(health_calls >= 5, "the health check ran %d times during a 100 ms wait",
                 health_calls);
    /* ...and its failure ends the wait with its status. */
    gpu->ops->set_health_check(gpu, health_bad, NULL);
    ZT_REQUIRE(cudaLaunchHostFunc(mine, sleep_on_stream, (void *)(intptr_t)200) == cudaSuccess);
    ZT_FAILS_WITH(gpu->ops->synchronize(gpu), ZS_ERR_COMM, "the peer is gone");
    gpu->ops->set_health_check(gpu, NULL, NULL);
    ZT_OK(gpu->ops->synchronize(gpu));
    ZT_OK(gpu->ops->set_stream(gpu, own));
    ZT_OK(gpu->ops->synchronize(gpu));
    gpu_free(g, (size_t)n * 4);
    ZT_CHECK(cudaStreamDestroy(mine) == cudaSuccess);
    free(x);
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
    zs_status s = zs__cuda_backend_create(&settings, &gpu_mem, 0, &gpu);
    if (s != ZS_OK) fprintf(stderr, "cuda backend: %s\n", zs_last_error());
    ZT_REQUIRE(s == ZS_OK);
    ZT_CHECK(strcmp(gpu->ops->name, "cuda") == 0 && gpu->ops->host_accessible == 0);
    test_memory();
    test_convert();
    test_accumulate();
    test_sum_squares();
    test_update();
    test_init_fill();
    test_streams();
    ZT_OK(gpu->ops->synchronize(gpu));
    zs__backend_destroy(gpu);
    zs__backend_destroy(cpu);
    ZT_EQ_U64(gpu_mem.total_current, 0);
    return zt_finish("test_cuda_kernels");
}
