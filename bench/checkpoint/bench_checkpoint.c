/* Checkpoint save and load throughput per rank, against the disk's own
 * sequential write and read bandwidth measured by the same program in the
 * same run (so the ratio does not depend on a shared machine's drift):
 *
 *   mpirun -np N bench_checkpoint [--params P] [--units U] [--dir D] [--iters I]
 *                                 [--io-bytes B]
 *
 *   --params   total parameters of the model (default 64M; K, M, G suffixes are
 *              powers of 1024), split evenly over --units units (default 8)
 *   --dir      where checkpoints and raw files go (default $TMPDIR or /tmp);
 *              it must be on the disk you want to measure
 *   --iters    measured repetitions, the median is reported (default 3)
 *   --io-bytes size of one write()/read() of the raw baseline (default 64 MiB)
 *
 * The model is fp32 with AdamW in ZeRO stage 3, so each rank's shard holds
 * master weights and two moments of Psi/N parameters (12 Psi/N bytes, plus
 * headers and user state). Per iteration, with a barrier before each part
 * and the slowest rank's time taken:
 *   zeroshard save  zs_save into a fresh root (writes, fsyncs, renames, manifest)
 *   raw write       each rank writes a file of its shard's size with large
 *                   write() calls, then fsync: the disk's sequential bound
 *   raw read        after posix_fadvise(POSIX_FADV_DONTNEED), read it back
 *   zeroshard load  after dropping the step's files the same way, zs_load
 *                   (which verifies every hash before using a value)
 * GB/s per rank = this rank's shard bytes / the slowest rank's time, averaged
 * over ranks. DONTNEED drops clean pages on ext4/xfs, but tmpfs, overlay
 * file systems and some network file systems may still serve reads from
 * memory: the program prints that caveat with the results. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../lib/stats.h"

#include "core/number.h"
#include "zeroshard.h"
#include "zeroshard_mpi.h"

#define B_CHECK(call)                                                                       \
    do {                                                                                    \
        zs_status s_ = (call);                                                              \
        if (s_ != ZS_OK) {                                                                  \
            fprintf(stderr, "bench_checkpoint: rank %d: %s failed: %s\n", rank, #call,     \
                    zs_last_error());                                                       \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
        }                                                                                   \
    } while (0)

#define B_SYS(cond, what, path)                                                              \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "bench_checkpoint: rank %d: %s %s: %s\n", rank, what, path,      \
                    strerror(errno));                                                        \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                    \
        }                                                                                    \
    } while (0)

static int rank, world;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Seconds the slowest rank took for the part that started at `start`. */
static double slowest(double start) {
    double mine = now() - start, worst = 0;
    MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

/* A positive count, whole, with K, M or G for powers of 1024 (the units of
 * zs__number_option_size); says on rank 0 what is wrong with it. */
static int parse_count(const char *option, const char *text, long long *out) {
    int64_t v = 0;
    if (zs__number_option_size(option, text, 1, INT64_MAX, &v) != ZS_OK) {
        if (rank == 0) fprintf(stderr, "bench_checkpoint: %s\n", zs_last_error());
        return 0;
    }
    *out = v;
    return 1;
}

/* Drops a file's clean pages from the page cache (after an fsync, all are clean). */
static void drop_cache(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return; /* another rank's file that does not exist: nothing cached */
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

static void raw_write(const char *path, uint64_t bytes, const unsigned char *buf, size_t io) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    B_SYS(fd >= 0, "cannot create", path);
    for (uint64_t done = 0; done < bytes;) {
        size_t want = bytes - done < io ? (size_t)(bytes - done) : io;
        ssize_t n = write(fd, buf, want);
        if (n < 0 && errno == EINTR) continue;
        B_SYS(n > 0, "write failed on", path);
        done += (uint64_t)n;
    }
    B_SYS(fsync(fd) == 0, "fsync failed on", path);
    B_SYS(close(fd) == 0, "close failed on", path);
}

static void raw_read(const char *path, uint64_t bytes, unsigned char *buf, size_t io) {
    int fd = open(path, O_RDONLY);
    B_SYS(fd >= 0, "cannot open", path);
    uint64_t done = 0;
    for (;;) {
        ssize_t n = read(fd, buf, io);
        if (n < 0 && errno == EINTR) continue;
        B_SYS(n >= 0, "read failed on", path);
        if (n == 0) break;
        done += (uint64_t)n;
    }
    close(fd);
    if (done != bytes) {
        fprintf(stderr, "bench_checkpoint: rank %d: read %" PRIu64 " of %" PRIu64 " bytes of %s\n",
                rank, done, bytes, path);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* This rank's files in a step directory (rank%05d.*.safetensors) and their bytes. */
static const char *const kinds[3] = {"master", "optim", "user"};
static uint64_t shard_bytes(const char *step_dir, int r) {
    uint64_t sum = 0;
    char path[4600];
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof path, "%s/rank%05d.%s.safetensors", step_dir, r, kinds[k]);
        struct stat st;
        if (stat(path, &st) == 0) sum += (uint64_t)st.st_size;
    }
    return sum;
}

int main(int argc, char **argv) {
    long long params = 64ll << 20, units = 8, iters = 3, io_bytes = 64ll << 20;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    for (int i = 1; i < argc; i++) {
        long long *count = NULL;
        int ok = i + 1 < argc;
        if (ok && strcmp(argv[i], "--params") == 0) count = &params;
        else if (ok && strcmp(argv[i], "--units") == 0) count = &units;
        else if (ok && strcmp(argv[i], "--iters") == 0) count = &iters;
        else if (ok && strcmp(argv[i], "--io-bytes") == 0) count = &io_bytes;
        else if (ok && strcmp(argv[i], "--dir") == 0) base = argv[++i];
        else ok = 0;
        if (count) {
            ok = parse_count(argv[i], argv[i + 1], count);
            i++;
        }
        if (!ok) {
            if (rank == 0)
                fprintf(stderr, "usage: bench_checkpoint [--params P] [--units U] [--dir D] "
                                "[--iters I] [--io-bytes B]\n");
            MPI_Finalize();
            return 2;
        }
    }

    /* A private working directory, created by rank 0 and shared by name. */
    char work[4096] = {0};
    if (rank == 0) {
        snprintf(work, sizeof work, "%s/zs_bench_checkpoint_XXXXXX", base);
        if (!mkdtemp(work)) {
            fprintf(stderr, "bench_checkpoint: cannot create a directory in %s: %s\n", base,
                    strerror(errno));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        char cfg_path[4200];
        snprintf(cfg_path, sizeof cfg_path, "%s/bench.cfg", work);
        FILE *f = fopen(cfg_path, "w");
        B_SYS(f != NULL, "cannot create", cfg_path);
        fprintf(f, "zero: { stage = 3; };\noptimizer: { type = \"adamw\"; lr = 1e-3; };\n");
        B_SYS(fclose(f) == 0, "cannot write", cfg_path);
    }
    MPI_Bcast(work, sizeof work, MPI_CHAR, 0, MPI_COMM_WORLD);
    char cfg_path[4200];
    snprintf(cfg_path, sizeof cfg_path, "%s/bench.cfg", work);

    zs_config *cfg = NULL;
    zs_ctx *zs = NULL;
    B_CHECK(zs_config_load(cfg_path, &cfg));
    B_CHECK(zs_create_with_comm(cfg, MPI_COMM_WORLD, &zs));
    zs_config_destroy(cfg);
    const int64_t per_unit = params / units;
    for (long long u = 0; u < units; u++) {
        char name[64];
        snprintf(name, sizeof name, "unit%lld", u);
        B_CHECK(zs_unit_begin(zs, name, NULL));
        snprintf(name, sizeof name, "unit%lld.weight", u);
        const int64_t shape[1] = {per_unit};
        B_CHECK(zs_param_create(zs, name, 1, shape, ZS_INIT_UNIFORM_RANGE(-1, 1), 0, NULL));
        B_CHECK(zs_unit_end(zs));
    }
    B_CHECK(zs_build(zs));

    unsigned char *buf = malloc((size_t)io_bytes);
    if (!buf) {
        fprintf(stderr, "bench_checkpoint: rank %d: no memory for --io-bytes %lld\n", rank,
                io_bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (long long i = 0; i < io_bytes; i++) buf[i] = (unsigned char)(i * 131 + 7);

    double *t[4];
    for (int k = 0; k < 4; k++) t[k] = calloc((size_t)iters, sizeof(double));
    uint64_t bytes = 0;
    char root[4300], step_dir[4400], raw[4400];
    snprintf(raw, sizeof raw, "%s/raw.%05d", work, rank);
    for (long long it = 0; it < iters; it++) {
        /* zeroshard save into a fresh root, so every save creates its step directory. */
        snprintf(root, sizeof root, "%s/ckpt%lld", work, it);
        MPI_Barrier(MPI_COMM_WORLD);
        double start = now();
        B_CHECK(zs_save(zs, root));
        t[0][it] = slowest(start);
        snprintf(step_dir, sizeof step_dir, "%s/step_%08" PRId64, root, zs_step_count(zs));
        bytes = shard_bytes(step_dir, rank);

        /* raw: the same bytes, large writes + fsync, then a cold read. */
        MPI_Barrier(MPI_COMM_WORLD);
        start = now();
        raw_write(raw, bytes, buf, (size_t)io_bytes);
        t[1][it] = slowest(start);
        drop_cache(raw);
        MPI_Barrier(MPI_COMM_WORLD);
        start = now();
        raw_read(raw, bytes, buf, (size_t)io_bytes);
        t[2][it] = slowest(start);
        unlink(raw);

        /* zeroshard load, cold the same way: every rank drops every file of
         * the step (zs_load may read more than its own shard to verify). */
        for (int r = 0; r < world; r++)
            for (int k = 0; k < 3; k++) {
                char path[4600];
                snprintf(path, sizeof path, "%s/rank%05d.%s.safetensors", step_dir, r, kinds[k]);
                drop_cache(path);
            }
        MPI_Barrier(MPI_COMM_WORLD);
        start = now();
        B_CHECK(zs_load(zs, step_dir));
        t[3][it] = slowest(start);

        /* Remove this iteration's checkpoint so disk use stays at one copy. */
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            char cmd[4400 + 32];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
            if (system(cmd) != 0) fprintf(stderr, "bench_checkpoint: could not remove %s\n", root);
        }
    }

    /* GB/s per rank: each rank's bytes over the slowest rank's time, averaged. */
    double gbps[4], mean_bytes = 0, mine = (double)bytes;
    MPI_Allreduce(&mine, &mean_bytes, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    mean_bytes /= world;
    for (int k = 0; k < 4; k++) gbps[k] = mean_bytes / bench_median(t[k], (int)iters) / 1e9;
    if (rank == 0) {
        printf("bench_checkpoint: %d ranks, %lld params (%lld units), fp32 AdamW, ZeRO stage 3, "
               "dir %s, median of %lld\n",
               world, (long long)(per_unit * units), units, base, iters);
        printf("shard bytes per rank: %.1f MB (master + exp_avg + exp_avg_sq + headers); raw "
               "io size %lld bytes\n",
               mean_bytes / 1e6, io_bytes);
        printf("%-14s %16s %16s\n", "", "save GB/s/rank", "load GB/s/rank");
        printf("%-14s %16.3f %16.3f\n", "raw", gbps[1], gbps[2]);
        printf("%-14s %16.3f %16.3f\n", "zeroshard", gbps[0], gbps[3]);
        printf("%-14s %16.3f %16.3f\n", "zeroshard/raw", gbps[0] / gbps[1], gbps[3] / gbps[2]);
        printf("note: reads follow posix_fadvise(POSIX_FADV_DONTNEED) after fsync; on some file "
               "systems (tmpfs, overlay, network) they may still be served from the page cache, "
               "which makes load and raw read look faster than the disk.\n");
    }
    for (int k = 0; k < 4; k++) free(t[k]);
    free(buf);
    zs_destroy(zs);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
        if (system(cmd) != 0) fprintf(stderr, "bench_checkpoint: could not remove %s\n", work);
    }
    MPI_Finalize();
    return 0;
}
