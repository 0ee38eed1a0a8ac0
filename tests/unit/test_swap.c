/* The NVMe tier's swap file (src/offload/swap.c): round trips with many
 * requests in flight, corruption and truncation found at read with the block's
 * offset and label, injected ENOSPC / EIO (ZS_FAULT_ERRNO), directories that
 * cannot be used, the deadline, and cleanup: nothing left after destroy, after
 * a failed create, or after a killed process (removed by the next create).
 * The file is opened with O_TMPFILE where the file system has it (nothing in
 * the directory, ever); the named way with its per-run directory, for file
 * systems without it, is tested through try_tmpfile = 0 and an injected
 * EOPNOTSUPP. */
#define _GNU_SOURCE /* O_DIRECT, mkdtemp */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/memory.h"
#include "offload/swap.h"
#include "test_util.h"

#define BLOCK ((size_t)64 << 10)

static char root[256];

/* The named way (per-run directory, owner files): what a file system without
 * O_TMPFILE gets. */
static zs__swap_config named(void) {
    zs__swap_config cfg = ZS__SWAP_CONFIG_INIT;
    cfg.try_tmpfile = 0;
    return cfg;
}

static unsigned char pattern(uint64_t at, unsigned seed) {
    uint64_t x = (at + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)seed * 0xC2B2AE3D27D4EB4Full;
    return (unsigned char)(x >> 56);
}

static void fill(unsigned char *p, uint64_t at, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = pattern(at + i, seed);
}

static size_t first_difference(const unsigned char *p, uint64_t at, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != pattern(at + i, seed)) return i;
    return n;
}

/* Many requests of 1-3 blocks (one ending in a partial block), 8 in flight,
 * completing in any order; then read back, 8 in flight, and compared. */
static void test_round_trip(void) {
    zs__mem mem = {0};
    zs__swap_config cfg = ZS__SWAP_CONFIG_INIT;
    cfg.io_threads = 3;
    zs__swap *sw = NULL;
    enum { UNITS = 40, QUEUE = 8 };
    uint64_t capacity = (uint64_t)UNITS * 3 * BLOCK;
    ZT_OK(zs__swap_create_with(root, 0, capacity, BLOCK, &cfg, &mem, &sw));
    ZT_REQUIRE(sw != NULL);
    ZT_EQ_U64(mem.current[ZS_MEM_HOST_STATE], UNITS * 3 * ZS_SWAP_META_BYTES_PER_BLOCK); /* checksums */
    fprintf(stderr, "  swap file %s on %s: %s\n", zs__swap_path(sw), root,
            zs__swap_is_direct(sw) ? "O_DIRECT" : "buffered");
    unsigned char *bufs[UNITS];
    size_t sizes[UNITS];
    uint64_t offsets[UNITS];
    char labels[UNITS][32];
    uint64_t at = 0;
    for (int u = 0; u < UNITS; u++) {
        size_t blocks = 1 + (size_t)(u % 3);
        sizes[u] = blocks * BLOCK - (u == 7 ? BLOCK / 2 + 100 : 0); /* a padded last block */
        offsets[u] = at;
        at += blocks * BLOCK;
        snprintf(labels[u], sizeof labels[u], "unit %d", u);
        void *p = NULL;
        ZT_OK(zs__swap_buffer_alloc(sw, blocks * BLOCK, ZS_MEM_SCRATCH, &p));
        bufs[u] = p;
        fill(bufs[u], offsets[u], blocks * BLOCK, 1);
    }
    zs__swap_req *reqs[UNITS] = {0};
    for (int u = 0; u < UNITS; u++) {
        if (u >= QUEUE) ZT_OK(zs__swap_wait(sw, reqs[u - QUEUE]));
        ZT_OK(zs__swap_write(sw, offsets[u], bufs[u], sizes[u], labels[u], &reqs[u]));
    }
    for (int u = UNITS - QUEUE; u < UNITS; u++) ZT_OK(zs__swap_wait(sw, reqs[u]));
    for (int u = 0; u < UNITS; u++) memset(bufs[u], 0, (1 + (size_t)(u % 3)) * BLOCK);
    /* Read in another order than written. */
    for (int k = 0; k < UNITS; k++) {
        int u = (k * 7) % UNITS;
        if (k >= QUEUE) ZT_OK(zs__swap_wait(sw, reqs[(((k - QUEUE) * 7) % UNITS)]));
        ZT_OK(zs__swap_read(sw, offsets[u], bufs[u], sizes[u], labels[u], &reqs[u]));
    }
    for (int k = UNITS - QUEUE; k < UNITS; k++) ZT_OK(zs__swap_wait(sw, reqs[(k * 7) % UNITS]));
    for (int u = 0; u < UNITS; u++) {
        size_t whole = (1 + (size_t)(u % 3)) * BLOCK;
        size_t bad = first_difference(bufs[u], offsets[u], whole, 1);
        ZT_CHECK_MSG(bad == whole, "unit %d differs at byte %zu of %zu", u, bad, whole);
        zs__swap_buffer_free(sw, bufs[u], whole, ZS_MEM_SCRATCH);
    }
    ZT_EQ_U64(mem.current[ZS_MEM_SCRATCH], 0);
    /* An unaligned offset, a region past the capacity and (O_DIRECT) an
     * unaligned buffer are refused at submission. */
    zs__swap_req *r = NULL;
    static unsigned char unaligned[BLOCK + 1];
    ZT_FAILS_WITH(zs__swap_write(sw, 4096, unaligned, BLOCK, "x", &r), ZS_ERR_INVALID_ARGUMENT,
                  "multiple of the block size");
    ZT_FAILS_WITH(zs__swap_write(sw, capacity, unaligned, BLOCK, "x", &r),
                  ZS_ERR_INVALID_ARGUMENT, "within the capacity");
    if (zs__swap_is_direct(sw))
        ZT_FAILS_WITH(zs__swap_write(sw, 0, unaligned + 1, BLOCK, "x", &r),
                      ZS_ERR_INVALID_ARGUMENT, "zs__swap_buffer_alloc");
    zs__swap_destroy(sw);
    ZT_EQ_U64(mem.current[ZS_MEM_OPTIM], 0);
    ZT_EQ_INT(zt_dir_entries(root), 0);
}

/* Writes units 0..n-1 of one block each with seed 2. */
static void write_units(zs__swap *sw, unsigned char *buf, int n) {
    for (int u = 0; u < n; u++) {
        zs__swap_req *r = NULL;
        char label[32];
        snprintf(label, sizeof label, "unit %d", u);
        fill(buf, (uint64_t)u * BLOCK, BLOCK, 2);
        ZT_OK(zs__swap_write(sw, (uint64_t)u * BLOCK, buf, BLOCK, label, &r));
        ZT_OK(zs__swap_wait(sw, r));
    }
}

static zs_status read_unit(zs__swap *sw, unsigned char *buf, int u) {
    zs__swap_req *r = NULL;
    char label[32];
    snprintf(label, sizeof label, "unit %d", u);
    zs_status s = zs__swap_read(sw, (uint64_t)u * BLOCK, buf, BLOCK, label, &r);
    return s == ZS_OK ? zs__swap_wait(sw, r) : s;
}

/* A flipped byte in block 2, then the file truncated inside block 4 and
 * before block 6. */
static void test_corruption(void) {
    zs__swap *sw = NULL;
    ZT_OK(zs__swap_create(root, 0, 8 * BLOCK, BLOCK, NULL, &sw));
    ZT_REQUIRE(sw != NULL);
    void *p = NULL;
    ZT_OK(zs__swap_buffer_alloc(sw, BLOCK, ZS_MEM_SCRATCH, &p));
    unsigned char *buf = p;
    write_units(sw, buf, 8);

    /* The test-only descriptor; with O_DIRECT the flip goes through an
     * aligned page. */
    int fd = zs__swap_fd_for_test(sw);
    uint64_t flip_at = 2 * BLOCK + 12345;
    uint64_t page = flip_at - flip_at % 4096;
    ZT_REQUIRE(pread(fd, buf, 4096, (off_t)page) == 4096);
    buf[flip_at - page] ^= 0x20;
    ZT_REQUIRE(pwrite(fd, buf, 4096, (off_t)page) == 4096);
    char expect[128];
    ZT_OK(read_unit(sw, buf, 1));
    snprintf(expect, sizeof expect, "checksum mismatch in 'unit 2' at byte %llu",
             (unsigned long long)(2 * BLOCK));
    ZT_FAILS_WITH(read_unit(sw, buf, 2), ZS_ERR_IO, expect);
    ZT_FAILS_WITH(read_unit(sw, buf, 2), ZS_ERR_IO, zs__swap_path(sw));
    ZT_OK(read_unit(sw, buf, 3));

    ZT_REQUIRE(ftruncate(fd, (off_t)(4 * BLOCK + 8192)) == 0);
    ZT_OK(read_unit(sw, buf, 3));
    snprintf(expect, sizeof expect, "short read of 'unit 4' at byte %llu",
             (unsigned long long)(4 * BLOCK + 8192));
    ZT_FAILS_WITH(read_unit(sw, buf, 4), ZS_ERR_IO, expect);
    ZT_FAILS_WITH(read_unit(sw, buf, 6), ZS_ERR_IO, "the swap file was truncated");
    ZT_FAILS_WITH(read_unit(sw, buf, 6), ZS_ERR_IO, "'unit 6'");
    zs__swap_buffer_free(sw, buf, BLOCK, ZS_MEM_SCRATCH);
    zs__swap_destroy(sw);
    ZT_EQ_INT(zt_dir_entries(root), 0);
}

/* ENOSPC on the 3rd pwrite, EIO on a pread: the documented messages, and the
 * blocks written before the failure still read back. */
static void test_injected_faults(void) {
    zs__swap_config cfg = ZS__SWAP_CONFIG_INIT;
    cfg.io_threads = 1; /* the n-th call is then the n-th request */
    zs__swap *sw = NULL;
    ZT_OK(zs__swap_create_with(root, 0, 8 * BLOCK, BLOCK, &cfg, NULL, &sw));
    ZT_REQUIRE(sw != NULL);
    void *p = NULL;
    ZT_OK(zs__swap_buffer_alloc(sw, BLOCK, ZS_MEM_SCRATCH, &p));
    unsigned char *buf = p;
    setenv("ZS_FAULT_ERRNO", "pwrite:ENOSPC:3", 1);
    zs__swap_req *r[4];
    for (int u = 0; u < 4; u++) {
        fill(buf, (uint64_t)u * BLOCK, BLOCK, 2); /* each waited before the next fill */
        ZT_OK(zs__swap_write(sw, (uint64_t)u * BLOCK, buf, BLOCK, u == 2 ? "unit 2" : "u", &r[u]));
        zs_status s = zs__swap_wait(sw, r[u]);
        if (u != 2) ZT_OK(s);
        else ZT_EQ_INT(s, ZS_ERR_IO);
        if (u == 2) {
            const char *m = zs_last_error();
            char at[64];
            snprintf(at, sizeof at, "write of 'unit 2' failed at byte %llu",
                     (unsigned long long)(2 * BLOCK));
            ZT_CHECK_MSG(strstr(m, at) && strstr(m, zs__swap_path(sw)) &&
                             strstr(m, strerror(ENOSPC)) &&
                             strstr(m, "the NVMe tier needs 524288 bytes under "
                                       "offload.nvme_path = ") &&
                             strstr(m, "free space or point it elsewhere"),
                         "message: %s", m);
        }
    }
    unsetenv("ZS_FAULT_ERRNO");
    for (int u = 0; u < 4; u++) {
        if (u == 2) {
            ZT_FAILS_WITH(read_unit(sw, buf, 2), ZS_ERR_IO, "never written or whose write failed");
            continue;
        }
        ZT_OK(read_unit(sw, buf, u));
        ZT_EQ_U64(first_difference(buf, (uint64_t)u * BLOCK, BLOCK, 2), BLOCK);
    }
    /* (The hook restarts its count when the variable's text changes, so
     * each fault below is one call checked for every part of its message.) */
    setenv("ZS_FAULT_ERRNO", "pread:EIO:1", 1);
    ZT_EQ_INT(read_unit(sw, buf, 1), ZS_ERR_IO);
    const char *m = zs_last_error();
    ZT_CHECK_MSG(strstr(m, "read of 'unit 1' failed at byte 65536") &&
                     strstr(m, strerror(EIO)) && strstr(m, zs__swap_path(sw)) &&
                     strstr(m, "check the device"),
                 "message: %s", m);
    unsetenv("ZS_FAULT_ERRNO");
    ZT_OK(read_unit(sw, buf, 1));
    write_units(sw, buf, 4); /* the failed unit writes again */
    ZT_OK(read_unit(sw, buf, 2));
    zs__swap_buffer_free(sw, buf, BLOCK, ZS_MEM_SCRATCH);
    zs__swap_destroy(sw);

    /* ENOSPC while reserving: create fails, names the bytes and the setting,
     * and leaves nothing behind. */
    setenv("ZS_FAULT_ERRNO", "fallocate:ENOSPC:1", 1);
    sw = NULL;
    ZT_FAILS_WITH(zs__swap_create(root, 3, 5 * BLOCK, BLOCK, NULL, &sw), ZS_ERR_IO,
                  "the NVMe tier needs 327680 bytes under offload.nvme_path = ");
    ZT_CHECK(sw == NULL);
    unsetenv("ZS_FAULT_ERRNO");
    ZT_EQ_INT(zt_dir_entries(root), 0);
}

/* Directories that cannot hold the swap; a directory deleted after create. */
static void test_directories(void) {
    zs__swap *sw = NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/missing", root);
    ZT_FAILS_WITH(zs__swap_create(path, 0, BLOCK, BLOCK, NULL, &sw), ZS_ERR_IO,
                  "cannot open the NVMe tier's directory (offload.nvme_path)");
    ZT_FAILS_WITH(zs__swap_create(path, 0, BLOCK, BLOCK, NULL, &sw), ZS_ERR_IO, "create it");
    snprintf(path, sizeof path, "%s/file", root);
    FILE *f = fopen(path, "w");
    ZT_REQUIRE(f != NULL);
    fclose(f);
    ZT_FAILS_WITH(zs__swap_create(path, 0, BLOCK, BLOCK, NULL, &sw), ZS_ERR_IO,
                  "it is not a directory");
    unlink(path);
    /* A read-only directory (injected: the tests run as root, who may write
     * anywhere). */
    zs__swap_config by_name = named();
    setenv("ZS_FAULT_ERRNO", "mkdir:EROFS:1", 1);
    ZT_EQ_INT(zs__swap_create_with(root, 0, BLOCK, BLOCK, &by_name, NULL, &sw), ZS_ERR_IO);
    const char *m = zs_last_error();
    ZT_CHECK_MSG(strstr(m, "cannot create the NVMe tier's swap directory") &&
                     strstr(m, strerror(EROFS)) && strstr(m, "must be a writable directory"),
                 "message: %s", m);
    unsetenv("ZS_FAULT_ERRNO");
    /* O_TMPFILE in a read-only directory: the same advice. */
    setenv("ZS_FAULT_ERRNO", "tmpfile:EROFS:1", 1);
    ZT_EQ_INT(zs__swap_create(root, 0, BLOCK, BLOCK, NULL, &sw), ZS_ERR_IO);
    m = zs_last_error();
    ZT_CHECK_MSG(strstr(m, "cannot create the swap file") && strstr(m, strerror(EROFS)) &&
                     strstr(m, "must be a writable directory"),
                 "message: %s", m);
    unsetenv("ZS_FAULT_ERRNO");
    /* A file system without O_DIRECT: buffered I/O, still checked. */
    setenv("ZS_FAULT_ERRNO", "odirect:EINVAL:1", 1);
    ZT_OK(zs__swap_create(root, 0, 2 * BLOCK, BLOCK, NULL, &sw));
    unsetenv("ZS_FAULT_ERRNO");
    ZT_REQUIRE(sw != NULL);
    ZT_EQ_INT(zs__swap_is_direct(sw), 0);
    void *q = NULL;
    ZT_OK(zs__swap_buffer_alloc(sw, BLOCK, ZS_MEM_SCRATCH, &q));
    write_units(sw, q, 2);
    ZT_OK(read_unit(sw, q, 1));
    ZT_EQ_U64(first_difference(q, BLOCK, BLOCK, 2), BLOCK);
    zs__swap_buffer_free(sw, q, BLOCK, ZS_MEM_SCRATCH);
    zs__swap_destroy(sw);
    sw = NULL;
    ZT_FAILS_WITH(zs__swap_create(root, 0, BLOCK, 1000, NULL, &sw), ZS_ERR_INVALID_ARGUMENT,
                  "multiple of 4096");
    ZT_CHECK(sw == NULL);
    ZT_EQ_INT(zt_dir_entries(root), 0);

    /* The per-run directory removed under a live swap: the file is open and
     * unlinked, so I/O goes on and destroy is quiet. */
    ZT_OK(zs__swap_create_with(root, 0, 2 * BLOCK, BLOCK, &by_name, NULL, &sw));
    ZT_REQUIRE(sw != NULL);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", zs__swap_dir(sw));
    ZT_EQ_INT(system(cmd), 0);
    void *p = NULL;
    ZT_OK(zs__swap_buffer_alloc(sw, BLOCK, ZS_MEM_SCRATCH, &p));
    write_units(sw, p, 2);
    ZT_OK(read_unit(sw, p, 1));
    zs__swap_buffer_free(sw, p, BLOCK, ZS_MEM_SCRATCH);
    zs__swap_destroy(sw);
    ZT_EQ_INT(zt_dir_entries(root), 0);
}

/* Two ranks of one run share the per-run directory; the last one out
 * removes it. */
static void test_shared_run_dir(void) {
    zs__swap_config cfg = named();
    cfg.runid = "job-42";
    zs__swap *a = NULL, *b = NULL, *c = NULL;
    ZT_OK(zs__swap_create_with(root, 0, BLOCK, BLOCK, &cfg, NULL, &a));
    ZT_OK(zs__swap_create_with(root, 1, BLOCK, BLOCK, &cfg, NULL, &b));
    ZT_REQUIRE(a && b);
    ZT_CHECK(strcmp(zs__swap_dir(a), zs__swap_dir(b)) == 0);
    ZT_EQ_INT(zt_dir_entries(zs__swap_dir(a)), 2); /* owner-0, owner-1; no swap files */
    ZT_FAILS_WITH(zs__swap_create_with(root, 1, BLOCK, BLOCK, &cfg, NULL, &c), ZS_ERR_IO,
                  "another live process is rank 1");
    zs__swap_destroy(a);
    ZT_EQ_INT(zt_dir_entries(root), 1);
    zs__swap_destroy(b);
    ZT_EQ_INT(zt_dir_entries(root), 0);
    cfg.runid = "../x";
    ZT_FAILS_WITH(zs__swap_create_with(root, 0, BLOCK, BLOCK, &cfg, NULL, &c),
                  ZS_ERR_INVALID_ARGUMENT, "runid");
}

/* A child process that creates a swap file in root with cfg and then waits
 * to be killed; returns its pid once the file exists, *tmpfile saying
 * whether it was opened with O_TMPFILE. */
static pid_t spawn_holder(const zs__swap_config *cfg, int *tmpfile) {
    int ready[2];
    ZT_REQUIRE(pipe(ready) == 0);
    pid_t child = fork();
    ZT_REQUIRE(child >= 0);
    if (child == 0) {
        close(ready[0]);
        zs__swap *sw = NULL;
        if (zs__swap_create_with(root, 0, 4 * BLOCK, BLOCK, cfg, NULL, &sw) != ZS_OK) _exit(3);
        char ok = (char)(1 + zs__swap_is_tmpfile(sw));
        if (write(ready[1], &ok, 1) != 1) _exit(4);
        for (;;) pause();
    }
    close(ready[1]);
    char ok = 0;
    ZT_REQUIRE(read(ready[0], &ok, 1) == 1 && ok >= 1);
    close(ready[0]);
    *tmpfile = ok - 1;
    return child;
}

/* A killed process's per-run directory is removed by the next create; a live
 * one's is not. */
static void test_killed_process(void) {
    zs__swap_config by_name = named();
    int tmpfile = -1;
    pid_t child = spawn_holder(&by_name, &tmpfile);
    ZT_EQ_INT(tmpfile, 0);
    ZT_EQ_INT(zt_dir_entries(root), 1);

    /* Alive: left alone. */
    zs__swap *sw = NULL;
    ZT_OK(zs__swap_create_with(root, 0, BLOCK, BLOCK, &by_name, NULL, &sw));
    ZT_EQ_INT(zt_dir_entries(root), 2);
    zs__swap_destroy(sw);
    ZT_EQ_INT(zt_dir_entries(root), 1);

    kill(child, SIGKILL);
    int st = 0;
    waitpid(child, &st, 0);
    ZT_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    ZT_EQ_INT(zt_dir_entries(root), 1); /* the directory with owner-0; no swap file */
    ZT_OK(zs__swap_create_with(root, 0, BLOCK, BLOCK, &by_name, NULL, &sw));
    ZT_EQ_INT(zt_dir_entries(root), 1); /* only ours now */
    zs__swap_destroy(sw);
    ZT_EQ_INT(zt_dir_entries(root), 0);
}

/* O_TMPFILE: the swap file never appears in the directory, not while it is
 * written and read, not after destroy, not after the process is killed; a
 * file system without O_TMPFILE (injected) takes the named way, which leaves
 * nothing either. */
static void test_tmpfile(void) {
    zs__swap *sw = NULL;
    ZT_OK(zs__swap_create(root, 0, 4 * BLOCK, BLOCK, NULL, &sw));
    ZT_REQUIRE(sw != NULL);
    ZT_EQ_INT(zs__swap_is_tmpfile(sw), 1); /* ext4, xfs, btrfs and tmpfs all have it */
    ZT_CHECK_MSG(strcmp(zs__swap_dir(sw), root) == 0, "dir %s, not %s", zs__swap_dir(sw), root);
    ZT_EQ_INT(zt_dir_entries(root), 0);
    void *p = NULL;
    ZT_OK(zs__swap_buffer_alloc(sw, BLOCK, ZS_MEM_SCRATCH, &p));
    write_units(sw, p, 4);
    ZT_EQ_INT(zt_dir_entries(root), 0);
    ZT_OK(read_unit(sw, p, 3));
    ZT_EQ_U64(first_difference(p, 3 * BLOCK, BLOCK, 2), BLOCK);
    ZT_EQ_INT(zt_dir_entries(root), 0);
    zs__swap_buffer_free(sw, p, BLOCK, ZS_MEM_SCRATCH);
    zs__swap_destroy(sw);
    ZT_EQ_INT(zt_dir_entries(root), 0);

    /* Killed while holding its file: nothing to clean up. */
    const zs__swap_config defaults = ZS__SWAP_CONFIG_INIT;
    int tmpfile = -1;
    pid_t child = spawn_holder(&defaults, &tmpfile);
    ZT_EQ_INT(tmpfile, 1);
    ZT_EQ_INT(zt_dir_entries(root), 0);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    ZT_EQ_INT(zt_dir_entries(root), 0);

    /* No O_TMPFILE here (injected): the named way, with its directory while
     * the file lives and nothing after. */
    setenv("ZS_FAULT_ERRNO", "tmpfile:EOPNOTSUPP:1", 1);
    ZT_OK(zs__swap_create(root, 0, 2 * BLOCK, BLOCK, NULL, &sw));
    unsetenv("ZS_FAULT_ERRNO");
    ZT_REQUIRE(sw != NULL);
    ZT_EQ_INT(zs__swap_is_tmpfile(sw), 0);
    ZT_EQ_INT(zt_dir_entries(root), 1); /* zeroshard-swap-<runid> */
    ZT_EQ_INT(zt_dir_entries(zs__swap_dir(sw)), 1); /* owner-0; the file is unlinked */
    ZT_OK(zs__swap_buffer_alloc(sw, BLOCK, ZS_MEM_SCRATCH, &p));
    write_units(sw, p, 2);
    ZT_OK(read_unit(sw, p, 1));
    ZT_EQ_U64(first_difference(p, BLOCK, BLOCK, 2), BLOCK);
    zs__swap_buffer_free(sw, p, BLOCK, ZS_MEM_SCRATCH);
    zs__swap_destroy(sw);
    ZT_EQ_INT(zt_dir_entries(root), 0);
}

static void stall_once(void *arg) {
    int *armed = arg;
    if (*armed) {
        *armed = 0;
        struct timespec t = {1, 0};
        nanosleep(&t, NULL);
    }
}

/* A device that makes no progress for timeout_s: the wait fails naming the
 * file, the unit and the offset. */
static void test_deadline(void) {
    int armed = 1;
    zs__swap_config cfg = ZS__SWAP_CONFIG_INIT;
    cfg.io_threads = 1;
    cfg.timeout_s = 0.3;
    cfg.test_before_io = stall_once;
    cfg.test_arg = &armed;
    zs__swap *sw = NULL;
    ZT_OK(zs__swap_create_with(root, 0, 4 * BLOCK, BLOCK, &cfg, NULL, &sw));
    ZT_REQUIRE(sw != NULL);
    void *p = NULL;
    ZT_OK(zs__swap_buffer_alloc(sw, BLOCK, ZS_MEM_SCRATCH, &p));
    zs__swap_req *r = NULL;
    ZT_OK(zs__swap_write(sw, 3 * BLOCK, p, BLOCK, "unit 3", &r));
    ZT_FAILS_WITH(zs__swap_wait(sw, r), ZS_ERR_TIMEOUT,
                  "write of 'unit 3' at byte 196608 (65536 bytes) made no progress for 0.3 s");
    ZT_FAILS_WITH(ZS_ERR_TIMEOUT, ZS_ERR_TIMEOUT, zs__swap_path(sw));
    /* The stalled request ends after 1 s; its buffer stays valid until then. */
    struct timespec t = {1, 200000000};
    nanosleep(&t, NULL);
    zs__swap_destroy(sw);
    free(p); /* allocated without an accountant */
    ZT_EQ_INT(zt_dir_entries(root), 0);
}

int main(void) {
    const char *base = getenv("ZS_SWAP_TEST_DIR");
    snprintf(root, sizeof root, "%s/zs-test-swap-XXXXXX", base && *base ? base : "/tmp");
    ZT_REQUIRE(mkdtemp(root) != NULL);
    test_round_trip();
    test_corruption();
    test_injected_faults();
    test_directories();
    test_tmpfile();
    test_shared_run_dir();
    test_killed_process();
    test_deadline();
    ZT_EQ_INT(zt_dir_entries(root), 0);
    rmdir(root);
    return zt_finish("test_swap");
}
