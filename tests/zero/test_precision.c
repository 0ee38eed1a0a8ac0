/* Mixed precision through the whole runtime (run under mpirun -np 2, 3, 4):
 *   - fp16 and bf16 in stages 0-3: model-state bytes per tag equal the ZeRO
 *     formula with K = 12 (stage 1: 4Ψ + 12Ψ/N, stage 2: 2Ψ + 14Ψ/N,
 *     stage 3: 16Ψ/N), computed here from the layout rules;
 *   - collectives carry the compute dtype (2 bytes per element), or fp32 for
 *     gradients with precision.reduce_dtype = "fp32";
 *   - stages 0-3 give bit-identical parameters at a fixed world size;
 *   - overflow consensus: +inf, -inf or NaN written into one gradient on one
 *     rank makes every rank skip the step with all state bitwise unchanged,
 *     reports where it was found (the rank owning the non-finite reduced
 *     element, and the unit), keeps the loss scale per the hysteresis, and
 *     training continues and improves;
 *   - at the minimum loss scale with on_min_scale = "abort", every rank fails
 *     with ZS_ERR_NUMERIC naming the step. */
#include <math.h>
#include <mpi.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"

#define STEPS 12
#define INJECT_STEP 4
#define MAX_LIVE 2

static int64_t padded_total(int world, int64_t *max_unit) {
    int64_t total = 0;
    *max_unit = 0;
    for (int l = 0; l < tiny_layer_count(); l++) {
        int64_t u = harness_unit_padded(l, world);
        total += u;
        if (u > *max_unit) *max_unit = u;
    }
    return total;
}

static void check_memory(const char *dtype, int stage, int world, const zs_memory_stats *m) {
    int64_t max_unit;
    const uint64_t psi = (uint64_t)padded_total(world, &max_unit), shard = psi / world;
    /* Compute dtype 2 bytes; fp32 master 4 and two fp32 moments 8: K = 12. */
    uint64_t want_params = 2 * (stage == 3 ? shard : psi);
    uint64_t want_grads = 2 * (stage >= 2 ? shard : psi);
    uint64_t want_master = 4 * (stage == 0 ? psi : shard);
    uint64_t want_optim = 8 * (stage == 0 ? psi : shard);
    ZT_EQ_U64(m->current[ZS_MEM_PARAMS], want_params);
    ZT_EQ_U64(m->current[ZS_MEM_GRADS], want_grads);
    ZT_EQ_U64(m->current[ZS_MEM_MASTER], want_master);
    ZT_EQ_U64(m->current[ZS_MEM_OPTIM], want_optim);
    uint64_t model = m->current[ZS_MEM_PARAMS] + m->current[ZS_MEM_GRADS] +
                     m->current[ZS_MEM_MASTER] + m->current[ZS_MEM_OPTIM];
    uint64_t formula = stage == 0 ? 16 * psi
                     : stage == 1 ? 4 * psi + 12 * shard
                     : stage == 2 ? 2 * psi + 14 * shard
                                  : 16 * shard;
    ZT_CHECK_MSG(model == formula, "%s stage %d: model state %llu bytes, formula %llu", dtype, stage,
                 (unsigned long long)model, (unsigned long long)formula);
    /* The live budget (zero.live_bytes = 0): max_live_units carves of the
     * largest unit (2 bytes per element, in 256-byte blocks) for parameters
     * in stage 3 and for gradients in stages 2-3; nothing carved between
     * steps, and the whole budget charged as live_free. */
    uint64_t span = ((uint64_t)max_unit * 2 + 255) / 256 * 256;
    uint64_t budget = stage < 2 ? 0 : (uint64_t)MAX_LIVE * span * (stage == 3 ? 2 : 1);
    ZT_EQ_U64(m->live_bytes_budget, budget);
    ZT_EQ_U64(m->current[ZS_MEM_LIVE_FREE], budget);
    ZT_EQ_U64(m->current[ZS_MEM_LIVE_PARAMS] + m->current[ZS_MEM_LIVE_GRADS], 0);
    ZT_EQ_U64(m->current[ZS_MEM_SCRATCH], 0);
}

/* Bytes of the last step: gradients in `grad_bytes` per element, parameters
 * gathered in 2 (the compute dtype). */
static void check_bytes(int stage, int world, int grad_bytes, const zs_comm_stats *b) {
    int64_t max_unit;
    const uint64_t psi = (uint64_t)padded_total(world, &max_unit);
    const uint64_t per_pass = psi / world * (world - 1);
    /* The step's scalar all-reduces: readiness, norm and the job's two
     * votes (4 doubles), and the agreement after the update or the skipped
     * step's reset (1). */
    uint64_t scalar = (uint64_t)(2.0 * (world - 1) / world * 4 * 8) +
                      (uint64_t)(2.0 * (world - 1) / world * 1 * 8);
    uint64_t want_grads = (stage == 0 ? 2 : 1) * per_pass * grad_bytes;
    uint64_t want_params = stage == 0 ? 0 : (stage == 3 ? 2 : 1) * per_pass * 2;
    uint64_t got_grads = b->bytes[ZS_COMM_REDUCE_SCATTER] + b->bytes[ZS_COMM_ALL_REDUCE] - scalar;
    ZT_CHECK_MSG(got_grads == want_grads, "stage %d: gradient bytes %llu, expected %llu", stage,
                 (unsigned long long)got_grads, (unsigned long long)want_grads);
    ZT_CHECK_MSG(b->bytes[ZS_COMM_ALL_GATHER] == want_params,
                 "stage %d: parameter bytes %llu, expected %llu", stage,
                 (unsigned long long)b->bytes[ZS_COMM_ALL_GATHER], (unsigned long long)want_params);
}

static void run_dtype(const char *dtype, int world) {
    harness_result first;
    const float values[3] = {INFINITY, -INFINITY, NAN};
    for (int stage = 0; stage < 4; stage++) {
        harness_options opt = {.stage = stage, .optimizer = "adamw", .steps = STEPS,
                               .mode = TINY_GRAD_TRUE, .max_live_units = MAX_LIVE, .prefetch = 1,
                               .scheduler = "constant", .dtype = dtype,
                               /* 2^16 times this model's gradients exceeds
                                * fp16's range (the scaler would rightly skip
                                * the first steps); 2^8 does not. */
                               .precision_extra = "initial_scale_power = 8;"};
        harness_result r;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &r) == 0);
        check_memory(dtype, stage, world, &r.memory);
        check_bytes(stage, world, 2, &r.step_bytes);
        for (int s = 0; s < STEPS; s++)
            ZT_CHECK_MSG(!r.skipped[s], "%s stage %d: step %d overflowed without injection", dtype,
                         stage, s);
        /* The same in the other modes of the comm engine: synchronous, and
         * with prefetch and buckets on its thread; and through host staging
         * in pieces of 1 KiB (comm.impl = "mpi" on a GPU). Bit for bit. */
        static const char *const modes[3] = {"synchronous", "prefetching and bucketed",
                                             "host-staged"};
        for (int mode = 0; mode < 3; mode++) {
            harness_options o = opt;
            o.sync = mode == 0;
            o.gather_ahead = mode >= 1;
            o.bucket_bytes = mode >= 1 ? 4096 : 0;
            o.comm_extra = mode == 2 ? "host_staging = true; staging_bytes = 1024;" : NULL;
            harness_result other;
            ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &other) == 0);
            ZT_CHECK_MSG(memcmp(other.final, r.final, sizeof(float) * (size_t)r.numel) == 0 &&
                             memcmp(other.loss, r.loss, sizeof(double) * STEPS) == 0 &&
                             memcmp(other.grad_norm, r.grad_norm, sizeof(double) * STEPS) == 0,
                         "%s np %d stage %d: the %s run differs", dtype, world, stage,
                         modes[mode]);
            harness_result_free(&other);
        }
        ZT_CHECK_MSG(r.loss[STEPS - 1] < r.loss[0], "%s stage %d: loss %g -> %g", dtype, stage,
                     r.loss[0], r.loss[STEPS - 1]);
        if (stage == 0) {
            first = r;
        } else {
            ZT_CHECK_MSG(memcmp(first.final, r.final, sizeof(float) * (size_t)r.numel) == 0,
                         "%s np %d: stage %d is not bit-identical to stage 0", dtype, world, stage);
            harness_result_free(&r);
        }

        /* With 2 micro-steps, stages 2-3 accumulate in an fp32 shard: 4 bytes
         * per shard element instead of 2; stages 0-1 keep the compute dtype. */
        opt.gas = 2;
        opt.steps = 2;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &r) == 0);
        {
            int64_t max_unit;
            const uint64_t psi = (uint64_t)padded_total(world, &max_unit);
            ZT_EQ_U64(r.memory.current[ZS_MEM_GRADS], stage >= 2 ? 4 * (psi / world) : 2 * psi);
        }
        harness_result_free(&r);
        opt.gas = 0;

        /* fp32 reduction of the same run: gradients travel in 4 bytes. */
        opt.reduce_dtype = "fp32";
        opt.steps = 2;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &r) == 0);
        check_bytes(stage, world, 4, &r.step_bytes);
        harness_result_free(&r);

        /* Overflow injected by rank 0 into the last weight element of unit 1,
         * which (after reduction) lies in the slice of the rank computed here. */
        opt.reduce_dtype = NULL;
        opt.steps = STEPS;
        opt.inject = 1;
        opt.inject_step = INJECT_STEP;
        opt.inject_rank = 0;
        opt.inject_unit = 1;
        opt.inject_index = (int)tiny_weight_numel(1) - 1;
        opt.inject_value = values[stage % 3];
        const int owner = (int)(opt.inject_index / (harness_unit_padded(1, world) / world));
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &r) == 0);
        for (int s = 0; s < STEPS; s++) {
            int expect = s == INJECT_STEP;
            ZT_CHECK_MSG(r.skipped[s] == expect, "%s stage %d: step %d skipped = %d", dtype, stage,
                         s, r.skipped[s]);
        }
        ZT_CHECK_MSG(r.digest_before[INJECT_STEP] == r.digest_after[INJECT_STEP],
                     "%s stage %d: state changed in the skipped step", dtype, stage);
        ZT_CHECK(r.digest_before[INJECT_STEP + 1] != r.digest_after[INJECT_STEP + 1]);
        ZT_EQ_INT(r.overflow_rank[INJECT_STEP], owner);
        ZT_EQ_INT(r.overflow_unit[INJECT_STEP], 1);
        ZT_EQ_INT(r.overflow_rank[INJECT_STEP + 1], -1);
        ZT_CHECK(!isfinite(r.grad_norm[INJECT_STEP]));
        /* fp16 starts at 2^8 with hysteresis 2: the first overflow only uses
         * up hysteresis. bf16 is not scaled at all. */
        ZT_CHECK_MSG(r.loss_scale[INJECT_STEP + 1] == r.loss_scale[INJECT_STEP] &&
                     r.loss_scale[0] == (strcmp(dtype, "fp16") == 0 ? 256.0 : 1.0),
                     "%s: loss scale %g then %g", dtype, r.loss_scale[INJECT_STEP],
                     r.loss_scale[INJECT_STEP + 1]);
        ZT_CHECK_MSG(r.loss[STEPS - 1] < r.loss[0], "%s stage %d after the skip: loss %g -> %g",
                     dtype, stage, r.loss[0], r.loss[STEPS - 1]);
        harness_result_free(&r);
    }
    harness_result_free(&first);

    /* At the minimum scale, abort: every rank fails at the injected step. */
    harness_options opt = {.stage = 2, .optimizer = "adamw", .steps = STEPS, .mode = TINY_GRAD_TRUE,
                           .max_live_units = MAX_LIVE, .scheduler = "constant", .dtype = dtype,
                           .inject = 1, .inject_step = INJECT_STEP, .inject_rank = 0,
                           .inject_unit = 2, .inject_value = NAN,
                           .precision_extra = "initial_scale_power = 0; hysteresis = 1; "
                                              "min_loss_scale = 1.0; on_min_scale = \"abort\";"};
    /* bf16 has no dynamic scale: the bound on consecutive skips stops it at
     * the second overflow in a row. */
    const char *expected_step = "step 5";
    if (strcmp(dtype, "fp16") != 0) {
        opt.precision_extra = "max_consecutive_skips = 1;";
        opt.inject_count = 2;
        expected_step = "step 6";
    }
    harness_result r;
    ZT_CHECK(harness_run(MPI_COMM_WORLD, &opt, &r) != 0);
    ZT_CHECK_MSG(r.status == ZS_ERR_NUMERIC, "%s: expected ZS_ERR_NUMERIC, got %s (%s)", dtype,
                 zs_status_name(r.status), zs_last_error());
    ZT_CHECK_MSG(strstr(zs_last_error(), expected_step) != NULL, "%s: message lacks %s: %s",
                 dtype, expected_step, zs_last_error());
    harness_result_free(&r);
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    run_dtype("fp16", world);
    run_dtype("bf16", world);
    int rc = zt_finish("test_precision");
    MPI_Finalize();
    return rc;
}
