/* Order statistics shared by the C benchmarks (bench/lib/common.sh is the
 * shell ones' preamble). Header-only: each benchmark is one program. */
#ifndef ZS_BENCH_STATS_H
#define ZS_BENCH_STATS_H

#include <stdlib.h>

static inline int bench_compare_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v[0..n) in place and returns its median (the mean of the middle
 * two for even n). */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_compare_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
