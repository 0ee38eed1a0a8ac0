/* How fast host memory for offloaded state becomes usable (issue 21, the
 * fast start): fresh allocations of GB bytes, each zeroed the way the
 * runtime does it, in one run:
 *   - one thread's memset (what the runtime did before: the kernel maps the
 *     pages as one thread touches them);
 *   - zs__host_zero: the same pages touched by every OpenMP thread;
 *   - with --cuda in a CUDA build on a machine with a GPU: cudaHostAlloc
 *     (page-locked by the driver on one thread) against the CUDA backend's
 *     host_alloc (zs__host_zero, then cudaHostRegister of 1 GiB chunks on
 *     several threads).
 * Each is a fresh allocation, freed before the next; the table gives GB/s
 * (1e9 bytes per second), the median of REPS, and the ratio to the first row.
 *
 *   build/bench/offload/bench_host_alloc [--gb 4] [--reps 3] [--cuda] */
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../lib/stats.h"
#include "bench_host_alloc.h"
#include "core/memory.h"
#include "core/number.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double time_zeroing(size_t bytes, int parallel) {
    char *p = aligned_alloc(4096, bytes);
    if (!p) {
        fprintf(stderr, "bench_host_alloc: cannot allocate %zu bytes\n", bytes);
        exit(1);
    }
    const double t0 = now_s();
    if (parallel) zs__host_zero(p, bytes);
    else memset(p, 0, bytes);
    const double t = now_s() - t0;
    free(p);
    return t;
}

int main(int argc, char **argv) {
    double gb = 4.0;
    int reps = 3, cuda = 0;
    for (int i = 1; i < argc; i++) {
        zs_status st = ZS_OK;
        if (strcmp(argv[i], "--gb") == 0 && i + 1 < argc) {
            st = zs__number_option_double(argv[i], argv[i + 1], 0, 1e9, &gb);
            i++;
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            st = zs__number_option_int(argv[i], argv[i + 1], 1, INT32_MAX, &reps);
            i++;
        } else if (strcmp(argv[i], "--cuda") == 0) {
            cuda = 1;
        } else {
            fprintf(stderr, "usage: bench_host_alloc [--gb G] [--reps N] [--cuda]\n");
            return 2;
        }
        if (st != ZS_OK) {
            fprintf(stderr, "bench_host_alloc: %s\n", zs_last_error());
            return 2;
        }
    }
    if (gb <= 0 || reps < 1) {
        fprintf(stderr, "bench_host_alloc: --gb must be > 0 and --reps >= 1\n");
        return 2;
    }
    const size_t bytes = (size_t)(gb * 1e9) / 4096 * 4096;
    double one[64], all[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        one[r] = time_zeroing(bytes, 0);
        all[r] = time_zeroing(bytes, 1);
    }
    const double base = (double)bytes / 1e9 / bench_median(one, reps);
    const double par = (double)bytes / 1e9 / bench_median(all, reps);
    printf("%.2f GB fresh host memory, median of %d; %d OpenMP threads\n", (double)bytes / 1e9,
           reps, omp_get_max_threads());
    printf("%-52s %8s %8s\n", "way", "GB/s", "ratio");
    printf("%-52s %8.2f %8.2f\n", "memset, one thread (before)", base, 1.0);
    printf("%-52s %8.2f %8.2f\n", "zs__host_zero (every thread touches)", par, par / base);
    if (cuda) return bench_host_alloc_cuda(bytes, reps, base);
    return 0;
}
