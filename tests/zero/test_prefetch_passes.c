/* Stage-3 prefetch and the kinds of pass (np 2, issue 22 items 11 and 16):
 *   - a program that reads every unit before training (as a program reading
 *     its initial weights does) gathers each unit exactly once per fetch in
 *     every micro-step: the all-gather calls and bytes of each micro-step
 *     are those of the formula (2 x units, 2 x the padded model's (w-1)/w),
 *     the first micro-step after the order was recorded included, where a
 *     unit used to be gathered ahead for nothing;
 *   - training micro-steps alternating with evaluation passes (zs_eval_begin
 *     .. zs_eval_end) print no warning about the fetch order, and both gather
 *     ahead once their order is known: after a pass's first fetch, units are
 *     in flight ahead of the program;
 *   - gradients inside an evaluation pass, a zs_step inside one and
 *     unbalanced calls fail with ZS_ERR_STATE and say what to do.
 * The model is the harness's tiny model; the loop does no math (the runtime
 * moves the same bytes whatever the values). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "test_util.h"
#include "zero/prefetch.h"

#define TRAIN_STEPS 6

typedef struct gathers {
    uint64_t calls, bytes;
} gathers;

static gathers all_gathers(zs_ctx *zs) {
    zs_comm_stats s;
    ZT_OK(zs_comm_report(zs, &s));
    return (gathers){s.calls[ZS_COMM_ALL_GATHER], s.bytes[ZS_COMM_ALL_GATHER]};
}

/* What one pass over every unit moves: each unit's padded size less the
 * rank's own chunk, in fp32. */
static uint64_t one_pass_bytes(int world) {
    int64_t padded = 0;
    for (int l = 0; l < tiny_layer_count(); l++) padded += harness_unit_padded(l, world);
    return (uint64_t)padded / (uint64_t)world * (uint64_t)(world - 1) * 4u;
}

/* Fetches and releases every unit in forward order; *ahead counts the
 * fetches after which units were in flight ahead of the program. */
static void forward(zs_ctx *zs, int *ahead) {
    for (int l = 0; l < tiny_layer_count(); l++) {
        ZT_OK(zs_fetch(zs, zs_unit_at(zs, l)));
        if (zs__prefetch_pending(zs)) (*ahead)++;
        ZT_OK(zs_release(zs, zs_unit_at(zs, l)));
    }
}

/* One training micro-step and its zs_step; returns the fetches after which
 * something was gathered ahead. */
static int train_step(zs_ctx *zs, zs_param **params) {
    int ahead = 0;
    forward(zs, &ahead);
    for (int l = tiny_layer_count() - 1; l >= 0; l--) {
        zs_unit *u = zs_unit_at(zs, l);
        ZT_OK(zs_fetch(zs, u));
        if (zs__prefetch_pending(zs)) ahead++;
        ZT_CHECK(zs_param_grad(params[2 * l]) != NULL); /* zeroed: the runtime opens it so */
        ZT_CHECK(zs_param_grad(params[2 * l + 1]) != NULL);
        ZT_OK(zs_grads_ready(zs, u));
        ZT_OK(zs_release(zs, u));
    }
    zs_step_info info;
    ZT_OK(zs_step(zs, &info));
    return ahead;
}

static int eval_pass(zs_ctx *zs) {
    int ahead = 0;
    ZT_OK(zs_eval_begin(zs));
    forward(zs, &ahead);
    ZT_OK(zs_eval_end(zs));
    return ahead;
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    char mine[256], extra[512];
    harness_warn_log("prefetch_passes", zt_rank, extra, sizeof extra, mine, sizeof mine);
    harness_options opt = {.optimizer = "sgd", .steps = TRAIN_STEPS, .mode = TINY_GRAD_TRUE,
                           .max_live_units = tiny_layer_count(), .scheduler = "constant", .stage = 3,
                           .gather_ahead = 1, .config_extra = extra};
    zs_ctx *zs = NULL;
    zs_param *params[2 * TINY_MAX_LAYERS];
    ZT_REQUIRE(harness_build(MPI_COMM_WORLD, &opt, &zs, params) == ZS_OK);
    const uint64_t pass_bytes = one_pass_bytes(world);

    /* Every unit read once before training. */
    int ignored = 0;
    forward(zs, &ignored);

    /* Training: each micro-step gathers every fetch once, no more. */
    for (int step = 0; step < TRAIN_STEPS; step++) {
        const gathers before = all_gathers(zs);
        const int ahead = train_step(zs, params);
        const gathers after = all_gathers(zs);
        ZT_CHECK_MSG(after.calls - before.calls == (uint64_t)(2 * tiny_layer_count()),
                     "training step %d: %llu all-gathers, want %d (one per fetch)", step,
                     (unsigned long long)(after.calls - before.calls), 2 * tiny_layer_count());
        ZT_CHECK_MSG(after.bytes - before.bytes == 2 * pass_bytes,
                     "training step %d: %llu all-gather bytes, want %llu", step,
                     (unsigned long long)(after.bytes - before.bytes),
                     (unsigned long long)(2 * pass_bytes));
        /* From the third step on the order is known: gathering ahead runs. */
        if (step >= 2)
            ZT_CHECK_MSG(ahead > 0, "training step %d: nothing was gathered ahead", step);
    }

    /* Evaluation between steps: two passes after each step. */
    for (int round = 0; round < 3; round++) {
        for (int pass = 0; pass < 2; pass++) {
            const gathers before = all_gathers(zs);
            const int ahead = eval_pass(zs);
            const gathers after = all_gathers(zs);
            ZT_CHECK_MSG(after.calls - before.calls == (uint64_t)tiny_layer_count() &&
                             after.bytes - before.bytes == pass_bytes,
                         "evaluation round %d pass %d: %llu all-gathers of %llu bytes, want %d "
                         "of %llu", round, pass, (unsigned long long)(after.calls - before.calls),
                         (unsigned long long)(after.bytes - before.bytes), tiny_layer_count(),
                         (unsigned long long)pass_bytes);
            /* Only the very first evaluation pass records without gathering ahead. */
            if (round > 0 || pass > 0)
                ZT_CHECK_MSG(ahead > 0, "evaluation round %d pass %d: nothing was gathered ahead",
                             round, pass);
        }
        const gathers before = all_gathers(zs);
        const int ahead = train_step(zs, params);
        const gathers after = all_gathers(zs);
        ZT_CHECK_MSG(ahead > 0, "training after evaluation round %d: nothing was gathered ahead",
                     round);
        ZT_CHECK_MSG(after.calls - before.calls == (uint64_t)(2 * tiny_layer_count()) &&
                         after.bytes - before.bytes == 2 * pass_bytes,
                     "training after evaluation round %d: %llu all-gathers of %llu bytes", round,
                     (unsigned long long)(after.calls - before.calls),
                     (unsigned long long)(after.bytes - before.bytes));
    }

    /* Misuse. */
    ZT_FAILS_WITH(zs_eval_end(zs), ZS_ERR_STATE, "no evaluation pass is open");
    ZT_OK(zs_eval_begin(zs));
    ZT_FAILS_WITH(zs_eval_begin(zs), ZS_ERR_STATE, "an evaluation pass is open already");
    ZT_OK(zs_fetch(zs, zs_unit_at(zs, 0)));
    ZT_CHECK(zs_param_grad(params[0]) == NULL);
    ZT_CHECK_MSG(strstr(zs_last_error(), "inside an evaluation pass") != NULL, "got: %s",
                 zs_last_error());
    ZT_FAILS_WITH(zs_grads_ready(zs, zs_unit_at(zs, 0)), ZS_ERR_STATE,
                  "inside an evaluation pass");
    ZT_OK(zs_release(zs, zs_unit_at(zs, 0)));
    ZT_OK(zs_eval_end(zs));

    const int warnings = harness_count_lines(mine, "differs from the order", NULL, 0);
    ZT_CHECK_MSG(warnings == 0, "%d fetch-order warning(s) in %s", warnings, mine);

    /* A zs_step inside an evaluation pass fails on every rank (last: the
     * micro-step cannot go on after a failed zs_step). */
    int ahead = 0;
    forward(zs, &ahead);
    for (int l = tiny_layer_count() - 1; l >= 0; l--) {
        ZT_OK(zs_fetch(zs, zs_unit_at(zs, l)));
        ZT_OK(zs_grads_ready(zs, zs_unit_at(zs, l)));
        ZT_OK(zs_release(zs, zs_unit_at(zs, l)));
    }
    ZT_OK(zs_eval_begin(zs));
    ZT_FAILS_WITH(zs_step(zs, NULL), ZS_ERR_STATE, "call zs_eval_end before zs_step");
    zs_destroy(zs);
    unlink(mine);
    int rc = zt_finish("test_prefetch_passes");
    MPI_Finalize();
    return rc;
}
