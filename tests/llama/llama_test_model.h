/*
 * A whole Llama-family model on one backend, for the tests and the
 * benchmark: every unit's parameters and gradients in one flat device array
 * each (units in order, each in registration order, as zeroshard's unit
 * buffers hold them), activations for every block, and one call for a full
 * training step (embed -> blocks -> head -> blocks backward -> embed
 * backward), the order a trainer runs the units in. fp32 devices only (the
 * CPU's). Links no zeroshard.
 */
#ifndef LLAMA_TEST_MODEL_H
#define LLAMA_TEST_MODEL_H

#include <stdint.h>
#include <stdio.h>

#include "llama_backend.h"
#include "model_tm.h"

typedef struct llama_tm {
    llama_backend *be; /* not owned */
    nn_device *dev;    /* be->dev */
    llama_dims d;
    int B, T, chunk_rows;
    int64_t n_params;
    float *params, *grads;   /* device [n_params] */
    llama_embed_w w0, g0;    /* unit 0 */
    llama_head_w wh, gh;     /* the head: unit 0 (tied) or the lm_head unit */
    llama_block_w *w, *g;    /* [L] */
    float *resid;            /* device [L + 1][BT][C]: input of block l at l; head input at L */
    unsigned char *acts_mem; /* device [L][acts_bytes] */
    size_t acts_bytes;
    llama_block_acts *acts;  /* [L] */
    float *dres[2];          /* device [BT][C] each */
    void *bscratch, *hscratch;
    float *losses;           /* device [BT] */
    int *tokens, *targets;   /* device [BT] */
    float *host_losses;      /* host [BT] */
    /* LoRA on a frozen base (llama_tm_set_lora): the adapters of every
     * block in one flat device array each, block by block, targets in
     * llama_lora_target order, each adapted target's A [r][in] then B
     * [out][r]; lora_at[l * LLAMA_LORA_TARGETS + t] is the offset of A
     * (-1: not adapted). NULL and 0 without LoRA. */
    int64_t n_lora;
    float *lora_params, *lora_grads; /* device [n_lora] */
    int64_t *lora_at;                /* host [L][LLAMA_LORA_TARGETS] */
} llama_tm;

/* 0 or an nn_status (message printed to stderr). */
int llama_tm_init(llama_tm *m, llama_backend *be, int B, int T, int chunk_rows);
void llama_tm_free(llama_tm *m);

/* The flat arrays follow the family's table (mt_unit_offset and
 * mt_param_offset of model_tm.h over &llama_param_table); test inputs come
 * from model_tm.h too. */
/* The residual stream entering block l (l = L: the head's input). */
float *llama_tm_resid(const llama_tm *m, int l);

int llama_tm_set_params(llama_tm *m, const float *host_params);
int llama_tm_set_data(llama_tm *m, const int *host_tokens, const int *host_targets);
/* Forward only (head_forward); *mean_loss = mean of the per-position
 * losses, summed in double on the host. */
int llama_tm_loss(llama_tm *m, double *mean_loss);
/* A full step: with zero_grads, grads holds on return the gradient of
 * dloss_scale * sum of the per-position losses (1 / (B T): the mean);
 * without, that gradient is added to what grads held. */
int llama_tm_step(llama_tm *m, float dloss_scale, int zero_grads, double *mean_loss);
/* LoRA fine-tuning of the model's base: the backend must have been given
 * llama_backend_set_lora before llama_tm_init (which sizes the block
 * scratch). Block l adapts target t where bit t of targets[l] is set.
 * Allocates the adapters (m->lora_params, m->lora_grads, zeroed) and
 * freezes the base: every base gradient pointer NULL (blocks, head,
 * embedding), so that llama_tm_step computes the adapters' gradients
 * alone, zeroes only lora_grads, and skips the embedding's backward;
 * m->grads is not touched by a step from then on. 0 or an nn_status. */
int llama_tm_set_lora(llama_tm *m, const unsigned *targets);
int llama_tm_set_lora_params(llama_tm *m, const float *host_lora);

/* The logits of row `row` of the head's input into host [V]. */
int llama_tm_logits(llama_tm *m, int row, float *host_logits);

#endif /* LLAMA_TEST_MODEL_H */
