/* bench_host_alloc --cuda in a build without CUDA. */
#include <stdio.h>

#include "bench_host_alloc.h"

int bench_host_alloc_cuda(size_t bytes, int reps, double base_gbps) {
    (void)bytes;
    (void)reps;
    (void)base_gbps;
    printf("--cuda: skipped, this build has no CUDA (configure with nvcc on PATH)\n");
    return 0;
}
