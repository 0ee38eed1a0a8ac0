/* The CPU backend's mixed-precision kernels at every instruction-set level
 * this machine supports (the scalar level forced included), against plain
 * scalar loops that call kernels/optimizer.h and kernels/convert.h directly:
 *   - the fused optimizer pass for every optimizer (SGD plain, with momentum,
 *     Nesterov; Adam; AdamW) x gradient dtype (fp32, fp16, bf16) x parameter
 *     copy (none, fp16, bf16): bit-identical master, state and parameter copy,
 *     in one call on 2 threads and in pieces of odd lengths at misaligned
 *     addresses; with non-finite gradients, identical except that NaNs are
 *     compared as NaNs (their payload bits are not specified by IEEE);
 *   - accumulate for every pair of dtypes: bit-identical;
 *   - sums of squares for every dtype: the same bits for 1 and 2 threads and
 *     at every level, within 1e-12 of a plain double sum, and non-finite when
 *     any element is. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_isa.h"
#include "kernels/convert.h"
#include "kernels/optimizer.h"
#include "test_util.h"

#define N 300007 /* above the parallel threshold, prime: every tail is partial */
#define PIECES_N 20011 /* the prefix also updated in pieces of odd lengths */

static const zs_dtype dtypes[3] = {ZS_DTYPE_FP32, ZS_DTYPE_FP16, ZS_DTYPE_BF16};

static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static double uniform(uint64_t *state) { return (double)(next_random(state) >> 11) * 0x1.0p-52 - 1.0; }

/* Values spread over many binades, with exact zeros and a few tiny ones. */
static float spread(uint64_t *state, double scale) {
    uint64_t r = next_random(state);
    if ((r & 63) == 0) return 0.0f;
    if ((r & 63) == 1) return (float)(1e-41 * uniform(state)); /* fp32 subnormal */
    return (float)(scale * uniform(state) * ldexp(1.0, (int)((r >> 8) % 24) - 12));
}

static float load_fp32(const void *base, zs_dtype dtype, int64_t i) {
    switch (dtype) {
    case ZS_DTYPE_FP16: return zs_k_fp16_to_fp32(((const uint16_t *)base)[i]);
    case ZS_DTYPE_BF16: return zs_k_bf16_to_fp32(((const uint16_t *)base)[i]);
    default: return ((const float *)base)[i];
    }
}

static void store_fp32(void *base, zs_dtype dtype, int64_t i, float value) {
    switch (dtype) {
    case ZS_DTYPE_FP16: ((uint16_t *)base)[i] = zs_k_fp32_to_fp16(value); break;
    case ZS_DTYPE_BF16: ((uint16_t *)base)[i] = zs_k_fp32_to_bf16(value); break;
    default: ((float *)base)[i] = value; break;
    }
}

static void *elem(void *base, zs_dtype dtype, int64_t i) {
    return (char *)base + (size_t)i * zs_dtype_size(dtype);
}

/* Arrays are allocated one element past an aligned address. */
static void *alloc_misaligned(size_t elem_size, int64_t n, void **base) {
    *base = malloc(elem_size * (size_t)(n + 1) + 64);
    ZT_REQUIRE(*base != NULL);
    return (char *)*base + elem_size;
}

/* The first index where a and b differ (n elements of `size` bytes), or -1.
 * With nan_as_nan, two NaNs of the same width count as equal. */
static int64_t first_difference(const void *a, const void *b, size_t size, int64_t n, int nan_as_nan,
                                zs_dtype dtype) {
    for (int64_t i = 0; i < n; i++) {
        if (memcmp((const char *)a + i * (int64_t)size, (const char *)b + i * (int64_t)size, size) == 0)
            continue;
        if (nan_as_nan && isnan(load_fp32(a, dtype, i)) && isnan(load_fp32(b, dtype, i))) continue;
        return i;
    }
    return -1;
}

/* ---------------------------------------------------------- fused update */

typedef struct optim_case {
    const char *name;
    zs_k_optim_kind kind;
    double momentum;
    int nesterov;
    int has_m, has_v;
} optim_case;

static const optim_case optim_cases[] = {
    {"sgd", ZS_K_OPTIM_SGD, 0.0, 0, 0, 0},
    {"sgd-momentum", ZS_K_OPTIM_SGD, 0.9, 0, 1, 0},
    {"sgd-nesterov", ZS_K_OPTIM_SGD, 0.9, 1, 1, 0},
    {"adam", ZS_K_OPTIM_ADAM, 0.0, 0, 1, 1},
    {"adamw", ZS_K_OPTIM_ADAMW, 0.0, 0, 1, 1},
};

/* The state of one run: master, m, v, gradient and parameter copy. */
typedef struct state {
    float *master, *m, *v;
    void *grad, *param;
    void *bases[5];
} state;

static void state_alloc(state *s) {
    s->master = alloc_misaligned(4, N, &s->bases[0]);
    s->m = alloc_misaligned(4, N, &s->bases[1]);
    s->v = alloc_misaligned(4, N, &s->bases[2]);
    s->grad = alloc_misaligned(4, N, &s->bases[3]);
    s->param = alloc_misaligned(4, N, &s->bases[4]);
}

static void state_free(state *s) {
    for (int i = 0; i < 5; i++) free(s->bases[i]);
}

/* Fills the initial state. With non_finite, some gradients are inf or NaN. */
static void state_fill(state *s, zs_dtype grad_dtype, uint64_t seed, int non_finite) {
    uint64_t rng = seed;
    for (int64_t i = 0; i < N; i++) {
        s->master[i] = spread(&rng, 1.0);
        s->m[i] = spread(&rng, 0.1);
        s->v[i] = (float)fabs(spread(&rng, 0.01));
        float g = spread(&rng, 3.0 * 65536.0); /* a loss-scaled sum */
        if (non_finite && i % 997 == 5) g = (i % 3 == 0) ? INFINITY : (i % 3 == 1) ? -INFINITY : NAN;
        store_fp32(s->grad, grad_dtype, i, g);
    }
    memset(s->param, 0xa5, 4 * (size_t)N);
}

static void state_copy(state *dst, const state *src) {
    memcpy(dst->master, src->master, 4 * (size_t)N);
    memcpy(dst->m, src->m, 4 * (size_t)N);
    memcpy(dst->v, src->v, 4 * (size_t)N);
    memcpy(dst->grad, src->grad, 4 * (size_t)N);
    memcpy(dst->param, src->param, 4 * (size_t)N);
}

static zs__update_args make_args(const optim_case *oc, state *s, int64_t first, int64_t count,
                                 zs_dtype grad_dtype, int has_param, zs_dtype param_dtype,
                                 zs_k_optim_scalars scalars) {
    zs__update_args a = {
        .kind = oc->kind,
        .master = s->master + first,
        .param = has_param ? elem(s->param, param_dtype, first) : NULL,
        .param_dtype = has_param ? param_dtype : ZS_DTYPE_FP32,
        .grad = elem(s->grad, grad_dtype, first),
        .grad_dtype = grad_dtype,
        .m = oc->has_m ? s->m + first : NULL,
        .v = oc->has_v ? s->v + first : NULL,
        .count = count,
        .scalars = scalars,
    };
    return a;
}

/* The reference: one element at a time, straight from the kernels/ headers. */
static void reference_update(const zs__update_args *a) {
    for (int64_t i = 0; i < a->count; i++) {
        float g = load_fp32(a->grad, a->grad_dtype, i);
        if (a->kind == ZS_K_OPTIM_SGD)
            zs_k_sgd_element(&a->master[i], a->m ? &a->m[i] : NULL, g, &a->scalars);
        else
            zs_k_adam_element(&a->master[i], &a->m[i], &a->v[i], g, &a->scalars,
                              a->kind == ZS_K_OPTIM_ADAMW);
        if (a->param) store_fp32(a->param, a->param_dtype, i, a->master[i]);
    }
}

static int compare_states(const state *got, const state *want, int64_t n, int nan_as_nan,
                          int has_param, zs_dtype param_dtype, const char *what) {
    struct { const char *name; const void *a, *b; size_t size; zs_dtype dtype; } arrays[4] = {
        {"master", got->master, want->master, 4, ZS_DTYPE_FP32},
        {"m", got->m, want->m, 4, ZS_DTYPE_FP32},
        {"v", got->v, want->v, 4, ZS_DTYPE_FP32},
        {"param", got->param, want->param, zs_dtype_size(param_dtype), param_dtype},
    };
    int ok = 1;
    for (int k = 0; k < (has_param ? 4 : 3); k++) {
        int64_t i = first_difference(arrays[k].a, arrays[k].b, arrays[k].size, n, nan_as_nan,
                                     arrays[k].dtype);
        ZT_CHECK_MSG(i < 0, "%s: %s[%lld] = %.9g, reference %.9g", what, arrays[k].name,
                     (long long)i, i < 0 ? 0.0 : load_fp32(arrays[k].a, arrays[k].dtype, i),
                     i < 0 ? 0.0 : load_fp32(arrays[k].b, arrays[k].dtype, i));
        ok &= i < 0;
    }
    return ok;
}

static void test_fused(zs__backend *be, const char *level, int non_finite) {
    state init, got, want;
    state_alloc(&init);
    state_alloc(&got);
    state_alloc(&want);
    int cases = 0, passed = 0;
    for (size_t oc_i = 0; oc_i < sizeof optim_cases / sizeof optim_cases[0]; oc_i++) {
        const optim_case *oc = &optim_cases[oc_i];
        for (int gd = 0; gd < 3; gd++) {
            for (int pc = 0; pc < 3; pc++) {
                const int has_param = pc > 0;
                const zs_dtype grad_dtype = dtypes[gd], param_dtype = has_param ? dtypes[pc] : ZS_DTYPE_FP32;
                /* Step 7, loss scale 2^16 over 3 ranks, clipping at 0.5, decay. */
                zs_k_optim_scalars sc = zs_k_optim_scalars_for_step(
                    oc->kind, 1e-3, 0.9, 0.95, 1e-8, 0.1, oc->momentum, oc->nesterov, 7,
                    3.0 * 65536.0, 0.5);
                state_fill(&init, grad_dtype, 1000 + oc_i * 9 + (uint64_t)gd * 3 + (uint64_t)pc, non_finite);
                char what[160];
                snprintf(what, sizeof what, "%s%s, %s, grad %s, param %s", level,
                         non_finite ? " (non-finite gradients)" : "", oc->name,
                         zs_dtype_name(grad_dtype), has_param ? zs_dtype_name(param_dtype) : "none");

                state_copy(&want, &init);
                zs__update_args ra = make_args(oc, &want, 0, N, grad_dtype, has_param, param_dtype, sc);
                reference_update(&ra);

                /* One call on 2 threads. */
                state_copy(&got, &init);
                zs__update_args a = make_args(oc, &got, 0, N, grad_dtype, has_param, param_dtype, sc);
                omp_set_num_threads(2);
                ZT_OK(be->ops->optimizer_update(be, &a));
                omp_set_num_threads(1);
                int ok = compare_states(&got, &want, N, non_finite, has_param, param_dtype, what);

                /* Pieces of lengths 1, 2, ..., 67 over a prefix (loop tails at
                 * every offset modulo the vector widths). */
                state_copy(&got, &init);
                for (int64_t off = 0, len = 1; off < PIECES_N; off += len, len = len == 67 ? 1 : len + 1) {
                    int64_t c = PIECES_N - off < len ? PIECES_N - off : len;
                    zs__update_args p = make_args(oc, &got, off, c, grad_dtype, has_param, param_dtype, sc);
                    ZT_OK(be->ops->optimizer_update(be, &p));
                }
                char what_pieces[200];
                snprintf(what_pieces, sizeof what_pieces, "%s, odd pieces", what);
                ok &= compare_states(&got, &want, PIECES_N, non_finite, has_param, param_dtype, what_pieces);
                cases++;
                passed += ok;
            }
        }
    }
    printf("level %s: fused update%s, %d/%d cases bit-identical to the scalar loop%s\n", level,
           non_finite ? " with non-finite gradients" : "", passed, cases,
           non_finite ? " (NaNs compared as NaNs)" : "");
    state_free(&init);
    state_free(&got);
    state_free(&want);
}

/* ------------------------------------------------------------ accumulate */

static void test_accumulate(zs__backend *be, const char *level) {
    void *dbase, *sbase, *rbase;
    void *dst = alloc_misaligned(4, N, &dbase), *src = alloc_misaligned(4, N, &sbase);
    void *ref = alloc_misaligned(4, N, &rbase);
    int pairs = 0;
    for (int dd = 0; dd < 3; dd++) {
        for (int sd = 0; sd < 3; sd++) {
            uint64_t rng = 77 + (uint64_t)dd * 3 + (uint64_t)sd;
            for (int64_t i = 0; i < N; i++) {
                float a = spread(&rng, 100.0), b = spread(&rng, 100.0);
                if (i % 1009 == 3) b = (i % 2) ? INFINITY : -INFINITY;
                store_fp32(ref, dtypes[dd], i, a);
                store_fp32(src, dtypes[sd], i, b);
            }
            memcpy(dst, ref, 4 * (size_t)N);
            for (int64_t i = 0; i < N; i++)
                store_fp32(ref, dtypes[dd], i,
                           load_fp32(ref, dtypes[dd], i) + load_fp32(src, dtypes[sd], i));
            omp_set_num_threads(2);
            ZT_OK(be->ops->accumulate(be, dst, dtypes[dd], src, dtypes[sd], N));
            omp_set_num_threads(1);
            int64_t i = first_difference(dst, ref, zs_dtype_size(dtypes[dd]), N, 0, dtypes[dd]);
            ZT_CHECK_MSG(i < 0, "%s: accumulate %s += %s: element %lld is %.9g, reference %.9g", level,
                         zs_dtype_name(dtypes[dd]), zs_dtype_name(dtypes[sd]), (long long)i,
                         i < 0 ? 0.0 : load_fp32(dst, dtypes[dd], i), i < 0 ? 0.0 : load_fp32(ref, dtypes[dd], i));
            pairs += i < 0;
        }
    }
    /* x += x, the one overlap allowed. */
    for (int64_t i = 0; i < 1000; i++) ((float *)dst)[i] = (float)i;
    ZT_OK(be->ops->accumulate(be, dst, ZS_DTYPE_FP32, dst, ZS_DTYPE_FP32, 1000));
    ZT_CHECK(((float *)dst)[999] == 1998.0f && ((float *)dst)[1] == 2.0f);
    ZT_FAILS_WITH(be->ops->accumulate(be, dst, (zs_dtype)5, src, ZS_DTYPE_FP32, 10),
                  ZS_ERR_INVALID_ARGUMENT, "dtype");
    printf("level %s: accumulate, %d/9 dtype pairs bit-identical\n", level, pairs);
    free(dbase);
    free(sbase);
    free(rbase);
}

/* --------------------------------------------------------- sum of squares */

/* sums[level][dtype]: the value at each level, compared across levels. */
static double level_sums[ZS_CPU_ISA_COUNT][3];

static void test_sum_squares(zs__backend *be, int level) {
    const char *name = zs__cpu_isa_name((zs__cpu_isa)level);
    void *base;
    void *x = alloc_misaligned(4, N, &base);
    for (int d = 0; d < 3; d++) {
        uint64_t rng = 5 + (uint64_t)d;
        for (int64_t i = 0; i < N; i++) store_fp32(x, dtypes[d], i, spread(&rng, 10.0));
        double one = 0, two = 0, plain = 0;
        omp_set_num_threads(1);
        ZT_OK(be->ops->sum_squares(be, x, dtypes[d], N, &one));
        omp_set_num_threads(2);
        ZT_OK(be->ops->sum_squares(be, x, dtypes[d], N, &two));
        omp_set_num_threads(1);
        for (int64_t i = 0; i < N; i++) {
            double v = load_fp32(x, dtypes[d], i);
            plain += v * v;
        }
        ZT_CHECK_MSG(memcmp(&one, &two, sizeof one) == 0, "%s, %s: 1 thread %.17g, 2 threads %.17g",
                     name, zs_dtype_name(dtypes[d]), one, two);
        ZT_CHECK_MSG(fabs(one - plain) <= 1e-12 * plain, "%s, %s: %.17g vs plain double sum %.17g",
                     name, zs_dtype_name(dtypes[d]), one, plain);
        level_sums[level][d] = one;
        if (level > 0)
            ZT_CHECK_MSG(memcmp(&level_sums[0][d], &one, sizeof one) == 0,
                         "%s, %s: %.17g differs from the scalar level's %.17g", name,
                         zs_dtype_name(dtypes[d]), one, level_sums[0][d]);

        /* Non-finite elements anywhere (first block, middle, last partial
         * block) make the sum non-finite: it is the overflow check. */
        const int64_t where[3] = {0, N / 2 + 3, N - 1};
        for (int w = 0; w < 3; w++) {
            float keep = load_fp32(x, dtypes[d], where[w]);
            for (int kind = 0; kind < 3; kind++) {
                float bad = kind == 0 ? INFINITY : kind == 1 ? -INFINITY : NAN;
                store_fp32(x, dtypes[d], where[w], bad);
                double r = 0;
                omp_set_num_threads(2);
                ZT_OK(be->ops->sum_squares(be, x, dtypes[d], N, &r));
                omp_set_num_threads(1);
                ZT_CHECK_MSG(kind == 2 ? isnan(r) : isinf(r) && r > 0,
                             "%s, %s: %s at %lld gives a sum of %g", name, zs_dtype_name(dtypes[d]),
                             kind == 0 ? "inf" : kind == 1 ? "-inf" : "NaN", (long long)where[w], r);
            }
            store_fp32(x, dtypes[d], where[w], keep);
        }
        /* Lengths that are not multiples of the lanes or blocks. */
        for (int64_t n = 0; n < 40; n++) {
            double r = -1, want = 0;
            ZT_OK(be->ops->sum_squares(be, x, dtypes[d], n, &r));
            for (int64_t i = 0; i < n; i++) {
                double v = load_fp32(x, dtypes[d], i);
                want += v * v;
            }
            ZT_CHECK_MSG(fabs(r - want) <= 1e-15 * want, "%s: %lld elements: %.17g vs %.17g", name,
                         (long long)n, r, want);
        }
    }
    ZT_FAILS_WITH(be->ops->sum_squares(be, x, (zs_dtype)3, 10, &level_sums[0][0]),
                  ZS_ERR_INVALID_ARGUMENT, "dtype");
    printf("level %s: sums of squares reproducible across threads and levels\n", name);
    free(base);
}

int main(void) {
    omp_set_num_threads(1);
    zs__mem mem;
    memset(&mem, 0, sizeof mem);
    zs__backend *be = NULL;
    ZT_OK(zs__cpu_backend_create(&mem, &be));
    ZT_REQUIRE(be != NULL);
    int tested = 0;
    for (int level = 0; level < ZS_CPU_ISA_COUNT; level++) {
        const char *name = zs__cpu_isa_name((zs__cpu_isa)level);
        if (!zs__cpu_isa_supported((zs__cpu_isa)level)) {
            printf("level %s: not supported by this CPU, skipped\n", name);
            continue;
        }
        ZT_OK(zs__cpu_set_isa((zs__cpu_isa)level));
        test_fused(be, name, 0);
        test_fused(be, name, 1);
        test_accumulate(be, name);
        test_sum_squares(be, level);
        tested++;
    }
    ZT_CHECK(tested >= 1);
    ZT_OK(zs__cpu_set_isa(ZS_CPU_ISA_AUTO));

    /* Argument checks of the fused pass. */
    float p = 0, g = 0;
    zs__update_args bad = {.kind = ZS_K_OPTIM_ADAM, .master = &p, .grad = &g,
                           .grad_dtype = ZS_DTYPE_FP32, .count = 1};
    ZT_FAILS_WITH(be->ops->optimizer_update(be, &bad), ZS_ERR_INTERNAL, "first-moment");
    bad.kind = ZS_K_OPTIM_SGD;
    bad.grad_dtype = (zs_dtype)4;
    ZT_FAILS_WITH(be->ops->optimizer_update(be, &bad), ZS_ERR_INVALID_ARGUMENT, "gradient dtype 4");
    bad.grad_dtype = ZS_DTYPE_FP32;
    bad.count = -1;
    ZT_FAILS_WITH(be->ops->optimizer_update(be, &bad), ZS_ERR_INVALID_ARGUMENT, ">= 0");
    zs__backend_destroy(be);
    ZT_EQ_U64(mem.total_current, 0);
    return zt_finish("test_fused");
}
