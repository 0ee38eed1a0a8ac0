/* Stages 0-3 at this world size (run under mpirun -np 1..4):
 *   - 20 AdamW steps match the single-process reference within 1e-5 relative
 *     (max |a-b| / max |b| per tensor) on every parameter;
 *   - stages 0-3 give bit-identical parameters, losses and gradient norms,
 *     with collectives on the comm engine's thread or synchronous, with
 *     stage-3 prefetch or without, and with small units' gradients reduced
 *     in buckets (fewer collectives, the same bytes);
 *   - model-state bytes per tag equal the ZeRO formula computed here from the
 *     layout rules, and stage 3 never holds more than max_live_units units;
 *   - bytes sent per step equal 2Ψ(n-1)/n (stages 0-2) or 3Ψ(n-1)/n (stage 3)
 *     for the padded Ψ, and are within padding of the unpadded Ψ;
 *   - collectives staged through host buffers (comm.host_staging, the path
 *     of comm.impl = "mpi" on a GPU) in pieces of 1 KiB give the same bits,
 *     with buckets and prefetch, and the staging is counted under comm;
 *   - every all-gather choice (ring, MPI's, auto measured, auto from a
 *     threshold between the unit sizes) gives the same bits. */
#include <mpi.h>
#include <math.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"

#define STEPS 20
#define MAX_LIVE 2

/* Bytes a carve of the live budget occupies (src/zero/live.h: 256-byte blocks). */
static uint64_t live_span(uint64_t bytes) { return (bytes + 255) / 256 * 256; }

static void check_memory(int stage, int world, const zs_memory_stats *m) {
    int64_t padded = 0, max_unit = 0, unit[TINY_MAX_LAYERS];
    for (int l = 0; l < tiny_layer_count(); l++) {
        unit[l] = harness_unit_padded(l, world);
        padded += unit[l];
        if (unit[l] > max_unit) max_unit = unit[l];
    }
    const uint64_t full = (uint64_t)padded * 4, shard = (uint64_t)padded / world * 4;
    /* fp32 AdamW: params and grads 4 bytes each, two fp32 moments, and the
     * parameters are their own master copy (K = 8). */
    uint64_t want_params = stage == 3 ? shard : full;
    uint64_t want_grads = stage >= 2 ? shard : full;
    uint64_t want_optim = 2 * (stage == 0 ? full : shard);
    ZT_EQ_U64(m->current[ZS_MEM_PARAMS], want_params);
    ZT_EQ_U64(m->current[ZS_MEM_GRADS], want_grads);
    ZT_EQ_U64(m->current[ZS_MEM_OPTIM], want_optim);
    ZT_EQ_U64(m->current[ZS_MEM_MASTER], 0);
    ZT_EQ_U64(m->peak[ZS_MEM_PARAMS], want_params);
    /* The live budget (zero.live_bytes = 0): max_live_units carves of the
     * largest unit for gathered parameters (stage 3) and as many for
     * gradients (stages 2-3). Between steps nothing is carved. */
    uint64_t budget = (uint64_t)MAX_LIVE * live_span((uint64_t)max_unit * 4) * (stage == 3 ? 2 : 1);
    if (stage < 2) budget = 0;
    ZT_EQ_U64(m->live_bytes_budget, budget);
    ZT_EQ_U64(m->current[ZS_MEM_LIVE_FREE], budget);
    ZT_EQ_U64(m->current[ZS_MEM_LIVE_PARAMS], 0);
    ZT_EQ_U64(m->current[ZS_MEM_LIVE_GRADS], 0);
    /* Peaks from the unit sizes and the harness's loop (units 0, 1, 2):
     * forward holds two consecutive units (it fetches the next before
     * releasing the current): the parameters' peak is exactly the larger
     * pair. In backward a unit's reduction keeps its gradient carve until
     * the runtime needs the room or the count (two open gradients here), so
     * unit l's backward may hold the gradient of unit l + 1 beside its own:
     * at most P1 + G2 + G1 or P0 + G1 + G0, at least one unit's parameters
     * and gradient; where the held carve goes back first depends on where
     * the carves were placed, so only the bounds are exact here (the tied
     * test checks exact peaks in a budget with no choice). */
    uint64_t u[TINY_MAX_LAYERS];
    for (int l = 0; l < tiny_layer_count(); l++) u[l] = (uint64_t)unit[l] * 4;
    const uint64_t fwd_pair = u[0] + u[1] > u[1] + u[2] ? u[0] + u[1] : u[1] + u[2];
    const uint64_t grad_pair = u[2] + u[1] > u[1] + u[0] ? u[2] + u[1] : u[1] + u[0];
    uint64_t single = u[0];
    for (int l = 1; l < tiny_layer_count(); l++) single = u[l] > single ? u[l] : single;
    uint64_t bwd = 2 * u[2];
    if (u[1] + u[2] + u[1] > bwd) bwd = u[1] + u[2] + u[1];
    if (u[0] + u[1] + u[0] > bwd) bwd = u[0] + u[1] + u[0];
    ZT_EQ_U64(m->peak[ZS_MEM_LIVE_PARAMS], stage == 3 ? fwd_pair : 0);
    if (stage >= 2) {
        ZT_CHECK_MSG(m->peak[ZS_MEM_LIVE_GRADS] >= single && m->peak[ZS_MEM_LIVE_GRADS] <= grad_pair,
                     "stage %d: live_grads peak %llu outside [%llu, %llu]", stage,
                     (unsigned long long)m->peak[ZS_MEM_LIVE_GRADS], (unsigned long long)single,
                     (unsigned long long)grad_pair);
        uint64_t low = stage == 3 ? (fwd_pair > 2 * single ? fwd_pair : 2 * single) : single;
        uint64_t high = stage == 3 ? (fwd_pair > bwd ? fwd_pair : bwd) : grad_pair;
        ZT_CHECK_MSG(m->live_bytes_peak >= low && m->live_bytes_peak <= high && m->live_bytes_peak <= budget,
                     "stage %d: live bytes peak %llu outside [%llu, %llu] (budget %llu)", stage,
                     (unsigned long long)m->live_bytes_peak, (unsigned long long)low,
                     (unsigned long long)high, (unsigned long long)budget);
    } else {
        ZT_EQ_U64(m->peak[ZS_MEM_LIVE_GRADS], 0);
        ZT_EQ_U64(m->live_bytes_peak, 0);
    }
    /* The ring's staging buffer is bounded by comm.segment_bytes (4096 here). */
    ZT_CHECK_MSG(m->peak[ZS_MEM_COMM] <= 2 * 4096, "comm staging %llu bytes",
                 (unsigned long long)m->peak[ZS_MEM_COMM]);
    ZT_CHECK_MSG(m->live_units_peak <= MAX_LIVE, "peak live units %d > %d", m->live_units_peak,
                 MAX_LIVE);
    /* The loop prefetches, so stage 3 reaches exactly the bound. */
    ZT_EQ_INT(m->live_units_peak, stage == 3 ? MAX_LIVE : 0);
}

static void check_bytes(int stage, int world, const zs_comm_stats *b) {
    int64_t padded = 0, unpadded = 0;
    for (int l = 0; l < tiny_layer_count(); l++) {
        padded += harness_unit_padded(l, world);
        unpadded += tiny_weight_numel(l) + tiny_bias_numel(l);
    }
    /* Bulk traffic: everything but the step's scalar all-reduces: the
     * agreement on readiness, norm and the job's two votes (4 doubles) and
     * the one after the update (1 double: which rank failed, if any). */
    uint64_t scalar = (uint64_t)(2.0 * (world - 1) / world * 4 * 8) +
                      (uint64_t)(2.0 * (world - 1) / world * 1 * 8);
    uint64_t bulk = b->bytes[ZS_COMM_REDUCE_SCATTER] + b->bytes[ZS_COMM_ALL_GATHER] +
                    b->bytes[ZS_COMM_ALL_REDUCE] - scalar;
    int passes = stage == 3 ? 3 : 2;
    uint64_t want = (uint64_t)passes * (uint64_t)padded / world * (world - 1) * 4;
    ZT_EQ_U64(bulk, want);
    uint64_t ideal = (uint64_t)(passes * (double)unpadded * (world - 1) / world * 4);
    uint64_t padding = (uint64_t)passes * (uint64_t)(padded - unpadded) * 4;
    ZT_CHECK_MSG(bulk + 1 >= ideal && bulk <= ideal + padding + 1,
                 "stage %d: %llu bytes vs ideal %llu (+%llu padding)", stage,
                 (unsigned long long)bulk, (unsigned long long)ideal, (unsigned long long)padding);
    ZT_EQ_U64(b->calls[ZS_COMM_BROADCAST], 0);
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);

    /* runs[0..3]: stages 0-3 with the comm engine's thread (the default) and
     * no gathering ahead, for the exact memory checks; sync[]: the same on
     * the calling thread (comm.overlap = false); ahead[]: with stage-3
     * prefetch in the recorded order. All must agree bit for bit. */
    static harness_result runs[4], sync[4], ahead[4], buckets[4], staged[4];
    static harness_result gathers[4][3];
    /* Chunks per rank here are 0.1-1 KiB: 512 bytes puts the threshold
     * between the units. */
    static const char *const gather_choices[3] = {
        "all_gather = \"ring\";", "all_gather = \"mpi\";", "all_gather_mpi_from_bytes = 512;"};
    harness_options opt = {.optimizer = "adamw", .steps = STEPS, .mode = TINY_GRAD_TRUE,
                           .max_live_units = MAX_LIVE, .prefetch = 1, .scheduler = "warmup_cosine"};
    for (int stage = 0; stage < 4; stage++) {
        opt.stage = stage;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &runs[stage]) == 0);
        check_memory(stage, world, &runs[stage].memory);
        check_bytes(stage, world, &runs[stage].step_bytes);
        harness_options o = opt;
        o.sync = 1;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &sync[stage]) == 0);
        check_memory(stage, world, &sync[stage].memory);
        o.sync = 0;
        o.gather_ahead = 1;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &ahead[stage]) == 0);
        check_bytes(stage, world, &ahead[stage].step_bytes);
        /* Small units reduced together in buckets of at least 4 KiB (the
         * tiny units are 0.4-2.1 KiB), overlapped, with prefetch. */
        o.bucket_bytes = 4096;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &buckets[stage]) == 0);
        check_bytes(stage, world, &buckets[stage].step_bytes);
        if (world > 1)
            ZT_CHECK_MSG(buckets[stage].step_bytes.calls[stage == 0 ? ZS_COMM_ALL_REDUCE : ZS_COMM_REDUCE_SCATTER] <
                             runs[stage].step_bytes.calls[stage == 0 ? ZS_COMM_ALL_REDUCE : ZS_COMM_REDUCE_SCATTER],
                         "stage %d: buckets did not reduce the number of gradient collectives", stage);
        /* The same through host staging: 1 KiB holds 256 / world elements
         * of each chunk, so units go in several pieces. */
        o.comm_extra = "host_staging = true; staging_bytes = 1024;";
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &staged[stage]) == 0);
        o.comm_extra = NULL;
        ZT_EQ_U64(staged[stage].memory.current[ZS_MEM_COMM],
                  buckets[stage].memory.current[ZS_MEM_COMM] + (world > 1 ? 1024 : 0));
        o = opt;
        for (int g = 0; g < 3; g++) {
            o.comm_extra = gather_choices[g];
            ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &gathers[stage][g]) == 0);
        }
        const size_t bytes = sizeof(float) * (size_t)runs[stage].numel;
        ZT_CHECK_MSG(memcmp(buckets[stage].final, staged[stage].final, bytes) == 0 &&
                         memcmp(buckets[stage].grad_norm, staged[stage].grad_norm, sizeof(double) * STEPS) == 0 &&
                         memcmp(buckets[stage].loss, staged[stage].loss, sizeof(double) * STEPS) == 0,
                     "np %d stage %d: runs with and without host staging differ", world, stage);
        for (int g = 0; g < 3; g++)
            ZT_CHECK_MSG(memcmp(runs[stage].final, gathers[stage][g].final, bytes) == 0 &&
                             memcmp(runs[stage].grad_norm, gathers[stage][g].grad_norm, sizeof(double) * STEPS) == 0,
                         "np %d stage %d: all-gather with '%s' differs from auto", world, stage,
                         gather_choices[g]);
        ZT_CHECK_MSG(memcmp(runs[stage].final, buckets[stage].final, bytes) == 0 &&
                         memcmp(runs[stage].grad_norm, buckets[stage].grad_norm, sizeof(double) * STEPS) == 0,
                     "np %d stage %d: runs with and without buckets differ", world, stage);
        ZT_CHECK_MSG(memcmp(runs[stage].final, sync[stage].final, bytes) == 0 &&
                         memcmp(runs[stage].grad_norm, sync[stage].grad_norm, sizeof(double) * STEPS) == 0 &&
                         memcmp(runs[stage].loss, sync[stage].loss, sizeof(double) * STEPS) == 0,
                     "np %d stage %d: overlapped and synchronous runs differ", world, stage);
        ZT_CHECK_MSG(memcmp(runs[stage].final, ahead[stage].final, bytes) == 0 &&
                         memcmp(runs[stage].grad_norm, ahead[stage].grad_norm, sizeof(double) * STEPS) == 0,
                     "np %d stage %d: runs with and without prefetch differ", world, stage);
    }

    harness_result ref;
    harness_reference(&opt, runs[0].initial, &ref);
    for (int stage = 0; stage < 4; stage++) {
        const char *name = "";
        double rel = harness_max_relative_diff(runs[stage].final, ref.final, &name);
        ZT_CHECK_MSG(rel <= 1e-5, "np %d stage %d: %s differs from the reference by %.3g (relative)",
                     world, stage, name, rel);
        ZT_CHECK_MSG(runs[stage].loss[STEPS - 1] < runs[stage].loss[0],
                     "stage %d: loss did not fall (%g -> %g)", stage, runs[stage].loss[0],
                     runs[stage].loss[STEPS - 1]);
        for (int s = 0; s < STEPS; s++) {
            ZT_CHECK_MSG(fabs(runs[stage].grad_norm[s] - ref.grad_norm[s]) <= 1e-5 * ref.grad_norm[s],
                         "stage %d step %d: grad norm %.9g vs reference %.9g", stage, s,
                         runs[stage].grad_norm[s], ref.grad_norm[s]);
            ZT_CHECK_MSG(fabs(runs[stage].lr[s] - ref.lr[s]) <= 1e-12, "step %d lr %.17g vs %.17g",
                         s, runs[stage].lr[s], ref.lr[s]);
        }
    }
    for (int stage = 1; stage < 4; stage++) {
        ZT_CHECK_MSG(memcmp(runs[0].initial, runs[stage].initial, sizeof(float) * (size_t)runs[0].numel) == 0,
                     "stage %d starts from other weights than stage 0", stage);
        ZT_CHECK_MSG(memcmp(runs[0].final, runs[stage].final, sizeof(float) * (size_t)runs[0].numel) == 0,
                     "np %d: stage %d parameters are not bit-identical to stage 0", world, stage);
        ZT_CHECK_MSG(memcmp(runs[0].grad_norm, runs[stage].grad_norm, sizeof(double) * STEPS) == 0,
                     "np %d: stage %d gradient norms are not bit-identical to stage 0", world, stage);
    }
    harness_result_free(&ref);
    for (int stage = 0; stage < 4; stage++) {
        harness_result_free(&runs[stage]);
        harness_result_free(&sync[stage]);
        harness_result_free(&ahead[stage]);
        harness_result_free(&buckets[stage]);
        harness_result_free(&staged[stage]);
        for (int g = 0; g < 3; g++) harness_result_free(&gathers[stage][g]);
    }
    int rc = zt_finish("test_stages");
    MPI_Finalize();
    return rc;
}
