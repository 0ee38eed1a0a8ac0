/*
 * ex_lora — LoRA fine-tuning for the examples' decoders (issue 42), as
 * PEFT does it: the model's base frozen (ZS_PARAM_FROZEN: no gradient, no
 * master, no moments), and on each adapted Linear of every block two small
 * trainable matrices, A [r][in] and B [out][r], whose product scaled by
 * alpha / r adds to the Linear's output (nn_layers.h's lora_forward). The
 * adapters of block l are one unit of their own, "<block>.lora", registered
 * after the model's units, so that a frozen unit is never mixed with a
 * trainable one.
 *
 * A family names its adaptable Linears (Hugging Face's module names for
 * the Llama family: q_proj ... down_proj) and their shapes; this file reads
 * the app keys, checks the targets against them and registers the units:
 *   app.lora_r               the rank (0, the default: no LoRA, everything
 *                            trains)
 *   app.lora_alpha           alpha (default 8, PEFT's); the scale is alpha / r
 *   app.lora_dropout         dropout on the adapters' input (default 0, in
 *                            [0, 1)), as PEFT's lora_dropout: in training
 *                            micro-steps only, a mask per micro-step, block
 *                            and Linear drawn from a counter-based hash of
 *                            (step, micro-step, rank, block, Linear, element),
 *                            so recomputation, stages and resume see the same
 *   app.lora_target_modules  the family's default (PEFT's: "q_proj,v_proj"
 *                            for Llama), any list of the family's module
 *                            names, or "all-linear". An entry names each
 *                            Linear whose path in the block is the entry or
 *                            ends with "." and the entry (PEFT's rule:
 *                            "c_proj" is both of GPT-2's); an unknown name is
 *                            refused, listing the model's Linears
 *   app.lora_init_from       a PEFT adapter directory (adapter_config.json,
 *                            adapter_model.safetensors) to start from: its
 *                            r, lora_alpha and target_modules must be the
 *                            keys' (refused naming the key otherwise), its
 *                            tensors the adapters' names and shapes
 *                            (refused naming the tensor: another base's)
 * A's initialization is PEFT's (Kaiming-uniform with a = sqrt(5): U(-1/sqrt(in),
 * +1/sqrt(in))), B's zeros, so training starts from the base model exactly.
 */
#ifndef EX_LORA_H
#define EX_LORA_H

#include "ex_units.h"
#include "nn_param.h"
#include "zeroshard.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EX_LORA_MAX_TARGETS 16

typedef struct ex_lora {
    int r;              /* 0: no LoRA */
    double alpha;
    double dropout;     /* app.lora_dropout */
    /* The training micro-step's dropout key (ex_lora_dropout_begin), 0
     * outside one; the step and micro-step it was drawn for. */
    uint64_t dropout_key;
    int64_t key_step;
    int key_micro;
    const char *init_from; /* app.lora_init_from: a PEFT adapter directory, or "" */
    unsigned targets;   /* bit t: the family's Linear t is adapted */
    /* The family's adaptable Linears of a block: module t's path inside the
     * block ("self_attn.q_proj") and its shape over the family's dims. */
    int n_targets;
    const char *default_targets; /* app.lora_target_modules' default */
    const char *(*target_name)(int t);
    void (*target_shape)(const void *dims, int t, int *in, int *out);
    /* The table's block units: first_block .. first_block + n_blocks - 1. */
    int first_block, n_blocks;
    /* QLoRA (zero.frozen_storage = "int8" or "nf4", zs_quantizes_frozen):
     * each block's matrices are registered ZS_PARAM_QUANTIZE in the block's
     * unit, and its 1-D tensors (norms, biases), which QLoRA keeps in the
     * compute dtype, in a unit "<block>.norms" of their own, fetched with
     * it. Only for families whose layers dequantize (quantizable: 1). */
    int quantizable;
} ex_lora;

/* Reads the app keys above into lora (whose family fields are set);
 * ZS_ERR_CONFIG with a message on stderr naming the key. */
zs_status ex_lora_configure(zs_config *cfg, const char *program, ex_lora *lora);

/* The model's units from its table, every tensor frozen when lora->r > 0,
 * then one adapter unit per block (nothing more without LoRA); *units_out
 * counts them all. */
zs_status ex_lora_describe(ex_units *u, zs_ctx *zs, const nn_param_table *table,
                           const void *dims, const ex_lora *lora, int *units_out);

/* app.lora_init_from's adapters into the context's trainable parameters
 * (zs_params_import_safetensors of its adapter_model.safetensors, PEFT's
 * "base_model.model." names, the trainable parameters only), after its
 * adapter_config.json was checked against the keys. Collective. */
zs_status ex_lora_import(const ex_lora *lora, zs_ctx *zs, const char *program);

/* A training micro-step begins (ex_decoder's): its dropout key from the
 * step count, the micro-step within the step and the rank; _end: none
 * (evaluation, sampling). Nothing without dropout. */
void ex_lora_dropout_begin(ex_lora *lora, zs_ctx *zs);
void ex_lora_dropout_end(ex_lora *lora);
/* Block `layer`'s dropout seed for the backend (nn_lora.seed), 0: none. */
uint64_t ex_lora_block_seed(const ex_lora *lora, int layer);

/* The adapters' parameters over all blocks (r (in + out) per adapted
 * Linear). */
int64_t ex_lora_params(const ex_lora *lora, const void *dims);

/* "model.layers.3.self_attn.q_proj.lora_A.weight" for block unit name
 * "model.layers.3", target t, A (which 0) or B (1): PEFT's names without
 * its "base_model.model." prefix. 0, or -1 when it does not fit. */
int ex_lora_param_name(const char *block, const ex_lora *lora, int t, int which, char *out,
                       size_t cap);

/* PEFT's adapter_config.json for these adapters (peft_type LORA, task_type
 * CAUSAL_LM, r, lora_alpha, lora_dropout, target_modules, bias "none",
 * base_model_name_or_path = base, "" when unknown), which the trainer keeps
 * in the checkpoint as global user state EX_LORA_CONFIG_STATE for
 * zs-ckpt export --peft. Its length, or -1 when it does not fit. */
#define EX_LORA_CONFIG_STATE "peft.adapter_config.json"
int ex_lora_adapter_config(const ex_lora *lora, const char *base, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* EX_LORA_H */
