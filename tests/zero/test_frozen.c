/* Frozen units (ZS_PARAM_FROZEN) at this world size, on the deep shape (26
 * units of 7..13 wide; the first, the last and every third one frozen, the
 * largest unit among them):
 *   - stages 0-3 give bit-identical parameters, losses and gradient norms,
 *     and every frozen parameter ends bit-identical to its initial value,
 *     in fp32 (against the single-process reference that freezes the same
 *     layers, within 1e-5) and in bf16 with two micro-steps, clipping and
 *     an fp32 reduction (stages 0-1 and 2-3 pairwise: they accumulate in
 *     bf16 and in fp32);
 *   - model state per tag equals the formula over the trainable units
 *     (gradients, moments) and the frozen ones (the frozen tag: full, or the
 *     shard in stage 3), and zs_estimate_memory_flags on the same settings
 *     equals the report on every tag;
 *   - bytes per step: only trainable units are reduced (and, in stages 1-2,
 *     gathered after the update); stage 3 gathers every unit;
 *   - with the optimizer offloaded to host memory (stage 2; stage 3 with the
 *     parameters too), and with hybrid sharding (zero.shard_group = "node",
 *     one rank per node) at more than one rank: the offloaded runs give the
 *     same bits as the plain fp32 run, the hybrid one the reference within
 *     1e-5; with ZeRO++ (qwZ, qgZ, hpZ): frozen values unchanged and the
 *     trainable ones trained;
 *   - a checkpoint of a frozen run (saved in stage 1 after step 3, the frozen
 *     values as their master tensors and no moments) resumed in stage 3
 *     gives the uninterrupted run's bits;
 *   - misuse fails with a message naming the parameter or unit: a frozen
 *     parameter's gradient, zs_grads_open on a frozen unit, a unit mixing
 *     frozen and trainable parameters, a model whose every unit is frozen. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config_text.h"
#include "harness.h"
#include "test_util.h"
#include "zeroshard_mpi.h"

#define STEPS 6
#define MAX_LIVE 2

static unsigned frozen_mask(void) {
    unsigned mask = 1u | (1u << (tiny_layer_count() - 1));
    for (int l = 0; l < tiny_layer_count(); l += 3) mask |= 1u << l;
    return mask;
}

static int frozen(int l) { return (frozen_mask() >> l) & 1u; }

static void check_memory(const char *what, int stage, int world, size_t elem,
                         const zs_memory_stats *m) {
    int64_t train = 0, cold = 0;
    for (int l = 0; l < tiny_layer_count(); l++)
        *(frozen(l) ? &cold : &train) += harness_unit_padded(l, world);
    const uint64_t params = (uint64_t)(stage == 3 ? train / world : train) * elem;
    const uint64_t held = (uint64_t)(stage == 3 ? cold / world : cold) * elem;
    const uint64_t grads = (uint64_t)(stage >= 2 ? train / world : train) * elem;
    const uint64_t state = (uint64_t)(stage == 0 ? train : train / world) * 4;
    ZT_CHECK_MSG(m->current[ZS_MEM_PARAMS] == params && m->peak[ZS_MEM_PARAMS] == params,
                 "%s: params %llu (peak %llu), want %llu", what,
                 (unsigned long long)m->current[ZS_MEM_PARAMS],
                 (unsigned long long)m->peak[ZS_MEM_PARAMS], (unsigned long long)params);
    ZT_CHECK_MSG(m->current[ZS_MEM_FROZEN] == held, "%s: frozen %llu, want %llu", what,
                 (unsigned long long)m->current[ZS_MEM_FROZEN], (unsigned long long)held);
    /* With accumulation the stage-2/3 shard is fp32. */
    ZT_CHECK_MSG(m->current[ZS_MEM_GRADS] == grads ||
                     (stage >= 2 && m->current[ZS_MEM_GRADS] == (uint64_t)(train / world) * 4),
                 "%s: grads %llu, want %llu", what, (unsigned long long)m->current[ZS_MEM_GRADS],
                 (unsigned long long)grads);
    ZT_CHECK_MSG(m->current[ZS_MEM_OPTIM] == 2 * state, "%s: optim %llu, want %llu", what,
                 (unsigned long long)m->current[ZS_MEM_OPTIM], (unsigned long long)(2 * state));
    ZT_CHECK_MSG(m->current[ZS_MEM_MASTER] == (elem == 4 ? 0 : state),
                 "%s: master %llu, want %llu", what,
                 (unsigned long long)m->current[ZS_MEM_MASTER],
                 (unsigned long long)(elem == 4 ? 0 : state));
}

/* Only trainable units are reduced; stage 3 gathers all, stages 1-2
 * gather the trainable ones after the update (fp32, one micro-step). */
static void check_bytes(int stage, int world, const zs_comm_stats *b) {
    int64_t train = 0, all = 0;
    for (int l = 0; l < tiny_layer_count(); l++) {
        all += harness_unit_padded(l, world);
        if (!frozen(l)) train += harness_unit_padded(l, world);
    }
    const uint64_t scalar = (uint64_t)(2.0 * (world - 1) / world * 4 * 8) +
                            (uint64_t)(2.0 * (world - 1) / world * 1 * 8);
    const uint64_t bulk = b->bytes[ZS_COMM_REDUCE_SCATTER] + b->bytes[ZS_COMM_ALL_GATHER] +
                          b->bytes[ZS_COMM_ALL_REDUCE] - scalar;
    const uint64_t ring = (uint64_t)(world - 1) * 4;
    uint64_t want = 2 * (uint64_t)train / world * ring; /* reduce + (stage 1-2) gather */
    if (stage == 3) want = (uint64_t)train / world * ring + 2 * (uint64_t)all / world * ring;
    ZT_CHECK_MSG(bulk == want, "np %d stage %d: %llu bulk bytes per step, want %llu", world, stage,
                 (unsigned long long)bulk, (unsigned long long)want);
}

static void check_frozen_kept(const char *what, const harness_result *r) {
    int64_t at = 0;
    for (int l = 0; l < tiny_layer_count(); l++) {
        const int64_t n = tiny_weight_numel(l) + tiny_bias_numel(l);
        if (frozen(l))
            ZT_CHECK_MSG(memcmp(r->initial + at, r->final + at, sizeof(float) * (size_t)n) == 0,
                         "%s: frozen layer %d changed", what, l);
        else
            ZT_CHECK_MSG(memcmp(r->initial + at, r->final + at, sizeof(float) * (size_t)n) != 0,
                         "%s: trainable layer %d did not change", what, l);
        at += n;
    }
}

static void check_estimate(const harness_options *opt, int world, const zs_memory_stats *got,
                           const char *what) {
    char path[512];
    ZT_REQUIRE(harness_write_config(opt, path, sizeof path) == 0);
    zs_config *cfg = NULL;
    ZT_OK(zs_config_load(path, &cfg));
    unlink(path);
    *strrchr(path, '/') = '\0';
    rmdir(path);
    const int units = tiny_layer_count();
    int per_unit[TINY_MAX_LAYERS];
    int64_t numel[2 * TINY_MAX_LAYERS];
    unsigned flags[2 * TINY_MAX_LAYERS];
    for (int l = 0; l < units; l++) {
        per_unit[l] = 2;
        numel[2 * l] = tiny_weight_numel(l);
        numel[2 * l + 1] = tiny_bias_numel(l);
        flags[2 * l] = frozen(l) ? ZS_PARAM_FROZEN : 0u;
        flags[2 * l + 1] = ZS_PARAM_NO_DECAY | flags[2 * l];
    }
    zs_memory_stats est;
    ZT_OK(zs_estimate_memory_flags(cfg, world, units, per_unit, numel, flags, &est));
    zs_config_destroy(cfg);
    for (int t = 0; t < ZS_MEM_TAG_COUNT; t++)
        ZT_CHECK_MSG(got->current[t] == est.current[t],
                     "%s: tag %s: measured %llu bytes, estimated %llu", what,
                     zs_mem_tag_name((zs_mem_tag)t), (unsigned long long)got->current[t],
                     (unsigned long long)est.current[t]);
    ZT_CHECK_MSG(got->live_bytes_budget == est.live_bytes_budget,
                 "%s: live budget measured %llu, estimated %llu", what,
                 (unsigned long long)got->live_bytes_budget,
                 (unsigned long long)est.live_bytes_budget);
}

/* Two units of two parameters each, with the given flags, in stage 3;
 * params receives the handles. */
static zs_status build_two_units(const unsigned flags[4], zs_ctx **out, zs_param *params[4]) {
    zs_config *cfg = zt_config_text("zero = { stage = 3; }; optimizer = { lr = 1e-3; };");
    if (!cfg) return ZS_ERR_CONFIG;
    zs_ctx *zs = NULL;
    zs_status s = zs_create_with_comm(cfg, MPI_COMM_WORLD, &zs);
    zs_config_destroy(cfg);
    const int64_t shape[1] = {37};
    for (int u = 0; s == ZS_OK && u < 2; u++) {
        char name[32];
        snprintf(name, sizeof name, "block%d", u);
        s = zs_unit_begin(zs, name, NULL);
        for (int i = 0; s == ZS_OK && i < 2; i++) {
            snprintf(name, sizeof name, "block%d.w%d", u, i);
            s = zs_param_create(zs, name, 1, shape, ZS_INIT_NORMAL_STD(0.02), flags[2 * u + i],
                                &params[2 * u + i]);
        }
        if (s == ZS_OK) s = zs_unit_end(zs);
    }
    if (s == ZS_OK) s = zs_build(zs);
    if (s != ZS_OK) {
        zs_destroy(zs);
        return s;
    }
    *out = zs;
    return ZS_OK;
}

static void check_misuse(void) {
    zs_ctx *zs = NULL;
    zs_param *p[4] = {NULL, NULL, NULL, NULL};
    const unsigned mixed[4] = {0, 0, ZS_PARAM_FROZEN, 0};
    ZT_FAILS_WITH(build_two_units(mixed, &zs, p), ZS_ERR_INVALID_ARGUMENT,
                  "unit 'block1' mixes frozen and trainable parameters ('block1.w0' is "
                  "ZS_PARAM_FROZEN, 'block1.w1' is not)");
    const unsigned all[4] = {ZS_PARAM_FROZEN, ZS_PARAM_FROZEN, ZS_PARAM_FROZEN, ZS_PARAM_FROZEN};
    ZT_FAILS_WITH(build_two_units(all, &zs, p), ZS_ERR_INVALID_ARGUMENT, "every unit is frozen");
    const unsigned first[4] = {ZS_PARAM_FROZEN, ZS_PARAM_FROZEN, 0, 0};
    ZT_OK(build_two_units(first, &zs, p));
    if (!zs) return;
    zs_unit *u0 = zs_unit_at(zs, 0), *u1 = zs_unit_at(zs, 1);
    ZT_CHECK(zs_unit_frozen(u0) == 1 && zs_unit_frozen(u1) == 0);
    ZT_OK(zs_fetch(zs, u0));
    zs_param *w = p[0];
    ZT_CHECK(w != NULL && zs_param_frozen(w) && !zs_param_frozen(p[2]));
    ZT_CHECK(zs_param_grad(w) == NULL);
    ZT_CHECK_MSG(strstr(zs_last_error(), "zs_param_grad('block0.w0'): the parameter is frozen") !=
                     NULL,
                 "zs_param_grad of a frozen parameter: \"%s\"", zs_last_error());
    ZT_OK(zs_release(zs, u0));
    ZT_FAILS_WITH(zs_grads_open(zs, u0), ZS_ERR_INVALID_ARGUMENT,
                  "zs_grads_open('block0'): the unit is frozen");
    /* A frozen unit needs no zs_grads_ready; calling it is a no-op. */
    ZT_OK(zs_grads_ready(zs, u0));
    ZT_OK(zs_fetch(zs, u1));
    ZT_CHECK(zs_param_grad(p[2]) != NULL);
    ZT_OK(zs_grads_ready(zs, u1));
    ZT_OK(zs_release(zs, u1));
    ZT_OK(zs_step(zs, NULL));
    zs_destroy(zs);
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    tiny_shape_select(TINY_SHAPE_DEEP);

    static harness_result fp32[4], bf16[4];
    harness_options opt = {.optimizer = "adamw", .steps = STEPS, .mode = TINY_GRAD_TRUE,
                           .max_live_units = MAX_LIVE, .prefetch = 1, .scheduler = "warmup_cosine",
                           .frozen_mask = frozen_mask()};
    harness_options low = opt;
    low.mode = TINY_GRAD_DYADIC;
    low.dtype = "bf16";
    low.reduce_dtype = "fp32";
    low.gas = 2;
    low.clip = 0.5;
    for (int stage = 0; stage < 4; stage++) {
        char what[64];
        opt.stage = low.stage = stage;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &fp32[stage]) == 0);
        snprintf(what, sizeof what, "np %d stage %d fp32", world, stage);
        check_memory(what, stage, world, 4, &fp32[stage].memory);
        check_estimate(&opt, world, &fp32[stage].memory, what);
        check_bytes(stage, world, &fp32[stage].step_bytes);
        check_frozen_kept(what, &fp32[stage]);
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &low, &bf16[stage]) == 0);
        snprintf(what, sizeof what, "np %d stage %d bf16", world, stage);
        check_memory(what, stage, world, 2, &bf16[stage].memory);
        check_estimate(&low, world, &bf16[stage].memory, what);
        check_frozen_kept(what, &bf16[stage]);
    }
    harness_result ref;
    harness_reference(&opt, fp32[0].initial, &ref);
    const size_t bytes = sizeof(float) * (size_t)fp32[0].numel;
    for (int stage = 0; stage < 4; stage++) {
        const char *name = "";
        const double rel = harness_max_relative_diff(fp32[stage].final, ref.final, &name);
        ZT_CHECK_MSG(rel <= 1e-5, "np %d stage %d: %s differs from the reference by %.3g", world,
                     stage, name, rel);
        for (int s = 0; s < STEPS; s++)
            ZT_CHECK_MSG(fabs(fp32[stage].grad_norm[s] - ref.grad_norm[s]) <=
                             1e-5 * ref.grad_norm[s],
                         "stage %d step %d: grad norm %.9g vs reference %.9g (frozen layers "
                         "left out)",
                         stage, s, fp32[stage].grad_norm[s], ref.grad_norm[s]);
        if (stage == 0) continue;
        ZT_CHECK_MSG(memcmp(fp32[0].final, fp32[stage].final, bytes) == 0 &&
                         memcmp(fp32[0].grad_norm, fp32[stage].grad_norm,
                                sizeof(double) * STEPS) == 0,
                     "np %d: fp32 stage %d differs from stage 0", world, stage);
        /* bf16 with accumulation: stages 0-1 add micro-steps in the bf16
         * full gradient, 2-3 in the fp32 shard; each pair agrees. */
        const int pair = stage < 2 ? 0 : 2;
        if (stage == pair) continue;
        ZT_CHECK_MSG(memcmp(bf16[pair].final, bf16[stage].final, bytes) == 0 &&
                         memcmp(bf16[pair].grad_norm, bf16[stage].grad_norm,
                                sizeof(double) * STEPS) == 0 &&
                         memcmp(bf16[pair].clip_coef, bf16[stage].clip_coef,
                                sizeof(double) * STEPS) == 0,
                     "np %d: bf16 stage %d differs from stage %d", world, stage, pair);
    }
    /* The features that touch the state, in pairs with frozen units. */
    static const struct {
        const char *what, *config, *zero, *comm;
        int stage, check, multi; /* check: 1 bitwise with the plain run, 2 within 1e-5
                                    of the reference, 0 frozen kept only; multi: only with
                                    more than one rank */
    } pairs[] = {
        {"offload.optimizer = host", "offload: { optimizer = \"host\"; buffer_bytes = 4096; };",
         NULL, NULL, 2, 1, 0},
        {"offload of optimizer and parameters to host",
         "offload: { optimizer = \"host\"; params = \"host\"; buffer_bytes = 4096; };", NULL,
         NULL, 3, 1, 0},
        {"hybrid sharding", NULL, "shard_group = \"node\";", "ranks_per_node = 1;", 3, 2, 1},
        {"ZeRO++ (qwZ, qgZ, hpZ)", NULL, "secondary_partition = \"node\";",
         "ranks_per_node = 1; quant_block = 64; quantize_weights = \"int8\"; "
         "quantize_grads = \"int8\";",
         3, 0, 1}};
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        if (pairs[k].multi && world < 2) continue;
        harness_options o = opt;
        o.stage = pairs[k].stage;
        o.config_extra = pairs[k].config;
        o.zero_extra = pairs[k].zero;
        o.comm_extra = pairs[k].comm;
        harness_result r;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &r) == 0);
        char what[160];
        snprintf(what, sizeof what, "np %d stage %d, %s", world, pairs[k].stage, pairs[k].what);
        check_frozen_kept(what, &r);
        if (pairs[k].check == 1)
            ZT_CHECK_MSG(memcmp(r.final, fp32[pairs[k].stage].final, bytes) == 0 &&
                             memcmp(r.grad_norm, fp32[pairs[k].stage].grad_norm,
                                    sizeof(double) * STEPS) == 0,
                         "%s: differs from the plain run", what);
        const char *name = "";
        const double rel = harness_max_relative_diff(r.final, ref.final, &name);
        if (pairs[k].check == 2)
            ZT_CHECK_MSG(rel <= 1e-5, "%s: %s differs from the reference by %.3g", what, name,
                         rel);
        harness_result_free(&r);
    }

    harness_result_free(&ref);

    char dir[512];
    harness_shared_tmpdir(dir, sizeof dir, "/tmp/zs_frozen_ckpt_XXXXXX");
    ZT_REQUIRE(dir[0] != '\0');
    harness_options save = opt, load = opt;
    save.stage = 1;
    save.save_dir = dir;
    save.save_after = 3;
    load.stage = 3;
    load.load_dir = dir;
    harness_result saved, resumed;
    ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &save, &saved) == 0);
    ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &load, &resumed) == 0);
    ZT_CHECK_MSG(resumed.first_step == 3, "resumed at step %d, want 3", resumed.first_step);
    ZT_CHECK_MSG(memcmp(resumed.final, fp32[3].final, bytes) == 0,
                 "np %d: a frozen run saved in stage 1 and resumed in stage 3 differs from the "
                 "uninterrupted run", world);
    harness_result_free(&saved);
    harness_result_free(&resumed);
    harness_remove_tree(dir);
    for (int stage = 0; stage < 4; stage++) {
        harness_result_free(&fp32[stage]);
        harness_result_free(&bf16[stage]);
    }
    check_misuse();
    int rc = zt_finish("test_frozen");
    MPI_Finalize();
    return rc;
}
