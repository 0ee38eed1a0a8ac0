/* The NVMe tier under faults, at np 2 (offload.optimizer = "nvme"): one
 * rank's swap file gets a flipped byte, is truncated, or its next write
 * fails with ENOSPC or its next read with EIO, just before step 2. Each time
 *   - zs_step fails on every rank with ZS_ERR_IO, the failing rank's message
 *     naming the swap file, the byte offset and the chunk, the other rank's
 *     the same message "(reported by rank r)"; nothing hangs;
 *   - no swap file or per-run directory is left after zs_destroy;
 *   - the checkpoint saved after step 1 still loads, in a new context and in
 *     the failed one (zs_load starts the tier over), and training from it
 *     ends bit for bit where a run that never failed ends.
 * Also: a missing offload.nvme_path fails zs_build on every rank naming the
 * path, and removing the per-run directory while training loses nothing
 * (the swap file is already unlinked; its descriptor keeps the data). */
#define _GNU_SOURCE /* mkdtemp */
#include <dirent.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "test_util.h"
#include "zero/ground.h" /* zs->store.nvme, for the test-only descriptor */

#define STEPS 4
#define FAULT_STEP 2

typedef struct fault {
    const char *kind;   /* "flip", "truncate", "enospc", "eio", "rmdir" */
    int rank;           /* the rank whose disk fails */
    const char *expect; /* in the message on every rank */
    int done;           /* injected already (a recovered run passes the step again) */
} fault;

static void inject(zs_ctx *zs, int step, void *arg) {
    fault *f = arg;
    if (step != FAULT_STEP || f->done) return;
    f->done = 1;
    const int fd = zs__nvme_state_fd_for_test(zs->store.nvme);
    if (strcmp(f->kind, "rmdir") == 0) {
        /* Every rank: the per-run directory goes away under the job. */
        MPI_Barrier(MPI_COMM_WORLD);
        if (zt_rank == 0) {
            char dir[512], cmd[600];
            snprintf(dir, sizeof dir, "%s", zs__nvme_state_path(zs->store.nvme));
            char *slash = strrchr(dir, '/');
            if (slash) *slash = '\0';
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
            ZT_CHECK_MSG(system(cmd) == 0, "could not remove %s", dir);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        return;
    }
    if (zt_rank != f->rank) return;
    if (strcmp(f->kind, "flip") == 0) {
        /* A second, buffered descriptor of the unlinked file: O_DIRECT's
         * would refuse a one-byte transfer. */
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        const int plain = open(proc, O_RDWR);
        ZT_REQUIRE(plain >= 0);
        unsigned char byte = 0;
        ZT_REQUIRE(pread(plain, &byte, 1, 100) == 1);
        byte ^= 0x20;
        ZT_REQUIRE(pwrite(plain, &byte, 1, 100) == 1);
        ZT_REQUIRE(fsync(plain) == 0);
        close(plain);
    } else if (strcmp(f->kind, "truncate") == 0) {
        ZT_REQUIRE(ftruncate(fd, 0) == 0);
    } else if (strcmp(f->kind, "enospc") == 0) {
        setenv("ZS_FAULT_ERRNO", "pwrite:ENOSPC:1", 1);
    } else if (strcmp(f->kind, "eio") == 0) {
        setenv("ZS_FAULT_ERRNO", "pread:EIO:1", 1);
    }
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0});
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    char swapdir[64], ckpt[64], extra[320];
    harness_shared_tmpdir(swapdir, sizeof swapdir, "/tmp/zs_nvme_faults_XXXXXX");
    ZT_REQUIRE(swapdir[0] != '\0');
    /* 16 KiB blocks: several chunks per rank. */
    snprintf(extra, sizeof extra,
             "offload: { optimizer = \"nvme\"; nvme_path = \"%s\"; buffer_bytes = 16384; };", swapdir);
    harness_options base = {.optimizer = "adamw", .steps = STEPS, .mode = TINY_GRAD_TRUE,
                            .max_live_units = 2, .scheduler = "warmup_cosine", .stage = 2,
                            .dtype = "bf16", .gas = 2, .clip = 0.5};
    harness_result straight, straight1;
    ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &base, &straight) == 0);
    harness_options base1 = base;
    base1.stage = 1; /* bf16 gradients accumulate in bf16 there: other bits than stage 2 */
    ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &base1, &straight1) == 0);

    fault faults[] = {
        {"flip", 1, "checksum mismatch", 0},
        {"truncate", 0, "truncated", 0},
        {"enospc", 1, "No space left on device", 0},
        {"eio", 0, "Input/output error", 0},
    };
    for (size_t k = 0; k < sizeof faults / sizeof faults[0]; k++) {
        fault *f = &faults[k];
        harness_shared_tmpdir(ckpt, sizeof ckpt, "/tmp/zs_nvme_ckpt_XXXXXX");
        ZT_REQUIRE(ckpt[0] != '\0');
        harness_options opt = base;
        opt.config_extra = extra;
        opt.save_dir = ckpt;
        opt.save_after = FAULT_STEP; /* saved after step 1 */
        opt.before_step = inject;
        opt.before_step_arg = (void *)f;
        harness_result failed;
        const int rc = harness_run(MPI_COMM_WORLD, &opt, &failed);
        unsetenv("ZS_FAULT_ERRNO");
        printf("rank %d, %s: %s\n", zt_rank, f->kind, failed.error);
        ZT_CHECK_MSG(rc != 0 && failed.status == ZS_ERR_IO, "%s: step %d gave status %d (%s)",
                     f->kind, FAULT_STEP, (int)failed.status, failed.error);
        ZT_CHECK_MSG(strstr(failed.error, f->expect) != NULL, "%s: message without '%s': %s",
                     f->kind, f->expect, failed.error);
        ZT_CHECK_MSG(strstr(failed.error, "rank-") != NULL && strstr(failed.error, ".swap") != NULL &&
                         strstr(failed.error, "chunk") != NULL && strstr(failed.error, "byte") != NULL,
                     "%s: message does not name the file, the offset and the chunk: %s", f->kind,
                     failed.error);
        if (zt_rank != f->rank) {
            char from[64];
            snprintf(from, sizeof from, "(reported by rank %d)", f->rank);
            ZT_CHECK_MSG(strstr(failed.error, from) != NULL, "%s: %s", f->kind, failed.error);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        ZT_CHECK_MSG(zt_dir_entries(swapdir) == 0, "%s: %d entries left in %s after the error", f->kind,
                     zt_dir_entries(swapdir), swapdir);
        /* The checkpoint of step 1 loads, and training from it ends where
         * the straight run ends. */
        harness_options again = base;
        again.config_extra = extra;
        again.load_dir = ckpt;
        harness_result resumed;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &again, &resumed) == 0);
        ZT_CHECK_MSG(memcmp(straight.final, resumed.final, sizeof(float) * (size_t)resumed.numel) == 0,
                     "%s: resumed from the last checkpoint, parameters differ from a straight run",
                     f->kind);
        /* The same again, recovering in the same context: zs_load of that
         * checkpoint makes the lost state usable, and training ends bit for
         * bit where the straight run ends. */
        f->done = 0;
        char ckpt2[64];
        harness_shared_tmpdir(ckpt2, sizeof ckpt2, "/tmp/zs_nvme_ckpt_XXXXXX");
        ZT_REQUIRE(ckpt2[0] != '\0');
        harness_options recover = opt;
        recover.save_dir = ckpt2; /* saved after step 1 by this run itself */
        recover.recover_dir = ckpt2;
        /* Stage 1 for half of them: its full gradient buffer is where a
         * failed step's gradient would linger. */
        recover.stage = k % 2 == 0 ? 1 : 2;
        harness_result healed;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &recover, &healed) == 0);
        unsetenv("ZS_FAULT_ERRNO");
        ZT_CHECK_MSG(healed.recovered && healed.status == ZS_ERR_IO, "%s: no failure to recover from "
                     "(status %d)", f->kind, (int)healed.status);
        const harness_result *want = recover.stage == 1 ? &straight1 : &straight;
        ZT_CHECK_MSG(memcmp(want->final, healed.final, sizeof(float) * (size_t)healed.numel) == 0,
                     "%s: zs_load in the failed context (stage %d), parameters differ from a "
                     "straight run", f->kind, recover.stage);
        harness_result_free(&healed);
        harness_remove_tree(ckpt2);
        harness_result_free(&failed);
        harness_result_free(&resumed);
        harness_remove_tree(ckpt);
    }

    /* The per-run directory removed in the middle: training goes on. */
    {
        fault rmdir_fault = {"rmdir", 0, "", 0};
        harness_options opt = base;
        opt.config_extra = extra;
        opt.before_step = inject;
        opt.before_step_arg = (void *)&rmdir_fault;
        harness_result r;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &r) == 0);
        ZT_CHECK_MSG(memcmp(straight.final, r.final, sizeof(float) * (size_t)r.numel) == 0,
                     "the directory removed under the job changed the result");
        harness_result_free(&r);
        MPI_Barrier(MPI_COMM_WORLD);
        /* -1: with O_TMPFILE the directory removed was nvme_path itself. */
        ZT_CHECK_MSG(zt_dir_entries(swapdir) <= 0, "%d entries left in %s", zt_dir_entries(swapdir), swapdir);
    }
    /* A missing nvme_path: zs_build fails on every rank naming it. */
    {
        char missing[128];
        snprintf(missing, sizeof missing, "%s/not-there", swapdir);
        snprintf(extra, sizeof extra,
                 "offload: { optimizer = \"nvme\"; nvme_path = \"%s\"; };", missing);
        harness_options opt = base;
        opt.config_extra = extra;
        zs_ctx *zs = NULL;
        zs_param *params[2 * TINY_MAX_LAYERS];
        ZT_FAILS_WITH(harness_build(MPI_COMM_WORLD, &opt, &zs, params), ZS_ERR_IO, missing);
        zs_destroy(zs);
    }
    harness_remove_tree(swapdir);
    harness_result_free(&straight);
    harness_result_free(&straight1);
    int rc = zt_finish("test_nvme_faults");
    MPI_Finalize();
    return rc;
}
