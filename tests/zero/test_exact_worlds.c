/* Bit-identical results across world sizes (run under mpirun -np 4).
 *
 * With exactly-summable gradients (multiples of 2^-8, see tiny_model.h) the
 * order of summation cannot matter, so 20 AdamW steps must give the same bits
 * on 1, 2, 3 and 4 ranks, in every stage. The four world sizes run one after
 * another on sub-communicators of MPI_COMM_WORLD (ranks 0..k-1). */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"

#define STEPS 20

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    ZT_REQUIRE(world == 4);

    harness_options opt = {.optimizer = "adamw", .steps = STEPS, .mode = TINY_GRAD_DYADIC,
                           .max_live_units = 2, .prefetch = 0, .scheduler = "warmup_cosine"};
    float *baseline = NULL; /* rank 0: world size 1, stage 0 */
    int64_t numel = 0;
    for (int k = 1; k <= 4; k++) {
        MPI_Comm sub;
        MPI_Comm_split(MPI_COMM_WORLD, zt_rank < k ? 0 : MPI_UNDEFINED, zt_rank, &sub);
        for (int stage = 0; stage < 4 && sub != MPI_COMM_NULL; stage++) {
            opt.stage = stage;
            harness_result r;
            ZT_REQUIRE(harness_run(sub, &opt, &r) == 0);
            if (zt_rank == 0) {
                if (!baseline) {
                    numel = r.numel;
                    baseline = malloc(sizeof(float) * (size_t)numel);
                    memcpy(baseline, r.final, sizeof(float) * (size_t)numel);
                    ZT_CHECK_MSG(memcmp(r.initial, r.final, sizeof(float) * (size_t)numel) != 0,
                                 "training did not change the parameters");
                } else {
                    int64_t first_diff = -1;
                    for (int64_t i = 0; i < numel && first_diff < 0; i++)
                        if (memcmp(&baseline[i], &r.final[i], sizeof(float)) != 0) first_diff = i;
                    ZT_CHECK_MSG(first_diff < 0,
                                 "world %d stage %d differs from world 1 stage 0 at element %lld "
                                 "(%.9g vs %.9g)", k, stage, (long long)first_diff,
                                 first_diff >= 0 ? r.final[first_diff] : 0.0,
                                 first_diff >= 0 ? baseline[first_diff] : 0.0);
                }
            }
            harness_result_free(&r);
        }
        if (sub != MPI_COMM_NULL) MPI_Comm_free(&sub);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    free(baseline);
    int rc = zt_finish("test_exact_worlds");
    MPI_Finalize();
    return rc;
}
