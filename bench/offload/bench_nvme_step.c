/* bench_nvme_step: the optimizer step with its state on NVMe, against the
 * disk (issue 12, part b).
 *
 *   mpirun -np 1 build/bench/offload/bench_nvme_step [--dir D] [--mparams M]
 *          [--buffer BYTES] [--steps S]
 *
 * One rank trains M million parameters (8 units, stage 1, bf16, AdamW) with
 * offload.optimizer = "nvme" under D, and times zs_step: each step reads and
 * writes the whole swap file (master weights and both moments) while the
 * fused update runs on the chunk in between. In the same run it measures the
 * disk under D with plain O_DIRECT pwrite and pread of the swap's block size
 * from as many threads as the swap has (raw_disk.h), and the same step with
 * the state in host memory (offload.optimizer = "host": the update alone).
 * Prints bytes moved per step over the step time, against the raw disk's
 * write+read bandwidth: ratio = (raw write time + raw read time) / step time
 * (the target is >= 0.7). Medians of S steps after one warm-up step. */
#define _GNU_SOURCE /* mkdtemp */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/number.h"
#include "offload/nvme_state.h"
#include "offload/swap.h"
#include "../lib/options.h"
#include "../lib/stats.h"
#include "raw_disk.h"
#include "zeroshard_mpi.h"

#define UNITS 8
#define IO_THREADS 3 /* the tier's: one per array (master, two moments) */

#define B_CHECK(call)                                                              \
    do {                                                                           \
        if ((call) != ZS_OK) {                                                     \
            fprintf(stderr, "bench_nvme_step: %s: %s\n", #call, zs_last_error());  \
            MPI_Abort(MPI_COMM_WORLD, 1);                                          \
        }                                                                          \
    } while (0)

/* Median seconds of zs_step over `steps` steps (after one warm-up), and the
 * swap file's bytes. */
static double time_steps(const char *cfg_path, const char *const *overrides, long long params,
                         int steps, uint64_t *swap_bytes) {
    zs_config *cfg = NULL;
    zs_ctx *zs = NULL;
    B_CHECK(zs_config_load(cfg_path, &cfg));
    for (int k = 0; overrides[k]; k++) B_CHECK(zs_config_override(cfg, overrides[k]));
    B_CHECK(zs_create_with_comm(cfg, MPI_COMM_WORLD, &zs));
    zs_config_destroy(cfg);
    for (int u = 0; u < UNITS; u++) {
        char name[64];
        snprintf(name, sizeof name, "unit%d", u);
        B_CHECK(zs_unit_begin(zs, name, NULL));
        snprintf(name, sizeof name, "unit%d.weight", u);
        const int64_t shape[1] = {params / UNITS};
        B_CHECK(zs_param_create(zs, name, 1, shape, ZS_INIT_UNIFORM_RANGE(-0.1, 0.1), 0, NULL));
        B_CHECK(zs_unit_end(zs));
    }
    B_CHECK(zs_build(zs));
    double *t = calloc((size_t)steps + 1, sizeof *t);
    for (int s = 0; s <= steps; s++) {
        /* A micro-step with zero gradients: the update still streams every
         * array (AdamW's decay and moments), which is what is measured. */
        for (int u = 0; u < UNITS; u++) {
            zs_unit *unit = zs_unit_at(zs, u);
            B_CHECK(zs_fetch(zs, unit));
            B_CHECK(zs_grads_ready(zs, unit));
            B_CHECK(zs_release(zs, unit));
        }
        const double t0 = raw_disk_now();
        B_CHECK(zs_step(zs, NULL));
        t[s] = raw_disk_now() - t0;
    }
    zs_memory_stats mem;
    B_CHECK(zs_memory_report(zs, &mem));
    *swap_bytes = mem.current[ZS_MEM_NVME_STATE];
    zs_destroy(zs);
    const double median = bench_median(t + 1, steps);
    free(t);
    return median;
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    const char *dir = "/tmp";
    int64_t opt_mparams = 32, opt_buffer = 16 << 20, opt_steps = 5;
    const bench_option options[] = {
        {"--dir", BENCH_OPT_TEXT, 0, 0, &dir},
        {"--mparams", BENCH_OPT_INT, 1, INT64_MAX / (1 << 20), &opt_mparams},
        {"--buffer", BENCH_OPT_SIZE, 4096, INT64_MAX, &opt_buffer},
        {"--steps", BENCH_OPT_INT, 1, INT32_MAX, &opt_steps},
    };
    if (bench_options_read("bench_nvme_step", argc, argv, options,
                           (int)(sizeof options / sizeof options[0])) != 0)
        return 2;
    const long long mparams = (long long)opt_mparams, buffer = (long long)opt_buffer;
    const int steps = (int)opt_steps;
    if (mparams < 1 || buffer < 4096 || steps < 1) {
        fprintf(stderr, "bench_nvme_step: need --mparams >= 1, --buffer >= 4096, --steps >= 1\n");
        return 2;
    }
    const long long params = mparams * 1000000 / UNITS * UNITS;
    char work[4096];
    snprintf(work, sizeof work, "%s/zs_bench_nvme_XXXXXX", dir);
    if (!mkdtemp(work)) {
        perror("bench_nvme_step: mkdtemp");
        return 1;
    }
    char cfg_path[4200];
    snprintf(cfg_path, sizeof cfg_path, "%s/bench.cfg", work);
    FILE *f = fopen(cfg_path, "w");
    if (!f) return 1;
    fprintf(f, "zero: { stage = 1; };\nprecision: { dtype = \"bf16\"; };\n"
               "optimizer: { type = \"adamw\"; lr = 1e-4; weight_decay = 0.1; };\n"
               "log: { level = \"warn\"; };\noffload: { buffer_bytes = %lld; };\n", buffer);
    fclose(f);

    char path[4400];
    snprintf(path, sizeof path, "offload.nvme_path=\"%s\"", work);
    const char *host[] = {"offload.optimizer=\"host\"", NULL};
    const char *nvme[] = {path, "offload.optimizer=\"nvme\"", NULL};
    uint64_t swap_bytes = 0, none = 0;
    const double host_s = time_steps(cfg_path, host, params, steps, &none);
    const double nvme_s = time_steps(cfg_path, nvme, params, steps, &swap_bytes);

    /* The raw disk: the swap's block size, its file size, its threads. */
    zs__nvme_layout layout;
    zs__nvme_layout_make(3, params, buffer, &layout);
    const uint64_t blocks = swap_bytes / layout.io_bytes;
    unsigned char *bufs[IO_THREADS];
    for (int k = 0; k < IO_THREADS; k++) {
        bufs[k] = aligned_alloc(ZS_SWAP_ALIGNMENT, layout.io_bytes);
        if (!bufs[k]) return 1;
        memset(bufs[k], 0x5a + k, layout.io_bytes);
    }
    const int fd = raw_disk_open(work, 1, swap_bytes);
    if (fd < 0) return 1;
    double raw_w = 1e30, raw_r = 1e30;
    for (int round = 0; round < 3; round++) {
        double t = raw_disk_pass(fd, 1, layout.io_bytes, blocks, IO_THREADS, bufs);
        if (t < 0) return 1;
        if (t < raw_w) raw_w = t;
        if ((t = raw_disk_pass(fd, 0, layout.io_bytes, blocks, IO_THREADS, bufs)) < 0) return 1;
        if (t < raw_r) raw_r = t;
    }
    close(fd);
    for (int k = 0; k < IO_THREADS; k++) free(bufs[k]);
    unlink(cfg_path);
    rmdir(work);

    const double mb = (double)swap_bytes / 1e6;
    printf("bench_nvme_step: %lld parameters on 1 rank (stage 1, bf16, AdamW), swap file %.1f MB "
           "in blocks of %zu bytes under %s, median of %d steps\n",
           params, mb, layout.io_bytes, dir, steps);
    printf("  raw disk (O_DIRECT, %d threads): write %.1f MB/s, read %.1f MB/s, write+read %.1f MB/s\n",
           IO_THREADS, mb / raw_w, mb / raw_r, 2 * mb / (raw_w + raw_r));
    printf("  step, state in host memory:  %8.1f ms (the update alone)\n", 1e3 * host_s);
    printf("  step, state on NVMe:         %8.1f ms, %.1f MB moved: %.1f MB/s\n", 1e3 * nvme_s,
           2 * mb, 2 * mb / nvme_s);
    printf("  ratio (raw write + raw read time) / NVMe step time: %.3f\n", (raw_w + raw_r) / nvme_s);
    MPI_Finalize();
    return 0;
}
