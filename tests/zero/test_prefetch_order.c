/* Stage-3 prefetch follows the order recorded from the program (np 2):
 *   - a program whose fetch order changes in step 3 gets exactly one
 *     warning naming the first divergence, and still the same parameters,
 *     bit for bit, as the same training without the change;
 *   - the live budget is never exceeded on the way (the accountant asserts
 *     on every carve; the peak is checked against the budget here), and
 *     prefetching resumes once the new order repeats (the step after the
 *     change runs without a second warning). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "test_util.h"

#define STEPS 8

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    char mine[256], extra[512];
    harness_warn_log("prefetch_order", zt_rank, extra, sizeof extra, mine, sizeof mine);
    harness_options opt = {.optimizer = "adamw", .steps = STEPS, .mode = TINY_GRAD_TRUE,
                           .max_live_units = 2, .scheduler = "constant", .stage = 3,
                           .gather_ahead = 1, .config_extra = extra};
    harness_result steady, changed;
    ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &steady) == 0);
    const int before = harness_count_lines(mine, "differs from the order", NULL, 0);
    opt.order_change_step = 3;
    ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &changed) == 0);
    const int after = harness_count_lines(mine, "differs from the order", NULL, 0);
    ZT_CHECK_MSG(memcmp(steady.final, changed.final, sizeof(float) * (size_t)steady.numel) == 0,
                 "a changed fetch order changed the parameters");
    ZT_CHECK_MSG(memcmp(steady.grad_norm, changed.grad_norm, sizeof(double) * STEPS) == 0,
                 "a changed fetch order changed the gradient norms");
    /* One warning for the change (the steady run may warn once at its final
     * gather, which leaves the order too: the same in both runs). */
    ZT_CHECK_MSG(before >= 0, "no log file %s", mine);
    ZT_CHECK_MSG(after - before == before + 1, "warnings: %d in the steady run, %d with the change",
                 before, after - before);
    printf("rank %d: %d warning(s) in the steady run, %d with the order changed at step 3\n",
           zt_rank, before, after - before);
    ZT_CHECK_MSG(changed.memory.live_bytes_peak <= changed.memory.live_bytes_budget,
                 "live peak %llu over the budget %llu",
                 (unsigned long long)changed.memory.live_bytes_peak,
                 (unsigned long long)changed.memory.live_bytes_budget);
    unlink(mine);
    harness_result_free(&steady);
    harness_result_free(&changed);
    int rc = zt_finish("test_prefetch_order");
    MPI_Finalize();
    return rc;
}
