/* Hybrid sharding (zero.shard_group = "node"; FSDP's HYBRID_SHARD), run
 * under mpirun with argv[1] ranks per simulated node (comm.ranks_per_node):
 *   - stages 1-3 give bit-identical parameters, losses and gradient norms
 *     among themselves, overlapped or synchronous, with stage-3 prefetch, in
 *     buckets and through host staging, and match the single-process
 *     reference within 1e-5 (relative);
 *   - every replica (the ranks with the same local rank) holds the same
 *     state, bit for bit;
 *   - model state per rank follows the node's rank count (the shard of a
 *     unit padded for the world is 1/node_size of it) and equals
 *     zs_estimate_memory's;
 *   - parameter gathers and reduce-scatters never cross nodes: only the
 *     all-reduce of each slice between the replicas does, with exactly the
 *     bytes of a ring all-reduce over the nodes;
 *   - a hybrid checkpoint loads into a plain run (on this world and on half
 *     of it) and a plain one into a hybrid run with the same master weights
 *     and moments bit for bit; a resumed hybrid run equals an uninterrupted
 *     one bit for bit;
 *   - with bf16/fp16, accumulation, clipping and the optimizer (and stage-3
 *     parameters) offloaded to host memory or NVMe, in pairs: replicas equal,
 *     offload bitwise equal to the device, stages 2-3 bitwise equal, fp32
 *     within 1e-5 of the reference;
 *   - nodes of unequal size are refused naming the nodes.
 * argv[2] = "deep" runs it all on the tiny model's deep shape (tiny_model.h). */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "test_util.h"

#define STEPS 8

static int g_world, g_rank, g_per_node;

static harness_options base(int stage, const char *zero_extra, const char *comm_extra) {
    harness_options o;
    memset(&o, 0, sizeof o);
    o.stage = stage;
    o.optimizer = "adamw";
    o.steps = STEPS;
    o.mode = TINY_GRAD_TRUE;
    o.max_live_units = 2;
    o.scheduler = "warmup_cosine";
    o.gather_ahead = 1;
    o.zero_extra = zero_extra;
    o.comm_extra = comm_extra;
    return o;
}

static int same_run(const harness_result *a, const harness_result *b) {
    return memcmp(a->final, b->final, sizeof(float) * (size_t)a->numel) == 0 &&
           memcmp(a->grad_norm, b->grad_norm, sizeof(double) * STEPS) == 0 &&
           memcmp(a->loss, b->loss, sizeof(double) * STEPS) == 0;
}

static int same_state(const harness_result *a, const harness_result *b) {
    for (int k = 0; k < 3; k++) {
        if (!a->gathered_state[k] != !b->gathered_state[k]) return 0;
        if (a->gathered_state[k] &&
            memcmp(a->gathered_state[k], b->gathered_state[k], sizeof(float) * (size_t)a->numel))
            return 0;
    }
    return 1;
}

/* The replicas of each slice (same local rank, every node) hold the same
 * shard state: their digests agree. */
static void check_replicas(const harness_result *r, const char *what) {
    uint64_t *all = calloc((size_t)g_world, sizeof *all);
    MPI_Allgather(&r->final_digest, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    for (int q = 0; q < g_world; q++)
        ZT_CHECK_MSG(all[q] == all[q % g_per_node],
                     "%s: rank %d's state differs from its replica rank %d's", what, q,
                     q % g_per_node);
    free(all);
}

/* Model state of fp32 AdamW: params, grads and two moments per element of
 * the shard (stage 3), the full model for what stages 1-2 keep whole; the
 * units are padded for the world, each shard is 1/node_size of them. */
static void check_memory(int stage, const zs_memory_stats *m) {
    int64_t padded = 0;
    for (int l = 0; l < tiny_layer_count(); l++) padded += harness_unit_padded(l, g_world);
    const uint64_t full = (uint64_t)padded * 4, shard = (uint64_t)padded / (uint64_t)g_per_node * 4;
    ZT_EQ_U64(m->current[ZS_MEM_PARAMS], stage == 3 ? shard : full);
    ZT_EQ_U64(m->current[ZS_MEM_GRADS], stage >= 2 ? shard : full);
    ZT_EQ_U64(m->current[ZS_MEM_OPTIM], 2 * shard);
}

/* The step's collectives by link: no gather or reduce-scatter crosses a
 * node; the replicas' all-reduce of every unit's slice does, a ring over
 * the nodes sending 2 (nodes - 1) / nodes of the slice. */
static void check_bytes(int stage, const zs_comm_stats *b) {
    const int nodes = g_world / g_per_node;
    ZT_EQ_U64(b->bytes_inter[ZS_COMM_ALL_GATHER], 0);
    ZT_EQ_U64(b->bytes_inter[ZS_COMM_REDUCE_SCATTER], 0);
    uint64_t slices = 0;
    for (int l = 0; l < tiny_layer_count(); l++)
        slices += (uint64_t)harness_unit_padded(l, g_world) / (uint64_t)g_per_node * 4;
    const uint64_t replicas = 2 * (uint64_t)(nodes - 1) * slices / (uint64_t)nodes;
    /* Beside them the step's agreements (scalars) are all-reduces too. */
    ZT_CHECK_MSG(b->bytes_inter[ZS_COMM_ALL_REDUCE] >= replicas &&
                     b->bytes_inter[ZS_COMM_ALL_REDUCE] < replicas + 1024,
                 "stage %d: %llu bytes of all-reduce crossed nodes; the replicas' all-reduce "
                 "alone sends %llu", stage, (unsigned long long)b->bytes_inter[ZS_COMM_ALL_REDUCE],
                 (unsigned long long)replicas);
    if (stage == 3)
        ZT_CHECK_MSG(b->bytes_intra[ZS_COMM_ALL_GATHER] > 0, "stage 3 gathered nothing in the node");
}

static void check_estimate(int stage, const zs_memory_stats *m) {
    char cfg_text[512], path[] = "/tmp/zs_hybrid_estimate_XXXXXX";
    const int fd = mkstemp(path);
    ZT_REQUIRE(fd >= 0);
    snprintf(cfg_text, sizeof cfg_text,
             "zero: { stage = %d; align = 16; shard_group = \"node\"; max_live_units = 2; };\n"
             "comm: { ranks_per_node = %d; segment_bytes = 4096; };\n"
             "optimizer: { type = \"adamw\"; lr = 0.01; };\n",
             stage, g_per_node);
    ZT_REQUIRE(write(fd, cfg_text, strlen(cfg_text)) == (ssize_t)strlen(cfg_text));
    close(fd);
    zs_config *cfg = NULL;
    ZT_OK(zs_config_load(path, &cfg));
    unlink(path);
    int per_unit[TINY_MAX_LAYERS];
    int64_t numel[2 * TINY_MAX_LAYERS];
    for (int l = 0; l < tiny_layer_count(); l++) {
        per_unit[l] = 2;
        numel[2 * l] = tiny_weight_numel(l);
        numel[2 * l + 1] = tiny_bias_numel(l);
    }
    zs_memory_stats est;
    ZT_OK(zs_estimate_memory(cfg, g_world, tiny_layer_count(), per_unit, numel, &est));
    for (int t = ZS_MEM_PARAMS; t <= ZS_MEM_OPTIM; t++)
        ZT_CHECK_MSG(est.current[t] == m->current[t], "stage %d: the estimate of %s is %llu, "
                     "zs_build holds %llu", stage, zs_mem_tag_name((zs_mem_tag)t),
                     (unsigned long long)est.current[t], (unsigned long long)m->current[t]);
    zs_config_destroy(cfg);
}

static void checkpoints(void) {
    char root[256];
    harness_shared_tmpdir(root, sizeof root, "/tmp/zs_hybrid_ckpt_XXXXXX");
    ZT_REQUIRE(root[0]);
    char zero_node[] = "shard_group = \"node\";", comm_nodes[64];
    snprintf(comm_nodes, sizeof comm_nodes, "ranks_per_node = %d;", g_per_node);
    char hybrid_dir[320], plain_dir[320], cfg_hybrid[640], cfg_plain[640];
    snprintf(hybrid_dir, sizeof hybrid_dir, "%s/hybrid", root);
    snprintf(plain_dir, sizeof plain_dir, "%s/plain", root);

    /* Hybrid, saved after 3 of 6 steps; then resumed to the end. */
    harness_options o = base(3, zero_node, comm_nodes);
    o.scheduler = "constant"; /* a run that trains no further has another length */
    o.steps = 6;
    harness_result whole, first, resumed, saved, plain_loaded, half_loaded, plain, hybrid_loaded;
    ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &whole) == 0);
    o.save_dir = hybrid_dir;
    o.save_after = 3;
    o.stop_after = 3;
    ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &first) == 0);
    snprintf(cfg_hybrid, sizeof cfg_hybrid, "%s/step_00000003", hybrid_dir);
    o.save_dir = NULL;
    o.stop_after = 0;
    o.load_dir = cfg_hybrid;
    ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &resumed) == 0);
    ZT_CHECK_MSG(memcmp(whole.final, resumed.final, sizeof(float) * (size_t)whole.numel) == 0,
                 "a resumed hybrid run differs from an uninterrupted one");
    /* The saved state, read back by a hybrid run that trains no further. */
    o.steps = 3;
    ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &saved) == 0);
    ZT_CHECK_MSG(same_state(&first, &saved), "a hybrid checkpoint does not load back bitwise");

    /* Into a plain run on this world, and on the first half of it. */
    harness_options p = base(3, NULL, NULL);
    p.scheduler = "constant";
    p.steps = 3;
    p.load_dir = cfg_hybrid;
    ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &p, &plain_loaded) == 0);
    ZT_CHECK_MSG(same_state(&first, &plain_loaded),
                 "a hybrid checkpoint loads into a plain run with other values");
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank < g_world / 2 ? 0 : MPI_UNDEFINED, g_rank, &half);
    if (half != MPI_COMM_NULL) {
        p.stage = 2;
        ZT_REQUIRE(harness_run(half, &p, &half_loaded) == 0);
        ZT_CHECK_MSG(same_state(&first, &half_loaded),
                     "a hybrid checkpoint loads into a plain stage-2 run on %d ranks with other "
                     "values", g_world / 2);
        harness_result_free(&half_loaded);
        MPI_Comm_free(&half);
    }

    /* A plain checkpoint into a hybrid run (stage 1). */
    p = base(3, NULL, NULL);
    p.scheduler = "constant";
    p.steps = 3;
    p.save_dir = plain_dir;
    p.save_after = 3;
    ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &p, &plain) == 0);
    snprintf(cfg_plain, sizeof cfg_plain, "%s/step_00000003", plain_dir);
    o = base(1, zero_node, comm_nodes);
    o.scheduler = "constant";
    o.steps = 3;
    o.load_dir = cfg_plain;
    ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &hybrid_loaded) == 0);
    ZT_CHECK_MSG(same_state(&plain, &hybrid_loaded),
                 "a plain checkpoint loads into a hybrid run with other values");

    harness_result_free(&whole);
    harness_result_free(&first);
    harness_result_free(&resumed);
    harness_result_free(&saved);
    harness_result_free(&plain_loaded);
    harness_result_free(&plain);
    harness_result_free(&hybrid_loaded);
    harness_remove_tree(root);
}

/* Hybrid sharding with the other features, each pair at least once: a
 * mixed-precision dtype, accumulation, clipping and the optimizer offloaded
 * (host, and NVMe with the stage-3 parameters there). Offload gives the
 * bits of the device run; stages 2 and 3 agree bitwise (they reduce alike
 * every micro-step); fp32 runs match the reference. */
static void with_features(const char *comm_nodes) {
    typedef struct feature_case {
        const char *dtype;
        int gas;
        double clip;
        int offload; /* 0 none, 1 host, 2 nvme (stage 3: parameters too) */
    } feature_case;
    static const feature_case cases[] = {
        {"bf16", 2, 0.0, 1}, {"fp16", 1, 0.05, 2}, {"fp32", 2, 0.05, 0}, {"bf16", 1, 0.05, 0},
        {"fp32", 1, 0.0, 2}, {"fp32", 2, 0.0, 1},
    };
    char swapdir[256];
    harness_shared_tmpdir(swapdir, sizeof swapdir, "/tmp/zs_hybrid_nvme_XXXXXX");
    ZT_REQUIRE(swapdir[0]);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const feature_case *f = &cases[c];
        harness_result device[4], offloaded;
        for (int stage = 2; stage < 4; stage++) {
            harness_options o = base(stage, "shard_group = \"node\";", comm_nodes);
            o.dtype = f->dtype;
            o.gas = f->gas;
            o.clip = f->clip;
            o.scheduler = "constant";
            ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &device[stage]) == 0);
            check_replicas(&device[stage], f->dtype);
            if (stage == 3 && f->offload) {
                char extra[512];
                if (f->offload == 1)
                    snprintf(extra, sizeof extra, "offload: { optimizer = \"host\"; };");
                else
                    snprintf(extra, sizeof extra, "offload: { optimizer = \"nvme\"; params = "
                             "\"nvme\"; nvme_path = \"%s\"; buffer_bytes = 4096; };", swapdir);
                o.config_extra = extra;
                ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &offloaded) == 0);
                ZT_CHECK_MSG(same_run(&device[3], &offloaded),
                             "hybrid %s, gas %d, clip %g: offloaded (%s) differs from the device "
                             "run", f->dtype, f->gas, f->clip, f->offload == 1 ? "host" : "nvme");
                harness_result_free(&offloaded);
            }
        }
        ZT_CHECK_MSG(same_run(&device[2], &device[3]),
                     "hybrid %s, gas %d, clip %g: stages 2 and 3 differ", f->dtype, f->gas, f->clip);
        if (strcmp(f->dtype, "fp32") == 0) {
            harness_options o = base(3, NULL, NULL);
            o.gas = f->gas;
            o.clip = f->clip;
            o.scheduler = "constant";
            harness_result ref;
            harness_reference(&o, device[3].initial, &ref);
            const char *name = "";
            const double rel = harness_max_relative_diff(device[3].final, ref.final, &name);
            ZT_CHECK_MSG(rel <= 1e-5, "hybrid fp32, gas %d, clip %g: %s differs from the reference "
                         "by %.3g", f->gas, f->clip, name, rel);
            harness_result_free(&ref);
        }
        for (int stage = 2; stage < 4; stage++) harness_result_free(&device[stage]);
    }
    harness_remove_tree(swapdir);
}

/* Nodes of 4 and 2 ranks (np 6 with ranks_per_node 4): refused on every
 * rank, naming the nodes. */
static void unequal_nodes(void) {
    if (g_world != 6) return;
    harness_options o = base(3, "shard_group = \"node\";", "ranks_per_node = 4;");
    zs_ctx *zs = NULL;
    zs_param *params[2 * TINY_MAX_LAYERS];
    const zs_status st = harness_build(MPI_COMM_WORLD, &o, &zs, params);
    ZT_CHECK_MSG(st == ZS_ERR_CONFIG, "unequal nodes: zs_build returned %s", zs_status_name(st));
    ZT_CHECK_MSG(strstr(zs_last_error(), "zero.shard_group") && strstr(zs_last_error(), "node 1"),
                 "unequal nodes: the message names neither the setting nor the nodes: %s",
                 zs_last_error());
    if (zs) zs_destroy(zs);
}

int main(int argc, char **argv) {
    ZT_REQUIRE(harness_init_nodes(&argc, &argv, &g_world, &g_rank, &g_per_node) == 0);
    char zero_node[] = "shard_group = \"node\";", comm_nodes[64], comm_staged[160];
    snprintf(comm_nodes, sizeof comm_nodes, "ranks_per_node = %d;", g_per_node);
    snprintf(comm_staged, sizeof comm_staged,
             "ranks_per_node = %d; host_staging = true; staging_bytes = 1024;", g_per_node);

    harness_result runs[4], sync[4], buckets[4], staged[4];
    for (int stage = 1; stage < 4; stage++) {
        harness_options o = base(stage, zero_node, comm_nodes);
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &runs[stage]) == 0);
        check_memory(stage, &runs[stage].memory);
        check_estimate(stage, &runs[stage].memory);
        check_bytes(stage, &runs[stage].step_bytes);
        check_replicas(&runs[stage], "hybrid");
        o.sync = 1;
        o.gather_ahead = 0;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &sync[stage]) == 0);
        o.sync = 0;
        o.gather_ahead = 1;
        o.bucket_bytes = 4096;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &buckets[stage]) == 0);
        check_bytes(stage, &buckets[stage].step_bytes);
        o.comm_extra = comm_staged;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &o, &staged[stage]) == 0);
        ZT_CHECK_MSG(same_run(&runs[stage], &sync[stage]),
                     "stage %d: overlapped and synchronous hybrid runs differ", stage);
        ZT_CHECK_MSG(same_run(&runs[stage], &buckets[stage]),
                     "stage %d: hybrid runs with and without buckets differ", stage);
        ZT_CHECK_MSG(same_run(&runs[stage], &staged[stage]),
                     "stage %d: hybrid runs with and without host staging differ", stage);
    }
    harness_options ro = base(1, zero_node, comm_nodes);
    harness_result ref;
    harness_reference(&ro, runs[1].initial, &ref);
    const char *name = "";
    const double rel = harness_max_relative_diff(runs[1].final, ref.final, &name);
    ZT_CHECK_MSG(rel <= 1e-5, "hybrid: %s differs from the reference by %.3g (relative)", name, rel);
    for (int s = 0; s < STEPS; s++)
        ZT_CHECK_MSG(fabs(runs[1].grad_norm[s] - ref.grad_norm[s]) <= 1e-5 * ref.grad_norm[s],
                     "hybrid step %d: grad norm %.9g vs reference %.9g", s, runs[1].grad_norm[s],
                     ref.grad_norm[s]);
    for (int stage = 2; stage < 4; stage++)
        ZT_CHECK_MSG(same_run(&runs[1], &runs[stage]),
                     "np %d, nodes of %d: hybrid stage %d is not bit-identical to stage 1", g_world,
                     g_per_node, stage);
    harness_result_free(&ref);
    for (int stage = 1; stage < 4; stage++) {
        harness_result_free(&runs[stage]);
        harness_result_free(&sync[stage]);
        harness_result_free(&buckets[stage]);
        harness_result_free(&staged[stage]);
    }
    checkpoints();
    with_features(comm_nodes);
    unequal_nodes();
    int rc = zt_finish("test_hybrid");
    MPI_Finalize();
    return rc;
}
