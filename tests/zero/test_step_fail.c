/* Failing together (issue 21): a failure injected on one rank at each point
 * of the optimizer step (ZS_STEP_FAULT, zero/step_fault.c) fails zs_step on
 * every rank, each naming the failing rank's cause, at once: never the
 * timeout of a collective the failed rank skipped. Points, with the
 * optimizer on the device and in host memory, with the host update
 * overlapped (offload.overlap) and not, in stage 2 (np 2 and 3):
 *   - "ready":  before the step's agreement; that zs_step fails;
 *   - "update": in the update (or its hand-over to the host); that zs_step;
 *   - "host":   in the host update of a unit (on the host optimizer's
 *               thread when overlapped), after the step's agreement: the
 *               next zs_step fails (the failing rank runs every collective
 *               in between);
 *   - "gather": in a unit's gather after the update (run anyway): the next
 *               zs_step.
 * The runs set comm.timeout_s = 120: a run that waited for a rank would
 * take that long and fail with ZS_ERR_TIMEOUT; each run's wall time is
 * printed. */
#define _GNU_SOURCE /* setenv */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"

#define STEPS 4
#define FAULT_STEP 2 /* the optimizer step (1-based) that fails */

typedef struct point {
    const char *name;
    int host_only;
} point;

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0});
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const point points[] = {{"ready", 0}, {"update", 0}, {"host", 1}, {"gather", 0}};
    const char *tiers[] = {"", "offload: { optimizer = \"host\"; overlap = true; };",
                           "offload: { optimizer = \"host\"; overlap = false; };"};
    const char *tier_names[] = {"device", "host, overlapped", "host"};
    char extra[256];
    for (size_t p = 0; p < sizeof points / sizeof points[0]; p++)
        for (int t = 0; t < 3; t++) {
            if (points[p].host_only && t == 0) continue;
            const int failing = world - 1; /* the last rank */
            char spec[64];
            snprintf(spec, sizeof spec, "%s:%d:%d", points[p].name, failing, FAULT_STEP);
            setenv("ZS_STEP_FAULT", spec, 1);
            snprintf(extra, sizeof extra, "%s", tiers[t]);
            harness_options opt = {.optimizer = "adamw", .steps = STEPS, .mode = TINY_GRAD_TRUE,
                                   .max_live_units = 2, .scheduler = "constant", .stage = 2,
                                   .dtype = "bf16", .config_extra = extra,
                                   .comm_extra = "timeout_s = 120;"};
            harness_result r;
            const double t0 = MPI_Wtime();
            const int rc = harness_run(MPI_COMM_WORLD, &opt, &r);
            const double seconds = MPI_Wtime() - t0;
            unsetenv("ZS_STEP_FAULT");
            char what[128];
            snprintf(what, sizeof what, "'%s' on rank %d, optimizer on the %s", points[p].name,
                     failing, tier_names[t]);
            printf("rank %d: %s: failed after %.2f s: %s\n", zt_rank, what, seconds, r.error);
            ZT_CHECK_MSG(rc != 0 && r.status == ZS_ERR_INTERNAL, "%s: status %d (%s)", what,
                         (int)r.status, r.error);
            ZT_CHECK_MSG(strstr(r.error, "injected by ZS_STEP_FAULT") != NULL,
                         "%s: the message does not give the cause: %s", what, r.error);
            if (zt_rank != failing) {
                char from[64];
                snprintf(from, sizeof from, "(reported by rank %d)", failing);
                ZT_CHECK_MSG(strstr(r.error, from) != NULL, "%s: %s", what, r.error);
            }
            /* The step that failed: the injected one, or the next where the
             * failure happened after the step's agreement (the host update,
             * a gather). */
            const int after_agreement =
                strcmp(points[p].name, "host") == 0 || strcmp(points[p].name, "gather") == 0;
            const int failed_at = FAULT_STEP + after_agreement;
            int steps_done = 0;
            for (int s = 0; s < STEPS; s++) steps_done += r.lr[s] != 0.0;
            ZT_CHECK_MSG(steps_done == failed_at - 1, "%s: %d steps completed, expected %d", what,
                         steps_done, failed_at - 1);
            harness_result_free(&r);
            MPI_Barrier(MPI_COMM_WORLD);
        }
    const int rc = zt_finish("test_step_fail");
    MPI_Finalize();
    return rc;
}
