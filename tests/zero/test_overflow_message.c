/* The overflow warning says what is known (np 3, issue 22 item 15): a
 * non-finite gradient injected on rank 2 into an element that, summed over
 * ranks, lands in the slice rank 0 owns. Gradients are summed before they
 * are checked, so the runtime knows where the value was found, not which
 * rank produced it: the warning, on every rank, names the unit and the
 * owning rank as the place it was found and never claims a rank as the
 * source ("non-finite gradient on rank 0" was the old, wrong claim), and
 * zs_step_info.overflow_rank is that owner, as documented. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "test_util.h"

#define STEPS 4
#define INJECT_STEP 2

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    ZT_REQUIRE(world == 3);
    char mine[256], extra[512];
    harness_warn_log("overflow_message", zt_rank, extra, sizeof extra, mine, sizeof mine);
    for (int stage = 0; stage < 4; stage++) {
        /* Element 0 of unit 1's weight: chunk 0 of the unit, rank 0's slice. */
        harness_options opt = {.optimizer = "adamw", .steps = STEPS, .mode = TINY_GRAD_TRUE,
                               .max_live_units = 2, .scheduler = "constant", .stage = stage,
                               .inject = 1, .inject_step = INJECT_STEP, .inject_rank = 2,
                               .inject_unit = 1, .inject_index = 0, .inject_value = INFINITY,
                               .config_extra = extra};
        harness_result r;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &r) == 0);
        ZT_EQ_INT(r.skipped[INJECT_STEP], 1);
        ZT_EQ_INT(r.overflow_rank[INJECT_STEP], 0);
        ZT_EQ_INT(r.overflow_unit[INJECT_STEP], 1);
        char line[4096];
        harness_count_lines(mine, "skipped", line, sizeof line);
        ZT_CHECK_MSG(strstr(line, "the gradient of unit 'layer1', summed over ranks, holds a "
                                  "non-finite value") != NULL &&
                         strstr(line, "found in the slice rank 0 owns; any rank's backward may "
                                      "have produced it") != NULL,
                     "stage %d: the warning does not say where the value was found: '%s'",
                     stage, line);
        ZT_CHECK_MSG(strstr(line, "on rank 0") == NULL && strstr(line, "on rank 1") == NULL,
                     "stage %d: the warning names a rank as the one that produced the value: '%s'",
                     stage, line);
        harness_result_free(&r);
        MPI_Barrier(MPI_COMM_WORLD);
        unlink(mine); /* each stage's run starts a fresh file */
        MPI_Barrier(MPI_COMM_WORLD);
    }
    int rc = zt_finish("test_overflow_message");
    MPI_Finalize();
    return rc;
}
