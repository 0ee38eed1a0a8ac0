/*
 * ex_decoder — the micro-step every decoder-only language model takes
 * through zeroshard, written once: the embedding (unit 0), the blocks (units
 * 1 .. L), the head (tied: unit 0 fetched a second time, its gradient left
 * open for the embedding's backward; untied: a unit of its own), in the
 * order of fetches, releases and grads_ready that overlaps communication
 * with compute. A family (gpt2_family.c, llama_family.c) gives only its
 * math, as an adapter table over its backend: each op receives a unit's
 * tensors as zeroshard registered them (ex_units_params / ex_units_grads:
 * pointers in registration order) and the stream's buffers.
 *
 * The residual stream, its gradient ping-pong and the scratch are the
 * family's ex_stream; the decoder reads res[l] and dres from it. A failure
 * of the family's math ends the job from this rank (ex_abort_job with the
 * op's name and the adapter's last_error); zeroshard statuses are returned.
 * Every function is collective as zs_fetch / zs_release are.
 */
#ifndef EX_DECODER_H
#define EX_DECODER_H

#include "ex_lora.h"
#include "ex_model.h"
#include "ex_stream.h"
#include "ex_units.h"
#include "nn_param.h"
#include "zeroshard.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ex_decoder_ops {
    /* x = the embedding of tokens ([B*T] int32 on the device); p: unit 0. */
    int (*embed_forward)(void *model, int B, int T, void *const *p, const int *tokens, void *x);
    /* Adds the embedding's gradient from dx into g (unit 0's gradients, the
     * tensors of ex_decoder.embed_grads). */
    int (*embed_backward)(void *model, int B, int T, void *const *g, const int *tokens,
                          const void *dx);
    /* y = block `layer`(x), keeping its activations; the same bits when
     * called again (recomputation). a: the block's LoRA adapters (its
     * adapter unit's tensors, ex_lora.h), NULL without LoRA. */
    int (*block_forward)(void *model, int layer, int B, int T, void *const *p, void *const *a,
                         const void *x, void *y);
    /* g: the block's gradients (every pointer NULL when the base is frozen,
     * with LoRA); ga: the adapters' (NULL without LoRA). */
    int (*block_backward)(void *model, int layer, int B, int T, void *const *p, void *const *g,
                          void *const *a, void *const *ga, const void *x, const void *dy,
                          void *dx);
    /* p, g: the head unit's tensors (unit 0 when tied). */
    int (*head_forward_backward)(void *model, int B, int T, void *const *p, void *const *g,
                                 const void *x, const int *targets, float dloss, void *dx,
                                 float *losses);
    int (*head_forward)(void *model, int B, int T, void *const *p, const void *x,
                        const int *targets, float *losses);
    /* The logits of row `row` of x ([B*T][C]) into host memory. */
    int (*head_logits)(void *model, int B, int T, void *const *p, const void *x, int row,
                       float *host_logits);
    const char *(*last_error)(void *model);
} ex_decoder_ops;

typedef struct ex_decoder {
    const char *program; /* names the program in messages */
    const nn_param_table *table; /* the family's parameters (nn_param.h) over `dims` */
    const void *dims;
    const ex_decoder_ops *ops;
    void *model; /* the family's, handed to every op */
    ex_units *units;
    ex_stream *ws;
    int n_layer;
    int head_unit;        /* 0 when the head is tied to the embedding's unit */
    unsigned embed_grads; /* the unit-0 tensors the embedding's backward adds into */
    int recompute;        /* recompute each block's forward before its backward */
    /* LoRA (ex_lora.h): block l's adapters are unit lora_unit0 + l, and
     * every other unit is frozen: no gradient is asked for, the embedding's
     * backward does not run, the head and the blocks get NULL gradient
     * tensors. */
    int lora, lora_unit0;
    ex_lora *adapters; /* the LoRA settings (NULL: none); the dropout key changes */
} ex_decoder;

/* One micro-step (ex_model.h's train_micro_step): forward, the head's loss
 * and backward, every block's backward, the embedding's; zs_grads_ready for
 * every unit. */
zs_status ex_decoder_train_micro_step(const ex_decoder *dec, zs_ctx *zs, const int *tokens,
                                      const int *targets, int B, int T, float dloss,
                                      float *losses);
/* Forward only, the head's losses (eval_losses). */
zs_status ex_decoder_eval_losses(const ex_decoder *dec, zs_ctx *zs, const int *tokens,
                                 const int *targets, int B, int T, float *losses);
/* Forward of one sequence, the logits of its last position (last_logits). */
zs_status ex_decoder_last_logits(const ex_decoder *dec, zs_ctx *zs, const int *tokens, int T,
                                 float *host_logits);

/* The same as ex_model.h's ops, for a family whose struct ex_model begins
 * with its ex_decoder (its first member), filled by its configure: the
 * family's table points at these and writes no registration or micro-step
 * of its own. describe registers the table's units (ex_units_describe). */
zs_status ex_decoder_model_describe(ex_model *m, zs_ctx *zs, ex_model_facts *facts);
zs_status ex_decoder_model_train_micro_step(ex_model *m, zs_ctx *zs, const int *tokens,
                                            const int *targets, int B, int T, float dloss,
                                            float *losses);
zs_status ex_decoder_model_eval_losses(ex_model *m, zs_ctx *zs, const int *tokens,
                                       const int *targets, int B, int T, float *losses);
zs_status ex_decoder_model_last_logits(ex_model *m, zs_ctx *zs, const int *tokens, int T,
                                       float *host_logits);

#ifdef __cplusplus
}
#endif
#endif /* EX_DECODER_H */
