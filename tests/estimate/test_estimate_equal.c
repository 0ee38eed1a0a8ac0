/* estimate = measured: for every layout, stage, dtype and configuration
 * below, zs_memory_report's `current` of every tag right after zs_build,
 * and its live_bytes_budget, equal zs_estimate_memory's for the same
 * layout, configuration and world size, to the byte. Both come from the
 * memory plan (src/zero/memory_plan.c); this keeps zs_build from allocating
 * anything the plan does not say, and keeps zs-estimate honest.
 *
 *   mpirun -np N test_estimate_equal <work dir>
 *
 * Run under 1, 2 and 3 ranks (tests/estimate/CMakeLists.txt). Every rank
 * checks its own report (with uneven shards a rank's figures could differ;
 * the plan says they do not). A QLoRA layout (issue 43: a frozen embedding
 * and norms in the compute dtype, a unit of ZS_PARAM_FROZEN |
 * ZS_PARAM_QUANTIZE matrices, a trainable adapter unit) runs under its own
 * variants: zero.frozen_storage nf4 and int8 (other blocks, double
 * quantization), with the parameters on the host, the optimizer on the
 * host, and accumulation,
 * through zs_estimate_memory_flags as zs-estimate calls it. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "zeroshard.h"
#include "zeroshard_mpi.h"

#define MAX_PARAMS 32

typedef struct layout {
    const char *name;
    int unit_count;
    int params_per_unit[8];
    int64_t numel[MAX_PARAMS];
    unsigned flags[MAX_PARAMS]; /* ZS_PARAM_*; all 0 but in the QLoRA layout */
} layout;

/* Uneven units; prime element counts (no unit divides by a world size or
 * the alignment); a GPT-2-like model whose first unit (embeddings) is far
 * larger than the blocks, so live budgets are sized by one unit. */
static const layout layouts[] = {
    {"uneven", 3, {3, 1, 2}, {7, 130, 1, 1000, 33, 64}, {0}},
    {"primes", 4, {2, 3, 1, 2}, {97, 101, 13, 7919, 3, 2, 65521, 5}, {0}},
    {"gpt2_tiny",
     3,
     {4, 12, 12},
     {257 * 24, 16 * 24, 24, 24,                                              /* embed */
      24, 24, 72 * 24, 72, 24 * 24, 24, 24, 24, 96 * 24, 96, 24 * 96, 24,     /* block 0 */
      24, 24, 72 * 24, 72, 24 * 24, 24, 24, 24, 96 * 24, 96, 24 * 96, 24},    /* block 1 */
     {0}},
};
#define LAYOUTS ((int)(sizeof layouts / sizeof layouts[0]))

/* QLoRA as llama_train registers it (examples/trainer/ex_lora.c): the
 * frozen embedding in the compute dtype, a block's norms in a frozen unit
 * of their own, its matrices quantizable (one of 1000 elements: a short
 * last block), the block's adapters trainable. */
#define FQ (ZS_PARAM_FROZEN | ZS_PARAM_QUANTIZE)
static const layout qlora_layout = {
    "qlora",
    4,
    {1, 2, 5, 4},
    {257 * 24, 24, 24, 72 * 24, 24 * 24, 96 * 24, 24 * 96, 1000, 4 * 24, 72 * 4, 4 * 96, 24 * 4},
    {ZS_PARAM_FROZEN, ZS_PARAM_FROZEN, ZS_PARAM_FROZEN, FQ, FQ, FQ, FQ, FQ, 0, 0, 0, 0}};
#undef FQ

/* Settings beside stage and dtype, as override lists: gradient
 * accumulation (an fp32 gradient shard in stages 2-3), fp32 reductions
 * (staging), buckets (staging), host-staged collectives, a given live budget (not a multiple of the
 * live alignment), the optimizers' state counts, and the host tier of
 * offload (state charged to host tags, a master copy in fp32 too), and the
 * NVMe tier. */
static const char *const variants[][6] = {
    {NULL},
    {"gradient_accumulation_steps=4", NULL},
    {"precision.reduce_dtype=fp32", NULL},
    {"comm.bucket_bytes=4096", NULL},
    /* Host staging of the collectives (comm.impl = "mpi" on a GPU). */
    {"comm.host_staging=true", "comm.staging_bytes=3000", NULL},
    {"zero.live_bytes=1000003", NULL},
    {"gradient_accumulation_steps=3", "precision.accumulate_dtype=compute",
     "comm.bucket_bytes=65536", "zero.live_bytes=2000000", "zero.max_live_units=3", NULL},
    {"gradient_accumulation_steps=2", "precision.reduce_dtype=fp32", "comm.bucket_bytes=8192",
     "zero.align=1", NULL},
    {"optimizer.type=sgd", "optimizer.momentum=0.9", NULL},
    {"optimizer.type=sgd", NULL},
    {"offload.optimizer=\"host\"", "offload.buffer_bytes=8192", NULL},
    {"offload.optimizer=\"host\"", "optimizer.type=sgd", "gradient_accumulation_steps=2", NULL},
    /* The NVMe tier (stages 1-3): swap-file bytes in whole chunks, three
     * I/O buffers, the checksum table; one page per array, and larger. */
    {"offload.nvme_path=\"/tmp\"", "offload.optimizer=\"nvme\"", "offload.buffer_bytes=4096", NULL},
    {"offload.nvme_path=\"/tmp\"", "offload.optimizer=\"nvme\"", "optimizer.type=sgd",
     "optimizer.momentum=0.9", "offload.buffer_bytes=100000", NULL},
    /* Stage 3 only: no parameter shard, gather staging instead. */
    {"offload.nvme_path=\"/tmp\"", "offload.optimizer=\"nvme\"", "offload.params=\"nvme\"", NULL},
};
#define VARIANTS ((int)(sizeof variants / sizeof variants[0]))

/* The QLoRA layout's: its frozen units in the compute dtype, then stored
 * quantized; stage 3 only with offload.params (the records in host_params). */
static const char *const qlora_variants[][6] = {
    {NULL},
    {"zero.frozen_storage=\"nf4\"", NULL},
    {"zero.frozen_storage=\"int8\"", "zero.frozen_block=32", NULL},
    {"zero.frozen_storage=\"nf4\"", "offload.optimizer=\"host\"", "gradient_accumulation_steps=2",
     NULL},
    {"zero.frozen_storage=\"nf4\"", "zero.frozen_block=128", "zero.live_bytes=200000", NULL},
    {"zero.frozen_storage=\"nf4\"", "offload.params=\"host\"", "offload.optimizer=\"host\"",
     NULL},
    /* Double quantization: its decode scratch (twice with the records on the host). */
    {"zero.frozen_storage=\"nf4\"", "zero.frozen_double_quant=true", "zero.frozen_block=16", NULL},
    {"zero.frozen_storage=\"int8\"", "zero.frozen_double_quant=true", "offload.params=\"host\"",
     NULL},
};
#define QLORA_VARIANTS ((int)(sizeof qlora_variants / sizeof qlora_variants[0]))

static const char *const dtypes[] = {"fp32", "bf16", "fp16"};

/* 1 when the variant sets something containing `text`. */
static int variant_has(const char *const *variant, const char *text) {
    for (int i = 0; variant[i]; i++)
        if (strstr(variant[i], text)) return 1;
    return 0;
}

/* The NVMe tier needs stages 1-3, parameters on NVMe or the host stage 3. */
static int variant_fits(const char *const *variant, int stage) {
    if (variant_has(variant, "params=")) return stage == 3;
    return stage > 0 || !variant_has(variant, "nvme");
}

static void describe(char *out, size_t cap, const layout *l, int stage, const char *dtype,
                     const char *const *variant, int world) {
    int n = snprintf(out, cap, "layout %s, stage %d, %s, world %d, variant {", l->name, stage,
                     dtype, world);
    for (int i = 0; variant[i] && n > 0 && (size_t)n < cap; i++)
        n += snprintf(out + n, cap - (size_t)n, "%s%s", i ? ", " : "", variant[i]);
    if (n > 0 && (size_t)n < cap) snprintf(out + n, cap - (size_t)n, "}");
}

static zs_status build(const zs_config *cfg, const layout *l, zs_ctx **out) {
    zs_ctx *zs = NULL;
    zs_status s = zs_create_with_comm(cfg, MPI_COMM_WORLD, &zs);
    for (int u = 0, p = 0; s == ZS_OK && u < l->unit_count; u++) {
        char name[32];
        snprintf(name, sizeof name, "unit%d", u);
        s = zs_unit_begin(zs, name, &(zs_unit *){NULL});
        for (int i = 0; s == ZS_OK && i < l->params_per_unit[u]; i++, p++) {
            snprintf(name, sizeof name, "p%d", p);
            s = zs_param_create(zs, name, 1, &l->numel[p], ZS_INIT_NORMAL_STD(0.02), l->flags[p],
                                &(zs_param *){NULL});
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

static void check_one(const char *cfg_path, const layout *l, int stage, int d,
                      const char *const *variant, int world) {
    char what[512];
    describe(what, sizeof what, l, stage, dtypes[d], variant, world);
    const char *list[8];
    char stage_set[32], dtype_set[32];
    snprintf(stage_set, sizeof stage_set, "zero.stage=%d", stage);
    snprintf(dtype_set, sizeof dtype_set, "precision.dtype=%s", dtypes[d]);
    int n = 0;
    list[n++] = stage_set;
    list[n++] = dtype_set;
    for (int i = 0; variant[i]; i++) list[n++] = variant[i];
    zs_config *cfg = NULL;
    ZT_OK(zs_config_load(cfg_path, &cfg));
    if (!cfg) return;
    zs_status s = zs_config_override_list(cfg, n, list);
    ZT_CHECK_MSG(s == ZS_OK, "%s: overrides refused: %s", what, zs_last_error());
    if (s != ZS_OK) {
        zs_config_destroy(cfg);
        return;
    }

    zs_memory_stats est, got;
    memset(&est, 0, sizeof est);
    zs_status es = zs_estimate_memory_flags(cfg, world, l->unit_count, l->params_per_unit,
                                            l->numel, l->flags, &est);
    ZT_CHECK_MSG(es == ZS_OK, "%s: zs_estimate_memory failed: %s", what, zs_last_error());
    zs_ctx *zs = NULL;
    s = build(cfg, l, &zs);
    zs_config_destroy(cfg);
    ZT_CHECK_MSG(s == ZS_OK, "%s: zs_build failed: %s", what, zs_last_error());
    if (s != ZS_OK || es != ZS_OK) return;
    ZT_OK(zs_memory_report(zs, &got));
    for (int t = 0; t < ZS_MEM_TAG_COUNT; t++)
        ZT_CHECK_MSG(got.current[t] == est.current[t],
                     "%s: tag %s: measured %llu bytes, estimated %llu", what,
                     zs_mem_tag_name((zs_mem_tag)t), (unsigned long long)got.current[t],
                     (unsigned long long)est.current[t]);
    ZT_CHECK_MSG(got.total_current == est.total_current, "%s: total: measured %llu, estimated %llu",
                 what, (unsigned long long)got.total_current,
                 (unsigned long long)est.total_current);
    ZT_CHECK_MSG(got.live_bytes_budget == est.live_bytes_budget,
                 "%s: live_bytes_budget: measured %llu, estimated %llu", what,
                 (unsigned long long)got.live_bytes_budget,
                 (unsigned long long)est.live_bytes_budget);
    zs_destroy(zs);
}

/* A live budget too small for the largest unit: both refuse it alike. */
static void check_too_small(const char *cfg_path, int world) {
    const layout *l = &layouts[2];
    zs_config *cfg = NULL;
    ZT_OK(zs_config_load(cfg_path, &cfg));
    if (!cfg) return;
    const char *list[] = {"zero.stage=3", "zero.live_bytes=4096"};
    ZT_OK(zs_config_override_list(cfg, 2, list));
    zs_memory_stats est;
    ZT_FAILS_WITH(zs_estimate_memory(cfg, world, l->unit_count, l->params_per_unit, l->numel, &est),
                  ZS_ERR_CONFIG, "zero.live_bytes");
    zs_ctx *zs = NULL;
    ZT_FAILS_WITH(build(cfg, l, &zs), ZS_ERR_CONFIG, "zero.live_bytes");
    zs_config_destroy(cfg);
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc != 2) {
        if (zt_rank == 0) fprintf(stderr, "usage: test_estimate_equal <work dir>\n");
        MPI_Finalize();
        return 2;
    }
    char cfg_path[4200];
    snprintf(cfg_path, sizeof cfg_path, "%s/estimate_np%d.cfg", argv[1], world);
    if (zt_rank == 0) {
        FILE *f = fopen(cfg_path, "w");
        if (!f) {
            fprintf(stderr, "test_estimate_equal: cannot write %s\n", cfg_path);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        fprintf(f, "seed = 11;\noptimizer: { type = \"adamw\"; lr = 0.001; };\n");
        fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    int cases = 0;
    for (int li = 0; li < LAYOUTS; li++)
        for (int stage = 0; stage < 4; stage++)
            for (int d = 0; d < 3; d++)
                for (int v = 0; v < VARIANTS; v++, cases++)
                    if (variant_fits(variants[v], stage))
                        check_one(cfg_path, &layouts[li], stage, d, variants[v], world);
    for (int stage = 0; stage < 4; stage++)
        for (int d = 0; d < 3; d++)
            for (int v = 0; v < QLORA_VARIANTS; v++, cases++)
                if (variant_fits(qlora_variants[v], stage))
                    check_one(cfg_path, &qlora_layout, stage, d, qlora_variants[v], world);
    check_too_small(cfg_path, world);
    if (zt_rank == 0) printf("test_estimate_equal: %d configurations on %d rank%s\n", cases, world,
                             world == 1 ? "" : "s");
    int rc = zt_finish("test_estimate_equal");
    MPI_Finalize();
    return rc;
}
