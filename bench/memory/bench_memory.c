/* Per-rank model-state memory of each ZeRO stage, measured from the runtime's
 * own accounting after zs_build, against the ZeRO paper's formula for fp32
 * training with Adam (K = 8 bytes of optimizer state per parameter; fp32
 * parameters are their own master copy):
 *   stage 0: 16 Ψ      stage 1: 8 Ψ + 8 Ψ/N      stage 2: 4 Ψ + 12 Ψ/N      stage 3: 16 Ψ/N
 * Ψ is the unpadded parameter count, so measured / formula - 1 is the cost of
 * alignment and padding. Non-model buffers (live units, comm staging) are
 * printed separately: they are bounded by configuration, not by Ψ.
 *
 *   mpirun -np 4 build/bench/memory/bench_memory [--units 8] [--unit-params 1000003]
 *                                                 [--max-live 2]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/number.h"
#include "zeroshard_mpi.h"

static int die(const char *what, zs_status st) {
    fprintf(stderr, "bench_memory: %s: %s: %s\n", what, zs_status_name(st), zs_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}
#define B_CHECK(call)                                   \
    do {                                                \
        zs_status b_st_ = (call);                       \
        if (b_st_ != ZS_OK) return die(#call, b_st_);   \
    } while (0)

int main(int argc, char **argv) {
    int units = 8, max_live = 2;
    long long unit_params = 1000003; /* prime: nothing divides it */
    for (int i = 1; i < argc; i += 2) {
        zs_status st = ZS_ERR_INVALID_ARGUMENT;
        int64_t params = 0;
        if (i + 1 == argc) zs__fail(st, "%s needs a value", argv[i]);
        else if (strcmp(argv[i], "--units") == 0)
            st = zs__number_option_int(argv[i], argv[i + 1], 1, INT32_MAX, &units);
        else if (strcmp(argv[i], "--unit-params") == 0)
            st = zs__number_option_int64(argv[i], argv[i + 1], 1, INT64_MAX, &params);
        else if (strcmp(argv[i], "--max-live") == 0)
            st = zs__number_option_int(argv[i], argv[i + 1], 1, INT32_MAX, &max_live);
        else zs__fail(st, "unknown option %s (--units, --unit-params, --max-live)", argv[i]);
        if (st != ZS_OK) {
            fprintf(stderr, "bench_memory: %s\n", zs_last_error());
            return 2;
        }
        if (params) unit_params = params;
    }
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);

    /* The configuration goes through a file (zs_config_load is the one
     * reader), which every rank reads once; the file and its directory are
     * removed before any stage runs, so a stage that fails (out of memory:
     * die() ends the job with MPI_Abort) leaves nothing behind. */
    char dir[] = "/tmp/zs_bench_memory_XXXXXX", path[256];
    int made = 1;
    if (rank == 0) {
        made = mkdtemp(dir) != NULL;
        snprintf(path, sizeof path, "%s/bench.cfg", dir);
        FILE *f = made ? fopen(path, "w") : NULL;
        if (f) {
            fprintf(f, "zero: { stage = 0; max_live_units = %d; };\n"
                       "optimizer: { type = \"adamw\"; lr = 1e-3; };\n", max_live);
            made = fclose(f) == 0;
        } else {
            made = 0;
        }
        if (!made) fprintf(stderr, "bench_memory: cannot write a configuration under /tmp\n");
    }
    MPI_Bcast(&made, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(path, sizeof path, "%s/bench.cfg", dir);
    zs_config *base = NULL;
    zs_status loaded = made ? zs_config_load(path, &base) : ZS_ERR_IO;
    MPI_Barrier(MPI_COMM_WORLD); /* every rank has read it */
    if (rank == 0) {
        unlink(path);
        rmdir(dir);
    }
    if (!made) MPI_Abort(MPI_COMM_WORLD, 1);
    B_CHECK(loaded);

    const double psi = (double)units * (double)unit_params;
    if (rank == 0) {
        printf("bench_memory: %d ranks, %d units x %lld params (Psi = %.0f), fp32 AdamW, max_live_units %d\n",
               n, units, unit_params, psi, max_live);
        printf("%-6s %14s %14s %9s | %14s %14s %14s\n", "stage", "model bytes", "ZeRO formula",
               "measured/", "live_params", "live_grads", "comm");
        printf("%-6s %14s %14s %9s | %14s %14s %14s\n", "", "(max rank)", "", "formula", "(peak)",
               "(peak)", "(peak)");
    }
    for (int stage = 0; stage < 4; stage++) {
        char override[64];
        snprintf(override, sizeof override, "zero.stage=%d", stage);
        B_CHECK(zs_config_override(base, override));
        zs_ctx *zs = NULL;
        B_CHECK(zs_create_with_comm(base, MPI_COMM_WORLD, &zs)); /* copies the configuration */
        for (int u = 0; u < units; u++) {
            char name[64];
            snprintf(name, sizeof name, "unit%d", u);
            B_CHECK(zs_unit_begin(zs, name, NULL));
            snprintf(name, sizeof name, "unit%d.weight", u);
            int64_t shape[1] = {unit_params};
            B_CHECK(zs_param_create(zs, name, 1, shape, ZS_INIT_ZEROS_VALUE, 0, NULL));
            B_CHECK(zs_unit_end(zs));
        }
        B_CHECK(zs_build(zs));
        zs_memory_stats m;
        B_CHECK(zs_memory_report(zs, &m));
        unsigned long long mine[4] = {
            m.current[ZS_MEM_PARAMS] + m.current[ZS_MEM_GRADS] + m.current[ZS_MEM_MASTER] +
                m.current[ZS_MEM_OPTIM],
            m.peak[ZS_MEM_LIVE_PARAMS], m.peak[ZS_MEM_LIVE_GRADS], m.peak[ZS_MEM_COMM]};
        unsigned long long worst[4];
        MPI_Reduce(mine, worst, 4, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
        double formula = stage == 0 ? 16 * psi
                       : stage == 1 ? 8 * psi + 8 * psi / n
                       : stage == 2 ? 4 * psi + 12 * psi / n
                                    : 16 * psi / n;
        if (rank == 0)
            printf("%-6d %14llu %14.0f %9.6f | %14llu %14llu %14llu\n", stage, worst[0], formula,
                   worst[0] / formula, worst[1], worst[2], worst[3]);
        zs_destroy(zs);
    }
    zs_config_destroy(base);
    MPI_Finalize();
    return 0;
}
