/*
 * ex_model — what a model gives the shared trainer (ex_trainer.h): a small
 * table of functions. The trainer owns everything that is not the model:
 * the configuration's generic keys, the data and its batches, the step loop,
 * validation, sampling, metrics, checkpoints and resume, deadlines and the
 * numerics line. A model owns its keys (sizes, pretrained weights, its own
 * options), its units, its math (through its backend on an nn_device) and
 * the order of its fetches and releases within a micro-step. GPT-2
 * (examples/gpt2/gpt2_family.c) and the Llama family
 * (examples/llama/llama_family.c) are two such tables.
 *
 * Every function that takes zs_ctx is collective where the runtime's calls
 * it makes are (fetch, release, grads_ready in stage 3): every rank calls it
 * alike. A failure of the model's own math on one rank only (a device
 * error) cannot be agreed without a collective the others would not make,
 * so the model ends the job there (ex_abort_job); zeroshard statuses are
 * returned.
 */
#ifndef EX_MODEL_H
#define EX_MODEL_H

#include <stdint.h>
#include <stdio.h>

#include "nn_device.h"
#include "zeroshard.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ex_model ex_model; /* a model's state, the family's own */

/* What the trainer needs to know of a model. configure fills the first
 * group, describe the second, start the third. */
typedef struct ex_model_facts {
    /* configure */
    char name[64];         /* "124M", "llama-3.2-1b", "custom": the header's label */
    char description[256]; /* "12 layers, 12 heads, 768 channels, vocab 50257, block 1024" */
    int vocab;             /* tokens lie in [0, vocab) */
    int max_seq;           /* the longest sequence: app.seq_len's maximum */
    int default_seq;       /* app.seq_len's default (<= max_seq) */
    int byte_tokens;       /* 1: tokens are bytes (a prompt is taken as bytes, samples print as
                              text) */
    /* describe */
    int64_t params;        /* parameters (a tied weight once) */
    int units;
    zs_dtype dtype;        /* zeroshard's compute dtype */
    int init_from_is_base; /* 1: app.init_from is a frozen base (zs_set_frozen_base), which
                              zs_build imports on a resume too */
    /* start */
    double activation_bytes; /* device memory the model's workspace took */
} ex_model_facts;

typedef struct ex_model_ops {
    const char *program; /* "gpt2_train": names the program in messages */
    const char *family;  /* "gpt2": its checkpoints' user state is "<family>.data_pos" */

    /* Reads the model's own keys of the `app` group (before zs_create; the
     * trainer reads the generic ones and then zs_config_app_finish rejects
     * unread keys) and opens what they name (a weights file, a config).
     * Messages go to stderr naming the key. */
    zs_status (*configure)(zs_config *cfg, ex_model **out, ex_model_facts *facts);
    /* Registers the units (zs_unit_begin ... zs_unit_end), before zs_build. */
    zs_status (*describe)(ex_model *m, zs_ctx *zs, ex_model_facts *facts);
    /* After zs_build: the device and the model's backend (the CPU, or CUDA in
     * zeroshard's compute dtype on its compute stream), views of the units,
     * and a workspace for micro-steps of B sequences of T tokens. 0, or -1
     * with a message in err. */
    int (*start)(ex_model *m, zs_ctx *zs, int B, int T, ex_model_facts *facts, char *err,
                 size_t cap);
    /* The device the model computes on; the trainer's buffers live there. */
    nn_device *(*device)(ex_model *m);
    /* Pretrained weights, for a run that does not resume (NULL or nothing
     * configured: zeroshard's initialization stands). Collective. */
    zs_status (*import)(ex_model *m, zs_ctx *zs);
    /* User state the model keeps in checkpoints (its config.json, ...), set
     * before the first step so every save carries it (NULL: none). */
    zs_status (*save_state)(ex_model *m, zs_ctx *zs);
    /* Training FLOPs per token at sequence length T (for TFLOP/s). */
    double (*flops_per_token)(const ex_model *m, int T);

    /* One micro-step on tokens and targets already on the device ([B*T]
     * int32 each): forward, the head's loss and its backward (the gradient
     * of dloss * sum of the losses), the backward of every unit and
     * zs_grads_ready for each. losses: [B*T] fp32 device memory, written.
     * Collective. */
    zs_status (*train_micro_step)(ex_model *m, zs_ctx *zs, const int *tokens, const int *targets,
                                  int B, int T, float dloss, float *losses);
    /* Forward only, inside an evaluation pass the trainer opened: losses
     * [B*T] written, bit-identical to the training head's. Collective. */
    zs_status (*eval_losses)(ex_model *m, zs_ctx *zs, const int *tokens, const int *targets,
                             int B, int T, float *losses);
    /* Forward of one sequence of T tokens (device), inside an evaluation
     * pass: the logits of its last position into host_logits [vocab].
     * Collective. */
    zs_status (*last_logits)(ex_model *m, zs_ctx *zs, const int *tokens, int T,
                             float *host_logits);
    /* Writes a sampled token for a reader (its text where the model has a
     * tokenizer, its bytes for byte tokens, else "[id]"). Rank 0 only. */
    void (*print_token)(ex_model *m, int token, FILE *out);
    /* The token a sample starts from when the prompt gives none. */
    int (*start_token)(ex_model *m);
    /* Frees the model (its backend, views, workspace; not the device's
     * memory the trainer allocated). NULL is a no-op. */
    void (*destroy)(ex_model *m);
} ex_model_ops;

/* zs_config_app_int into an int (the app group's sizes): the key's value,
 * or `def`, within [lo, hi], refused with the key's name otherwise. */
zs_status ex_config_int(zs_config *cfg, const char *key, int64_t def, int64_t lo, int64_t hi,
                        int *out);

/* Ends the job from one rank: prints "<program>: <what>: <why>" and calls
 * MPI_Abort, for failures only this rank sees (the model's math, a local
 * read), which would otherwise leave the others waiting in a collective. */
#if defined(__GNUC__)
__attribute__((noreturn))
#endif
void ex_abort_job(const char *program, const char *what, const char *why);

#ifdef __cplusplus
}
#endif
#endif /* EX_MODEL_H */
