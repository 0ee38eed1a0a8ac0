/* The shared element math (kernels/) and the CPU backend's loops over it:
 * optimizer elements against formulas written here in double precision, the
 * CPU loops against element-by-element calls (bitwise), reproducible norms,
 * deterministic initialization, and the learning-rate schedules. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "kernels/init.h"
#include "kernels/optimizer.h"
#include "test_util.h"
#include "zero/ground.h"
#include "zero/schedule.h"

static double rnd(unsigned *state) {
    *state = *state * 1664525u + 1013904223u;
    return ((*state >> 8) / (double)(1u << 24)) * 2.0 - 1.0;
}

/* Relative error against the larger of |want| and `scale`, the magnitude of
 * the terms that were added (a sum that cancels is judged by its terms). */
static void check_close(double got, double want, double scale, double tol, const char *what, int i) {
    double ref = fabs(want) > scale ? fabs(want) : scale;
    double err = fabs(got - want) / (ref > 1e-30 ? ref : 1e-30);
    ZT_CHECK_MSG(err <= tol, "%s element %d: %.9g vs %.9g (rel err %.3g)", what, i, got, want, err);
}

static void test_optimizer_elements(void) {
    unsigned seed = 12345;
    const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.05, mu = 0.9;
    for (int kind = 0; kind < 3; kind++) {
        for (int t = 1; t <= 5; t++) {
            zs_k_optim_scalars s = zs_k_optim_scalars_for_step((zs_k_optim_kind)kind, lr, b1, b2,
                                                               eps, wd, mu, kind == 0, t, 3.0, 1.0);
            for (int i = 0; i < 200; i++) {
                float p = (float)rnd(&seed), m = (float)(0.1 * rnd(&seed));
                float v = (float)fabs(0.01 * rnd(&seed)), gsum = (float)(3.0 * rnd(&seed));
                double g = gsum / 3.0, x = p, want_p, want_m, want_v = 0;
                if (kind == ZS_K_OPTIM_SGD) {
                    g += wd * x;
                    want_m = mu * m + g;
                    want_p = x - lr * (g + mu * want_m); /* nesterov */
                    float pp = p, mm = m;
                    zs_k_sgd_element(&pp, &mm, gsum, &s);
                    check_close(pp, want_p, fabs(x), 1e-6, "sgd p", i);
                    check_close(mm, want_m, fabs(mu * m) + fabs(g), 1e-6, "sgd buf", i);
                    continue;
                }
                if (kind == ZS_K_OPTIM_ADAMW) x *= 1 - lr * wd;
                else g += wd * x;
                want_m = b1 * m + (1 - b1) * g;
                want_v = b2 * v + (1 - b2) * g * g;
                want_p = x - lr * (want_m / (1 - pow(b1, t))) /
                                 (sqrt(want_v / (1 - pow(b2, t))) + eps);
                float pp = p, mm = m, vv = v;
                zs_k_adam_element(&pp, &mm, &vv, gsum, &s, kind == ZS_K_OPTIM_ADAMW);
                check_close(pp, want_p, fabs(x), 1e-6, kind == ZS_K_OPTIM_ADAM ? "adam p" : "adamw p", i);
                check_close(mm, want_m, fabs(b1 * m) + fabs((1 - b1) * g), 1e-6, "adam m", i);
                check_close(vv, want_v, want_v, 1e-6, "adam v", i);
            }
        }
    }
    /* SGD without momentum keeps no state. */
    zs_k_optim_scalars s = zs_k_optim_scalars_for_step(ZS_K_OPTIM_SGD, 0.5, 0, 0, 0, 0, 0, 0, 1, 2.0, 1.0);
    float p = 1.0f;
    zs_k_sgd_element(&p, NULL, 4.0f, &s);
    ZT_CHECK_MSG(p == 0.0f, "plain sgd: 1 - 0.5 * (4 / 2) = 0, got %g", p);
}

/* The CPU backend's OpenMP loops must equal per-element calls bit for bit,
 * whatever the thread count. */
static void test_cpu_loops(void) {
    zs__mem mem;
    memset(&mem, 0, sizeof mem);
    zs__backend *be = NULL;
    ZT_OK(zs__cpu_backend_create(&mem, &be));
    const int64_t n = 300007; /* above the parallel threshold, and prime */
    float *p = malloc(sizeof(float) * n), *m = malloc(sizeof(float) * n), *v = malloc(sizeof(float) * n);
    float *g = malloc(sizeof(float) * n);
    float *rp = malloc(sizeof(float) * n), *rm = malloc(sizeof(float) * n), *rv = malloc(sizeof(float) * n);
    unsigned seed = 7;
    for (int kind = 0; kind < 3; kind++) {
        for (int64_t i = 0; i < n; i++) {
            p[i] = rp[i] = (float)rnd(&seed);
            m[i] = rm[i] = (float)(0.1 * rnd(&seed));
            v[i] = rv[i] = (float)fabs(0.01 * rnd(&seed));
            g[i] = (float)rnd(&seed);
        }
        zs__update_args args = {.kind = (zs_k_optim_kind)kind, .master = p, .param_dtype = ZS_DTYPE_FP32,
                                .grad = g, .grad_dtype = ZS_DTYPE_FP32, .m = m,
                                .v = kind == ZS_K_OPTIM_SGD ? NULL : v, .count = n,
                                .scalars = zs_k_optim_scalars_for_step((zs_k_optim_kind)kind, 1e-3,
                                    0.9, 0.95, 1e-8, 0.1, 0.9, 0, 7, 2.0, 1.0)};
        omp_set_num_threads(2);
        ZT_OK(be->ops->optimizer_update(be, &args));
        for (int64_t i = 0; i < n; i++) {
            if (kind == ZS_K_OPTIM_SGD) zs_k_sgd_element(&rp[i], &rm[i], g[i], &args.scalars);
            else zs_k_adam_element(&rp[i], &rm[i], &rv[i], g[i], &args.scalars, kind == ZS_K_OPTIM_ADAMW);
        }
        ZT_CHECK_MSG(memcmp(p, rp, sizeof(float) * n) == 0 && memcmp(m, rm, sizeof(float) * n) == 0,
                     "optimizer kind %d: OpenMP loop differs from the scalar reference", kind);
    }
    /* Norms: a fixed order, so 1 and 2 threads agree bit for bit, and the
     * value matches a plain double sum closely. */
    double one = 0, two = 0, plain = 0;
    omp_set_num_threads(1);
    ZT_OK(be->ops->sum_squares(be, g, ZS_DTYPE_FP32, n, &one));
    omp_set_num_threads(2);
    ZT_OK(be->ops->sum_squares(be, g, ZS_DTYPE_FP32, n, &two));
    for (int64_t i = 0; i < n; i++) plain += (double)g[i] * g[i];
    ZT_CHECK_MSG(memcmp(&one, &two, sizeof one) == 0, "norm depends on threads: %.17g vs %.17g", one, two);
    ZT_CHECK_MSG(fabs(one - plain) <= 1e-12 * plain, "norm %.17g vs plain sum %.17g", one, plain);
    /* Many arrays at once (zs_step's call): each value is the single call's
     * bits, empty arrays give 0, and a bad dtype names its array. */
    {
        const void *ptrs[4] = {g, g + 5, m, g};
        const zs_dtype dtypes[4] = {ZS_DTYPE_FP32, ZS_DTYPE_FP32, ZS_DTYPE_BF16, ZS_DTYPE_FP32};
        const int64_t counts[4] = {n, n - 5, 0, 4097};
        double many[4] = {-1, -1, -1, -1}, single;
        ZT_OK(be->ops->sum_squares_many(be, 4, ptrs, dtypes, counts, many));
        for (int a = 0; a < 4; a++) {
            ZT_OK(be->ops->sum_squares(be, ptrs[a], dtypes[a], counts[a], &single));
            ZT_CHECK_MSG(memcmp(&many[a], &single, sizeof single) == 0,
                         "sum_squares_many array %d: %.17g, sum_squares %.17g", a, many[a], single);
        }
        ZT_OK(be->ops->sum_squares_many(be, 0, NULL, NULL, NULL, NULL));
        const zs_dtype bad[4] = {ZS_DTYPE_FP32, ZS_DTYPE_FP32, (zs_dtype)7, ZS_DTYPE_FP32};
        ZT_FAILS_WITH(be->ops->sum_squares_many(be, 4, ptrs, bad, counts, many),
                      ZS_ERR_INVALID_ARGUMENT, "array 2 of 4");
    }

    /* Initialization by range equals element-by-element values. */
    uint64_t key = zs_k_param_key(42, "block.0.weight");
    ZT_OK(be->ops->init_fill(be, p, ZS_DTYPE_FP32, 1000, n, ZS_K_INIT_NORMAL, 0.0, 0.02, key));
    int same = 1;
    for (int64_t i = 0; i < n; i += 997)
        same &= p[i] == zs_k_init_value(ZS_K_INIT_NORMAL, 0.0, 0.02, key, (uint64_t)(1000 + i));
    ZT_CHECK_MSG(same, "init_fill by range differs from single-element values");
    free(p); free(m); free(v); free(g); free(rp); free(rm); free(rv);
    zs__backend_destroy(be);
    ZT_EQ_U64(mem.total_current, 0);
}

static void test_init_values(void) {
    /* Depends on seed and name: different names or seeds give other streams. */
    uint64_t a = zs_k_param_key(1, "w"), b = zs_k_param_key(1, "v"), c = zs_k_param_key(2, "w");
    ZT_CHECK(a != b && a != c);
    const int n = 200000;
    double sum = 0, sq = 0, lo = 1e9, hi = -1e9;
    for (int i = 0; i < n; i++) {
        double x = zs_k_init_value(ZS_K_INIT_NORMAL, 1.0, 2.0, a, (uint64_t)i);
        sum += x;
        sq += x * x;
        double u = zs_k_init_value(ZS_K_INIT_UNIFORM, -3.0, 5.0, b, (uint64_t)i);
        if (u < lo) lo = u;
        if (u > hi) hi = u;
    }
    double mean = sum / n, std = sqrt(sq / n - mean * mean);
    ZT_CHECK_MSG(fabs(mean - 1.0) < 0.02 && fabs(std - 2.0) < 0.02, "normal(1, 2): mean %g std %g", mean, std);
    ZT_CHECK_MSG(lo >= -3.0 && hi < 5.0 && lo < -2.99 && hi > 4.99, "uniform[-3, 5): range %g..%g", lo, hi);
    ZT_CHECK(zs_k_init_value(ZS_K_INIT_CONSTANT, 0.25, 0, a, 9) == 0.25f);
    ZT_CHECK(zs_k_init_value(ZS_K_INIT_ZEROS, 0.25, 0, a, 9) == 0.0f);
}

static void test_schedules(void) {
    zs__settings s;
    memset(&s, 0, sizeof s);
    s.optimizer.lr = 1.0;
    s.scheduler.kind = ZS_SCHEDULE_CONSTANT;
    ZT_CHECK(zs__schedule_lr(&s, 1) == 1.0 && zs__schedule_lr(&s, 1000) == 1.0);
    s.scheduler.kind = ZS_SCHEDULE_WARMUP_COSINE;
    s.scheduler.warmup_steps = 10;
    s.scheduler.total_steps = 110;
    s.scheduler.min_lr = 0.1;
    ZT_CHECK(fabs(zs__schedule_lr(&s, 1) - 0.1) < 1e-15);
    ZT_CHECK(fabs(zs__schedule_lr(&s, 5) - 0.5) < 1e-15);
    ZT_CHECK(fabs(zs__schedule_lr(&s, 10) - 1.0) < 1e-15);
    ZT_CHECK(fabs(zs__schedule_lr(&s, 60) - 0.55) < 1e-12); /* half-way: (1 + 0.1) / 2 */
    ZT_CHECK(fabs(zs__schedule_lr(&s, 110) - 0.1) < 1e-15);
    ZT_CHECK(fabs(zs__schedule_lr(&s, 500) - 0.1) < 1e-15);
    for (int t = 11; t < 110; t++) ZT_CHECK(zs__schedule_lr(&s, t) > zs__schedule_lr(&s, t + 1));
}

int main(void) {
    test_optimizer_elements();
    test_cpu_loops();
    test_init_values();
    test_schedules();
    return zt_finish("test_kernels");
}
