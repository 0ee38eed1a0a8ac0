/* Global-norm clipping and gradient accumulation in every stage (run under
 * mpirun -np 1, 2, 3, 4), fp32, against the single-process reference:
 *   - the reported global norm equals the reference's full-batch norm within
 *     1e-6 (relative) at every step, and clipped updates match the reference
 *     within 1e-5 (max |a-b| / max |b| per tensor);
 *   - k = 3 micro-steps of batch b give the same parameters as one step of
 *     batch k*b, through the runtime and in the reference, within 1e-5. */
#include <math.h>
#include <mpi.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"

#define STEPS 10
#define MICRO 3

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    for (int stage = 0; stage < 4; stage++) {
        /* Clipping at a norm below the typical one, so most steps clip. */
        harness_options clip = {.stage = stage, .optimizer = "adamw", .steps = STEPS,
                                .mode = TINY_GRAD_TRUE, .max_live_units = 2,
                                .scheduler = "constant", .clip = 0.05};
        harness_result run, ref;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &clip, &run) == 0);
        harness_reference(&clip, run.initial, &ref);
        int clipped = 0;
        for (int s = 0; s < STEPS; s++) {
            double rel = fabs(run.grad_norm[s] - ref.grad_norm[s]) / ref.grad_norm[s];
            ZT_CHECK_MSG(rel <= 1e-6, "np %d stage %d step %d: norm %.12g vs reference %.12g",
                         world, stage, s, run.grad_norm[s], ref.grad_norm[s]);
            ZT_CHECK_MSG(fabs(run.clip_coef[s] - ref.clip_coef[s]) <= 1e-6 * ref.clip_coef[s],
                         "stage %d step %d: clip %.9g vs %.9g", stage, s, run.clip_coef[s],
                         ref.clip_coef[s]);
            clipped += run.clip_coef[s] < 1.0;
        }
        ZT_CHECK_MSG(clipped >= STEPS / 2, "stage %d: only %d of %d steps clipped", stage, clipped,
                     STEPS);
        const char *worst = "";
        double diff = harness_max_relative_diff(run.final, ref.final, &worst);
        ZT_CHECK_MSG(diff <= 1e-5, "np %d stage %d clipped: %s differs by %.3g", world, stage,
                     worst, diff);
        harness_result_free(&run);
        harness_result_free(&ref);

        /* Accumulation: 3 x 12 samples against 1 x 36. */
        harness_options micro = {.stage = stage, .optimizer = "adamw", .steps = STEPS,
                                 .mode = TINY_GRAD_TRUE, .max_live_units = 2,
                                 .scheduler = "warmup_cosine", .gas = MICRO, .batch = TINY_BATCH};
        harness_options whole = micro;
        whole.gas = 1;
        whole.batch = MICRO * TINY_BATCH;
        harness_result a, b;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &micro, &a) == 0);
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &whole, &b) == 0);
        harness_reference(&whole, a.initial, &ref);
        diff = harness_max_relative_diff(a.final, b.final, &worst);
        ZT_CHECK_MSG(diff <= 1e-5, "np %d stage %d: %d micro-steps vs one big batch: %s differs "
                     "by %.3g", world, stage, MICRO, worst, diff);
        diff = harness_max_relative_diff(a.final, ref.final, &worst);
        ZT_CHECK_MSG(diff <= 1e-5, "np %d stage %d: accumulation vs reference: %s differs by %.3g",
                     world, stage, worst, diff);
        for (int s = 0; s < STEPS; s++)
            ZT_CHECK_MSG(fabs(a.grad_norm[s] - ref.grad_norm[s]) <= 1e-6 * ref.grad_norm[s],
                         "stage %d step %d: accumulated norm %.12g vs %.12g", stage, s,
                         a.grad_norm[s], ref.grad_norm[s]);
        harness_result_free(&a);
        harness_result_free(&b);
        harness_result_free(&ref);
    }
    int rc = zt_finish("test_clip_accum");
    MPI_Finalize();
    return rc;
}
