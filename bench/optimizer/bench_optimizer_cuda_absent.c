/* bench_optimizer --backend cuda in a build without CUDA: says so and skips
 * (CMake compiles bench_optimizer_cuda.c instead when nvcc is found). */
#include <stdio.h>

#include "bench_cuda.h"

int bench_optimizer_cuda(int64_t n, int reps) {
    (void)n;
    (void)reps;
    printf("bench_optimizer --backend cuda: skipped: this build has no CUDA backend (nvcc was "
           "not found, or -DZS_CUDA=OFF); configure on a machine with the CUDA toolkit\n");
    return 0;
}
