/* Reshard (run under mpirun -np 4): a checkpoint saved by one world size and
 * stage loads on others, with the gathered fp32 master weights, both Adam
 * moments and the parameters bit-identical to the saving run's:
 *   saved at np 2, stage 3  ->  np 1 stage 3, np 3 stage 1, np 4 stage 2, np 2 stage 0
 *   saved at np 4, stage 1  ->  np 2 stage 3, and back: np 4 stage 1
 * Each world size runs on a sub-communicator of MPI_COMM_WORLD. fp16, so the
 * master weights are a separate buffer from the parameters. */
#define _DEFAULT_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"

#define STEPS 6

static char g_root[256];

/* Runs `opt` on ranks 0..world-1; the result is valid on those ranks. */
static int run_on(int world, const harness_options *opt, harness_result *r) {
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, zt_rank < world ? 0 : MPI_UNDEFINED, zt_rank, &sub);
    int rc = 0;
    memset(r, 0, sizeof *r);
    if (sub != MPI_COMM_NULL) {
        rc = harness_run(sub, opt, r);
        MPI_Comm_free(&sub);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return rc;
}

static void compare(const char *what, const harness_result *src, const harness_result *dst) {
    static const char *const names[3] = {"master", "exp_avg", "exp_avg_sq"};
    for (int s = 0; s < 3; s++)
        ZT_CHECK_MSG(memcmp(src->gathered_state[s], dst->gathered_state[s],
                            sizeof(float) * (size_t)src->numel) == 0,
                     "%s: gathered %s differs from the saving run's", what, names[s]);
    ZT_CHECK_MSG(memcmp(src->final, dst->final, sizeof(float) * (size_t)src->numel) == 0,
                 "%s: parameters differ from the saving run's", what);
}

static void scenario(int save_world, int save_stage, const int (*loads)[2], int load_count,
                     const char *name) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", g_root, name);
    harness_options opt = {.stage = save_stage, .optimizer = "adamw", .steps = STEPS,
                           .mode = TINY_GRAD_TRUE, .max_live_units = 2, .scheduler = "constant",
                           .dtype = "fp16", .precision_extra = "initial_scale_power = 8;",
                           .save_dir = dir, .save_after = STEPS};
    harness_result src;
    ZT_REQUIRE(run_on(save_world, &opt, &src) == 0);
    /* Rank 0 is in every sub-communicator, so it holds every result. */
    for (int l = 0; l < load_count; l++) {
        harness_options load = opt;
        load.save_dir = NULL;
        load.load_dir = dir;
        load.stage = loads[l][1];
        harness_result dst;
        ZT_REQUIRE(run_on(loads[l][0], &load, &dst) == 0);
        if (zt_rank == 0) {
            char what[128];
            snprintf(what, sizeof what, "saved at np %d stage %d, loaded at np %d stage %d",
                     save_world, save_stage, loads[l][0], loads[l][1]);
            ZT_EQ_INT(dst.first_step, STEPS);
            compare(what, &src, &dst);
        }
        harness_result_free(&dst);
    }
    harness_result_free(&src);
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    ZT_REQUIRE(world == 4);
    char root[] = "/tmp/zs_reshard_XXXXXX";
    if (zt_rank == 0) ZT_REQUIRE(mkdtemp(root) != NULL);
    MPI_Bcast(root, sizeof root, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(g_root, sizeof g_root, "%s", root);

    const int from_two[][2] = {{1, 3}, {3, 1}, {4, 2}, {2, 0}};
    scenario(2, 3, from_two, 4, "np2_stage3");
    const int from_four[][2] = {{2, 3}, {4, 1}};
    scenario(4, 1, from_four, 2, "np4_stage1");

    MPI_Barrier(MPI_COMM_WORLD);
    if (zt_rank == 0) {
        char command[600];
        snprintf(command, sizeof command, "rm -rf '%s'", root);
        ZT_CHECK(system(command) == 0);
    }
    int rc = zt_finish("test_ckpt_reshard");
    MPI_Finalize();
    return rc;
}
