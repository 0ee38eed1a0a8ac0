/* The raw disk of the NVMe benchmarks (raw_disk.h). */
#define _GNU_SOURCE /* O_DIRECT, fallocate */
#include "raw_disk.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double raw_disk_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct raw_job {
    int fd, is_write, stride, first;
    size_t block;
    uint64_t blocks;
    unsigned char *buf;
    int failed;
} raw_job;

/* One raw thread: blocks first, first + stride, ... with pwrite/pread. */
static void *raw_thread(void *arg) {
    raw_job *j = arg;
    for (uint64_t b = (uint64_t)j->first; b < j->blocks; b += (uint64_t)j->stride) {
        size_t done = 0;
        while (done < j->block) {
            off_t at = (off_t)(b * j->block + done);
            ssize_t n = j->is_write ? pwrite(j->fd, j->buf + done, j->block - done, at)
                                    : pread(j->fd, j->buf + done, j->block - done, at);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                j->failed = n < 0 ? errno : EIO;
                return NULL;
            }
            done += (size_t)n;
        }
    }
    return NULL;
}

/* Seconds to move every block once with q threads; -1 on failure. */
double raw_disk_pass(int fd, int is_write, size_t block, uint64_t blocks, int q,
                       unsigned char **bufs) {
    pthread_t th[64];
    raw_job jobs[64];
    double t0 = raw_disk_now();
    for (int k = 0; k < q; k++) {
        jobs[k] = (raw_job){fd, is_write, q, k, block, blocks, bufs[k], 0};
        pthread_create(&th[k], NULL, raw_thread, &jobs[k]);
    }
    int failed = 0;
    for (int k = 0; k < q; k++) {
        pthread_join(th[k], NULL);
        if (jobs[k].failed) failed = jobs[k].failed;
    }
    if (failed) {
        fprintf(stderr, "raw disk: %s failed: %s\n", is_write ? "pwrite" : "pread",
                strerror(failed));
        return -1;
    }
    return raw_disk_now() - t0;
}

int raw_disk_open(const char *dir, int direct, uint64_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/zs-bench-raw-%ld", dir, (long)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | (direct ? O_DIRECT : 0), 0600);
    if (fd < 0) {
        fprintf(stderr, "raw disk: %s: %s\n", path, strerror(errno));
        return -1;
    }
    unlink(path);
    if (fallocate(fd, 0, 0, (off_t)bytes) != 0 && ftruncate(fd, (off_t)bytes) != 0) {
        fprintf(stderr, "raw disk: %s: cannot reserve: %s\n", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}
