/* bench_host_alloc --cuda (bench_host_alloc_cuda.c in CUDA builds,
 * bench_host_alloc_cuda_absent.c otherwise, chosen by CMake). */
#ifndef ZS_BENCH_HOST_ALLOC_H
#define ZS_BENCH_HOST_ALLOC_H

#include <stddef.h>

/* Prints the page-locked rows (GB/s and the ratio to `base_gbps`); returns
 * the exit status: 0 also without a CUDA build or a usable device (it says
 * so), 1 on a failure (named). */
int bench_host_alloc_cuda(size_t bytes, int reps, double base_gbps);

#endif
