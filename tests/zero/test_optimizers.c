/* SGD (plain, and with Nesterov momentum) and Adam (L2 decay through the
 * gradient) in every stage against the single-process reference written in
 * harness.c, with a constant schedule (run under mpirun -np 3). AdamW with
 * warmup + cosine is covered by test_stages. */
#include <mpi.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    struct { const char *name; double momentum; int nesterov; } cases[] = {
        {"sgd", 0.0, 0}, {"sgd", 0.9, 1}, {"sgd", 0.8, 0}, {"adam", 0.0, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        harness_options opt = {.optimizer = cases[c].name, .momentum = cases[c].momentum,
                               .nesterov = cases[c].nesterov, .steps = 12, .mode = TINY_GRAD_TRUE,
                               .max_live_units = 1, .scheduler = "constant"};
        harness_result first;
        for (int stage = 0; stage < 4; stage++) {
            opt.stage = stage;
            harness_result run, ref;
            ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &run) == 0);
            harness_reference(&opt, run.initial, &ref);
            const char *worst = "";
            double rel = harness_max_relative_diff(run.final, ref.final, &worst);
            ZT_CHECK_MSG(rel <= 1e-5, "%s (momentum %g, nesterov %d) stage %d: %s differs by %.3g",
                         cases[c].name, cases[c].momentum, cases[c].nesterov, stage, worst, rel);
            ZT_CHECK_MSG(memcmp(run.initial, run.final, sizeof(float) * (size_t)run.numel) != 0,
                         "%s stage %d: parameters did not move", cases[c].name, stage);
            if (stage == 0) {
                first = run;
            } else {
                ZT_CHECK_MSG(memcmp(first.final, run.final, sizeof(float) * (size_t)run.numel) == 0,
                             "%s stage %d is not bit-identical to stage 0", cases[c].name, stage);
                harness_result_free(&run);
            }
            harness_result_free(&ref);
        }
        harness_result_free(&first);
    }
    int rc = zt_finish("test_optimizers");
    MPI_Finalize();
    return rc;
}
