/* Runs the tiny model through the runtime on a communicator, and through an
 * independent single-process reference, for the zero tests. */
#ifndef ZS_TESTS_HARNESS_H
#define ZS_TESTS_HARNESS_H

#include <mpi.h>
#include <stdint.h>

#include "tiny_model.h"
#include "zeroshard.h"

#define HARNESS_MAX_STEPS 64

typedef struct harness_options {
    int stage;
    const char *optimizer;   /* "adamw", "adam", "sgd" */
    double momentum;         /* sgd */
    int nesterov;            /* sgd */
    int steps;
    tiny_grad_mode mode;
    int max_live_units;
    int prefetch;            /* keep two units live in forward (stage 3 residency check) */
    const char *scheduler;   /* "constant" or "warmup_cosine" */
} harness_options;

typedef struct harness_result {
    int64_t numel;            /* parameters of the model, concatenated in registration order */
    float *initial;           /* [numel] after zs_build */
    float *final;             /* [numel] after the last step */
    double loss[HARNESS_MAX_STEPS];
    double grad_norm[HARNESS_MAX_STEPS];
    double lr[HARNESS_MAX_STEPS];
    zs_memory_stats memory;
    zs_comm_stats step_bytes; /* counters of the last step alone */
    int world;
} harness_result;

/* Trains through zeroshard on `comm`. Returns 0 on success; on failure prints
 * the zeroshard error and returns -1. */
int harness_run(MPI_Comm comm, const harness_options *opt, harness_result *out);

/* The same training in one process on the full batch with plainly written
 * optimizers, starting from `initial`. Fills final, loss, grad_norm. */
void harness_reference(const harness_options *opt, const float *initial, harness_result *out);

void harness_result_free(harness_result *r);

/* max |a - b| / max |b| over each parameter tensor; returns the worst tensor's value. */
double harness_max_relative_diff(const float *a, const float *b, const char **worst_name);

/* Model-wide layout facts computed from the layout rules (not from the runtime):
 * padded elements of unit l for world size n and alignment 16. */
int64_t harness_unit_padded(int l, int world);

#endif
