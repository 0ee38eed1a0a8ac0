/*
 * gpt2_train — trains GPT-2 through zeroshard: the project's main example.
 *
 *   mpirun -np 2 build/examples/gpt2/gpt2_train configs/gpt2_demo.cfg [group.key=value ...]
 *
 * One zeroshard unit holds the embeddings and the final LayerNorm, one unit
 * each transformer block. The loop is the one of DESIGN.md section 4, the
 * same for every ZeRO stage and both backends:
 *
 *   fetch embed; x = wte[tokens] + wpe; release                (forward)
 *   per block: fetch; x = block(x); release
 *   fetch embed; loss, and the head's backward (dwte, dln_f); release,
 *       its gradient still open (wte is tied to the output projection)
 *   per block, reversed: fetch; backward; grads_ready; release
 *   the embedding's backward into the same open gradient; grads_ready embed
 *   zs_step
 *
 * The math is gpt2_backend.h's (OpenBLAS in fp32 on "cpu"; cuBLASLt and
 * kernels on "cuda", in zeroshard's compute dtype, on zeroshard's own
 * parameter and gradient buffers); this file only orders it, moves tokens,
 * and reports. A training step never makes the host wait for the GPU except
 * inside zs_step (the gradient norm): tokens go up from page-locked memory
 * without waiting, and the loss comes back the same way, read after zs_step. Data: a text file read as
 * bytes (vocab 256) or llm.c token shards; every rank reads its own disjoint
 * samples, the same for any world size at the same global batch, and the
 * position is saved with checkpoints. Weights can start from an llm.c model
 * file (app.init_from), each rank reading only the ranges it owns.
 *
 * App keys (the `app` group; defaults in brackets):
 *   model [""]            "124M", "350M", "774M", "1558M", or "" for the sizes below
 *   n_layer [4] n_head [4] n_embd [128] vocab [256] block_size [256]
 *   seq_len [block_size]  tokens per sequence (T <= block_size)
 *   batch_size [8]        sequences per rank per micro-step (B)
 *   steps [200]           optimizer steps
 *   train_data ["data/shakespeare/shakespeare.txt"]  text (bytes) or llm.c .bin shards (a glob)
 *   val_data [""]         held-out stream; "" holds out the last val_fraction of train_data
 *   val_fraction [0.05]   data_seed [1337]
 *   val_every [50]        validation every this many steps (and at the end); 0 = only at the end
 *   val_batches [4]       batches of batch_size sequences per rank per validation
 *   log_every [1]         a progress line every this many steps
 *   init_from [""]        an llm.c model file (gpt2_124M.bin, fp32 version 3) to start from
 *   recompute [false]     keep only block inputs; recompute activations in backward
 *   head_chunk_rows [0]   rows of logits the head holds at once; 0: 128 on the CPU, 1024 on
 *                         CUDA (gpt2_model.h)
 *   gelu_fusion [-1]      CUDA: GELU in the c_fc GEMM's epilogue: 0 none, 1 forward, 2 forward
 *                         and backward, -1 the device's default (gpt2_backend.h)
 *   require_same_kernels [false]  refuse to train when ranks compute with other BLAS kernels
 *                         or GPU models (examples/common/numerics.h)
 *   sample_tokens [256] temperature [0.8] top_k [40] sample_seed [42] prompt ["\n"]
 *   tokenizer [""]        llm.c tokenizer file to decode samples when vocab > 256
 *   target_val_loss [0]   exit 1 unless the final validation loss is at most this (0: off)
 *   beat_unigram [false]  exit 1 unless the final validation loss is below the unigram baseline
 *   save_final [false]    save a checkpoint (into checkpoint.dir) after the last step
 *   loss_log [""]         rank 0 writes "step loss grad_norm lr" per step, as hex floats
 *   memory_file [""]      rank 0 writes every rank's memory per tag in bytes as JSON at the end
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "gpt2_backend.h"
#include "gpt2_data.h"
#include "gpt2_llmc.h"
#include "gpt2_sample.h"
#include "gpt2_train_cuda.h"
#include "gpt2_units.h"
#include "numerics.h"
#include "test_stop.h"
#include "zeroshard.h"

#define MIB (1024.0 * 1024.0)

typedef struct app_settings {
    const char *model;
    gpt2_dims dims;
    int T, B;
    int64_t steps;
    const char *train_data, *val_data;
    double val_fraction;
    int64_t data_seed, val_every, val_batches, log_every, head_chunk_rows, gelu_fusion;
    const char *init_from;
    int recompute;
    int64_t sample_tokens, top_k, sample_seed;
    double temperature;
    const char *prompt, *tokenizer;
    double target_val_loss;
    int beat_unigram, save_final;
    int require_same_kernels; /* a rank with another BLAS kernel or GPU model is an error */
    const char *loss_log, *memory_file;
} app_settings;

/* Micro-steps whose losses wait in page-locked memory before the host reads
 * them after zs_step; more micro-steps per optimizer step fold the older
 * ones in early (one wait per this many). */
#define LOSS_SLOTS 64

/* Everything the model's math reads and writes, in backend memory (tensors
 * in the backend's dtype), plus the host staging of tokens and losses. */
typedef struct workspace {
    int *tokens, *targets;   /* [B*T] */
    unsigned char *res;      /* [L + 1][B*T][C]: the residual stream, block l reads res[l] */
    unsigned char *acts;     /* [L or 1][acts_bytes]: 1 with recompute */
    size_t acts_bytes;
    void *dres[2];           /* [B*T][C] each: gradients of the residual stream, ping-pong */
    void *block_scratch, *head_scratch;
    float *losses;           /* [B*T] */
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
    app_settings app;
    zs_ctx *zs;
    gpt2_units units;
    gpt2_backend *be;
    workspace ws;
    gpt2_tokens *train_stream, *val_stream;
    gpt2_view train, val;
    int64_t train_windows, val_windows;
    gpt2_unigram unigram;
    int have_unigram;
    int rank, world;
    int64_t pos; /* training samples consumed by all ranks (the data position) */
} trainer;

static void report_status(zs_status status) {
    fprintf(stderr, "gpt2_train: %s: %s\n", zs_status_name(status), zs_last_error());
}

#define TRY(call)                                                                  \
    do {                                                                           \
        zs_status try_status_ = (call);                                            \
        if (try_status_ != ZS_OK) {                                                \
            report_status(try_status_);                                            \
            goto done;                                                             \
        }                                                                          \
    } while (0)

/* A failure only this rank sees (the model's math, a local read) would leave
 * the other ranks waiting in their next collective: it ends the job. */
static void abort_job(const char *what, const char *why) {
    fprintf(stderr, "gpt2_train: %s: %s\n", what, why);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void check_model(trainer *tr, int rc, const char *what) {
    if (rc != 0) abort_job(what, tr->be->ops->last_error(tr->be));
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------ settings */

static zs_status read_int(zs_config *cfg, const char *key, int64_t def, int64_t lo, int64_t hi,
                          int *out) {
    int64_t v = 0;
    zs_status st = zs_config_app_int(cfg, key, def, lo, hi, &v);
    if (st == ZS_OK) *out = (int)v;
    return st;
}

/* Reads the app group. With a preset (app.model) or an llm.c file
 * (app.init_from) the sizes are not read, so zs_config_app_finish rejects
 * n_layer and friends given beside them instead of silently ignoring them. */
static zs_status read_settings(zs_config *cfg, app_settings *a, gpt2_llmc_model **llmc) {
    zs_status st;
    char err[GPT2_ERR_CAP];
    if ((st = zs_config_app_string(cfg, "model", "", &a->model)) ||
        (st = zs_config_app_string(cfg, "init_from", "", &a->init_from)))
        return st;
    gpt2_dims preset;
    const int have_preset = a->model[0] != '\0';
    if (have_preset && gpt2_dims_preset(a->model, &preset) != 0) {
        fprintf(stderr, "gpt2_train: app.model = \"%s\" is not a preset; use \"124M\", \"350M\", "
                        "\"774M\", \"1558M\", or \"\" with app.n_layer etc.\n", a->model);
        return ZS_ERR_CONFIG;
    }
    if (a->init_from[0] != '\0') {
        if (gpt2_llmc_model_open(a->init_from, llmc, err, sizeof err) != 0) {
            fprintf(stderr, "gpt2_train: app.init_from: %s\n", err);
            return ZS_ERR_IO;
        }
        const gpt2_llmc_config *c = gpt2_llmc_model_config(*llmc);
        a->dims = (gpt2_dims){c->num_layers, c->num_heads, c->channels, c->vocab_size,
                              c->max_seq_len};
        if (have_preset && memcmp(&preset, &a->dims, sizeof preset) != 0) {
            fprintf(stderr, "gpt2_train: app.model = \"%s\" does not match %s (%d layers, %d heads, "
                            "%d channels, vocab %d, block_size %d)\n", a->model, a->init_from,
                    a->dims.n_layer, a->dims.n_head, a->dims.n_embd, a->dims.vocab,
                    a->dims.block_size);
            return ZS_ERR_CONFIG;
        }
    } else if (have_preset) {
        a->dims = preset;
    } else if ((st = read_int(cfg, "n_layer", 4, 1, 1024, &a->dims.n_layer)) ||
               (st = read_int(cfg, "n_head", 4, 1, 1024, &a->dims.n_head)) ||
               (st = read_int(cfg, "n_embd", 128, 1, 1 << 16, &a->dims.n_embd)) ||
               (st = read_int(cfg, "vocab", 256, 2, 1 << 24, &a->dims.vocab)) ||
               (st = read_int(cfg, "block_size", 256, 1, 1 << 20, &a->dims.block_size))) {
        return st;
    }
    if (gpt2_dims_check(&a->dims, err, sizeof err) != 0) {
        fprintf(stderr, "gpt2_train: the model's sizes: %s\n", err);
        return ZS_ERR_CONFIG;
    }
    if ((st = read_int(cfg, "seq_len", a->dims.block_size, 1, a->dims.block_size, &a->T)) ||
        (st = read_int(cfg, "batch_size", 8, 1, 1 << 16, &a->B)) ||
        (st = zs_config_app_int(cfg, "steps", 200, 0, INT64_C(1) << 40, &a->steps)) ||
        (st = zs_config_app_string(cfg, "train_data", "data/shakespeare/shakespeare.txt",
                                   &a->train_data)) ||
        (st = zs_config_app_string(cfg, "val_data", "", &a->val_data)) ||
        (st = zs_config_app_float(cfg, "val_fraction", 0.05, 0.0, 0.5, &a->val_fraction)) ||
        (st = zs_config_app_int(cfg, "data_seed", 1337, 0, INT64_MAX, &a->data_seed)) ||
        (st = zs_config_app_int(cfg, "val_every", 50, 0, INT64_C(1) << 40, &a->val_every)) ||
        (st = zs_config_app_int(cfg, "val_batches", 4, 1, 1 << 20, &a->val_batches)) ||
        (st = zs_config_app_int(cfg, "log_every", 1, 1, INT64_C(1) << 40, &a->log_every)) ||
        (st = zs_config_app_int(cfg, "head_chunk_rows", 0, 0, 1 << 16, &a->head_chunk_rows)) ||
        (st = zs_config_app_int(cfg, "gelu_fusion", -1, -1, 2, &a->gelu_fusion)) ||
        (st = zs_config_app_bool(cfg, "recompute", 0, &a->recompute)) ||
        (st = zs_config_app_int(cfg, "sample_tokens", 256, 0, 1 << 20, &a->sample_tokens)) ||
        (st = zs_config_app_float(cfg, "temperature", 0.8, 0.0, 100.0, &a->temperature)) ||
        (st = zs_config_app_int(cfg, "top_k", 40, 0, 1 << 24, &a->top_k)) ||
        (st = zs_config_app_int(cfg, "sample_seed", 42, 0, INT64_MAX, &a->sample_seed)) ||
        (st = zs_config_app_string(cfg, "prompt", "\n", &a->prompt)) ||
        (st = zs_config_app_string(cfg, "tokenizer", "", &a->tokenizer)) ||
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

/* ---------------------------------------------------------------- data */

static int open_data(trainer *tr) {
    const app_settings *a = &tr->app;
    char err[GPT2_ERR_CAP];
    if (gpt2_tokens_open(a->train_data, &tr->train_stream, err, sizeof err) != 0) {
        fprintf(stderr, "gpt2_train: app.train_data: %s%s\n", err,
                strstr(a->train_data, "shakespeare") ? " (make demo fetches it with "
                                                       "scripts/fetch-shakespeare.sh)" : "");
        return -1;
    }
    if (a->val_data[0] != '\0') {
        if (gpt2_tokens_open(a->val_data, &tr->val_stream, err, sizeof err) != 0) {
            fprintf(stderr, "gpt2_train: app.val_data: %s\n", err);
            return -1;
        }
        tr->train = gpt2_view_all(tr->train_stream);
        tr->val = gpt2_view_all(tr->val_stream);
    } else if (gpt2_split(gpt2_view_all(tr->train_stream), a->T, a->val_fraction, &tr->train,
                          &tr->val, err, sizeof err) != 0) {
        fprintf(stderr, "gpt2_train: splitting app.train_data: %s\n", err);
        return -1;
    }
    tr->train_windows = gpt2_view_num_windows(tr->train, a->T);
    tr->val_windows = a->val_fraction > 0 || tr->val_stream ? gpt2_view_num_windows(tr->val, a->T) : 0;
    if (tr->train_windows < 1) {
        fprintf(stderr, "gpt2_train: app.train_data holds no sequence of %d + 1 tokens\n", a->T);
        return -1;
    }
    int largest = gpt2_tokens_max_token(tr->train_stream);
    if (tr->val_stream && gpt2_tokens_max_token(tr->val_stream) > largest)
        largest = gpt2_tokens_max_token(tr->val_stream);
    if (largest >= a->dims.vocab) {
        fprintf(stderr, "gpt2_train: the data holds token %d but the model's vocabulary has %d "
                        "entries; raise app.vocab or use matching data\n", largest, a->dims.vocab);
        return -1;
    }
    /* What a model that ignores context scores: the baseline to beat. */
    if (tr->val_windows > 0 &&
        gpt2_unigram_baseline(tr->train, tr->val, a->dims.vocab, &tr->unigram, err, sizeof err) == 0)
        tr->have_unigram = 1;
    return 0;
}

/* ----------------------------------------------------------- workspace */

static void *backend_alloc(trainer *tr, size_t bytes, const char *what) {
    void *p = NULL;
    if (tr->be->ops->alloc(tr->be, bytes, &p) != 0) {
        char why[512];
        snprintf(why, sizeof why, "%.1f MiB: %s", (double)bytes / MIB, tr->be->ops->last_error(tr->be));
        abort_job(what, why);
    }
    return p;
}

static void *host_alloc(size_t bytes, const char *what) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) abort_job(what, "out of host memory");
    return p;
}

static void *pinned_alloc(trainer *tr, size_t bytes, const char *what) {
    void *p = NULL;
    if (tr->be->ops->host_alloc(tr->be, bytes, &p) != 0) abort_job(what, tr->be->ops->last_error(tr->be));
    return p;
}

static double workspace_create(trainer *tr) {
    const gpt2_dims *d = &tr->app.dims;
    gpt2_backend *be = tr->be;
    const int B = tr->app.B, T = tr->app.T, L = d->n_layer;
    const size_t BT = (size_t)B * (size_t)T, C = (size_t)d->n_embd;
    const size_t elem = gpt2_dtype_size(be->dtype);
    workspace *ws = &tr->ws;
    ws->acts_bytes = (size_t)gpt2_block_acts_bytes(d, B, T, be->dtype);
    const size_t act_sets = tr->app.recompute ? 1 : (size_t)L;
    size_t bytes[] = {
        BT * sizeof(int), BT * sizeof(int), (size_t)(L + 1) * BT * C * elem,
        act_sets * ws->acts_bytes, BT * C * elem, BT * C * elem,
        be->ops->block_scratch_bytes(be, d, B, T),
        be->ops->head_scratch_bytes(be, d, (int)tr->app.head_chunk_rows), BT * sizeof(float)};
    void **ptrs[] = {(void **)&ws->tokens, (void **)&ws->targets, (void **)&ws->res,
                     (void **)&ws->acts, &ws->dres[0], &ws->dres[1], &ws->block_scratch,
                     &ws->head_scratch, (void **)&ws->losses};
    double total = 0.0;
    for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; i++) {
        *ptrs[i] = backend_alloc(tr, bytes[i], "the activations");
        total += (double)bytes[i];
    }
    for (int k = 0; k < 2; k++) {
        ws->host_tokens[k] = pinned_alloc(tr, BT * sizeof(int32_t), "token staging");
        ws->host_targets[k] = pinned_alloc(tr, BT * sizeof(int32_t), "token staging");
    }
    ws->host_loss_sums = pinned_alloc(tr, LOSS_SLOTS * sizeof(double), "loss staging");
    ws->host_losses = host_alloc(BT * sizeof(float), "loss staging");
    ws->host_logits = host_alloc((size_t)d->vocab * sizeof(float), "sampling");
    ws->sample_values = host_alloc((size_t)d->vocab * sizeof(float), "sampling");
    ws->sample_ids = host_alloc((size_t)d->vocab * sizeof(int), "sampling");
    return total;
}

static void workspace_free(trainer *tr) {
    workspace *ws = &tr->ws;
    if (tr->be) {
        void *ptrs[] = {ws->tokens, ws->targets, ws->res, ws->acts, ws->dres[0], ws->dres[1],
                        ws->block_scratch, ws->head_scratch, ws->losses};
        for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) tr->be->ops->free(tr->be, ptrs[i]);
        for (int k = 0; k < 2; k++) {
            tr->be->ops->host_free(tr->be, ws->host_tokens[k]);
            tr->be->ops->host_free(tr->be, ws->host_targets[k]);
        }
        tr->be->ops->host_free(tr->be, ws->host_loss_sums);
    }
    free(ws->host_losses);
    free(ws->host_logits);
    free(ws->sample_values);
    free(ws->sample_ids);
}

static void *residual(trainer *tr, int l, int B, int T) {
    return tr->ws.res + (size_t)l * (size_t)B * (size_t)T * (size_t)tr->app.dims.n_embd *
                            gpt2_dtype_size(tr->be->dtype);
}

/* Block l's saved activations for (B, T): its own set, or the one shared
 * set when activations are recomputed. */
static gpt2_block_acts block_acts(trainer *tr, int l, int B, int T) {
    gpt2_block_acts a;
    const size_t set = tr->app.recompute ? 0 : (size_t)l;
    gpt2_block_acts_carve(&tr->app.dims, B, T, tr->be->dtype, tr->ws.acts + set * tr->ws.acts_bytes,
                          &a);
    return a;
}

/* The token set the next batch is written into, once the upload that last
 * read it has completed (two micro-steps ago: long done). */
static int next_token_set(trainer *tr) {
    workspace *ws = &tr->ws;
    const int k = ws->next_tokens;
    ws->next_tokens ^= 1;
    check_model(tr, tr->be->ops->host_wait(tr->be, ws->host_tokens[k]), "token staging");
    check_model(tr, tr->be->ops->host_wait(tr->be, ws->host_targets[k]), "token staging");
    return k;
}

/* Uploads n tokens and targets from set k without waiting. */
static void upload_tokens(trainer *tr, int k, int n) {
    workspace *ws = &tr->ws;
    check_model(tr, tr->be->ops->upload_async(tr->be, ws->tokens, ws->host_tokens[k],
                                              (size_t)n * sizeof(int)),
                "uploading tokens");
    check_model(tr, tr->be->ops->upload_async(tr->be, ws->targets, ws->host_targets[k],
                                              (size_t)n * sizeof(int)),
                "uploading targets");
}

/* ------------------------------------------------------ forward/backward */

static void units_or_abort(int rc, const char *what, const char *err) {
    if (rc != 0) abort_job(what, err);
}

/* Forward of the embedding and every block on the uploaded tokens, (B, T):
 * res[L] holds the last block's output. Collective (stage 3 gathers). */
static zs_status forward_blocks(trainer *tr, int B, int T) {
    const gpt2_dims *d = &tr->app.dims;
    char err[1024];
    gpt2_embed_w ew;
    zs_status st = zs_fetch(tr->zs, tr->units.unit[0]);
    if (st != ZS_OK) return st;
    units_or_abort(gpt2_units_embed_params(&tr->units, &ew, err, sizeof err), "embedding", err);
    check_model(tr, tr->be->ops->embed_forward(tr->be, d, B, T, &ew, tr->ws.tokens,
                                               residual(tr, 0, B, T)),
                "embedding forward");
    if ((st = zs_release(tr->zs, tr->units.unit[0])) != ZS_OK) return st;
    for (int l = 0; l < d->n_layer; l++) {
        if ((st = zs_fetch(tr->zs, tr->units.unit[1 + l])) != ZS_OK) return st;
        gpt2_block_w w;
        units_or_abort(gpt2_units_block_params(&tr->units, l, &w, err, sizeof err), "block", err);
        gpt2_block_acts a = block_acts(tr, l, B, T);
        check_model(tr, tr->be->ops->block_forward(tr->be, d, B, T, &w, residual(tr, l, B, T), &a,
                                                   residual(tr, l + 1, B, T),
                                                   tr->ws.block_scratch),
                    "block forward");
        if ((st = zs_release(tr->zs, tr->units.unit[1 + l])) != ZS_OK) return st;
    }
    return ZS_OK;
}

/* One micro-step: forward, the fused head (loss and its backward), the
 * blocks' backward, the embedding's backward. Enqueues the sum of this
 * rank's B*T losses into host_loss_sums[slot], to be read after a wait.
 * Collective. */
static zs_status micro_step(trainer *tr, int slot) {
    const gpt2_dims *d = &tr->app.dims;
    const int B = tr->app.B, T = tr->app.T, BT = B * T;
    char err[1024];
    char data_err[GPT2_ERR_CAP];
    const int set = next_token_set(tr);
    if (gpt2_train_batch(tr->train, T, (uint64_t)tr->app.data_seed, tr->pos, tr->rank, B,
                         tr->ws.host_tokens[set], tr->ws.host_targets[set], data_err,
                         sizeof data_err) != 0)
        abort_job("reading a training batch", data_err);
    tr->pos += (int64_t)tr->world * B;
    upload_tokens(tr, set, BT);
    zs_status st = forward_blocks(tr, B, T);
    if (st != ZS_OK) return st;

    /* The head: fetched a second time; the gradient of wte opens here and
     * stays open until the embedding's backward adds its part. */
    if ((st = zs_fetch(tr->zs, tr->units.unit[0])) != ZS_OK) return st;
    gpt2_embed_w ew, eg;
    units_or_abort(gpt2_units_embed_params(&tr->units, &ew, err, sizeof err), "head", err);
    units_or_abort(gpt2_units_embed_grads(&tr->units, &eg, err, sizeof err), "head", err);
    /* The gradient of the scaled mean loss over this rank's positions;
     * zeroshard averages over ranks and micro-steps and unscales. */
    const float dloss = zs_loss_scale(tr->zs) / (float)BT;
    void *dy = tr->ws.dres[0], *dx = tr->ws.dres[1];
    check_model(tr, tr->be->ops->head_forward_backward(
                        tr->be, d, B, T, &ew, &eg, residual(tr, d->n_layer, B, T), tr->ws.targets,
                        dloss, dy, tr->ws.losses, (int)tr->app.head_chunk_rows,
                        tr->ws.head_scratch),
                "head");
    units_or_abort(gpt2_units_embed_commit(&tr->units, err, sizeof err), "head", err);
    if ((st = zs_release(tr->zs, tr->units.unit[0])) != ZS_OK) return st;

    for (int l = d->n_layer - 1; l >= 0; l--) {
        zs_unit *unit = tr->units.unit[1 + l];
        if ((st = zs_fetch(tr->zs, unit)) != ZS_OK) return st;
        gpt2_block_w w, g;
        units_or_abort(gpt2_units_block_params(&tr->units, l, &w, err, sizeof err), "block", err);
        gpt2_block_acts a = block_acts(tr, l, B, T);
        if (tr->app.recompute)
            /* The block's output is already in res[l + 1]; recomputing writes
             * the same bits there and rebuilds the activations. */
            check_model(tr, tr->be->ops->block_forward(tr->be, d, B, T, &w, residual(tr, l, B, T),
                                                       &a, residual(tr, l + 1, B, T),
                                                       tr->ws.block_scratch),
                        "recomputing a block");
        units_or_abort(gpt2_units_block_grads(&tr->units, l, &g, err, sizeof err), "block", err);
        check_model(tr, tr->be->ops->block_backward(tr->be, d, B, T, &w, &g, residual(tr, l, B, T),
                                                    &a, dy, dx, tr->ws.block_scratch),
                    "block backward");
        units_or_abort(gpt2_units_block_commit(&tr->units, l, err, sizeof err), "block", err);
        if ((st = zs_grads_ready(tr->zs, unit)) != ZS_OK) return st;
        if ((st = zs_release(tr->zs, unit)) != ZS_OK) return st;
        void *t = dy;
        dy = dx;
        dx = t;
    }
    /* The embedding's backward needs no parameters: it adds into the open
     * gradient of the released unit, which is then reduced once. */
    units_or_abort(gpt2_units_embed_grads_again(&tr->units, &eg, err, sizeof err), "embedding", err);
    check_model(tr, tr->be->ops->embed_backward(tr->be, d, B, T, &eg, tr->ws.tokens, dy),
                "embedding backward");
    units_or_abort(gpt2_units_embed_commit_again(&tr->units, err, sizeof err), "embedding", err);
    if ((st = zs_grads_ready(tr->zs, tr->units.unit[0])) != ZS_OK) return st;

    check_model(tr, tr->be->ops->losses_sum(tr->be, tr->ws.losses, BT,
                                            &tr->ws.host_loss_sums[slot]),
                "summing the losses");
    return ZS_OK;
}

/* The mean validation loss over every rank's val_batches batches, or NAN
 * without a validation view. Every rank runs the same number of forward
 * passes (stage 3 gathers are collective). */
static zs_status evaluate(trainer *tr, double *out) {
    *out = NAN;
    if (tr->val_windows < 1) return ZS_OK;
    const gpt2_dims *d = &tr->app.dims;
    const int B = tr->app.B, T = tr->app.T, BT = B * T;
    char data_err[GPT2_ERR_CAP], err[1024];
    double sums[2] = {0.0, 0.0}; /* loss summed over positions, positions */
    ex_test_stop("gpt2_train", "validation", tr->rank);
    for (int64_t k = 0; k < tr->app.val_batches; k++) {
        const int set = next_token_set(tr);
        for (int b = 0; b < B; b++) {
            int64_t j = ((k * tr->world + tr->rank) * B + b) % tr->val_windows;
            if (gpt2_val_sample(tr->val, T, j, tr->ws.host_tokens[set] + (size_t)b * T,
                                tr->ws.host_targets[set] + (size_t)b * T, data_err,
                                sizeof data_err) != 0)
                abort_job("reading a validation batch", data_err);
        }
        upload_tokens(tr, set, BT);
        /* An evaluation pass: its fetch order is recorded apart from the
         * training micro-steps', so stage 3 gathers ahead in both. */
        zs_status st = zs_eval_begin(tr->zs);
        if (st == ZS_OK) st = forward_blocks(tr, B, T);
        if (st == ZS_OK) st = zs_fetch(tr->zs, tr->units.unit[0]);
        if (st != ZS_OK) return st;
        gpt2_embed_w ew;
        units_or_abort(gpt2_units_embed_params(&tr->units, &ew, err, sizeof err), "head", err);
        check_model(tr, tr->be->ops->head_forward(tr->be, d, B, T, &ew,
                                                  residual(tr, d->n_layer, B, T), tr->ws.targets,
                                                  tr->ws.losses, (int)tr->app.head_chunk_rows,
                                                  tr->ws.head_scratch),
                    "validation head");
        if ((st = zs_release(tr->zs, tr->units.unit[0])) != ZS_OK) return st;
        if ((st = zs_eval_end(tr->zs)) != ZS_OK) return st;
        check_model(tr, tr->be->ops->download(tr->be, tr->ws.host_losses, tr->ws.losses,
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

static void print_token(trainer *tr, const gpt2_llmc_tokenizer *tok, int token) {
    if (tr->rank != 0) return;
    if (tr->app.dims.vocab <= 256) {
        fputc(token, stdout);
    } else if (tok) {
        size_t len = 0;
        const char *bytes = gpt2_llmc_tokenizer_decode(tok, token, &len);
        if (bytes) fwrite(bytes, 1, len, stdout);
    } else {
        printf("[%d]", token);
    }
}

/* Generates app.sample_tokens tokens after the prompt (bytes of app.prompt
 * when the vocabulary is bytes; token 0 otherwise), with a window of the last
 * seq_len tokens, and prints them on rank 0. Every rank runs the same
 * forward passes with the same generator. Collective. */
static zs_status sample(trainer *tr) {
    const gpt2_dims *d = &tr->app.dims;
    const int T = tr->app.T;
    if (tr->app.sample_tokens <= 0) return ZS_OK;
    gpt2_llmc_tokenizer *tok = NULL;
    char err[GPT2_ERR_CAP];
    if (d->vocab > 256 && tr->app.tokenizer[0] != '\0' &&
        gpt2_llmc_tokenizer_open(tr->app.tokenizer, &tok, err, sizeof err) != 0 && tr->rank == 0)
        fprintf(stderr, "gpt2_train: app.tokenizer: %s (printing token ids)\n", err);
    int64_t total = tr->app.sample_tokens + (int64_t)strlen(tr->app.prompt) + 1;
    int32_t *seq = host_alloc((size_t)total * sizeof(int32_t), "the sample");
    int64_t n = 0;
    if (d->vocab <= 256)
        for (const char *c = tr->app.prompt; *c; c++) seq[n++] = (unsigned char)*c;
    if (n == 0) seq[n++] = tok && gpt2_llmc_tokenizer_eot(tok) >= 0 ? gpt2_llmc_tokenizer_eot(tok) : 0;
    gpt2_rng rng;
    gpt2_rng_seed(&rng, (uint64_t)tr->app.sample_seed);
    if (tr->rank == 0) {
        printf("\nsample (%lld tokens, temperature %g, top-k %lld, seed %lld):\n",
               (long long)tr->app.sample_tokens, tr->app.temperature, (long long)tr->app.top_k,
               (long long)tr->app.sample_seed);
        for (int64_t i = 0; i < n; i++) print_token(tr, tok, seq[i]);
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
        if (st == ZS_OK) st = forward_blocks(tr, 1, t);
        if (st == ZS_OK) st = zs_fetch(tr->zs, tr->units.unit[0]);
        if (st != ZS_OK) break;
        gpt2_embed_w ew;
        char uerr[1024];
        units_or_abort(gpt2_units_embed_params(&tr->units, &ew, uerr, sizeof uerr), "sampling", uerr);
        check_model(tr, tr->be->ops->head_logits(tr->be, d, 1, t, &ew, residual(tr, d->n_layer, 1, t),
                                                 t - 1, tr->ws.host_logits, tr->ws.head_scratch),
                    "sampling logits");
        st = zs_release(tr->zs, tr->units.unit[0]);
        if (st == ZS_OK) st = zs_eval_end(tr->zs);
        int next = gpt2_sample_token(tr->ws.host_logits, d->vocab, tr->app.temperature,
                                     (int)tr->app.top_k, &rng, tr->ws.sample_values,
                                     tr->ws.sample_ids);
        seq[n++] = next;
        print_token(tr, tok, next);
    }
    if (tr->rank == 0) {
        printf("\n");
        fflush(stdout);
    }
    free(seq);
    gpt2_llmc_tokenizer_destroy(tok);
    return st;
}

/* -------------------------------------------------------------- import */

static int llmc_source(void *user, const zs_param *p, int64_t first, int64_t count, float *dst,
                       char *err, size_t err_cap) {
    return gpt2_llmc_param_read(user, zs_param_name(p), zs_param_numel(p), first, count, dst, err,
                                err_cap);
}

/* ------------------------------------------------------------- reports */

/* Every rank's memory per tag in bytes, as JSON, written by rank 0: for
 * checking the ZeRO formula from outside (tests/gpt2/check_memory.py).
 * Collective. */
static zs_status write_memory_file(trainer *tr) {
    zs_memory_stats mine;
    if (zs_memory_report(tr->zs, &mine) != ZS_OK) abort_job("memory report", zs_last_error());
    /* Every rank runs the same binary, so the structs travel as bytes; every
     * rank receives them (a few hundred bytes each), rank 0 writes them. */
    zs_memory_stats *all = host_alloc(sizeof *all * (size_t)tr->world, "the memory report");
    zs_status st = zs_all_gather_host(tr->zs, &mine, sizeof mine, all, "memory report");
    if (st == ZS_OK && tr->rank == 0) {
        FILE *f = fopen(tr->app.memory_file, "w");
        if (!f) abort_job("app.memory_file", "cannot open it for writing");
        fprintf(f, "{\"world\": %d, \"stage\": %d, \"dtype\": \"%s\", \"ranks\": [", tr->world,
                zs_stage(tr->zs), zs_dtype_name(zs_param_dtype(tr->units.param[0])));
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
        if (fclose(f) != 0) abort_job("app.memory_file", "write failed");
    }
    free(all);
    return st;
}

static void print_header(trainer *tr, double activation_bytes) {
    if (tr->rank != 0) return;
    const app_settings *a = &tr->app;
    const gpt2_dims *d = &a->dims;
    printf("gpt2_train: %s, stage %d, %s, backend %s, %d rank%s\n",
           a->model[0] ? a->model : "custom", zs_stage(tr->zs),
           zs_dtype_name(zs_param_dtype(tr->units.param[0])), zs_backend_name(tr->zs), tr->world,
           tr->world == 1 ? "" : "s");
    printf("model: %d layers, %d heads, %d channels, vocab %d, block %d: %.2fM parameters in %d "
           "units%s\n",
           d->n_layer, d->n_head, d->n_embd, d->vocab, d->block_size,
           (double)gpt2_num_params(d) / 1e6, tr->units.unit_count,
           a->recompute ? "; activations recomputed in backward" : "");
    printf("batch: %d ranks x %d sequences x %d tokens = %d tokens per micro-step; "
           "activations %.1f MiB per rank\n",
           tr->world, a->B, a->T, tr->world * a->B * a->T, activation_bytes / MIB);
    printf("data: %s: %" PRId64 " training sequences of %d + 1 tokens, %" PRId64
           " held out\n", a->train_data, tr->train_windows, a->T, tr->val_windows);
    if (tr->have_unigram)
        printf("baseline: a model that ignores context (unigram) scores %.4f nats per token on "
               "the held-out text (entropy of the training text %.4f)\n",
               tr->unigram.val_cross_entropy, tr->unigram.train_entropy);
    fflush(stdout);
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        fprintf(stderr, "usage: %s <config.cfg> [group.key=value ...]\n",
                argc > 0 ? argv[0] : "gpt2_train");
        return argc < 2 ? 1 : 0;
    }
    int exit_code = 1;
    trainer tr;
    memset(&tr, 0, sizeof tr);
    zs_config *cfg = NULL;
    gpt2_llmc_model *llmc = NULL;
    FILE *loss_log = NULL;
    TRY(zs_config_load(argv[1], &cfg));
    TRY(zs_config_override_list(cfg, argc - 2, (const char *const *)(argv + 2)));
    TRY(read_settings(cfg, &tr.app, &llmc));
    TRY(zs_create(cfg, &tr.zs));
    tr.rank = zs_rank(tr.zs);
    tr.world = zs_world_size(tr.zs);
    TRY(ex_numerics_check(tr.zs, tr.app.require_same_kernels));
    /* Every rank opens the data (cheap: streams are mapped, not read), so a
     * missing file is reported by every rank; they agree before going on. */
    int32_t data_failed = open_data(&tr) != 0;
    TRY(zs_all_reduce_host(tr.zs, &data_failed, 1, ZS_HOST_TYPE_INT32, ZS_REDUCE_OP_MAX,
                           "data files opened"));
    if (data_failed) goto done;

    TRY(gpt2_units_describe(&tr.units, tr.zs, &tr.app.dims));
    TRY(zs_build(tr.zs));
    char err[GPT2_ERR_CAP];
    if (strcmp(zs_backend_name(tr.zs), "cuda") == 0) {
        /* The model computes in zeroshard's compute dtype on its own buffers. */
        const zs_dtype dt = zs_param_dtype(tr.units.param[0]);
        const gpt2_cuda_options options = {
            .dtype = dt == ZS_DTYPE_BF16 ? GPT2_BF16 : dt == ZS_DTYPE_FP16 ? GPT2_F16 : GPT2_F32,
            .gelu_fusion = (int)tr.app.gelu_fusion};
        if (gpt2_cuda_backend_create(gpt2_train_cuda_stream(tr.zs), &options, &tr.be, err,
                                     sizeof err) != 0)
            abort_job("the model's CUDA backend", err);
    } else if (!(tr.be = gpt2_cpu_backend_create())) {
        abort_job("the model's CPU backend", "out of host memory");
    }
    if (gpt2_units_attach(&tr.units, tr.be, err, sizeof err) != 0) abort_job("fp32 views", err);
    if (tr.app.head_chunk_rows == 0)
        tr.app.head_chunk_rows = strcmp(tr.be->ops->name, "cuda") == 0
                                     ? GPT2_HEAD_CHUNK_ROWS_DEFAULT_GPU
                                     : GPT2_HEAD_CHUNK_ROWS_DEFAULT;
    const double activation_bytes = workspace_create(&tr);

    /* Where training starts: a checkpoint (checkpoint.resume) brings its step
     * and the data position; otherwise pretrained weights, or zeroshard's
     * GPT-2 initialization. */
    int64_t first_step = zs_step_count(tr.zs);
    if (first_step > 0) {
        size_t bytes = 0;
        TRY(zs_user_state_get(tr.zs, "gpt2.data_pos", &tr.pos, sizeof tr.pos, &bytes));
        if (bytes != sizeof tr.pos) abort_job("resuming", "gpt2.data_pos has the wrong size");
    } else if (llmc) {
        TRY(zs_params_import(tr.zs, llmc_source, llmc));
    }
    print_header(&tr, activation_bytes);
    if (first_step > 0 && tr.rank == 0)
        printf("resumed at step %" PRId64 ", data position %" PRId64 "\n", first_step, tr.pos);
    if (tr.rank == 0 && tr.app.loss_log[0] != '\0' && !(loss_log = fopen(tr.app.loss_log, "w")))
        abort_job("app.loss_log", "cannot open it for writing");

    const double flops_per_token = gpt2_flops_per_token(&tr.app.dims, tr.app.T);
    double val_loss = NAN;
    const double positions = (double)tr.app.B * tr.app.T;
    while (zs_step_count(tr.zs) < tr.app.steps) {
        const double t0 = now_seconds();
        double local_sum = 0.0; /* this rank's losses of the micro-steps folded in so far */
        int micro = 0, slot = 0;
        zs_step_info info;
        do {
            if (slot == LOSS_SLOTS) {
                /* More micro-steps than slots: fold the waiting sums in. */
                check_model(&tr, tr.be->ops->host_wait(tr.be, tr.ws.host_loss_sums), "losses");
                for (int k = 0; k < slot; k++) local_sum += tr.ws.host_loss_sums[k];
                slot = 0;
            }
            TRY(micro_step(&tr, slot++));
            micro++;
            /* The data position a checkpoint taken by this zs_step resumes from. */
            TRY(zs_user_state_set(tr.zs, "gpt2.data_pos", &tr.pos, sizeof tr.pos, 0));
            TRY(zs_step(tr.zs, &info));
        } while (!info.boundary);
        /* The losses were summed on the device and copied behind the
         * backward; zs_step waited for the gradient norm, enqueued after
         * them, so this wait returns at once. */
        check_model(&tr, tr.be->ops->host_wait(tr.be, tr.ws.host_loss_sums), "losses");
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
        if (tr.app.val_every > 0 && step % tr.app.val_every == 0 && step < tr.app.steps) {
            TRY(evaluate(&tr, &val_loss));
            if (tr.rank == 0 && !isnan(val_loss))
                printf("validation at step %" PRId64 ": loss %.4f\n", step, val_loss);
            if (!isnan(val_loss)) TRY(zs_log_scalar_previous(tr.zs, "val_loss", val_loss));
        }
    }
    if (loss_log && fclose(loss_log) != 0) abort_job("app.loss_log", "write failed");
    loss_log = NULL;
    if (tr.app.save_final) TRY(zs_save(tr.zs, NULL));
    TRY(evaluate(&tr, &val_loss));
    if (tr.rank == 0 && !isnan(val_loss))
        printf("validation after %" PRId64 " steps: loss %.4f nats per token%s\n",
               zs_step_count(tr.zs), val_loss,
               tr.have_unigram ? (val_loss < tr.unigram.val_cross_entropy
                                      ? " (below the unigram baseline)"
                                      : " (NOT below the unigram baseline)")
                               : "");
    TRY(sample(&tr));
    if (tr.rank == 0) printf("\n");
    TRY(zs_report_print(tr.zs, stdout));
    if (tr.app.memory_file[0] != '\0') TRY(write_memory_file(&tr));

    exit_code = 0;
    if (tr.app.target_val_loss > 0 && !(val_loss <= tr.app.target_val_loss)) {
        if (tr.rank == 0)
            fprintf(stderr, "gpt2_train: the validation loss %.4f is above app.target_val_loss = "
                            "%.4f; train longer (app.steps) or tune optimizer.lr\n",
                    val_loss, tr.app.target_val_loss);
        exit_code = 1;
    }
    if (tr.app.beat_unigram && !(tr.have_unigram && val_loss < tr.unigram.val_cross_entropy)) {
        if (tr.rank == 0)
            fprintf(stderr, "gpt2_train: the validation loss %.4f is not below the unigram "
                            "baseline %.4f\n", val_loss, tr.unigram.val_cross_entropy);
        exit_code = 1;
    }
done:
    if (loss_log) fclose(loss_log);
    workspace_free(&tr);
    gpt2_units_free(&tr.units);
    if (tr.be) tr.be->ops->destroy(tr.be);
    gpt2_tokens_destroy(tr.train_stream);
    gpt2_tokens_destroy(tr.val_stream);
    gpt2_llmc_model_destroy(llmc);
    zs_destroy(tr.zs);
    zs_config_destroy(cfg);
    return exit_code;
}
