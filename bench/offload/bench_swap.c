/* bench_swap: the NVMe tier's swap file against the raw disk.
 *
 *   bench_swap [--dir D] [--mib N] [--block BYTES] [--queue Q] [--threads T] [--repeat R]
 *
 * Writes then reads N MiB through zs__swap in blocks of BYTES with Q requests
 * in flight on T I/O threads (default T = Q), and in the same run measures
 * the raw bandwidth of the disk under D with plain O_DIRECT pwrite/pread of
 * the same block size on a separate (unlinked) file, from Q threads at once
 * and from one. Prints MB/s of each and the ratios swap / raw (the offload
 * benchmark wants >= 0.7 for write + read together). With R > 1 the best of R
 * rounds of each is kept. Not part of ctest. */
#define _GNU_SOURCE /* O_DIRECT, fallocate */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/number.h"
#include "offload/swap.h"
#include "raw_disk.h"
#include "../lib/options.h"

/* Seconds to move every block once through the swap with q in flight. */
static double swap_pass(zs__swap *sw, int is_write, size_t block, uint64_t blocks, int q,
                        unsigned char **bufs) {
    zs__swap_req *reqs[64] = {0};
    double t0 = raw_disk_now();
    for (uint64_t b = 0; b < blocks + (uint64_t)q; b++) {
        int slot = (int)(b % (uint64_t)q);
        if (reqs[slot] && zs__swap_wait(sw, reqs[slot]) != ZS_OK) {
            fprintf(stderr, "bench_swap: %s\n", zs_last_error());
            return -1;
        }
        reqs[slot] = NULL;
        if (b >= blocks) continue;
        zs_status s = is_write
                          ? zs__swap_write(sw, b * block, bufs[slot], block, "bench", &reqs[slot])
                          : zs__swap_read(sw, b * block, bufs[slot], block, "bench", &reqs[slot]);
        if (s != ZS_OK) {
            fprintf(stderr, "bench_swap: %s\n", zs_last_error());
            return -1;
        }
    }
    return raw_disk_now() - t0;
}

int main(int argc, char **argv) {
    const char *dir = "/tmp";
    int64_t opt_mib = 1024, opt_q = 4, opt_threads = 0, opt_repeat = 1, opt_block = 1 << 20;
    const bench_option options[] = {
        {"--dir", BENCH_OPT_TEXT, 0, 0, &dir},
        {"--block", BENCH_OPT_SIZE, 4096, INT64_MAX, &opt_block},
        {"--mib", BENCH_OPT_INT, 0, INT32_MAX, &opt_mib},
        {"--queue", BENCH_OPT_INT, 0, INT32_MAX, &opt_q},
        {"--threads", BENCH_OPT_INT, 0, INT32_MAX, &opt_threads},
        {"--repeat", BENCH_OPT_INT, 0, INT32_MAX, &opt_repeat},
    };
    if (bench_options_read("bench_swap", argc, argv, options,
                           (int)(sizeof options / sizeof options[0])) != 0)
        return 2;
    long mib = (long)opt_mib, q = (long)opt_q, threads = (long)opt_threads,
         repeat = (long)opt_repeat;
    long long block = (long long)opt_block;
    if (threads <= 0) threads = q;
    if (mib <= 0 || block <= 0 || block % 4096 != 0 || q < 1 || q > 64 || threads > 64 ||
        repeat < 1) {
        fprintf(stderr, "bench_swap: need --mib > 0, --block a multiple of 4096, --queue 1..64\n");
        return 2;
    }
    uint64_t bytes = (uint64_t)mib << 20;
    uint64_t blocks = bytes / (uint64_t)block;
    bytes = blocks * (uint64_t)block;

    zs__mem mem = {0};
    zs__swap_config cfg = ZS__SWAP_CONFIG_INIT;
    cfg.io_threads = (int)threads;
    zs__swap *sw = NULL;
    if (zs__swap_create_with(dir, 0, bytes, (size_t)block, &cfg, &mem, &sw) != ZS_OK) {
        fprintf(stderr, "bench_swap: %s\n", zs_last_error());
        return 1;
    }
    unsigned char *bufs[64];
    for (int k = 0; k < q; k++) {
        void *p = NULL;
        if (zs__swap_buffer_alloc(sw, (size_t)block, ZS_MEM_SCRATCH, &p) != ZS_OK) return 1;
        bufs[k] = p;
        for (long long i = 0; i < block; i++) bufs[k][i] = (unsigned char)(i * 131 + k);
    }

    /* The raw file: same directory, same flags, same block size, unlinked. */
    int direct = zs__swap_is_direct(sw);
    int fd = raw_disk_open(dir, direct, bytes);
    if (fd < 0) return 1;

    double raw_w = 1e30, raw_r = 1e30, raw1_w = 1e30, raw1_r = 1e30, sw_w = 1e30, sw_r = 1e30;
    for (long round = 0; round < repeat; round++) {
        double t;
        /* Interleaved, so drift in the device's speed hits both alike. */
        if ((t = raw_disk_pass(fd, 1, (size_t)block, blocks, (int)q, bufs)) < 0) return 1;
        if (t < raw_w) raw_w = t;
        if ((t = swap_pass(sw, 1, (size_t)block, blocks, (int)q, bufs)) < 0) return 1;
        if (t < sw_w) sw_w = t;
        if ((t = raw_disk_pass(fd, 0, (size_t)block, blocks, (int)q, bufs)) < 0) return 1;
        if (t < raw_r) raw_r = t;
        if ((t = swap_pass(sw, 0, (size_t)block, blocks, (int)q, bufs)) < 0) return 1;
        if (t < sw_r) sw_r = t;
        if ((t = raw_disk_pass(fd, 1, (size_t)block, blocks, 1, bufs)) < 0) return 1;
        if (t < raw1_w) raw1_w = t;
        if ((t = raw_disk_pass(fd, 0, (size_t)block, blocks, 1, bufs)) < 0) return 1;
        if (t < raw1_r) raw1_r = t;
    }
    close(fd);
    double mb = (double)bytes / 1e6;
    printf("bench_swap: dir %s (%s), %llu MiB, block %lld bytes, %ld in flight, %ld I/O threads, "
           "best of %ld\n",
           dir, direct ? "O_DIRECT" : "buffered: no O_DIRECT here", (unsigned long long)mib,
           block, q, threads, repeat);
    printf("  raw  QD1      write %8.1f MB/s   read %8.1f MB/s\n", mb / raw1_w, mb / raw1_r);
    printf("  raw  QD%-3ld    write %8.1f MB/s   read %8.1f MB/s   write+read %8.1f MB/s\n", q,
           mb / raw_w, mb / raw_r, 2 * mb / (raw_w + raw_r));
    printf("  swap QD%-3ld    write %8.1f MB/s   read %8.1f MB/s   write+read %8.1f MB/s\n", q,
           mb / sw_w, mb / sw_r, 2 * mb / (sw_w + sw_r));
    printf("  ratio swap/raw (same QD): write %.3f  read %.3f  write+read %.3f\n", raw_w / sw_w,
           raw_r / sw_r, (raw_w + raw_r) / (sw_w + sw_r));
    for (int k = 0; k < q; k++) zs__swap_buffer_free(sw, bufs[k], (size_t)block, ZS_MEM_SCRATCH);
    zs__swap_destroy(sw);
    return 0;
}
