/* A training run with periodic checkpoints, for run_ckpt_crash.sh:
 *   test_ckpt_crash <dir> <steps> <every> <keep>
 * trains the tiny model (fp32, stage 2, np 2) up to <steps> with
 * checkpoint { dir; every; keep; resume = "auto" }: it resumes from the newest
 * checkpoint that verifies, and prints "resumed from step N" on rank 0. With
 * ZS_FAULT set, the save protocol kills a rank at the named point. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "test_util.h"

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    ZT_REQUIRE(argc == 5);
    char extra[1024];
    snprintf(extra, sizeof extra,
             "checkpoint: { dir = \"%s\"; every = %s; keep = %s; resume = \"auto\"; };", argv[1],
             argv[3], argv[4]);
    harness_options opt = {.stage = 2, .optimizer = "adamw", .steps = atoi(argv[2]),
                           .mode = TINY_GRAD_TRUE, .max_live_units = 2, .scheduler = "constant",
                           .config_extra = extra, .resume = 1};
    harness_result r;
    ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &r) == 0);
    if (zt_rank == 0) printf("resumed from step %d\n", r.first_step);
    harness_result_free(&r);
    int rc = zt_finish("test_ckpt_crash");
    MPI_Finalize();
    return rc;
}
