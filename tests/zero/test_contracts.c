/* Misuse of the API gives a clear status and message, on every rank, and
 * never a hang (run under mpirun -np 2):
 *   - ranks that loaded different configurations, or described different
 *     models, fail together naming the disagreement;
 *   - stage 3 refuses to hold more than max_live_units fetched units;
 *   - data and gradients are refused outside fetch/release, except a
 *     gradient opened without its parameters (zs_grads_open), which stage
 *     3 serves without a gather;
 *   - a step with a unit still fetched on one rank fails on every rank;
 *   - bad names, shapes and call orders are rejected. */
#define _DEFAULT_SOURCE /* mkdtemp */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "zeroshard_mpi.h"

static char g_path[256];

static zs_config *load(const char *override_a, const char *override_b) {
    zs_config *cfg = NULL;
    ZT_OK(zs_config_load(g_path, &cfg));
    if (override_a) ZT_OK(zs_config_override(cfg, override_a));
    if (override_b) ZT_OK(zs_config_override(cfg, override_b));
    return cfg;
}

static zs_ctx *create(const char *override_a, const char *override_b) {
    zs_config *cfg = load(override_a, override_b);
    zs_ctx *zs = NULL;
    ZT_OK(zs_create_with_comm(cfg, MPI_COMM_WORLD, &zs));
    zs_config_destroy(cfg);
    return zs;
}

/* Three units of one parameter each; `rows` lets a rank describe another model. */
static void describe(zs_ctx *zs, zs_param **params, int64_t rows) {
    for (int u = 0; u < 3; u++) {
        char name[32];
        snprintf(name, sizeof name, "u%d", u);
        ZT_OK(zs_unit_begin(zs, name, NULL));
        snprintf(name, sizeof name, "u%d.w", u);
        int64_t shape[2] = {u == 2 ? rows : 7, 11};
        ZT_OK(zs_param_create(zs, name, 2, shape, ZS_INIT_NORMAL_STD(0.1), 0, &params[u]));
        ZT_OK(zs_unit_end(zs));
    }
}

static void test_config_disagreement(void) {
    zs_config *cfg = load(zt_rank == 0 ? "optimizer.lr=0.5" : "optimizer.lr=0.25", NULL);
    zs_ctx *zs = NULL;
    ZT_FAILS_WITH(zs_create_with_comm(cfg, MPI_COMM_WORLD, &zs), ZS_ERR_MISMATCH,
                  "ranks disagree on the configuration hash: rank 1");
    ZT_CHECK(zs == NULL);
    zs_config_destroy(cfg);
}

static void test_layout_disagreement(void) {
    zs_ctx *zs = create(NULL, NULL);
    zs_param *params[3];
    describe(zs, params, zt_rank == 0 ? 5 : 6);
    ZT_FAILS_WITH(zs_build(zs), ZS_ERR_MISMATCH, "ranks disagree on the model layout: rank 1");
    zs_destroy(zs);
}

static void test_live_units_bound(void) {
    zs_ctx *zs = create("zero.stage=3", "zero.max_live_units=2");
    zs_param *params[3];
    describe(zs, params, 5);
    ZT_OK(zs_build(zs));
    ZT_CHECK(zs_param_data(params[0]) == NULL);
    ZT_CHECK(strstr(zs_last_error(), "'u0' is not fetched") != NULL);
    ZT_OK(zs_fetch(zs, zs_unit_at(zs, 0)));
    ZT_OK(zs_fetch(zs, zs_unit_at(zs, 1)));
    ZT_FAILS_WITH(zs_fetch(zs, zs_unit_at(zs, 2)), ZS_ERR_STATE,
                  "zero.max_live_units = 2 units are fetched already ('u0', 'u1')");
    ZT_FAILS_WITH(zs_fetch(zs, zs_unit_at(zs, 0)), ZS_ERR_STATE, "already fetched");
    zs_memory_stats m;
    ZT_OK(zs_memory_report(zs, &m));
    ZT_EQ_INT(m.live_units_current, 2);
    ZT_CHECK(zs_param_data(params[1]) != NULL);
    /* Open gradients are bounded the same way, and stay open across a
     * release (tied weights): after releasing u1 with its gradient open, u2
     * can be fetched but not open a third gradient. */
    ZT_CHECK(zs_param_grad(params[0]) != NULL);
    void *u1_grad = zs_param_grad(params[1]);
    ZT_CHECK(u1_grad != NULL);
    ZT_OK(zs_release(zs, zs_unit_at(zs, 1)));
    ZT_OK(zs_fetch(zs, zs_unit_at(zs, 2)));
    ZT_CHECK(zs_param_grad(params[2]) == NULL);
    ZT_CHECK_MSG(strstr(zs_last_error(), "zero.max_live_units = 2 unit gradients are open "
                                         "already ('u0', 'u1')") != NULL,
                 "message: %s", zs_last_error());
    ZT_CHECK(zs_param_grad(params[1]) == NULL); /* released: no access until fetched again */
    ZT_OK(zs_grads_ready(zs, zs_unit_at(zs, 1)));
    ZT_CHECK(zs_param_grad(params[2]) != NULL);
    ZT_OK(zs_grads_ready(zs, zs_unit_at(zs, 2)));
    ZT_OK(zs_grads_ready(zs, zs_unit_at(zs, 0)));
    ZT_FAILS_WITH(zs_grads_ready(zs, zs_unit_at(zs, 0)), ZS_ERR_STATE, "called twice");
    ZT_OK(zs_release(zs, zs_unit_at(zs, 0)));
    ZT_OK(zs_release(zs, zs_unit_at(zs, 2)));
    ZT_FAILS_WITH(zs_release(zs, zs_unit_at(zs, 2)), ZS_ERR_STATE, "not fetched");
    ZT_OK(zs_memory_report(zs, &m));
    ZT_EQ_INT(m.live_units_current, 0);
    ZT_EQ_INT(m.live_units_peak, 2);
    zs_step_info info;
    ZT_OK(zs_step(zs, &info));
    ZT_EQ_INT(info.step, 1);
    zs_destroy(zs);
}

/* zs_grads_open: a gradient without its parameters, in every stage; stage 3
 * carves it without gathering the unit. */
static void test_grads_open(void) {
    for (int stage = 0; stage < 4; stage++) {
        char set[32];
        snprintf(set, sizeof set, "zero.stage=%d", stage);
        zs_ctx *zs = create(set, "zero.max_live_units=2");
        zs_param *params[3];
        describe(zs, params, 5);
        ZT_OK(zs_build(zs));
        zs_unit *u0 = zs_unit_at(zs, 0), *u1 = zs_unit_at(zs, 1), *u2 = zs_unit_at(zs, 2);
        /* Not fetched, not opened: refused, naming the way out. */
        ZT_CHECK(zs_param_grad(params[0]) == NULL);
        ZT_CHECK_MSG(strstr(zs_last_error(), "zs_grads_open") != NULL, "message: %s",
                     zs_last_error());
        zs_comm_stats before, after;
        ZT_OK(zs_comm_report(zs, &before));
        ZT_OK(zs_grads_open(zs, u0));
        ZT_OK(zs_comm_report(zs, &after));
        ZT_EQ_INT((int)(after.calls[ZS_COMM_ALL_GATHER] - before.calls[ZS_COMM_ALL_GATHER]), 0);
        ZT_CHECK(zs_param_data(params[0]) == NULL); /* the parameters are still not there */
        float *g0 = zs_param_grad(params[0]);
        ZT_CHECK_MSG(g0 != NULL, "stage %d: %s", stage, zs_last_error());
        /* An open gradient of a released unit is served again once opened. */
        ZT_OK(zs_fetch(zs, u1));
        void *g1 = zs_param_grad(params[1]);
        ZT_CHECK(g1 != NULL);
        ZT_OK(zs_release(zs, u1));
        ZT_CHECK(zs_param_grad(params[1]) == NULL);
        ZT_OK(zs_grads_open(zs, u1));
        ZT_CHECK(zs_param_grad(params[1]) == g1);
        if (stage >= 2) {
            /* Two gradients open (max_live_units = 2): a third is refused
             * by zs_grads_open itself. */
            ZT_FAILS_WITH(zs_grads_open(zs, u2), ZS_ERR_STATE,
                          "zero.max_live_units = 2 unit gradients are open already");
        }
        ZT_OK(zs_grads_ready(zs, u1));
        ZT_OK(zs_grads_open(zs, u2));
        ZT_OK(zs_grads_ready(zs, u2));
        ZT_FAILS_WITH(zs_grads_open(zs, u2), ZS_ERR_STATE, "already declared its gradient ready");
        g0[0] = 1.0f;
        ZT_OK(zs_grads_ready(zs, u0));
        zs_step_info info;
        ZT_OK(zs_step(zs, &info));
        /* A new micro-step: opened gradients are closed again. */
        ZT_CHECK(zs_param_grad(params[0]) == NULL);
        zs_destroy(zs);
    }
}

/* One rank keeps a unit fetched; the step fails on both ranks, and neither hangs. */
static void test_step_fails_together(void) {
    zs_ctx *zs = create("zero.stage=2", NULL);
    zs_param *params[3];
    describe(zs, params, 5);
    ZT_OK(zs_build(zs));
    for (int u = 2; u >= 0; u--) {
        ZT_OK(zs_fetch(zs, zs_unit_at(zs, u)));
        ZT_CHECK(zs_param_grad(params[u]) != NULL);
        ZT_OK(zs_grads_ready(zs, zs_unit_at(zs, u)));
        if (!(zt_rank == 1 && u == 0)) ZT_OK(zs_release(zs, zs_unit_at(zs, u)));
    }
    if (zt_rank == 1)
        ZT_FAILS_WITH(zs_step(zs, NULL), ZS_ERR_STATE, "unit 'u0' is still fetched");
    else /* the failing rank's own cause, and who reported it */
        ZT_FAILS_WITH(zs_step(zs, NULL), ZS_ERR_STATE,
                      "unit 'u0' is still fetched; release every unit before zs_step (reported "
                      "by rank 1)");
    zs_destroy(zs);

    /* Every rank forgot grads_ready for one unit. */
    zs = create(NULL, NULL);
    describe(zs, params, 5);
    ZT_OK(zs_build(zs));
    for (int u = 2; u >= 1; u--) {
        ZT_OK(zs_fetch(zs, zs_unit_at(zs, u)));
        ZT_OK(zs_grads_ready(zs, zs_unit_at(zs, u)));
        ZT_OK(zs_release(zs, zs_unit_at(zs, u)));
    }
    ZT_FAILS_WITH(zs_step(zs, NULL), ZS_ERR_STATE, "unit 'u0' has not called zs_grads_ready");
    zs_destroy(zs);
}

static void test_description_errors(void) {
    zs_ctx *zs = create(NULL, NULL);
    zs_param *p = NULL;
    int64_t shape[2] = {3, 0};
    ZT_FAILS_WITH(zs_param_create(zs, "w", 1, shape, ZS_INIT_ZEROS_VALUE, 0, &p), ZS_ERR_STATE,
                  "no unit is open");
    ZT_FAILS_WITH(zs_unit_begin(zs, "a/b", NULL), ZS_ERR_INVALID_ARGUMENT, "contains '/'");
    ZT_OK(zs_unit_begin(zs, "a", NULL));
    ZT_FAILS_WITH(zs_unit_begin(zs, "b", NULL), ZS_ERR_STATE, "unit 'a' is still open");
    ZT_FAILS_WITH(zs_unit_end(zs), ZS_ERR_INVALID_ARGUMENT, "unit 'a' has no parameters");
    ZT_FAILS_WITH(zs_param_create(zs, "w", 2, shape, ZS_INIT_ZEROS_VALUE, 0, &p),
                  ZS_ERR_INVALID_ARGUMENT, "dimension 1 is 0");
    ZT_FAILS_WITH(zs_param_create(zs, "w", 0, shape, ZS_INIT_ZEROS_VALUE, 0, &p),
                  ZS_ERR_INVALID_ARGUMENT, "ndim = 0");
    ZT_FAILS_WITH(zs_param_create(zs, "w", 1, shape, ZS_INIT_UNIFORM_RANGE(1.0, 1.0), 0, &p),
                  ZS_ERR_INVALID_ARGUMENT, "uniform init needs a < b");
    ZT_OK(zs_param_create(zs, "w", 1, shape, ZS_INIT_ZEROS_VALUE, ZS_PARAM_NO_DECAY, &p));
    ZT_FAILS_WITH(zs_param_create(zs, "w", 1, shape, ZS_INIT_ZEROS_VALUE, 0, &p),
                  ZS_ERR_INVALID_ARGUMENT, "'w' is used twice");
    ZT_FAILS_WITH(zs_build(zs), ZS_ERR_STATE, "still open");
    ZT_OK(zs_unit_end(zs));
    ZT_FAILS_WITH(zs_fetch(zs, zs_unit_at(zs, 0)), ZS_ERR_STATE, "call zs_build first");
    ZT_FAILS_WITH(zs_step(zs, NULL), ZS_ERR_STATE, "call zs_build first");
    ZT_OK(zs_build(zs));
    ZT_FAILS_WITH(zs_unit_begin(zs, "late", NULL), ZS_ERR_STATE, "already built");
    ZT_CHECK(zs_unit_at(zs, 1) == NULL);
    zs_destroy(zs);
    zs_destroy(NULL);
    zs_config_destroy(NULL);
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    ZT_REQUIRE(world == 2);
    char dir[] = "/tmp/zs_contracts_XXXXXX";
    if (zt_rank == 0) ZT_REQUIRE(mkdtemp(dir) != NULL);
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(g_path, sizeof g_path, "%s/contracts.cfg", dir);
    if (zt_rank == 0) {
        FILE *f = fopen(g_path, "w");
        fputs("zero: { stage = 0; };\noptimizer: { type = \"adamw\"; lr = 0.001; };\n", f);
        fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    test_config_disagreement();
    test_layout_disagreement();
    test_live_units_bound();
    test_step_fails_together();
    test_grads_open();
    test_description_errors();

    MPI_Barrier(MPI_COMM_WORLD);
    if (zt_rank == 0) {
        unlink(g_path);
        rmdir(dir);
    }
    int rc = zt_finish("test_contracts");
    MPI_Finalize();
    return rc;
}
