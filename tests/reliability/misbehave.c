/* A training program in which one rank misbehaves, for run_deadlines.sh:
 *
 *   misbehave <scenario> <bad_rank> <stage> <timeout_s> <on_timeout> <workdir> [backend]
 *             [algorithms]
 *
 * backend is "cpu" (default) or "cuda" (ranks beyond a node's GPUs share
 * them: comm.impl = "auto" stages the collectives through MPI then);
 * algorithms is "default" (comm.all_gather = "auto", the ring's
 * reduce-scatter) or "mpi" (MPI's own non-blocking collectives for both,
 * whose requests a timeout must leave alone).
 * Every rank trains a small model of four units (sizes that divide by
 * nothing) with constant synthetic gradients through the public API. At step
 * 3 rank <bad_rank> does what the scenario says, while the others go on
 * as if nothing happened:
 *   none      nothing (a clean run: exits 0)
 *   sigstop   raises SIGSTOP on itself before its forward pass (a stopped
 *             process: a debugger, a swapped-out node)
 *   return    leaves the loop before zs_step, destroys its context and
 *             finalizes MPI (a program that returns early)
 *   destroy   calls zs_destroy in the middle of backward and finalizes MPI
 *   save      calls zs_save alone, then goes on training
 *   desync    fetches the units in another order in its forward pass (with
 *             comm.check_collectives = true: both fingerprints are reported)
 *   nocreate  stops itself (SIGSTOP) before zs_create, so the others wait in
 *             the creation of the communicator
 * A rank whose zeroshard call fails prints "rank R: FAILED <status>: <message>"
 * and exits 3 without MPI_Finalize (which would wait for the missing rank);
 * with comm.on_timeout = "abort" the runtime itself ends the job. Ranks out
 * of step all fail at the same exchange, so before exiting they wait (10 s
 * at most) until every rank has printed its report: otherwise the first to
 * exit has mpirun kill the others before they print theirs. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "blocks.h"
#include "grad_fill.h"
#include "zeroshard.h"
#include "zeroshard_mpi.h"

#define UNITS 4
#define STEPS 6

static int g_rank;

/* Every rank reaches this after printing; bounded so that it cannot hang. */
static void wait_for_every_report(void) {
    MPI_Request barrier;
    if (MPI_Ibarrier(MPI_COMM_WORLD, &barrier) != MPI_SUCCESS) return;
    const double deadline = MPI_Wtime() + 10.0;
    int done = 0;
    while (!done && MPI_Wtime() < deadline) {
        MPI_Test(&barrier, &done, MPI_STATUS_IGNORE);
        const struct timespec pause = {0, 1000000};
        if (!done) nanosleep(&pause, NULL);
    }
}

static void check(zs_status st, const char *what) {
    if (st == ZS_OK) return;
    fprintf(stderr, "rank %d: FAILED %s in %s: %s\n", g_rank, zs_status_name(st), what,
            zs_last_error());
    fflush(stderr);
    if (st == ZS_ERR_MISMATCH) wait_for_every_report();
    _exit(3);
}

static void fill_grad(zs_ctx *zs, zs_param *p, int64_t numel, float value) {
    float *g = zs_param_grad(p);
    if (!g) check(ZS_ERR_STATE, "zs_param_grad");
    check(grad_fill_add(zs, g, numel, value), "writing a gradient");
}

int main(int argc, char **argv) {
    if (argc < 7 || argc > 9) {
        fprintf(stderr, "usage: misbehave scenario bad_rank stage timeout_s on_timeout workdir "
                        "[backend] [algorithms]\n");
        return 2;
    }
    const char *backend = argc >= 8 ? argv[7] : "cpu";
    const int mpi_algorithms = argc == 9 && strcmp(argv[8], "mpi") == 0;
    const char *scenario = argv[1];
    const int bad_rank = atoi(argv[2]);
    int provided = 0;
    /* MULTIPLE: the collectives run on the comm engine's thread, whose
     * waits must keep their deadlines too. */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    const int bad = g_rank == bad_rank;

    char path[512];
    snprintf(path, sizeof path, "%s/misbehave-%d.cfg", argv[6], g_rank);
    FILE *f = fopen(path, "w");
    if (!f) return 2;
    fprintf(f,
            "backend = \"%s\";\n"
            "zero: { stage = %s; max_live_units = 2; };\n"
            "optimizer: { type = \"adamw\"; lr = 0.01; };\n"
            "comm: { timeout_s = %s; on_timeout = \"%s\"; check_collectives = %s; %s };\n",
            backend, argv[3], argv[4], argv[5], strcmp(scenario, "desync") == 0 ? "true" : "false",
            mpi_algorithms ? "all_gather = \"mpi\"; reduce_scatter = \"mpi\";" : "");
    fclose(f);
    zs_config *cfg = NULL;
    check(zs_config_load(path, &cfg), "zs_config_load");
    zs_ctx *zs = NULL;
    if (bad && strcmp(scenario, "nocreate") == 0) raise(SIGSTOP);
    check(zs_create_with_comm(cfg, MPI_COMM_WORLD, &zs), "zs_create");
    zs_config_destroy(cfg);

    zs_unit *units[UNITS];
    zs_param *params[UNITS];
    int64_t numel[UNITS];
    const char *what = "";
    zs_status described = blocks_describe(zs, UNITS, 1000, 337, units, params, numel, &what);
    check(described, what);
    check(zs_build(zs), "zs_build");

    for (int step = 0; step < STEPS; step++) {
        const int now = step == 3 && bad;
        if (now && strcmp(scenario, "sigstop") == 0) raise(SIGSTOP);
        for (int i = 0; i < UNITS; i++) {
            /* desync: this rank walks the units backwards. */
            const int u = now && strcmp(scenario, "desync") == 0 ? UNITS - 1 - i : i;
            check(zs_fetch(zs, units[u]), "zs_fetch (forward)");
            if (!zs_param_data(params[u])) check(ZS_ERR_STATE, "zs_param_data");
            check(zs_release(zs, units[u]), "zs_release (forward)");
        }
        for (int u = UNITS - 1; u >= 0; u--) {
            check(zs_fetch(zs, units[u]), "zs_fetch (backward)");
            if (now && strcmp(scenario, "destroy") == 0) {
                zs_destroy(zs);
                MPI_Finalize();
                return 0;
            }
            fill_grad(zs, params[u], numel[u], 0.001f * (float)(g_rank + 1));
            check(zs_grads_ready(zs, units[u]), "zs_grads_ready");
            check(zs_release(zs, units[u]), "zs_release (backward)");
        }
        if (now && strcmp(scenario, "return") == 0) {
            zs_destroy(zs);
            MPI_Finalize();
            return 0;
        }
        zs_step_info info;
        check(zs_step(zs, &info), "zs_step");
        if (now && strcmp(scenario, "save") == 0) {
            char dir[512];
            snprintf(dir, sizeof dir, "%s/ckpt", argv[6]);
            check(zs_save(zs, dir), "zs_save (alone)");
        }
    }
    if (g_rank == 0) printf("finished %d steps\n", STEPS);
    zs_destroy(zs);
    MPI_Finalize();
    return 0;
}
