/* A checkpoint of GPT-2 124M's layout (124.4M parameters: the embedding
 * unit and 12 blocks) with the optimizer on NVMe, at np 1: the save streams
 * the 1.49 GB of master weights and moments from the swap file into the
 * checkpoint a piece at a time, so the process's peak resident memory grows
 * by less than SAVE_BOUND while it saves (it would grow by the whole state,
 * 12 bytes per parameter, if the save copied the state into memory first).
 * The checkpoint then loads, and the loaded state's digest is the saved
 * state's.
 *
 * The peak is the kernel's: /proc/self/status VmHWM, reset just before the
 * save by writing 5 to /proc/self/clear_refs. Skipped (77) where the kernel
 * cannot reset it. */
#define _GNU_SOURCE /* mkdtemp */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "test_util.h"
#include "zero/state_io.h" /* zs__state_digest */

/* The bound: the writer's piece (4 MiB), the swap file's chunk cache and
 * I/O buffers already exist, the rest is the manifest and file tables. */
#define SAVE_BOUND ((uint64_t)64 << 20)

static uint64_t status_kib(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    uint64_t kib = 0;
    const size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0) kib = strtoull(line + n, NULL, 10);
    fclose(f);
    return kib;
}

static int reset_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return 0;
    const int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

static zs_status add_param(zs_ctx *zs, const char *name, int64_t rows, int64_t cols) {
    zs_param *p = NULL;
    const int64_t shape[2] = {rows, cols};
    zs_init init = {.kind = ZS_INIT_NORMAL, .a = 0.0, .b = 0.02};
    return zs_param_create(zs, name, cols > 0 ? 2 : 1, shape, init, 0, &p);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    if (!reset_peak() || status_kib("VmHWM:") == 0) {
        printf("SKIP: this kernel cannot reset the peak resident memory (/proc/self/clear_refs)\n");
        MPI_Finalize();
        return 77;
    }
    char swapdir[] = "/tmp/zs_save_memory_swap_XXXXXX", ckpt[] = "/tmp/zs_save_memory_ckpt_XXXXXX";
    ZT_REQUIRE(mkdtemp(swapdir) && mkdtemp(ckpt));
    char text[1024];
    snprintf(text, sizeof text,
             "backend = \"cpu\"; zero: { stage = 3; }; precision: { dtype = \"bf16\"; };\n"
             "optimizer: { type = \"adamw\"; lr = 1e-3; };\n"
             "offload: { optimizer = \"nvme\"; nvme_path = \"%s\"; };\n"
             "log: { level = \"warn\"; };\n",
             swapdir);
    char cfg_path[] = "/tmp/zs_save_memory_cfg_XXXXXX";
    const int fd = mkstemp(cfg_path);
    ZT_REQUIRE(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    zs_config *cfg = NULL;
    ZT_OK(zs_config_load(cfg_path, &cfg));
    zs_ctx *zs = NULL;
    ZT_OK(zs_create(cfg, &zs));
    /* GPT-2 124M: wte + wpe + ln_f in one unit, then 12 blocks. */
    zs_unit *u = NULL;
    ZT_OK(zs_unit_begin(zs, "embed", &u));
    ZT_OK(add_param(zs, "wte", 50257, 768));
    ZT_OK(add_param(zs, "wpe", 1024, 768));
    ZT_OK(add_param(zs, "lnf", 2 * 768, 0));
    ZT_OK(zs_unit_end(zs));
    for (int l = 0; l < 12; l++) {
        char name[32];
        snprintf(name, sizeof name, "h.%d", l);
        ZT_OK(zs_unit_begin(zs, name, &u));
        snprintf(name, sizeof name, "h.%d.w", l);
        ZT_OK(add_param(zs, name, 12 * 768 + 13, 768)); /* 7,087,872 + 9,984 */
        ZT_OK(zs_unit_end(zs));
    }
    ZT_OK(zs_build(zs));
    zs_memory_stats m;
    ZT_OK(zs_memory_report(zs, &m));
    const uint64_t state = m.current[ZS_MEM_NVME_STATE];
    ZT_CHECK_MSG(state >= (uint64_t)124000000 * 12, "the swap file holds %llu bytes",
                 (unsigned long long)state);
    const uint64_t digest = zs__state_digest(zs);

    const uint64_t rss_before = status_kib("VmRSS:") * 1024;
    ZT_REQUIRE(reset_peak());
    ZT_OK(zs_save(zs, ckpt));
    const uint64_t peak = status_kib("VmHWM:") * 1024;
    const uint64_t grew = peak > rss_before ? peak - rss_before : 0;
    printf("optimizer state on NVMe: %.2f GB; resident before the save %.1f MiB, peak during it "
           "%.1f MiB: +%.1f MiB (bound %.0f MiB)\n",
           (double)state / 1e9, (double)rss_before / 1048576.0, (double)peak / 1048576.0,
           (double)grew / 1048576.0, (double)SAVE_BOUND / 1048576.0);
    ZT_CHECK_MSG(grew < SAVE_BOUND, "a save of %.2f GB of state on NVMe grew the peak resident "
                 "memory by %.1f MiB (bound %.0f MiB): it holds the state instead of streaming it",
                 (double)state / 1e9, (double)grew / 1048576.0, (double)SAVE_BOUND / 1048576.0);
    ZT_OK(zs_load(zs, ckpt));
    ZT_CHECK_MSG(zs__state_digest(zs) == digest, "the loaded state differs from the saved one");
    zs_destroy(zs);
    zs_config_destroy(cfg);
    unlink(cfg_path);
    harness_remove_tree(ckpt);
    ZT_EQ_INT(zt_dir_entries(swapdir), 0);
    rmdir(swapdir);
    const int rc = zt_finish("test_save_memory");
    MPI_Finalize();
    return rc;
}
