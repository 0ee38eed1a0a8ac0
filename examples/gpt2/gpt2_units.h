/*
 * gpt2_units — GPT-2's parameters as zeroshard units, and the fp32 views the
 * model's math (gpt2_backend.h) works on.
 *
 * Unit 0 ("transformer.embed") holds wte, wpe and ln_f; unit 1 + l holds
 * block l (gpt2_model.h's table, nanoGPT's names and GPT-2's initializers).
 *
 * The model's backend computes on tensors of its own dtype (be->dtype).
 * When that is zeroshard's compute dtype (fp32 anywhere; bf16 or fp16 on
 * CUDA) the views ARE zeroshard's buffers (zs_param_data / zs_param_grad):
 * no copy, and backward adds straight into the runtime's gradients. When
 * they differ (the CPU backend, which computes in fp32, training in fp16 or
 * bf16) a view is an fp32 copy made at each fetch (zs_backend_convert, on
 * the backend's own memory), and backward adds into an fp32 scratch that is
 * then added into the runtime's low-precision gradient
 * (zs_backend_accumulate, rounded once per contribution). Either way the
 * calls below are the same.
 *
 * All pointers are backend memory (host on "cpu", device on "cuda").
 */
#ifndef GPT2_UNITS_H
#define GPT2_UNITS_H

#include "gpt2_backend.h"
#include "zeroshard.h"

typedef struct gpt2_units {
    gpt2_dims dims;
    zs_ctx *zs;
    gpt2_backend *be;
    zs_dtype dtype;              /* the compute dtype of zeroshard's buffers */
    int direct;                  /* the backend computes in that dtype: no views */
    int unit_count;              /* 1 + n_layer */
    zs_unit **unit;              /* [unit_count] */
    zs_param **param;            /* [unit][index] flattened: unit 0 first, then 12 per block */
    /* Converted views only: one unit's fp32 parameters and gradient
     * contributions ([largest unit] floats each, backend memory). */
    float *param32, *grad32;
    /* The embed unit's gradient pointers, taken while it is fetched for the
     * head and used again by the embedding's backward after it was released
     * (zeroshard keeps an open gradient valid until zs_grads_ready). */
    void *embed_grad[GPT2_EMBED_PARAMS];
} gpt2_units;

/* Describes the model to zeroshard (zs_unit_begin / zs_param_create /
 * zs_unit_end for every unit). Call before zs_build. */
zs_status gpt2_units_describe(gpt2_units *u, zs_ctx *zs, const gpt2_dims *dims);

/* After zs_build: decides whether the backend works on zeroshard's buffers
 * directly and otherwise allocates the fp32 views on it. Returns 0, or -1
 * with a message in err (also when the backend computes in a dtype that is
 * neither zeroshard's nor fp32). */
int gpt2_units_attach(gpt2_units *u, gpt2_backend *be, char *err, size_t cap);
void gpt2_units_free(gpt2_units *u);

zs_param *gpt2_units_param(const gpt2_units *u, int unit, int index);

/* The fetched unit's parameters in the backend's dtype (embed: unit 0;
 * block: unit 1 + l).
 * Returns 0, or -1 with a message (the unit is not fetched, a conversion
 * failed). */
int gpt2_units_embed_params(gpt2_units *u, gpt2_embed_w *w, char *err, size_t cap);
int gpt2_units_block_params(gpt2_units *u, int l, gpt2_block_w *w, char *err, size_t cap);

/* The gradient to ADD into for the fetched unit, in the backend's dtype:
 * zeroshard's own gradient (direct) or a zeroed fp32 scratch; then
 * gpt2_units_*_commit adds a scratch into zeroshard's gradient (a no-op when
 * direct). The embed unit's gradient pointers are kept (embed_grad) for
 * gpt2_units_embed_grads_again. */
int gpt2_units_embed_grads(gpt2_units *u, gpt2_embed_w *g, char *err, size_t cap);
int gpt2_units_embed_commit(gpt2_units *u, char *err, size_t cap);
int gpt2_units_block_grads(gpt2_units *u, int l, gpt2_block_w *g, char *err, size_t cap);
int gpt2_units_block_commit(gpt2_units *u, int l, char *err, size_t cap);

/* The embed unit's gradient once more, for the token and position
 * embeddings' backward at the end of the micro-step, while the unit is
 * released (its gradient still open: no second gather in stage 3). Only
 * wte and wpe receive anything (the embedding's backward leaves ln_f
 * alone), and the commit adds those two. */
int gpt2_units_embed_grads_again(gpt2_units *u, gpt2_embed_w *g, char *err, size_t cap);
int gpt2_units_embed_commit_again(gpt2_units *u, char *err, size_t cap);

#endif
