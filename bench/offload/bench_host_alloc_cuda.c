/* bench_host_alloc --cuda: cudaHostAlloc against the CUDA backend's
 * host_alloc (src/backend/cuda/cuda_backend.c: zeroed by every thread, then
 * registered in 1 GiB chunks on several threads). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "../lib/stats.h"
#include "backend/backend.h"
#include "bench_host_alloc.h"
#include "core/error.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int bench_host_alloc_cuda(size_t bytes, int reps, double base_gbps) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        (void)cudaGetLastError();
        printf("--cuda: skipped, no usable CUDA device\n");
        return 0;
    }
    zs__mem mem;
    memset(&mem, 0, sizeof mem);
    zs__backend *be = NULL;
    if (zs__cuda_backend_create(NULL, &mem, 0, &be) != ZS_OK) {
        fprintf(stderr, "bench_host_alloc: %s\n", zs_last_error());
        return 1;
    }
    double driver[64], ours[64];
    for (int r = 0; r < reps; r++) {
        void *p = NULL;
        double t0 = now_s();
        if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
            fprintf(stderr, "bench_host_alloc: cudaHostAlloc of %zu bytes failed\n", bytes);
            return 1;
        }
        memset(p, 0, bytes); /* what the runtime did with it */
        driver[r] = now_s() - t0;
        cudaFreeHost(p);
        t0 = now_s();
        if (be->ops->host_alloc(be, ZS_MEM_HOST_STATE, bytes, &p) != ZS_OK) {
            fprintf(stderr, "bench_host_alloc: %s\n", zs_last_error());
            return 1;
        }
        ours[r] = now_s() - t0;
        be->ops->host_free(be, ZS_MEM_HOST_STATE, p, bytes);
    }
    const double d = (double)bytes / 1e9 / bench_median(driver, reps);
    const double o = (double)bytes / 1e9 / bench_median(ours, reps);
    printf("%-52s %8.2f %8.2f\n", "cudaHostAlloc + memset (before)", d, d / base_gbps);
    printf("%-52s %8.2f %8.2f\n", "host_alloc: zeroed by all, registered in chunks", o,
           o / base_gbps);
    zs__backend_destroy(be);
    return 0;
}
