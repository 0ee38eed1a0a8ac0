/* A failed offloaded update is reported once (issue 29, item 1). With the
 * optimizer in host memory (overlapped and not, stage 2, np 2), a failure
 * injected on the last rank after the step's agreement (ZS_STEP_FAULT
 * "host": the host update of a unit; "gather": a unit's gather after it):
 *   - when the next zs_step reports it on every rank, zs_destroy stays
 *     quiet: its warning "... no later call reported it" would be false;
 *   - when no later call reports it (the failure is in the last step's
 *     pass; the program reads the final weights with zs_fetch, which runs
 *     the gathers but returns no failure of the update, and destroys the
 *     context), zs_destroy on the failing rank warns, once, and no other
 *     rank does.
 * Each rank's warnings go to a log file of its own (harness_warn_log). The
 * loop does no math: the runtime runs the same update whatever the values. */
#define _GNU_SOURCE /* setenv */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "test_util.h"

#define STEPS 3
#define UNREPORTED "no later call reported it"

/* One micro-step over every unit (no gradient written: the runtime zeroes
 * it) and its zs_step. Returns the zs_step's status. */
static zs_status train_step(zs_ctx *zs) {
    for (int l = 0; l < tiny_layer_count(); l++) {
        zs_unit *u = zs_unit_at(zs, l);
        zs_status st = zs_fetch(zs, u);
        if (st == ZS_OK) st = zs_grads_ready(zs, u);
        if (st == ZS_OK) st = zs_release(zs, u);
        if (st != ZS_OK) return st;
    }
    zs_step_info info;
    return zs_step(zs, &info);
}

typedef struct run_case {
    const char *point;
    int overlap;
    int fault_step; /* the optimizer step (1-based) whose update fails */
} run_case;

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const int failing = world - 1;
    char mine[256], log_group[256], extra[512];
    harness_warn_log("update_reported", zt_rank, log_group, sizeof log_group, mine, sizeof mine);
    /* Step 2 fails and step 3's zs_step reports it; step 3 fails and no
     * call after it does. */
    const run_case cases[] = {{"host", 1, 2}, {"host", 0, 2},    {"gather", 1, 2},
                              {"host", 1, STEPS}, {"host", 0, STEPS}, {"gather", 1, STEPS}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const run_case *rc = &cases[c];
        const int reported = rc->fault_step < STEPS;
        char what[160];
        snprintf(what, sizeof what, "'%s' failing at step %d on rank %d, %soverlapped (%s)",
                 rc->point, rc->fault_step, failing, rc->overlap ? "" : "not ",
                 reported ? "reported by the next zs_step" : "never reported");
        unlink(mine); /* the log is appended to */
        MPI_Barrier(MPI_COMM_WORLD);
        snprintf(extra, sizeof extra, "offload: { optimizer = \"host\"; overlap = %s; }; %s",
                 rc->overlap ? "true" : "false", log_group);
        char spec[64];
        snprintf(spec, sizeof spec, "%s:%d:%d", rc->point, failing, rc->fault_step);
        setenv("ZS_STEP_FAULT", spec, 1);
        harness_options opt = {.optimizer = "adamw", .steps = STEPS, .mode = TINY_GRAD_TRUE,
                               .max_live_units = 2, .scheduler = "constant", .stage = 2,
                               .config_extra = extra, .comm_extra = "timeout_s = 120;"};
        zs_ctx *zs = NULL;
        zs_param *params[2 * TINY_MAX_LAYERS];
        ZT_REQUIRE(harness_build(MPI_COMM_WORLD, &opt, &zs, params) == ZS_OK);
        int failed_at = 0;
        for (int s = 1; s <= STEPS && !failed_at; s++)
            if (train_step(zs) != ZS_OK) failed_at = s;
        /* The final weights read, as a program saving or evaluating them
         * would: each unit's gather runs here, after the last step. */
        for (int l = 0; l < tiny_layer_count() && !failed_at; l++) {
            ZT_OK(zs_fetch(zs, zs_unit_at(zs, l)));
            ZT_OK(zs_release(zs, zs_unit_at(zs, l)));
        }
        zs_destroy(zs);
        unsetenv("ZS_STEP_FAULT");
        ZT_CHECK_MSG(failed_at == (reported ? rc->fault_step + 1 : 0),
                     "%s: zs_step failed at step %d", what, failed_at);
        char first[4096];
        const int warnings = harness_count_lines(mine, UNREPORTED, first, sizeof first);
        const int expected = !reported && zt_rank == failing;
        printf("rank %d: %s: %d warning(s) %s\n", zt_rank, what, warnings, first);
        ZT_CHECK_MSG(warnings == expected,
                     "%s: zs_destroy warned \"%s\" %d time(s) on rank %d, expected %d%s%s", what,
                     UNREPORTED, warnings, zt_rank, expected, warnings > 0 ? ": " : "", first);
        if (expected)
            ZT_CHECK_MSG(strstr(first, "injected by ZS_STEP_FAULT") != NULL,
                         "%s: the warning does not give the cause: %s", what, first);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    unlink(mine);
    const int rc = zt_finish("test_update_reported");
    MPI_Finalize();
    return rc;
}
