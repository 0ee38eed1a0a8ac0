/* The training program every model shares (see ex_trainer.h). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "ex_trainer.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "ex_batch.h"
#include "ex_data.h"
#include "ex_sample.h"
#include "numerics.h"
#include "test_stop.h"
#include "zeroshard.h"
#include "zeroshard_sim.h"

#define MIB (1024.0 * 1024.0)

/* Micro-steps whose losses wait in page-locked memory before the host reads
 * them after zs_step; more micro-steps per optimizer step fold the older
 * ones in early (one wait per this many). */
#define LOSS_SLOTS 64

typedef struct app_settings {
    int T, B; /* B: sequences per rank per micro-step (derived with global_batch) */
    int64_t global_batch; /* sequences per optimizer step at any world size; 0 = off */
    int accumulation;     /* micro-steps per optimizer step, derived from global_batch */
    int batch_cap;        /* app.batch_size as configured: the micro-batch's cap */
    int64_t steps;
    const char *train_data, *val_data;
    double val_fraction;
    int64_t data_seed, val_every, val_batches, log_every;
    int64_t sample_tokens, top_k, sample_seed;
    double temperature;
    const char *prompt, *prompt_tokens;
    double target_val_loss;
    int beat_unigram, save_final;
    int require_same_kernels; /* a rank with another BLAS kernel or GPU model is an error */
    const char *loss_log, *memory_file;
} app_settings;

/* The trainer's buffers on the model's device, plus the host staging of
 * tokens and losses. The model keeps its own (activations, scratch). */
typedef struct workspace {
    int *tokens, *targets;   /* [B*T] device */
    float *losses;           /* [B*T] device */
    /* Page-locked (host_alloc): a micro-step's tokens and targets, two sets
     * used in turn so that writing one never waits for the upload of the
     * other; the losses' sums of up to LOSS_SLOTS micro-steps. */
    int32_t *host_tokens[2], *host_targets[2];
    double *host_loss_sums;  /* [LOSS_SLOTS] */
    int next_tokens;         /* the set the next micro-step writes */
    float *host_losses;      /* [B*T] (evaluation) */
    float *host_logits;      /* [V] */
    float *sample_values;    /* [V] */
    int *sample_ids;         /* [V] */
} workspace;

typedef struct trainer {
    /* The runtime's host waits (zs_sim_blocking_waits: sim and CUDA) and the
     * model device's (nn_device blocking_waits) inside micro-steps, and the
     * micro-steps run: a micro-step waits only where a collective stages
     * through the host. */
    unsigned long long micro_waits, micro_device_waits;
    long long micro_steps;
    const ex_model_ops *ops;
    ex_model *model;
    ex_model_facts facts;
    nn_device *dev;
    app_settings app;
    zs_ctx *zs;
    workspace ws;
    ex_tokens *train_stream, *val_stream;
    ex_view train, val;
    int64_t train_windows, val_windows;
    ex_unigram unigram;
    int have_unigram;
    int rank, world;
    int owns_mpi;       /* the trainer initialized MPI, so it finalizes it */
    zs_status failure;  /* the first failing call's status (decides MPI_Finalize) */
    int64_t pos; /* training samples consumed by all ranks (the data position) */
    char pos_name[64]; /* "<family>.data_pos": the user state that saves pos */
} trainer;

void ex_abort_job(const char *program, const char *what, const char *why) {
    fprintf(stderr, "%s: %s: %s\n", program, what, why);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    abort(); /* MPI_Abort does not return; the compiler cannot know */
}

static void abort_job(const trainer *tr, const char *what, const char *why) {
    ex_abort_job(tr->ops->program, what, why);
}

static void check_device(const trainer *tr, int rc, const char *what) {
    if (rc != 0) abort_job(tr, what, tr->dev->ops->last_error(tr->dev));
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------ settings */

zs_status ex_config_int(zs_config *cfg, const char *key, int64_t def, int64_t lo, int64_t hi,
                        int *out) {
    int64_t v = 0;
    zs_status st = zs_config_app_int(cfg, key, def, lo, hi, &v);
    if (st == ZS_OK) *out = (int)v;
    return st;
}

/* The generic keys of the app group, after the model read its own (the
 * sequence length's default and maximum are the model's). */
static zs_status read_settings(zs_config *cfg, const ex_model_facts *f, app_settings *a) {
    zs_status st;
    if ((st = ex_config_int(cfg, "seq_len", f->default_seq, 1, f->max_seq, &a->T)) ||
        (st = ex_config_int(cfg, "batch_size", 8, 1, 1 << 16, &a->B)) ||
        (st = zs_config_app_int(cfg, "global_batch", 0, 0, INT64_C(1) << 40, &a->global_batch)) ||
        (st = zs_config_app_int(cfg, "steps", 200, 0, INT64_C(1) << 40, &a->steps)) ||
        (st = zs_config_app_string(cfg, "train_data", "data/shakespeare/shakespeare.txt",
                                   &a->train_data)) ||
        (st = zs_config_app_string(cfg, "val_data", "", &a->val_data)) ||
        (st = zs_config_app_float(cfg, "val_fraction", 0.05, 0.0, 0.5, &a->val_fraction)) ||
        (st = zs_config_app_int(cfg, "data_seed", 1337, 0, INT64_MAX, &a->data_seed)) ||
        (st = zs_config_app_int(cfg, "val_every", 50, 0, INT64_C(1) << 40, &a->val_every)) ||
        (st = zs_config_app_int(cfg, "val_batches", 4, 1, 1 << 20, &a->val_batches)) ||
        (st = zs_config_app_int(cfg, "log_every", 1, 1, INT64_C(1) << 40, &a->log_every)) ||
        (st = zs_config_app_int(cfg, "sample_tokens", 256, 0, 1 << 20, &a->sample_tokens)) ||
        (st = zs_config_app_float(cfg, "temperature", 0.8, 0.0, 100.0, &a->temperature)) ||
        (st = zs_config_app_int(cfg, "top_k", 40, 0, 1 << 24, &a->top_k)) ||
        (st = zs_config_app_int(cfg, "sample_seed", 42, 0, INT64_MAX, &a->sample_seed)) ||
        (st = zs_config_app_string(cfg, "prompt", "\n", &a->prompt)) ||
        (st = zs_config_app_string(cfg, "prompt_tokens", "", &a->prompt_tokens)) ||
        (st = zs_config_app_float(cfg, "target_val_loss", 0.0, 0.0, 1e6, &a->target_val_loss)) ||
        (st = zs_config_app_bool(cfg, "beat_unigram", 0, &a->beat_unigram)) ||
        (st = zs_config_app_bool(cfg, "save_final", 0, &a->save_final)) ||
        (st = zs_config_app_string(cfg, "loss_log", "", &a->loss_log)) ||
        (st = zs_config_app_string(cfg, "memory_file", "", &a->memory_file)) ||
        (st = zs_config_app_bool(cfg, "require_same_kernels", 0, &a->require_same_kernels)) ||
        (st = zs_config_app_finish(cfg)))
        return st;
    return ZS_OK;
}

/* ------------------------------------------------------- world and batch */

/* MPI starts here, before zs_create: the global batch's split needs the
 * world size while the configuration can still change
 * (gradient_accumulation_steps is a runtime key, fixed at zs_create). The
 * thread level is the one zs_create asks for (its comm engine's thread);
 * zs_create then uses MPI without owning it, and finish_mpi ends it. */
static int start_mpi(trainer *tr) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
            fprintf(stderr, "%s: MPI_Init_thread failed; launch the program with mpirun\n",
                    tr->ops->program);
            return -1;
        }
        tr->owns_mpi = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &tr->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &tr->world);
    return 0;
}

/* MPI_Finalize waits for every rank, so it is skipped after a collective
 * failed or timed out (a peer may never come; the runtime's own rule when
 * it owns MPI): the process then ends without it, and mpirun reports the
 * job failed. */
static void finish_mpi(const trainer *tr) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (tr->owns_mpi && !finalized && tr->failure != ZS_ERR_TIMEOUT && tr->failure != ZS_ERR_COMM)
        MPI_Finalize();
}

/* app.global_batch: the per-rank micro-batch (app.batch_size is its cap)
 * and the runtime's gradient_accumulation_steps, from the world size
 * (ex_batch.h). Every rank computes the same from the same numbers, so all
 * refuse alike, each with its configuration error's report. Returns 0, or
 * -1 after zs_report_config_error. */
static int derive_batch(trainer *tr, zs_config *cfg) {
    app_settings *a = &tr->app;
    a->accumulation = 0;
    a->batch_cap = a->B;
    if (a->global_batch == 0) return 0;
    ex_batch b;
    char err[512];
    if (ex_batch_derive(a->global_batch, tr->world, a->B, &b, err, sizeof err) != 0) {
        zs_report_config_error(tr->ops->program, err);
        return -1;
    }
    char assignment[64];
    snprintf(assignment, sizeof assignment, "gradient_accumulation_steps=%d", b.accumulation);
    zs_status st = zs_config_override(cfg, assignment);
    if (st != ZS_OK) {
        tr->failure = st;
        snprintf(err, sizeof err, "app.global_batch: %s", zs_last_error());
        zs_report_config_error(tr->ops->program, err);
        return -1;
    }
    a->B = b.micro_batch;
    a->accumulation = b.accumulation;
    return 0;
}

/* ---------------------------------------------------------------- data */

/* The data files: 0, or -1 with the reason in why (a configuration error:
 * the files app.train_data and app.val_data name). */
static int open_data(trainer *tr, char *why, size_t cap) {
    const app_settings *a = &tr->app;
    char err[EX_ERR_CAP];
    if (ex_tokens_open(a->train_data, &tr->train_stream, err, sizeof err) != 0) {
        snprintf(why, cap, "app.train_data: %s%s", err,
                 strstr(a->train_data, "shakespeare") ? " (make demo fetches it with "
                                                        "scripts/fetch-shakespeare.sh)" : "");
        return -1;
    }
    if (a->val_data[0] != '\0') {
        if (ex_tokens_open(a->val_data, &tr->val_stream, err, sizeof err) != 0) {
            snprintf(why, cap, "app.val_data: %s", err);
            return -1;
        }
        tr->train = ex_view_all(tr->train_stream);
        tr->val = ex_view_all(tr->val_stream);
    } else if (ex_split(ex_view_all(tr->train_stream), a->T, a->val_fraction, &tr->train,
                        &tr->val, err, sizeof err) != 0) {
        snprintf(why, cap, "splitting app.train_data: %s", err);
        return -1;
    }
    tr->train_windows = ex_view_num_windows(tr->train, a->T);
    tr->val_windows = a->val_fraction > 0 || tr->val_stream ? ex_view_num_windows(tr->val, a->T) : 0;
    if (tr->train_windows < 1) {
        snprintf(why, cap, "app.train_data holds no sequence of %d + 1 tokens", a->T);
        return -1;
    }
    int largest = ex_tokens_max_token(tr->train_stream);
    if (tr->val_stream && ex_tokens_max_token(tr->val_stream) > largest)
        largest = ex_tokens_max_token(tr->val_stream);
    if (largest >= tr->facts.vocab) {
        snprintf(why, cap, "the data holds token %d but the model's vocabulary has %d entries; "
                           "use a model with a larger vocabulary or data made with its tokenizer",
                 largest, tr->facts.vocab);
        return -1;
    }
    /* What a model that ignores context scores: the baseline to beat. */
    if (tr->val_windows > 0 &&
        ex_unigram_baseline(tr->train, tr->val, tr->facts.vocab, &tr->unigram, err, sizeof err) == 0)
        tr->have_unigram = 1;
    return 0;
}

/* ----------------------------------------------------------- workspace */

static void *device_alloc(trainer *tr, size_t bytes, const char *what) {
    void *p = NULL;
    if (tr->dev->ops->alloc(tr->dev, bytes, &p) != 0) {
        char why[NN_ERR_CAP + 64];
        snprintf(why, sizeof why, "%.1f MiB: %s", (double)bytes / MIB,
                 tr->dev->ops->last_error(tr->dev));
        abort_job(tr, what, why);
    }
    return p;
}

static void *host_alloc(const trainer *tr, size_t bytes, const char *what) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) abort_job(tr, what, "out of host memory");
    return p;
}

static void *pinned_alloc(trainer *tr, size_t bytes, const char *what) {
    void *p = NULL;
    check_device(tr, tr->dev->ops->host_alloc(tr->dev, bytes, &p), what);
    return p;
}

static void workspace_create(trainer *tr) {
    workspace *ws = &tr->ws;
    const size_t BT = (size_t)tr->app.B * (size_t)tr->app.T, V = (size_t)tr->facts.vocab;
    ws->tokens = device_alloc(tr, BT * sizeof(int), "the token buffers");
    ws->targets = device_alloc(tr, BT * sizeof(int), "the token buffers");
    ws->losses = device_alloc(tr, BT * sizeof(float), "the losses");
    for (int k = 0; k < 2; k++) {
        ws->host_tokens[k] = pinned_alloc(tr, BT * sizeof(int32_t), "token staging");
        ws->host_targets[k] = pinned_alloc(tr, BT * sizeof(int32_t), "token staging");
    }
    ws->host_loss_sums = pinned_alloc(tr, LOSS_SLOTS * sizeof(double), "loss staging");
    ws->host_losses = host_alloc(tr, BT * sizeof(float), "loss staging");
    ws->host_logits = host_alloc(tr, V * sizeof(float), "sampling");
    ws->sample_values = host_alloc(tr, V * sizeof(float), "sampling");
    ws->sample_ids = host_alloc(tr, V * sizeof(int), "sampling");
}

static void workspace_free(trainer *tr) {
    workspace *ws = &tr->ws;
    if (tr->dev) {
        void *ptrs[] = {ws->tokens, ws->targets, ws->losses};
        for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) tr->dev->ops->free(tr->dev, ptrs[i]);
        for (int k = 0; k < 2; k++) {
            tr->dev->ops->host_free(tr->dev, ws->host_tokens[k]);
            tr->dev->ops->host_free(tr->dev, ws->host_targets[k]);
        }
        tr->dev->ops->host_free(tr->dev, ws->host_loss_sums);
    }
    free(ws->host_losses);
    free(ws->host_logits);
    free(ws->sample_values);
    free(ws->sample_ids);
}

/* The token set the next batch is written into, once the upload that last
 * read it has completed (two micro-steps ago: long done). */
static int next_token_set(trainer *tr) {
    workspace *ws = &tr->ws;
    const int k = ws->next_tokens;
    ws->next_tokens ^= 1;
    check_device(tr, tr->dev->ops->host_wait(tr->dev, ws->host_tokens[k]), "token staging");
    check_device(tr, tr->dev->ops->host_wait(tr->dev, ws->host_targets[k]), "token staging");
    return k;
}

/* Uploads n tokens and targets from set k without waiting. */
static void upload_tokens(trainer *tr, int k, int n) {
    workspace *ws = &tr->ws;
    check_device(tr, tr->dev->ops->upload_async(tr->dev, ws->tokens, ws->host_tokens[k],
                                                (size_t)n * sizeof(int)),
                 "uploading tokens");
    check_device(tr, tr->dev->ops->upload_async(tr->dev, ws->targets, ws->host_targets[k],
                                                (size_t)n * sizeof(int)),
                 "uploading targets");
}

/* ------------------------------------------------------ micro-steps */

/* The model device's blocking waits so far (0 where it does not count). */
static unsigned long long device_waits_of(const trainer *tr) {
    return tr->dev->ops->blocking_waits ? tr->dev->ops->blocking_waits(tr->dev) : 0;
}

/* One micro-step: this rank's batch up, the model's forward, head and
 * backward; enqueues the sum of this rank's B*T losses into
 * host_loss_sums[slot], read after a wait. Collective. */
static zs_status micro_step(trainer *tr, int slot) {
    const int B = tr->app.B, T = tr->app.T, BT = B * T;
    const unsigned long long waits = zs_sim_blocking_waits(tr->zs);
    const unsigned long long device_waits = device_waits_of(tr);
    char data_err[EX_ERR_CAP];
    const int set = next_token_set(tr);
    if (ex_train_batch(tr->train, T, (uint64_t)tr->app.data_seed, tr->pos, tr->rank, B,
                       tr->ws.host_tokens[set], tr->ws.host_targets[set], data_err,
                       sizeof data_err) != 0)
        abort_job(tr, "reading a training batch", data_err);
    tr->pos += (int64_t)tr->world * B;
    upload_tokens(tr, set, BT);
    /* The gradient of the scaled mean loss over this rank's positions;
     * zeroshard averages over ranks and micro-steps and unscales. */
    const float dloss = zs_loss_scale(tr->zs) / (float)BT;
    zs_status st = tr->ops->train_micro_step(tr->model, tr->zs, tr->ws.tokens, tr->ws.targets, B,
                                             T, dloss, tr->ws.losses);
    if (st != ZS_OK) return st;
    check_device(tr, tr->dev->ops->losses_sum(tr->dev, tr->ws.losses, BT,
                                              &tr->ws.host_loss_sums[slot]),
                 "summing the losses");
    tr->micro_waits += zs_sim_blocking_waits(tr->zs) - waits;
    tr->micro_device_waits += device_waits_of(tr) - device_waits;
    tr->micro_steps++;
    return ZS_OK;
}

/* The mean validation loss over every rank's val_batches batches, or NAN
 * without a validation view. Every rank runs the same number of forward
 * passes (stage 3 gathers are collective). */
static zs_status evaluate(trainer *tr, double *out) {
    *out = NAN;
    if (tr->val_windows < 1) return ZS_OK;
    const int B = tr->app.B, T = tr->app.T, BT = B * T;
    char data_err[EX_ERR_CAP];
    double sums[2] = {0.0, 0.0}; /* loss summed over positions, positions */
    ex_test_stop(tr->ops->program, "validation", tr->rank);
    /* With a global batch, val_batches global batches: every world size
     * evaluates the same val_batches x global_batch sequences. */
    const int64_t passes =
        tr->app.val_batches * (tr->app.accumulation > 0 ? tr->app.accumulation : 1);
    for (int64_t k = 0; k < passes; k++) {
        const int set = next_token_set(tr);
        for (int b = 0; b < B; b++) {
            int64_t j = ((k * tr->world + tr->rank) * B + b) % tr->val_windows;
            if (ex_val_sample(tr->val, T, j, tr->ws.host_tokens[set] + (size_t)b * T,
                              tr->ws.host_targets[set] + (size_t)b * T, data_err,
                              sizeof data_err) != 0)
                abort_job(tr, "reading a validation batch", data_err);
        }
        upload_tokens(tr, set, BT);
        /* An evaluation pass: its fetch order is recorded apart from the
         * training micro-steps', so stage 3 gathers ahead in both. */
        zs_status st = zs_eval_begin(tr->zs);
        if (st == ZS_OK)
            st = tr->ops->eval_losses(tr->model, tr->zs, tr->ws.tokens, tr->ws.targets, B, T,
                                      tr->ws.losses);
        if (st == ZS_OK) st = zs_eval_end(tr->zs);
        if (st != ZS_OK) return st;
        check_device(tr, tr->dev->ops->download(tr->dev, tr->ws.host_losses, tr->ws.losses,
                                                (size_t)BT * sizeof(float)),
                     "downloading losses");
        for (int i = 0; i < BT; i++) sums[0] += tr->ws.host_losses[i];
        sums[1] += BT;
    }
    zs_status st = zs_all_reduce_host(tr->zs, sums, 2, ZS_HOST_TYPE_DOUBLE, ZS_REDUCE_OP_SUM,
                                      "validation loss");
    if (st == ZS_OK) *out = sums[0] / sums[1];
    return st;
}

/* ------------------------------------------------------------ sampling */

/* app.prompt_tokens: ids separated by blanks into seq (NULL: only
 * checked); their count, or -1 (after zs_report_config_error) when one is
 * not an id of the vocabulary. */
static int64_t parse_prompt_tokens(const trainer *tr, int32_t *seq) {
    int64_t n = 0;
    for (const char *c = tr->app.prompt_tokens; *c;) {
        while (*c == ' ' || *c == '\t' || *c == '\n' || *c == ',') c++;
        if (!*c) break;
        char *end = NULL;
        const long id = strtol(c, &end, 10);
        if (end == c || id < 0 || id >= tr->facts.vocab) {
            char why[96];
            snprintf(why, sizeof why, "app.prompt_tokens: \"%.20s\" is not a token id in [0, %d)",
                     c, tr->facts.vocab);
            zs_report_config_error(tr->ops->program, why);
            return -1;
        }
        if (seq) seq[n] = (int32_t)id;
        n++;
        c = end;
    }
    return n;
}

/* Generates app.sample_tokens tokens after the prompt (app.prompt_tokens'
 * ids if given; else app.prompt's bytes when the model's tokens are bytes;
 * else the model's start token), with a window of the last seq_len tokens,
 * and prints them on rank 0. Every rank runs the same forward passes with
 * the same generator. Collective. */
static zs_status sample(trainer *tr) {
    const int T = tr->app.T, V = tr->facts.vocab;
    if (tr->app.sample_tokens <= 0) return ZS_OK;
    /* Room for every prompt token: at most one per character of either. */
    int64_t total = tr->app.sample_tokens + (int64_t)strlen(tr->app.prompt) +
                    (int64_t)strlen(tr->app.prompt_tokens) + 1;
    int32_t *seq = host_alloc(tr, (size_t)total * sizeof(int32_t), "the sample");
    int64_t n = 0;
    if (tr->app.prompt_tokens[0] != '\0') {
        n = parse_prompt_tokens(tr, seq); /* checked before training */
    } else if (tr->facts.byte_tokens) {
        for (const char *c = tr->app.prompt; *c; c++) seq[n++] = (unsigned char)*c;
    }
    if (n == 0) seq[n++] = tr->ops->start_token(tr->model);
    ex_rng rng;
    ex_rng_seed(&rng, (uint64_t)tr->app.sample_seed);
    if (tr->rank == 0) {
        printf("\nsample (%lld tokens, temperature %g, top-k %lld, seed %lld):\n",
               (long long)tr->app.sample_tokens, tr->app.temperature, (long long)tr->app.top_k,
               (long long)tr->app.sample_seed);
        for (int64_t i = 0; i < n; i++) tr->ops->print_token(tr->model, seq[i], stdout);
    }
    zs_status st = ZS_OK;
    for (int64_t i = 0; i < tr->app.sample_tokens && st == ZS_OK; i++) {
        const int64_t first = n > T ? n - T : 0;
        const int t = (int)(n - first);
        const int set = next_token_set(tr);
        memcpy(tr->ws.host_tokens[set], seq + first, sizeof(int32_t) * (size_t)t);
        memset(tr->ws.host_targets[set], 0, sizeof(int32_t) * (size_t)t);
        upload_tokens(tr, set, t);
        st = zs_eval_begin(tr->zs); /* one evaluation pass per token */
        if (st == ZS_OK)
            st = tr->ops->last_logits(tr->model, tr->zs, tr->ws.tokens, t, tr->ws.host_logits);
        if (st == ZS_OK) st = zs_eval_end(tr->zs);
        if (st != ZS_OK) break;
        int next = ex_sample_token(tr->ws.host_logits, V, tr->app.temperature,
                                   (int)tr->app.top_k, &rng, tr->ws.sample_values,
                                   tr->ws.sample_ids);
        seq[n++] = next;
        if (tr->rank == 0) tr->ops->print_token(tr->model, next, stdout);
    }
    if (tr->rank == 0) {
        printf("\n");
        fflush(stdout);
    }
    free(seq);
    return st;
}

/* ------------------------------------------------------------- reports */

/* Every rank's memory per tag in bytes, as JSON, written by rank 0: for
 * checking the ZeRO formula from outside (tests/gpt2/check_memory.py).
 * Collective. */
static zs_status write_memory_file(trainer *tr) {
    zs_memory_stats mine;
    if (zs_memory_report(tr->zs, &mine) != ZS_OK) abort_job(tr, "memory report", zs_last_error());
    /* Every rank runs the same binary, so the structs travel as bytes; every
     * rank receives them (a few hundred bytes each), rank 0 writes them. */
    zs_memory_stats *all = host_alloc(tr, sizeof *all * (size_t)tr->world, "the memory report");
    zs_status st = zs_all_gather_host(tr->zs, &mine, sizeof mine, all, "memory report");
    if (st == ZS_OK && tr->rank == 0) {
        FILE *f = fopen(tr->app.memory_file, "w");
        if (!f) abort_job(tr, "app.memory_file", "cannot open it for writing");
        fprintf(f, "{\"world\": %d, \"stage\": %d, \"dtype\": \"%s\", \"ranks\": [", tr->world,
                zs_stage(tr->zs), zs_dtype_name(tr->facts.dtype));
        for (int r = 0; r < tr->world; r++) {
            fprintf(f, "%s\n  {\"rank\": %d", r ? "," : "", r);
            const char *kinds[2] = {"current", "peak"};
            for (int k = 0; k < 2; k++) {
                fprintf(f, ", \"%s\": {", kinds[k]);
                for (int t = 0; t < ZS_MEM_TAG_COUNT; t++)
                    fprintf(f, "%s\"%s\": %" PRIu64, t ? ", " : "", zs_mem_tag_name((zs_mem_tag)t),
                            k ? all[r].peak[t] : all[r].current[t]);
                fprintf(f, "}");
            }
            fprintf(f, ", \"live_bytes_budget\": %" PRIu64 ", \"live_bytes_peak\": %" PRIu64 "}",
                    all[r].live_bytes_budget, all[r].live_bytes_peak);
        }
        fprintf(f, "\n]}\n");
        if (fclose(f) != 0) abort_job(tr, "app.memory_file", "write failed");
    }
    free(all);
    return st;
}

static void print_header(trainer *tr) {
    if (tr->rank != 0) return;
    const app_settings *a = &tr->app;
    const ex_model_facts *f = &tr->facts;
    printf("%s: %s, stage %d, %s, backend %s, %d rank%s\n", tr->ops->program, f->name,
           zs_stage(tr->zs), zs_dtype_name(f->dtype), zs_backend_name(tr->zs), tr->world,
           tr->world == 1 ? "" : "s");
    printf("model: %s: %.2fM parameters in %d units\n", f->description, (double)f->params / 1e6,
           f->units);
    printf("batch: %d ranks x %d sequences x %d tokens = %d tokens per micro-step; "
           "activations %.1f MiB per rank\n",
           tr->world, a->B, a->T, tr->world * a->B * a->T, f->activation_bytes / MIB);
    if (a->global_batch > 0)
        printf("global batch: %" PRId64 " sequences per optimizer step = %d rank%s x %d "
               "sequence%s x %d micro-step%s (app.global_batch; app.batch_size = %d caps the "
               "micro-batch)\n", a->global_batch, tr->world, tr->world == 1 ? "" : "s", a->B,
               a->B == 1 ? "" : "s", a->accumulation, a->accumulation == 1 ? "" : "s",
               a->batch_cap);
    printf("data: %s: %" PRId64 " training sequences of %d + 1 tokens, %" PRId64
           " held out\n", a->train_data, tr->train_windows, a->T, tr->val_windows);
    if (tr->have_unigram)
        printf("baseline: a model that ignores context (unigram) scores %.4f nats per token on "
               "the held-out text (entropy of the training text %.4f)\n",
               tr->unigram.val_cross_entropy, tr->unigram.train_entropy);
    fflush(stdout);
}

static void report_status(const trainer *tr, zs_status status) {
    fprintf(stderr, "%s: %s: %s\n", tr->ops->program, zs_status_name(status), zs_last_error());
}

#define TRY(call)                                                                  \
    do {                                                                           \
        zs_status try_status_ = (call);                                            \
        if (try_status_ != ZS_OK) {                                                \
            report_status(&tr, try_status_);                                       \
            if (tr.failure == ZS_OK) tr.failure = try_status_;                     \
            goto done;                                                             \
        }                                                                          \
    } while (0)

/* A loss that is not a number or infinite ends the run: every later step
 * and every reported number would be meaningless, and an evaluation-only
 * run (app.steps = 0) of broken weights must not look like a success. The
 * loss was all-reduced, so every rank sees the same value and stops at the
 * same point; rank 0 says which loss, at which step. Returns 1 when the
 * loss is not finite. */
static int loss_not_finite(const trainer *tr, const char *which, int64_t step, double loss) {
    if (isfinite(loss)) return 0;
    if (tr->rank == 0)
        fprintf(stderr,
                "%s: the %s loss %s step %" PRId64 " is %s: the model's output is not finite "
                "(check the weights it started from, app.init_from or the checkpoint it resumed, "
                "for NaN or infinite values; in training, a smaller optimizer.lr or "
                "gradient_clipping)\n",
                tr->ops->program, which, strcmp(which, "training") == 0 ? "of" : "after", step,
                isnan(loss) ? "NaN" : loss > 0 ? "+infinity" : "-infinity");
    return 1;
}

/* app.init_from and a checkpoint to resume from name two different
 * starting points. Resuming wins, as a restarted job must continue where it
 * stopped without its configuration edited (DeepSpeed and Hugging Face's
 * Trainer resume a run the same way), but the pretrained weights are then
 * not used at all, which must not pass unseen: rank 0 warns, naming both
 * and how to choose the other. app.init_from is the key both models' weights
 * come from (each model read it already, so reading it here again changes
 * nothing of what zs_config_app_finish accepts). */
static void warn_init_from_unused(const trainer *tr, zs_config *cfg, int64_t step) {
    const char *init_from = "";
    if (tr->rank != 0 || zs_config_app_string(cfg, "init_from", "", &init_from) != ZS_OK ||
        init_from[0] == '\0')
        return;
    fprintf(stderr,
            "%s: WARN app.init_from = \"%s\" is not used: this run resumed from the checkpoint "
            "of step %" PRId64 " in checkpoint.dir (checkpoint.resume; the runtime's \"loaded\" "
            "line names its directory), and a resumed run continues from its checkpoint. To "
            "start from app.init_from instead, give a checkpoint.dir that holds no checkpoint, or "
            "set checkpoint.resume = \"none\"\n",
            tr->ops->program, init_from, step);
    fflush(stderr);
}

/* A configuration the program refuses (the file, an override, a key of the
 * model or of the trainer) is the same on every rank and every host: the
 * run ends with ZS_CONFIG_EXIT_CODE and an exit report saying so, and a
 * launcher does not restart it (docs/UNATTENDED.md). What a model checks
 * itself it prints itself, with no zeroshard error behind it. */
static int config_error(const ex_model_ops *ops, zs_status status) {
    char why[160];
    const char *text = zs_last_error();
    if (text[0] == '\0') {
        snprintf(why, sizeof why, "%s (the message above says which setting)",
                 zs_status_message(status));
        text = why;
    }
    return zs_report_config_error(ops->program, text);
}

#define CONFIG_TRY(call)                                                           \
    do {                                                                           \
        zs_status config_status_ = (call);                                         \
        if (config_status_ != ZS_OK) {                                             \
            exit_code = config_error(ops, config_status_);                         \
            goto done;                                                             \
        }                                                                          \
    } while (0)

/* ---------------------------------------------------------------- main */

int ex_train_main(int argc, char **argv, const ex_model_ops *ops) {
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        fprintf(stderr, "usage: %s <config.cfg> [group.key=value ...]\n",
                argc > 0 ? argv[0] : ops->program);
        return argc < 2 ? 1 : 0;
    }
    int exit_code = 1;
    trainer tr;
    memset(&tr, 0, sizeof tr);
    tr.ops = ops;
    snprintf(tr.pos_name, sizeof tr.pos_name, "%s.data_pos", ops->family);
    zs_config *cfg = NULL;
    FILE *loss_log = NULL;
    CONFIG_TRY(zs_config_load(argv[1], &cfg));
    CONFIG_TRY(zs_config_override_list(cfg, argc - 2, (const char *const *)(argv + 2)));
    CONFIG_TRY(ops->configure(cfg, &tr.model, &tr.facts));
    CONFIG_TRY(read_settings(cfg, &tr.facts, &tr.app));
    /* Every rank reads the same text, so every rank fails alike, before
     * anything is created. */
    if (parse_prompt_tokens(&tr, NULL) < 0) {
        exit_code = ZS_CONFIG_EXIT_CODE;
        goto done;
    }
    if (start_mpi(&tr) != 0) goto done;
    if (derive_batch(&tr, cfg) != 0) {
        exit_code = ZS_CONFIG_EXIT_CODE;
        goto done;
    }
    TRY(zs_create(cfg, &tr.zs));
    tr.rank = zs_rank(tr.zs);
    tr.world = zs_world_size(tr.zs);
    TRY(ex_numerics_check(tr.zs, tr.app.require_same_kernels));
    /* Every rank opens the data (cheap: streams are mapped, not read), so a
     * missing file is reported by every rank; they agree before going on,
     * and all end as a configuration error, the ranks that failed saying
     * why. */
    char data_why[EX_ERR_CAP + 128];
    const int data_mine = open_data(&tr, data_why, sizeof data_why) != 0;
    int32_t data_failed = data_mine;
    TRY(zs_all_reduce_host(tr.zs, &data_failed, 1, ZS_HOST_TYPE_INT32, ZS_REDUCE_OP_MAX,
                           "data files opened"));
    if (data_failed) {
        exit_code = data_mine ? zs_report_config_error(ops->program, data_why) : ZS_CONFIG_EXIT_CODE;
        goto done;
    }

    TRY(ops->describe(tr.model, tr.zs, &tr.facts));
    TRY(zs_build(tr.zs));
    char err[NN_ERR_CAP + EX_ERR_CAP];
    if (ops->start(tr.model, tr.zs, tr.app.B, tr.app.T, &tr.facts, err, sizeof err) != 0)
        abort_job(&tr, "starting the model", err);
    tr.dev = ops->device(tr.model);
    workspace_create(&tr);

    /* Where training starts: a checkpoint (checkpoint.resume) brings its step
     * and the data position; otherwise pretrained weights, or zeroshard's
     * initialization. */
    int64_t first_step = zs_step_count(tr.zs);
    if (first_step > 0) {
        size_t bytes = 0;
        TRY(zs_user_state_get(tr.zs, tr.pos_name, &tr.pos, sizeof tr.pos, &bytes));
        if (bytes != sizeof tr.pos) abort_job(&tr, "resuming", "the data position has the wrong size");
        if (!tr.facts.init_from_is_base) warn_init_from_unused(&tr, cfg, first_step);
    } else if (ops->import) {
        TRY(ops->import(tr.model, tr.zs));
    }
    if (ops->save_state) TRY(ops->save_state(tr.model, tr.zs));
    print_header(&tr);
    if (first_step > 0 && tr.rank == 0)
        printf("resumed at step %" PRId64 ", data position %" PRId64 "\n", first_step, tr.pos);
    if (tr.rank == 0 && tr.app.loss_log[0] != '\0' && !(loss_log = fopen(tr.app.loss_log, "w")))
        abort_job(&tr, "app.loss_log", "cannot open it for writing");

    const double flops_per_token = ops->flops_per_token(tr.model, tr.app.T);
    double val_loss = NAN;
    const double positions = (double)tr.app.B * tr.app.T;
    int stop_code = 0; /* zs_stop_requested's value once a stop was agreed */
    while (zs_step_count(tr.zs) < tr.app.steps) {
        const double t0 = now_seconds();
        double local_sum = 0.0; /* this rank's losses of the micro-steps folded in so far */
        int micro = 0, slot = 0;
        zs_step_info info;
        do {
            if (slot == LOSS_SLOTS) {
                /* More micro-steps than slots: fold the waiting sums in. */
                check_device(&tr, tr.dev->ops->host_wait(tr.dev, tr.ws.host_loss_sums), "losses");
                for (int k = 0; k < slot; k++) local_sum += tr.ws.host_loss_sums[k];
                slot = 0;
            }
            TRY(micro_step(&tr, slot++));
            micro++;
            /* The data position a checkpoint taken by this zs_step resumes from. */
            TRY(zs_user_state_set(tr.zs, tr.pos_name, &tr.pos, sizeof tr.pos, 0));
            TRY(zs_step(tr.zs, &info));
        } while (!info.boundary);
        /* The losses were summed on the device and copied behind the
         * backward; zs_step waited for the gradient norm, enqueued after
         * them, so this wait returns at once. */
        check_device(&tr, tr.dev->ops->host_wait(tr.dev, tr.ws.host_loss_sums), "losses");
        for (int k = 0; k < slot; k++) local_sum += tr.ws.host_loss_sums[k];
        double loss = local_sum / (positions * micro);
        TRY(zs_all_reduce_host(tr.zs, &loss, 1, ZS_HOST_TYPE_DOUBLE, ZS_REDUCE_OP_SUM,
                               "training loss"));
        loss /= tr.world;
        /* For log.metrics_file: the mean loss goes in the line of the step
         * that just finished. */
        TRY(zs_log_scalar_previous(tr.zs, "loss", loss));
        const double seconds = now_seconds() - t0;
        const int64_t step = zs_step_count(tr.zs);
        const double tokens = (double)micro * tr.world * tr.app.B * tr.app.T;
        if (loss_log) fprintf(loss_log, "%" PRId64 " %a %a %a\n", step, loss, info.grad_norm, info.lr);
        if (tr.rank == 0 && (step % tr.app.log_every == 0 || step == tr.app.steps || info.skipped))
            printf("step %5" PRId64 "/%" PRId64 " | loss %.4f | lr %.3e | norm %.3f | scale %g%s | "
                   "%.0f tok/s | %.3f TFLOP/s | %.1f ms\n",
                   step, tr.app.steps, loss, info.lr, info.grad_norm, info.loss_scale,
                   info.skipped ? " (skipped)" : "", tokens / seconds,
                   flops_per_token * tokens / seconds / 1e12, seconds * 1e3);
        fflush(stdout);
        /* Numbered as the runtime numbers attempts (a step skipped on a
         * non-finite gradient included), so the message meets its warning. */
        if (loss_not_finite(&tr, "training", step + info.skipped_total, loss)) goto done;
        /* A stop signal (job.stop_signal, SIGTERM) was agreed at this
         * boundary on every rank and the runtime committed a checkpoint (or
         * had nowhere to save): end now, skipping validation and sampling,
         * since a preemption leaves little time. */
        if ((stop_code = zs_stop_requested(tr.zs)) != 0) {
            if (tr.rank == 0)
                printf("stopped after step %" PRId64 " on a signal: %s; exit code %d\n", step,
                       stop_code == ZS_STOPPED_EXIT_CODE ? "checkpoint committed"
                                                         : "no checkpoint (no checkpoint.dir)",
                       stop_code);
            fflush(stdout);
            break;
        }
        if (tr.app.val_every > 0 && step % tr.app.val_every == 0 && step < tr.app.steps) {
            TRY(evaluate(&tr, &val_loss));
            /* NaN without a validation view; with one, a NaN is an error. */
            if (tr.val_windows > 0 && loss_not_finite(&tr, "validation", step, val_loss))
                goto done;
            /* Six decimals: enough to compare with a reference implementation's
             * loss (agreement is typically 1e-5 or better). */
            if (tr.rank == 0 && !isnan(val_loss))
                printf("validation at step %" PRId64 ": loss %.6f\n", step, val_loss);
            if (!isnan(val_loss)) TRY(zs_log_scalar_previous(tr.zs, "val_loss", val_loss));
        }
    }
    if (loss_log && fclose(loss_log) != 0) abort_job(&tr, "app.loss_log", "write failed");
    loss_log = NULL;
    if (stop_code != 0) {
        exit_code = stop_code;
        goto done;
    }
    if (tr.app.save_final) TRY(zs_save(tr.zs, NULL));
    TRY(evaluate(&tr, &val_loss));
    if (tr.val_windows > 0 && loss_not_finite(&tr, "validation", zs_step_count(tr.zs), val_loss))
        goto done;
    if (tr.rank == 0 && !isnan(val_loss))
        printf("validation after %" PRId64 " steps: loss %.6f nats per token%s\n",
               zs_step_count(tr.zs), val_loss,
               tr.have_unigram ? (val_loss < tr.unigram.val_cross_entropy
                                      ? " (below the unigram baseline)"
                                      : " (NOT below the unigram baseline)")
                               : "");
    /* On a device: the tokens went up and the losses came back without the
     * runtime blocking the host; only a collective staged through host
     * memory waits inside a micro-step (docs/GPU.md). */
    if (tr.rank == 0 && strcmp(zs_backend_name(tr.zs), "cpu") != 0 && tr.micro_steps > 0)
        printf("host waits in micro-steps: %llu in %lld (rank 0), %llu of them the model "
               "device's\n",
               tr.micro_waits + tr.micro_device_waits, tr.micro_steps, tr.micro_device_waits);
    /* The last validation goes in the last step's line of log.metrics_file,
     * like those of the loop (when this process ran a step). */
    if (!isnan(val_loss) && zs_step_count(tr.zs) > first_step)
        TRY(zs_log_scalar_previous(tr.zs, "val_loss", val_loss));
    TRY(sample(&tr));
    if (tr.rank == 0) printf("\n");
    TRY(zs_report_print(tr.zs, stdout));
    if (tr.app.memory_file[0] != '\0') TRY(write_memory_file(&tr));

    exit_code = 0;
    if (tr.app.target_val_loss > 0 && !(val_loss <= tr.app.target_val_loss)) {
        if (tr.rank == 0)
            fprintf(stderr, "%s: the validation loss %.4f is above app.target_val_loss = %.4f; "
                            "train longer (app.steps) or tune optimizer.lr\n",
                    ops->program, val_loss, tr.app.target_val_loss);
        exit_code = 1;
    }
    if (tr.app.beat_unigram && !(tr.have_unigram && val_loss < tr.unigram.val_cross_entropy)) {
        if (tr.rank == 0)
            fprintf(stderr, "%s: the validation loss %.4f is not below the unigram baseline %.4f\n",
                    ops->program, val_loss, tr.unigram.val_cross_entropy);
        exit_code = 1;
    }
done:
    if (loss_log) fclose(loss_log);
    workspace_free(&tr);
    if (ops->destroy) ops->destroy(tr.model);
    ex_tokens_destroy(tr.train_stream);
    ex_tokens_destroy(tr.val_stream);
    zs_destroy(tr.zs);
    zs_config_destroy(cfg);
    finish_mpi(&tr);
    return exit_code;
}
