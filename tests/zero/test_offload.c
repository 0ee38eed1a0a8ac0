/* The host and NVMe tiers of offload (ZeRO-Offload, ZeRO-Infinity), at np 2:
 *   - offload.optimizer = "host" or "nvme" (and offload.params = "host", or
 *     "nvme" with the optimizer there, in stage 3) gives parameters, master weights, moments, losses and
 *     gradient norms bit-identical to no offload, in stages 1-3,
 *     fp32/bf16/fp16, with gradient accumulation and clipping; the state is
 *     charged to the host and nvme_state tags, not to the device's, and no
 *     swap file or directory is left after zs_destroy;
 *   - the simulated device (device_memory_bytes) refuses, at zs_build and
 *     with the bytes needed per tag, a model that does not fit without
 *     offload, and trains it with offload under the same cap (the cap is
 *     computed from the memory the two runs report);
 *   - a checkpoint saved under any of none / host / nvme loads under each
 *     of the others, and training continues bit for bit as if
 *     uninterrupted. */
#define _DEFAULT_SOURCE /* mkdtemp */
#include <dirent.h>
#include <stdlib.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"

#define STEPS 6

static void compare(const harness_result *a, const harness_result *b, const char *what) {
    const size_t bytes = sizeof(float) * (size_t)a->numel;
    ZT_CHECK_MSG(memcmp(a->final, b->final, bytes) == 0, "%s: parameters differ", what);
    for (int k = 0; k < 3; k++)
        ZT_CHECK_MSG(memcmp(a->gathered_state[k], b->gathered_state[k], bytes) == 0,
                     "%s: %s differ", what, k == 0 ? "master weights" : k == 1 ? "first moments" : "second moments");
    ZT_CHECK_MSG(memcmp(a->loss, b->loss, sizeof(double) * STEPS) == 0, "%s: losses differ", what);
    ZT_CHECK_MSG(memcmp(a->grad_norm, b->grad_norm, sizeof(double) * STEPS) == 0,
                 "%s: gradient norms differ", what);
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    const char *dtypes[] = {"fp32", "bf16", "fp16"};
    for (int d = 0; d < 3; d++)
        for (int stage = 1; stage <= 3; stage++) {
            harness_options opt = {.optimizer = "adamw", .steps = STEPS, .mode = TINY_GRAD_TRUE,
                                   .max_live_units = 2, .scheduler = "warmup_cosine",
                                   .stage = stage, .dtype = dtypes[d], .gas = 2, .clip = 0.5};
            harness_result none, host, both, nvme;
            ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &none) == 0);
            /* NVMe, with chunks of one page per array (buffer_bytes 4096),
             * so the state spans many chunks and parameters straddle them. */
            char swapdir[64], extra[256];
            harness_shared_tmpdir(swapdir, sizeof swapdir, "/tmp/zs_nvme_XXXXXX");
            ZT_REQUIRE(swapdir[0] != '\0');
            snprintf(extra, sizeof extra, "offload: { optimizer = \"nvme\"; nvme_path = \"%s\"; "
                     "buffer_bytes = 4096; %s};", swapdir, stage == 3 ? "params = \"host\"; " : "");
            opt.config_extra = extra;
            ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &nvme) == 0);
            opt.config_extra = NULL;
            char what_nvme[96];
            snprintf(what_nvme, sizeof what_nvme, "%s stage %d, optimizer on NVMe", dtypes[d], stage);
            compare(&none, &nvme, what_nvme);
            ZT_EQ_U64(nvme.memory.current[ZS_MEM_MASTER] + nvme.memory.current[ZS_MEM_OPTIM], 0);
            ZT_CHECK_MSG(nvme.memory.current[ZS_MEM_NVME_STATE] >=
                         (uint64_t)nvme.numel / 2 * 3 * sizeof(float),
                         "%s: the swap file holds %llu bytes", what_nvme,
                         (unsigned long long)nvme.memory.current[ZS_MEM_NVME_STATE]);
            uint64_t in_memory = 0;
            for (int t = 0; t < ZS_MEM_TAG_COUNT; t++)
                if (t != ZS_MEM_NVME_STATE) in_memory += nvme.memory.current[t];
            ZT_EQ_U64(nvme.memory.total_current, in_memory); /* the disk is not memory */
            MPI_Barrier(MPI_COMM_WORLD);
            ZT_CHECK_MSG(zt_dir_entries(swapdir) == 0, "%s: %d entries left in %s", what_nvme,
                         zt_dir_entries(swapdir), swapdir);
            if (stage == 3) {
                /* The parameters on NVMe too: each gather rounds the master. */
                snprintf(extra, sizeof extra, "offload: { optimizer = \"nvme\"; params = \"nvme\"; "
                         "nvme_path = \"%s\"; buffer_bytes = 4096; };", swapdir);
                opt.config_extra = extra;
                harness_result all;
                ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &all) == 0);
                opt.config_extra = NULL;
                snprintf(what_nvme, sizeof what_nvme, "%s stage 3, optimizer and parameters on NVMe",
                         dtypes[d]);
                compare(&none, &all, what_nvme);
                ZT_EQ_U64(all.memory.current[ZS_MEM_PARAMS] + all.memory.current[ZS_MEM_HOST_PARAMS], 0);
                harness_result_free(&all);
                MPI_Barrier(MPI_COMM_WORLD);
                ZT_CHECK_MSG(zt_dir_entries(swapdir) == 0, "%s: entries left in %s", what_nvme, swapdir);
            }
            harness_remove_tree(swapdir);
            harness_result_free(&nvme);
            opt.config_extra = "offload: { optimizer = \"host\"; buffer_bytes = 4096; };";
            ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &host) == 0);
            char what[96];
            snprintf(what, sizeof what, "%s stage %d, optimizer on the host", dtypes[d], stage);
            compare(&none, &host, what);
            ZT_EQ_U64(host.memory.current[ZS_MEM_MASTER] + host.memory.current[ZS_MEM_OPTIM], 0);
            ZT_CHECK_MSG(host.memory.current[ZS_MEM_HOST_STATE] > 0, "%s: nothing in host_state", what);
            /* Host staging: the new parameters in the compute dtype before
             * they go back (not in fp32, whose master in host memory is
             * the source), and, with accumulation in stages 2-3, the
             * landing of one reduced unit chunk before the host adds it. */
            {
                int world = 1;
                MPI_Comm_size(MPI_COMM_WORLD, &world);
                const uint64_t elem = d == 0 ? 4 : 2;
                int64_t state = 0, max_shard = 0;
                for (int l = 0; l < tiny_layer_count(); l++) {
                    const int64_t shard = harness_unit_padded(l, world) / world;
                    state += shard;
                    max_shard = shard > max_shard ? shard : max_shard;
                }
                const uint64_t want = (d == 0 ? 0 : (uint64_t)state * elem) +
                                      (stage >= 2 ? (uint64_t)max_shard * elem : 0);
                ZT_EQ_U64(host.memory.current[ZS_MEM_OFFLOAD_STAGING], want);
            }
            if (stage == 3) {
                opt.config_extra = "offload: { optimizer = \"host\"; params = \"host\"; buffer_bytes = 4096; };";
                ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &both) == 0);
                snprintf(what, sizeof what, "%s stage 3, optimizer and parameters on the host", dtypes[d]);
                compare(&none, &both, what);
                ZT_EQ_U64(both.memory.current[ZS_MEM_PARAMS], 0);
                ZT_EQ_U64(both.memory.current[ZS_MEM_HOST_PARAMS], none.memory.current[ZS_MEM_PARAMS]);
                harness_result_free(&both);
            }
            harness_result_free(&none);
            harness_result_free(&host);
        }

    /* The simulated device: a cap between what stage 3 needs on the device
     * with and without offload. */
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    {
        harness_options opt = {.optimizer = "adamw", .steps = 2, .mode = TINY_GRAD_TRUE,
                               .max_live_units = 2, .scheduler = "constant", .stage = 3};
        harness_result plain, offloaded;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &plain) == 0);
        opt.config_extra = "offload: { optimizer = \"host\"; params = \"host\"; buffer_bytes = 4096; };";
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &offloaded) == 0);
        uint64_t need_plain = 0, need_offloaded = 0;
        const zs_mem_tag device[] = {ZS_MEM_PARAMS, ZS_MEM_GRADS, ZS_MEM_MASTER, ZS_MEM_OPTIM,
                                     ZS_MEM_LIVE_PARAMS, ZS_MEM_LIVE_GRADS, ZS_MEM_LIVE_FREE};
        for (size_t i = 0; i < sizeof device / sizeof device[0]; i++) {
            need_plain += plain.memory.current[device[i]];
            need_offloaded += offloaded.memory.current[device[i]];
        }
        ZT_CHECK_MSG(need_offloaded < need_plain, "offload did not lower the device's bytes (%llu vs %llu)",
                     (unsigned long long)need_offloaded, (unsigned long long)need_plain);
        const uint64_t cap = (need_plain + need_offloaded) / 2;
        char extra[256];
        snprintf(extra, sizeof extra, "device_memory_bytes = %llu;", (unsigned long long)cap);
        harness_options capped = opt;
        capped.config_extra = extra;
        zs_ctx *zs = NULL;
        zs_param *params[2 * TINY_MAX_LAYERS];
        ZT_FAILS_WITH(harness_build(MPI_COMM_WORLD, &capped, &zs, params), ZS_ERR_OUT_OF_MEMORY,
                      "of device memory per rank at stage 3");
        ZT_CHECK_MSG(strstr(zs_last_error(), "optim ") != NULL && strstr(zs_last_error(), "offload.optimizer") != NULL,
                     "message: %s", zs_last_error());
        zs_destroy(zs);
        snprintf(extra, sizeof extra, "device_memory_bytes = %llu; offload: { optimizer = \"host\"; "
                 "params = \"host\"; buffer_bytes = 4096; };", (unsigned long long)cap);
        harness_result under_cap;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &capped, &under_cap) == 0);
        compare(&offloaded, &under_cap, "under the cap");
        harness_result_free(&plain);
        harness_result_free(&offloaded);
        harness_result_free(&under_cap);
    }
    /* Resume across offload settings, both ways: 3 steps, save, load under
     * the other setting, 3 more = 6 straight steps. */
    {
        const char *host = "offload: { optimizer = \"host\"; buffer_bytes = 4096; };";
        harness_options opt = {.optimizer = "adamw", .steps = STEPS, .mode = TINY_GRAD_TRUE,
                               .max_live_units = 2, .scheduler = "warmup_cosine", .stage = 2,
                               .dtype = "bf16"};
        harness_result straight;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &straight) == 0);
        char swapdir[64], nvme[200];
        harness_shared_tmpdir(swapdir, sizeof swapdir, "/tmp/zs_nvme_XXXXXX");
        ZT_REQUIRE(swapdir[0] != '\0');
        snprintf(nvme, sizeof nvme, "offload: { optimizer = \"nvme\"; nvme_path = \"%s\"; "
                 "buffer_bytes = 4096; };", swapdir);
        const char *tiers[3] = {NULL, host, nvme};
        const char *tier_names[3] = {"none", "host", "nvme"};
        for (int from = 0; from < 3; from++)
            for (int to = 0; to < 3; to++) {
                if (from == to) continue;
                char dir[64];
                harness_shared_tmpdir(dir, sizeof dir, "/tmp/zs_offload_ckpt_XXXXXX");
                ZT_REQUIRE(dir[0] != '\0');
                harness_options first = opt, second = opt;
                first.save_dir = dir;
                first.save_after = 3;
                first.stop_after = 3;
                first.config_extra = tiers[from];
                second.load_dir = dir;
                second.config_extra = tiers[to];
                harness_result a, b;
                ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &first, &a) == 0);
                ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &second, &b) == 0);
                ZT_CHECK_MSG(memcmp(straight.final, b.final, sizeof(float) * (size_t)b.numel) == 0,
                             "saved with offload %s, resumed with %s: parameters differ from a "
                             "straight run", tier_names[from], tier_names[to]);
                harness_result_free(&a);
                harness_result_free(&b);
                harness_remove_tree(dir);
            }
        harness_remove_tree(swapdir);
        harness_result_free(&straight);
    }
    int rc = zt_finish("test_offload");
    MPI_Finalize();
    return rc;
}
