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
    /* The comm engine: sync = 1 sets comm.overlap = false (collectives on the
     * calling thread); gather_ahead = 1 lets stage 3 prefetch in the recorded
     * order (zero.prefetch_bytes = 64 MiB), 0 turns it off (the memory checks
     * compute their peaks without it). */
    int sync;
    int gather_ahead;
    int bucket_bytes;        /* comm.bucket_bytes (0: every unit reduced alone) */
    int order_change_step;   /* if > 0: from this step on, each micro-step first fetches and
                                releases the last unit (the fetch order changes; results not) */
    const char *scheduler;   /* "constant" or "warmup_cosine" */
    /* Mixed precision and step options; zero values mean the defaults. */
    const char *dtype;        /* "fp32" (default), "fp16", "bf16" */
    const char *reduce_dtype; /* "compute" (default) or "fp32" */
    int gas;                  /* micro-steps per step (default 1) */
    int batch;                /* global samples per micro-step (default TINY_BATCH) */
    double clip;              /* gradient_clipping (0: off) */
    const char *precision_extra; /* more settings inside the generated precision group */
    /* Overflow injection (when inject is 1): at micro-step 0 of step
     * inject_step, rank inject_rank writes inject_value into element
     * inject_index of the weight gradient of unit inject_unit; and again in
     * the next inject_count - 1 steps. */
    int inject, inject_step, inject_count, inject_rank, inject_unit, inject_index;
    float inject_value;
    /* Checkpoints: after building, load load_dir (if set) and train from the
     * step it recorded; save into save_dir (if set) after step save_after - 1,
     * recording the next step as user state "next_step". */
    const char *load_dir;
    const char *save_dir;
    int save_after;
    int stop_after;           /* if > 0, stop the loop after this many steps (the schedule
                                 still spans `steps`) */
    const char *config_extra; /* more top-level settings (e.g. a checkpoint group) */
    const char *comm_extra;   /* more settings inside the generated comm group */
    const char *zero_extra;   /* more settings inside the generated zero group */
    int align;                /* zero.align (0: 16, the alignment harness_unit_padded assumes) */
    /* Called on every rank just before each optimizer step's zs_step (fault
     * injection). */
    void (*before_step)(zs_ctx *zs, int step, void *arg);
    void *before_step_arg;
    /* When a zs_step fails: load this checkpoint in the same context and
     * go on from the step it recorded (once); the failure is kept in
     * status/error and `recovered` is set. */
    const char *recover_dir;
    int resume;               /* after zs_build, continue from the user state "next_step" if a
                                 checkpoint was loaded (checkpoint.resume) */
    /* Bit l: layer l's unit is frozen (ZS_PARAM_FROZEN): its backward
     * computes only its input's gradient, it never asks for its own, and the
     * reference leaves it unchanged (and out of the gradient norm). */
    unsigned frozen_mask;
} harness_options;

typedef struct harness_result {
    int64_t numel;            /* parameters of the model, concatenated in registration order */
    float *initial;           /* [numel] after zs_build */
    float *final;             /* [numel] after the last step */
    double loss[HARNESS_MAX_STEPS];
    double grad_norm[HARNESS_MAX_STEPS];
    double lr[HARNESS_MAX_STEPS];
    double loss_scale[HARNESS_MAX_STEPS];
    double clip_coef[HARNESS_MAX_STEPS];
    int skipped[HARNESS_MAX_STEPS];
    int overflow_rank[HARNESS_MAX_STEPS], overflow_unit[HARNESS_MAX_STEPS];
    uint64_t digest_before[HARNESS_MAX_STEPS]; /* this rank's state before the step's zs_step */
    uint64_t digest_after[HARNESS_MAX_STEPS];
    zs_memory_stats memory;
    zs_comm_stats step_bytes; /* counters of the last step alone */
    int world;
    zs_status status;         /* of the first failing call, ZS_OK if none */
    char error[1024];         /* zs_last_error() of a failed zs_step */
    int recovered;            /* recover_dir was loaded after a failed zs_step */
    int first_step;           /* the step training started from (after a load) */
    uint64_t final_digest;    /* zs__state_digest after the last step */
    /* fp32 master weights, first and second moments after the last step,
     * gathered bit-exactly from every rank: [numel] each (registration order). */
    float *gathered_state[3];
    double final_loss_scale;  /* zs_loss_scale after the last step */
} harness_result;

/* Creates and builds a context holding the tiny model under `opt`'s
 * configuration (including checkpoint.resume); params receives the
 * 2 x tiny_layer_count() parameter handles in registration order. */
zs_status harness_build(MPI_Comm comm, const harness_options *opt, zs_ctx **zs, zs_param **params);

/* MPI with MPI_THREAD_MULTIPLE for the tests of simulated nodes, which take
 * the ranks per node (comm.ranks_per_node) as their first argument and
 * optionally "deep" (the tiny model's deep shape, tiny_model.h) as their
 * second: the world size, this rank and that number. -1 (after a message)
 * when the argument is missing or does not divide the world. */
int harness_init_nodes(int *argc, char ***argv, int *world, int *rank, int *per_node);

/* The configuration harness_build loads for `opt`, written as run.cfg in a
 * new temporary directory (its path in `path`; the caller removes both).
 * 0 on success. For zs_estimate_memory on the very settings of a run. */
int harness_write_config(const harness_options *opt, char *path, size_t cap);

/* Trains through zeroshard on `comm`. Returns 0 on success; on failure prints
 * the zeroshard error (unless quiet) and returns -1 with out->status set. */
int harness_run(MPI_Comm comm, const harness_options *opt, harness_result *out);

/* The same training in one process on the full batch with plainly written
 * optimizers, starting from `initial`. Fills final, loss, grad_norm. */
void harness_reference(const harness_options *opt, const float *initial, harness_result *out);

void harness_result_free(harness_result *r);

/* A temporary directory made by rank 0 from a mkdtemp pattern, known to
 * every rank of MPI_COMM_WORLD ("" on failure); and its removal (rm -rf by
 * rank 0 after a barrier). */
void harness_shared_tmpdir(char *dir, size_t cap, const char *pattern);
void harness_remove_tree(const char *dir);

/* The checkpoint fixture of the corruption tests: trains the tiny model
 * (fp32, stage 2, AdamW) on `comm` and saves root/step_00000003, then again
 * up to root/step_00000004 (a second checkpoint to borrow files from).
 * Returns 0 on success. */
int harness_save_steps_3_and_4(MPI_Comm comm, const char *root);

/* max |a - b| / max |b| over each parameter tensor; returns the worst tensor's value. */
double harness_max_relative_diff(const float *a, const float *b, const char **worst_name);

/* Model-wide layout facts computed from the layout rules (not from the runtime):
 * padded elements of unit l for world size n and alignment 16, or `align`. */
int64_t harness_unit_padded(int l, int world);
int64_t harness_unit_padded_aligned(int l, int world, int64_t align);

/* Warnings of a run into a file per rank: `extra` receives the log group
 * for harness_options.config_extra (level warn, file
 * /tmp/zs_<name>_<launcher pid>_<rank>.log), `mine` this rank's file. */
void harness_warn_log(const char *name, int rank, char *extra, size_t extra_cap, char *mine,
                      size_t mine_cap);
/* Lines of the text file `path` holding `needle` (-1 if it cannot be
 * opened); with `first` (may be NULL), the first such line, "" if none. */
int harness_count_lines(const char *path, const char *needle, char *first, size_t first_cap);

#endif
