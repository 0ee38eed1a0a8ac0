/* The metrics file (log.metrics_file): one JSON line per optimizer step,
 * written by rank 0, with the step's figures and the program's scalars. A
 * step's line is kept until the next step ends (or the context closes), so
 * that zs_log_scalar_previous can add what the program learns after zs_step
 * returned (a loss read from the device without a wait of its own). */
#ifndef ZS_ZERO_METRICS_H
#define ZS_ZERO_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "core/clock.h"
#include "zeroshard.h"

#define ZS_METRICS_SCALARS 32

typedef struct zs__metrics {
    FILE *file;                  /* rank 0 with log.metrics_file; NULL otherwise */
    char path[1024];
    uint64_t step_start_ns;      /* when the previous optimizer step returned */
    /* Nanoseconds of the step in progress spent: waiting for collectives
     * (exposed communication), in the optimizer pass, saving checkpoints. */
    uint64_t comm_ns, optimizer_ns, checkpoint_ns;
    /* The optimizer offloaded: the main thread's waits for the host update
     * (a fetch that needed a unit not updated yet, zs_step's wait for the
     * end of the last pass). */
    uint64_t offload_wait_ns;
    zs_comm_stats comm_before;   /* counters when the step began */
    int scalar_count;
    char scalar_names[ZS_METRICS_SCALARS][64];
    double scalar_values[ZS_METRICS_SCALARS];
    /* The finished step's line (a json_object) and its scalars object, not
     * written yet; NULL before the first step. */
    void *pending, *pending_scalars;
    int pending_scalar_count;
} zs__metrics;

#endif
