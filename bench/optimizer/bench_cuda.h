/* bench_optimizer --backend cuda (bench_optimizer_cuda.c in CUDA builds,
 * bench_optimizer_cuda_absent.c otherwise, chosen by CMake). */
#ifndef ZS_BENCH_OPTIMIZER_CUDA_H
#define ZS_BENCH_OPTIMIZER_CUDA_H

#include <stdint.h>

/* Runs the device half of the benchmark over n elements (0: the default,
 * shrunk to what fits the device), median of `reps` timed repetitions, and
 * prints its table. Returns the program's exit status: 0 also when there is
 * no CUDA build or no usable device (it says so and skips), 1 on a CUDA
 * failure (named). */
int bench_optimizer_cuda(int64_t n, int reps);

#endif
