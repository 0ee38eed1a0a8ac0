/* Stages 0-3 on the simulated device (tests/device/device_stages.h says what
 * is checked): the sim side of the test, its copies in stream order, a
 * kernel that holds the stream back, and the backend's count of blocking
 * waits. It always runs: the sim device needs no GPU. */
#define _DEFAULT_SOURCE /* nanosleep */
#include <stdio.h>
#include <time.h>

#include "device_stages.h"
#include "test_util.h"
#include "zeroshard_sim.h"

static int sim_copy(zs_ctx *zs, void *dst, const void *src, size_t bytes, int to_device,
                    const char *what) {
    (void)to_device;
    const zs_status st = zs_sim_memcpy(zs, dst, src, bytes);
    if (st != ZS_OK) {
        fprintf(stderr, "rank %d: %s (%zu bytes) failed: %s\n", zt_rank, what, bytes,
                zs_last_error());
        return -1;
    }
    return 0;
}

static int sleep_kernel(const zs_sim_kernel *k, void *args) {
    (void)k;
    const int ms = *(const int *)args;
    struct timespec nap = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&nap, NULL);
    return 0;
}

static int sim_hold(zs_ctx *zs, int ms) {
    return zs_sim_launch(zs, "sleep", sleep_kernel, &ms, sizeof ms) == ZS_OK ? 0 : -1;
}

static uint64_t sim_waits(const zs_ctx *zs) { return zs_sim_blocking_waits(zs); }

typedef struct grad_args {
    int param;
    const float *p;
    float *g;
    int64_t n;
} grad_args;

static int grad_kernel(const zs_sim_kernel *k, void *args) {
    const grad_args *a = args;
    device_stages_gradient(a->param, zs_sim_ptr(k, a->p), zs_sim_ptr(k, a->g), a->n);
    return 0;
}

/* The backward pass's kernel: reads the gathered parameter, writes the
 * gradient, declared for the stream-order check. */
static int sim_gradient(zs_ctx *zs, int param, const void *p, void *g, int64_t n) {
    const grad_args a = {param, p, g, n};
    const zs_sim_access acc[2] = {{p, (size_t)n * sizeof(float), 0},
                                  {g, (size_t)n * sizeof(float), 1}};
    const zs_status st = zs_sim_launch_access(zs, "gradient", grad_kernel, &a, sizeof a, acc, 2);
    if (st != ZS_OK) fprintf(stderr, "rank %d: the gradient kernel: %s\n", zt_rank, zs_last_error());
    return st == ZS_OK ? 0 : -1;
}

static int sim_must_skip(char *reason, size_t capacity) {
    (void)reason;
    (void)capacity;
    return 0;
}

int main(int argc, char **argv) {
    static const device_ops ops = {"sim",    "test_sim_stages", sim_must_skip, sim_copy,
                                   sim_hold, sim_waits,         sim_gradient};
    return device_stages_main(argc, argv, &ops);
}
