/* The public host collectives (zs_all_reduce_host, zs_all_gather_host) that
 * programs use for their own agreements under the runtime's deadline
 * (run_example_deadlines.sh shows the deadline through the examples):
 *   - every element type and reduction gives the rank-order fold, the same
 *     bits on every rank; integers are exact beyond 2^53; a NaN wins a max
 *     or a min; an integer sum that overflows fails on every rank;
 *   - the all-gather puts rank r's bytes at r * bytes;
 *   - each call is counted in zs_comm_report and its scratch is returned;
 *   - bad arguments give a clear ZS_ERR_INVALID_ARGUMENT without numbering a
 *     collective, so the ranks stay in step;
 *   - with comm.check_collectives, ranks that name their reduction
 *     differently fail together with both names.
 *
 *   mpirun -np N test_host_collective     (N = 1, 2, 3) */
#define _DEFAULT_SOURCE /* mkdtemp */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "zeroshard_mpi.h"

static int g_world;
static char g_path[256];

static zs_ctx *create(const char *override) {
    zs_config *cfg = NULL;
    ZT_OK(zs_config_load(g_path, &cfg));
    if (override) ZT_OK(zs_config_override(cfg, override));
    zs_ctx *zs = NULL;
    ZT_OK(zs_create_with_comm(cfg, MPI_COMM_WORLD, &zs));
    zs_config_destroy(cfg);
    ZT_REQUIRE(zs != NULL);
    return zs;
}

static int same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* Rank r's doubles: exact halves, so the sum is exact in any order. */
static void test_double(zs_ctx *zs) {
    double v[3] = {1.5 * (zt_rank + 1), -(double)zt_rank, 0.25 * zt_rank};
    ZT_OK(zs_all_reduce_host(zs, v, 3, ZS_HOST_TYPE_DOUBLE, ZS_REDUCE_OP_SUM, "doubles"));
    const double n = g_world;
    ZT_CHECK_MSG(v[0] == 1.5 * n * (n + 1) / 2, "sum %g", v[0]);
    ZT_CHECK_MSG(v[1] == -n * (n - 1) / 2, "sum %g", v[1]);
    ZT_CHECK_MSG(v[2] == 0.25 * n * (n - 1) / 2, "sum %g", v[2]);

    double m[2] = {(double)zt_rank, -(double)zt_rank};
    ZT_OK(zs_all_reduce_host(zs, m, 2, ZS_HOST_TYPE_DOUBLE, ZS_REDUCE_OP_MAX, "max"));
    ZT_CHECK_MSG(m[0] == g_world - 1 && m[1] == 0.0, "max %g %g", m[0], m[1]);
    double lo[2] = {(double)zt_rank, -(double)zt_rank};
    ZT_OK(zs_all_reduce_host(zs, lo, 2, ZS_HOST_TYPE_DOUBLE, ZS_REDUCE_OP_MIN, "min"));
    ZT_CHECK_MSG(lo[0] == 0.0 && lo[1] == -(g_world - 1), "min %g %g", lo[0], lo[1]);

    /* A NaN on the last rank wins a max and a min (it would a sum): a
     * diverged rank's loss must not vanish from the agreed value. */
    for (int op = ZS_REDUCE_OP_MAX; op <= ZS_REDUCE_OP_MIN; op++) {
        double x = zt_rank == g_world - 1 ? NAN : 1.0 + zt_rank;
        ZT_OK(zs_all_reduce_host(zs, &x, 1, ZS_HOST_TYPE_DOUBLE, (zs_reduce_op)op, "nan wins"));
        ZT_CHECK_MSG(isnan(x), "op %d gave %g, expected NaN", op, x);
    }
}

/* Sums that round: the result must be the rank-order fold, bit for bit, on
 * every rank (each rank checks against its own fold of every rank's value). */
static void test_float_rank_order(zs_ctx *zs) {
    float x = 0.1f + 0.37f * (float)zt_rank + 1e-7f * (float)(zt_rank * zt_rank);
    float expected = 0.1f;
    for (int r = 1; r < g_world; r++)
        expected = expected + (0.1f + 0.37f * (float)r + 1e-7f * (float)(r * r));
    ZT_OK(zs_all_reduce_host(zs, &x, 1, ZS_HOST_TYPE_FLOAT, ZS_REDUCE_OP_SUM, "floats"));
    ZT_CHECK_MSG(same_bits(&x, &expected, sizeof x), "float sum %a, rank-order fold %a", (double)x,
                 (double)expected);
    /* Every rank has the same bits. */
    float all[8];
    ZT_REQUIRE(g_world <= 8);
    ZT_OK(zs_all_gather_host(zs, &x, sizeof x, all, "float result"));
    for (int r = 0; r < g_world; r++)
        ZT_CHECK_MSG(same_bits(&all[r], &x, sizeof x), "rank %d has %a, this rank %a", r,
                     (double)all[r], (double)x);
}

static void test_integers(zs_ctx *zs) {
    int32_t a[3] = {zt_rank + 1, -7 * zt_rank, zt_rank == 0 ? 5 : -5};
    ZT_OK(zs_all_reduce_host(zs, a, 3, ZS_HOST_TYPE_INT32, ZS_REDUCE_OP_SUM, "int32 sum"));
    ZT_EQ_INT(a[0], g_world * (g_world + 1) / 2);
    ZT_EQ_INT(a[1], -7 * g_world * (g_world - 1) / 2);
    ZT_EQ_INT(a[2], 5 - 5 * (g_world - 1));
    int32_t b[2] = {zt_rank, -zt_rank};
    ZT_OK(zs_all_reduce_host(zs, b, 2, ZS_HOST_TYPE_INT32, ZS_REDUCE_OP_MAX, "int32 max"));
    ZT_EQ_INT(b[0], g_world - 1);
    ZT_EQ_INT(b[1], 0);
    int32_t c = 100 - zt_rank;
    ZT_OK(zs_all_reduce_host(zs, &c, 1, ZS_HOST_TYPE_INT32, ZS_REDUCE_OP_MIN, "int32 min"));
    ZT_EQ_INT(c, 100 - (g_world - 1));

    /* Beyond 2^53, where a double all-reduce would round. */
    const int64_t big = ((int64_t)1 << 60) + 1;
    int64_t d[2] = {big / 8 + zt_rank, INT64_MIN + zt_rank};
    ZT_OK(zs_all_reduce_host(zs, d, 1, ZS_HOST_TYPE_INT64, ZS_REDUCE_OP_SUM, "int64 sum"));
    ZT_CHECK_MSG(d[0] == (big / 8) * g_world + (int64_t)g_world * (g_world - 1) / 2, "sum %lld",
                 (long long)d[0]);
    ZT_OK(zs_all_reduce_host(zs, &d[1], 1, ZS_HOST_TYPE_INT64, ZS_REDUCE_OP_MIN, "int64 min"));
    ZT_CHECK(d[1] == INT64_MIN);

    /* An overflowing sum fails on every rank (each folds the same values),
     * naming the element and the type, instead of wrapping into a count. */
    int32_t o[2] = {1, INT32_MAX - 1 + (zt_rank == 0)};
    if (g_world > 1) {
        ZT_FAILS_WITH(zs_all_reduce_host(zs, o, 2, ZS_HOST_TYPE_INT32, ZS_REDUCE_OP_SUM, "counts"),
                      ZS_ERR_INVALID_ARGUMENT, "the int32 sum of element 1 overflows");
        ZT_CHECK(strstr(zs_last_error(), "'counts'") != NULL);
        ZT_CHECK_MSG(o[0] == 1, "a failed reduction changed its values (%d)", o[0]);
        int64_t low[1] = {INT64_MIN + 1};
        ZT_FAILS_WITH(zs_all_reduce_host(zs, low, 1, ZS_HOST_TYPE_INT64, ZS_REDUCE_OP_SUM, "low"),
                      ZS_ERR_INVALID_ARGUMENT, "the int64 sum of element 0 overflows");
    }
}

/* Rank r's record lands at r * bytes on every rank. */
static void test_all_gather(zs_ctx *zs) {
    typedef struct record { int32_t rank; char text[20]; double value; } record;
    record mine;
    memset(&mine, 0, sizeof mine);
    mine.rank = zt_rank;
    snprintf(mine.text, sizeof mine.text, "rank %d", zt_rank);
    mine.value = 0.5 + zt_rank;
    record *all = calloc((size_t)g_world, sizeof *all);
    ZT_REQUIRE(all != NULL);
    ZT_OK(zs_all_gather_host(zs, &mine, sizeof mine, all, "records"));
    for (int r = 0; r < g_world; r++) {
        char text[20];
        snprintf(text, sizeof text, "rank %d", r);
        ZT_EQ_INT(all[r].rank, r);
        ZT_CHECK_MSG(strcmp(all[r].text, text) == 0, "record %d says '%s'", r, all[r].text);
        ZT_CHECK(all[r].value == 0.5 + r);
    }
    free(all);
}

/* Each call is one all-reduce / all-gather in the report; count 0 still
 * takes part (with NULL values); the scratch goes back to the comm tag. */
static void test_accounting(zs_ctx *zs) {
    zs_comm_stats before, after;
    zs_memory_stats mem_before, mem_after;
    ZT_OK(zs_comm_report(zs, &before));
    ZT_OK(zs_memory_report(zs, &mem_before));
    double x[4] = {1, 2, 3, 4};
    ZT_OK(zs_all_reduce_host(zs, x, 4, ZS_HOST_TYPE_DOUBLE, ZS_REDUCE_OP_SUM, "counted"));
    ZT_OK(zs_all_reduce_host(zs, NULL, 0, ZS_HOST_TYPE_INT64, ZS_REDUCE_OP_MAX, "nothing"));
    char c = 'a', all[8];
    ZT_OK(zs_all_gather_host(zs, &c, 1, all, "one byte"));
    ZT_OK(zs_comm_report(zs, &after));
    ZT_OK(zs_memory_report(zs, &mem_after));
    ZT_EQ_U64(after.calls[ZS_COMM_ALL_REDUCE] - before.calls[ZS_COMM_ALL_REDUCE], 2);
    ZT_EQ_U64(after.calls[ZS_COMM_ALL_GATHER] - before.calls[ZS_COMM_ALL_GATHER], 1);
    /* A ring all-reduce's 2 (n-1)/n of 32 bytes; an all-gather's (n-1) of 1. */
    ZT_EQ_U64(after.bytes[ZS_COMM_ALL_REDUCE] - before.bytes[ZS_COMM_ALL_REDUCE],
              2 * (uint64_t)(g_world - 1) * 32 / (uint64_t)g_world);
    ZT_EQ_U64(after.bytes[ZS_COMM_ALL_GATHER] - before.bytes[ZS_COMM_ALL_GATHER],
              (uint64_t)(g_world - 1));
    ZT_EQ_U64(mem_after.current[ZS_MEM_COMM], mem_before.current[ZS_MEM_COMM]);
}

/* Every rank makes the same bad call: each fails at once with a message
 * that says what is wrong, and no collective is numbered, so the next good
 * call still lines up across ranks. */
static void test_bad_arguments(zs_ctx *zs) {
    double v = 1.0;
    char all[8];
    ZT_FAILS_WITH(zs_all_reduce_host(NULL, &v, 1, ZS_HOST_TYPE_DOUBLE, ZS_REDUCE_OP_SUM, "x"),
                  ZS_ERR_INVALID_ARGUMENT, "zs_all_reduce_host: the context is NULL");
    ZT_FAILS_WITH(zs_all_reduce_host(zs, &v, 1, ZS_HOST_TYPE_DOUBLE, ZS_REDUCE_OP_SUM, NULL),
                  ZS_ERR_INVALID_ARGUMENT, "`what` is NULL; name the collective");
    ZT_FAILS_WITH(zs_all_reduce_host(zs, &v, 1, ZS_HOST_TYPE_DOUBLE, ZS_REDUCE_OP_SUM, ""),
                  ZS_ERR_INVALID_ARGUMENT, "has 0 bytes; name the collective in 1..63 bytes");
    char long_name[80];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    ZT_FAILS_WITH(zs_all_gather_host(zs, &v, sizeof v, all, long_name), ZS_ERR_INVALID_ARGUMENT,
                  "has 79 bytes");
    ZT_FAILS_WITH(zs_all_reduce_host(zs, &v, 1, (zs_host_type)7, ZS_REDUCE_OP_SUM, "typed"),
                  ZS_ERR_INVALID_ARGUMENT, "unknown element type 7; use a ZS_HOST_TYPE_* value");
    ZT_FAILS_WITH(zs_all_reduce_host(zs, &v, 1, ZS_HOST_TYPE_DOUBLE, (zs_reduce_op)9, "op"),
                  ZS_ERR_INVALID_ARGUMENT, "unknown reduction 9");
    ZT_FAILS_WITH(zs_all_reduce_host(zs, NULL, 2, ZS_HOST_TYPE_DOUBLE, ZS_REDUCE_OP_SUM, "loss"),
                  ZS_ERR_INVALID_ARGUMENT, "zs_all_reduce_host('loss') on rank");
    ZT_CHECK(strstr(zs_last_error(), "values is NULL for 2 double values") != NULL);
    ZT_FAILS_WITH(zs_all_reduce_host(zs, &v, SIZE_MAX / 2, ZS_HOST_TYPE_DOUBLE, ZS_REDUCE_OP_SUM,
                                     "huge"),
                  ZS_ERR_INVALID_ARGUMENT, "overflow the address space");
    ZT_FAILS_WITH(zs_all_gather_host(zs, NULL, 4, all, "gather"), ZS_ERR_INVALID_ARGUMENT,
                  "mine is NULL for 4 bytes");
    ZT_FAILS_WITH(zs_all_gather_host(zs, all, 1, all, "gather"), ZS_ERR_INVALID_ARGUMENT,
                  "mine and all overlap");
    /* Still in step. */
    double s = 1.0;
    ZT_OK(zs_all_reduce_host(zs, &s, 1, ZS_HOST_TYPE_DOUBLE, ZS_REDUCE_OP_SUM, "after"));
    ZT_CHECK_MSG(s == g_world, "sum %g after the bad calls", s);
}

/* comm.check_collectives: one rank names its reduction differently; every
 * rank fails with both names before any value moves. The context is then
 * unusable (the ranks are out of step), so it comes last. */
static void test_fingerprint(void) {
    if (g_world < 2) return;
    zs_ctx *zs = create("comm.check_collectives=true");
    double v = 1.0;
    ZT_FAILS_WITH(zs_all_reduce_host(zs, &v, 1, ZS_HOST_TYPE_DOUBLE, ZS_REDUCE_OP_SUM,
                                     zt_rank == 1 ? "other loss" : "loss"),
                  ZS_ERR_MISMATCH, "out of step");
    ZT_CHECK_MSG(strstr(zs_last_error(), "all_reduce") && strstr(zs_last_error(), "'loss'") &&
                     strstr(zs_last_error(), "'other loss'"),
                 "%s", zs_last_error());
    ZT_CHECK_MSG(v == 1.0, "the values changed to %g", v);
    zs_destroy(zs);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    char dir[] = "/tmp/zs_host_collective_XXXXXX";
    if (zt_rank == 0) ZT_REQUIRE(mkdtemp(dir) != NULL);
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(g_path, sizeof g_path, "%s/host.cfg", dir);
    if (zt_rank == 0) {
        FILE *f = fopen(g_path, "w");
        ZT_REQUIRE(f != NULL);
        fputs("zero: { stage = 2; };\noptimizer: { type = \"sgd\"; lr = 0.1; };\n"
              "comm: { timeout_s = 30; };\n",
              f);
        fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    zs_ctx *zs = create(NULL);
    test_double(zs);
    test_float_rank_order(zs);
    test_integers(zs);
    test_all_gather(zs);
    test_accounting(zs);
    test_bad_arguments(zs);
    zs_destroy(zs);
    test_fingerprint();

    MPI_Barrier(MPI_COMM_WORLD);
    if (zt_rank == 0) {
        unlink(g_path);
        rmdir(dir);
    }
    int code = zt_finish("test_host_collective");
    MPI_Finalize();
    return code;
}
