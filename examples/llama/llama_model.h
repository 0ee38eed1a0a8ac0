/*
 * llama_model — the Llama family's shapes, configuration, parameter table,
 * FLOP count and activation layout, on plain pointers: nothing here knows of
 * zeroshard.
 *
 * The model is the decoder of Hugging Face's LlamaForCausalLM, which Llama 2
 * and 3, SmolLM2, TinyLlama, Mistral (without a sliding window) and Qwen2
 * (with q/k/v biases) share: a token embedding; L pre-norm blocks
 *     x = x + o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))),
 *                                          n = input_layernorm(x)  (RMSNorm)
 *     x = x + down_proj(silu(gate_proj(m)) * up_proj(m)),
 *                                          m = post_attention_layernorm(x)
 * causal grouped-query attention (num_key_value_heads K/V heads, each serving
 * num_attention_heads / num_key_value_heads query heads), rotary position
 * embeddings in the rotate-half convention of Hugging Face checkpoints, a
 * final RMSNorm (model.norm) and logits = norm(x) . W^T with W = lm_head, or
 * the token embedding when tie_word_embeddings.
 *
 * Units (what zeroshard gathers and releases together):
 *   unit 0       "model.embed_tokens": model.embed_tokens.weight, and, when
 *                the head is tied, model.norm.weight (the head then fetches
 *                unit 0 again, as GPT-2's does);
 *   unit 1 + l   "model.layers.<l>": block l;
 *   unit 1 + L   "lm_head" (untied only): model.norm.weight, lm_head.weight.
 * Parameter names are Hugging Face's, so checkpoints map by name.
 *
 * Conventions are gpt2_model.h's: row-major, Linear weights [out][in]
 * (y = x W^T + b), B*T rows, element counts unless a name says bytes, pure
 * functions, no allocation.
 */
#ifndef LLAMA_MODEL_H
#define LLAMA_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "nn_dtype.h"
#include "nn_param.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- dims */

typedef enum llama_rope_kind {
    LLAMA_ROPE_DEFAULT = 0, /* rope_scaling null (or rope_type "default") */
    LLAMA_ROPE_LLAMA3 = 1   /* rope_scaling {"rope_type": "llama3", ...} (Llama 3.1+) */
} llama_rope_kind;

typedef struct llama_dims {
    int n_layer;   /* num_hidden_layers L */
    int n_head;    /* num_attention_heads NH */
    int n_kv_head; /* num_key_value_heads NKV; divides NH */
    int head_dim;  /* head_dim hd (default hidden_size / num_attention_heads); even */
    int n_embd;    /* hidden_size C */
    int n_ff;      /* intermediate_size F */
    int vocab;     /* vocab_size V */
    int max_seq;   /* max_position_embeddings: the longest sequence accepted */
    double rms_eps; /* rms_norm_eps, as the config writes it; the math adds it in fp32 */
    double rope_theta;
    llama_rope_kind rope_kind;
    /* LLAMA_ROPE_LLAMA3's factor, low_freq_factor, high_freq_factor and
     * original_max_position_embeddings. */
    double rope_factor, rope_low_freq, rope_high_freq;
    int rope_orig_max;
    int qkv_bias; /* q, k and v projections carry biases (attention_bias; Qwen2) */
    int o_bias;   /* o_proj carries a bias (attention_bias; never in Qwen2) */
    int mlp_bias; /* gate, up and down projections carry biases (mlp_bias) */
    int tied;     /* tie_word_embeddings: logits through model.embed_tokens.weight */
    double init_std; /* initializer_range: the std of every matrix's normal init */
    char model_type[16]; /* "llama", "mistral" or "qwen2" (the config's model_type) */
} llama_dims;

/* 0 when the dims describe a model every function here and in
 * llama_backend.h can handle; otherwise -1 and a message in err (cap bytes,
 * may be NULL/0) naming the bad field: every size positive, n_head a
 * multiple of n_kv_head, head_dim even, rms_eps > 0, rope_theta > 0, the
 * llama3 scaling's factors consistent (high_freq_factor > low_freq_factor,
 * factor >= 1), and the largest sizes within int (GEMM dimensions) and int64
 * (parameter counts). */
int llama_dims_check(const llama_dims *d, char *err, size_t cap);

/* Named shapes: "tiny" (the Shakespeare demo: bytes, 4 layers), and the
 * public shapes "llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b" (their
 * config.json values). 0, or -1 for an unknown name (out untouched). */
int llama_dims_preset(const char *name, llama_dims *out);
/* The preset names, NULL-terminated, for messages. */
extern const char *const llama_preset_names[];

/* ------------------------------------------------ Hugging Face config */

/*
 * Reads a Hugging Face config.json (`text`, `len` bytes; `path` names it in
 * messages) into *out. Keys read: vocab_size, hidden_size,
 * intermediate_size, num_hidden_layers, num_attention_heads,
 * num_key_value_heads (default num_attention_heads), head_dim (default
 * hidden_size / num_attention_heads), rms_norm_eps, rope_theta (default
 * 10000), rope_scaling (null, or rope_type/type "default" or "llama3" with
 * its four numbers), attention_bias, mlp_bias, tie_word_embeddings (default
 * false), max_position_embeddings, initializer_range (default 0.02),
 * model_type ("llama", "mistral" with sliding_window null, "qwen2" with
 * use_sliding_window false: q/k/v biases, no o_proj bias), hidden_act (must
 * be "silu"), attention_dropout (must be 0; this model has no dropout).
 * Keys that do not change the computation (token ids, torch_dtype,
 * architectures, transformers_version, use_cache, pretraining_tp, ...) are
 * ignored. A key that changes the architecture and is not implemented (a
 * sliding window, another rope scaling, partial rotary, interleaved rope)
 * is an error naming the key; so is a key this reader does not know, since
 * it cannot tell whether it changes the architecture. Returns 0, or -1 with
 * "path: key: what is wrong" in err.
 */
int llama_config_parse(const char *text, size_t len, const char *path, llama_dims *out,
                       char *err, size_t cap);
/* The same from a file (at most 1 MiB). */
int llama_config_read(const char *path, llama_dims *out, char *err, size_t cap);
/* A config.json for d, as LlamaConfig (or Qwen2Config / MistralConfig by
 * d->model_type) writes it, that llama_config_parse reads back into the
 * same dims and transformers loads: the program's own model travels with
 * its checkpoints this way. Returns the length (snprintf's rule: the
 * output is complete when it is < cap). */
int llama_config_write(const llama_dims *d, char *out, size_t cap);

/* ------------------------------------------------------ parameter table */

/* Tensor indices within a block unit, in registration order; optional
 * biases are absent (not registered) unless the dims enable them. */
typedef enum llama_block_param {
    LLAMA_P_ATTN_NORM = 0, /* input_layernorm.weight [C] */
    LLAMA_P_WQ,            /* self_attn.q_proj.weight [NH hd][C] */
    LLAMA_P_BQ,            /* self_attn.q_proj.bias [NH hd]      (qkv_bias) */
    LLAMA_P_WK,            /* self_attn.k_proj.weight [NKV hd][C] */
    LLAMA_P_BK,            /* self_attn.k_proj.bias [NKV hd]     (qkv_bias) */
    LLAMA_P_WV,            /* self_attn.v_proj.weight [NKV hd][C] */
    LLAMA_P_BV,            /* self_attn.v_proj.bias [NKV hd]     (qkv_bias) */
    LLAMA_P_WO,            /* self_attn.o_proj.weight [C][NH hd] */
    LLAMA_P_BO,            /* self_attn.o_proj.bias [C]          (o_bias) */
    LLAMA_P_MLP_NORM,      /* post_attention_layernorm.weight [C] */
    LLAMA_P_WGATE,         /* mlp.gate_proj.weight [F][C] */
    LLAMA_P_BGATE,         /* mlp.gate_proj.bias [F]             (mlp_bias) */
    LLAMA_P_WUP,           /* mlp.up_proj.weight [F][C] */
    LLAMA_P_BUP,           /* mlp.up_proj.bias [F]               (mlp_bias) */
    LLAMA_P_WDOWN,         /* mlp.down_proj.weight [C][F] */
    LLAMA_P_BDOWN,         /* mlp.down_proj.bias [C]             (mlp_bias) */
    LLAMA_BLOCK_SLOTS
} llama_block_param;

/* Longest name: "model.layers.<int>.self_attn.q_proj.weight" and the like. */
#define LLAMA_NAME_MAX 64

/* The family's initializations: nn_param.h's. */
typedef nn_init llama_init;
#define LLAMA_INIT_NORMAL NN_INIT_NORMAL /* normal(0, initializer_range): matrices, embeddings */
#define LLAMA_INIT_ZEROS NN_INIT_ZEROS   /* biases */
#define LLAMA_INIT_ONES NN_INIT_ONES     /* RMSNorm weights */

/* A tensor of the table (nn_param.h): Hugging Face's state_dict name, its
 * shape, its offset in its unit, its initialization; no_decay for every
 * 1-D tensor (biases, norms). */
typedef nn_param_spec llama_param_spec;

/* 1 + n_layer, and one more for the untied head. */
int llama_num_units(const llama_dims *d);
/* Which unit holds what: the block of unit u (-1 for the embedding or the
 * head), the untied head's unit (-1 when tied). */
int llama_unit_block(const llama_dims *d, int unit);
int llama_head_unit(const llama_dims *d);
/* Tensors registered in the unit (present ones only), -1 when out of range. */
int llama_unit_num_params(const llama_dims *d, int unit);
/* "model.embed_tokens", "model.layers.<l>" or "lm_head"; 0, or -1 when
 * unit is out of range or the name does not fit in cap bytes. */
int llama_unit_name(const llama_dims *d, int unit, char *buf, size_t cap);
/* Tensor `index` (0 .. llama_unit_num_params - 1) of `unit`, in registration
 * order: unit 0 embed_tokens [V][C] then (tied) model.norm.weight [C];
 * blocks in llama_block_param order skipping absent biases; the untied head
 * model.norm.weight [C], lm_head.weight [V][C]. Initialization as
 * LlamaPreTrainedModel: matrices and the embedding normal(0,
 * initializer_range), biases 0, norms 1. Returns 0, or -1 when out of range. */
int llama_param_spec_get(const llama_dims *d, int unit, int index, llama_param_spec *out);
/* The functions above as the shared table (nn_param.h), over a llama_dims. */
extern const nn_param_table llama_param_table;
/* For a block unit: the llama_block_param slot of registration index
 * `index`, and the registration index of a slot (-1 when the slot is
 * absent in these dims). */
int llama_block_slot(const llama_dims *d, int index);
int llama_block_index(const llama_dims *d, llama_block_param slot);
int64_t llama_unit_numel(const llama_dims *d, int unit);
/* Every parameter (the tied embedding counted once). */
int64_t llama_num_params(const llama_dims *d);

/*
 * Training FLOPs per token at sequence length T, the estimate of
 * gpt2_flops_per_token made for this shape: 6 N + 12 L NH hd T, where N
 * counts every weight a token's activations are multiplied by (the
 * embedding lookup is free: N leaves out model.embed_tokens unless the head
 * is tied to it) and the second term is attention's scores and weighted
 * sum over the full T x T, forward and backward. Norms, RoPE, SiLU and
 * softmax are not counted.
 */
double llama_flops_per_token(const llama_dims *d, int T);

/* ------------------------------------------------- one unit's pointers */

/* Used for parameters and, with the same shapes, for their gradients;
 * every pointer is to elements of the backend's dtype; absent biases are
 * NULL. */
typedef struct llama_embed_w {
    void *wte;  /* [V][C] model.embed_tokens.weight */
} llama_embed_w;

typedef struct llama_head_w {
    void *norm; /* [C] model.norm.weight */
    void *wout; /* [V][C] lm_head.weight, or embed_tokens when tied */
} llama_head_w;

/* The Linears LoRA can adapt (issue 42), by Hugging Face's module names
 * ("q_proj", ...; llama_lora_target_name gives "self_attn.q_proj"). */
typedef enum llama_lora_target {
    LLAMA_LORA_Q = 0,
    LLAMA_LORA_K,
    LLAMA_LORA_V,
    LLAMA_LORA_O,
    LLAMA_LORA_GATE,
    LLAMA_LORA_UP,
    LLAMA_LORA_DOWN,
    LLAMA_LORA_TARGETS
} llama_lora_target;

/* "self_attn.q_proj", ..., "mlp.down_proj"; NULL out of range. */
const char *llama_lora_target_name(int target);
/* The target Linear's inputs and outputs. */
void llama_lora_target_shape(const llama_dims *d, int target, int *in, int *out);

typedef struct llama_block_w {
    void *attn_norm;        /* [C] */
    void *wq, *bq;          /* [NH hd][C], [NH hd] */
    void *wk, *bk;          /* [NKV hd][C], [NKV hd] */
    void *wv, *bv;          /* [NKV hd][C], [NKV hd] */
    void *wo, *bo;          /* [C][NH hd], [C] */
    void *mlp_norm;         /* [C] */
    void *wgate, *bgate;    /* [F][C], [F] */
    void *wup, *bup;        /* [F][C], [F] */
    void *wdown, *bdown;    /* [C][F], [C] */
    /* LoRA adapters (llama_backend_set_lora): A [r][in] and B [out][r] of
     * each adapted Linear, NULL for the others (and without LoRA). In a
     * gradient struct, the base tensors are NULL when frozen. */
    void *lora_A[LLAMA_LORA_TARGETS], *lora_B[LLAMA_LORA_TARGETS];
} llama_block_w;

/*
 * Pointers to a unit's tensors in a buffer that holds them in registration
 * order, each directly after the previous one (as zeroshard's unit buffers
 * and the tests' flat arrays do), in elements of dtype t from base:
 *   llama_embed_w_carve: unit 0's buffer;
 *   llama_head_w_carve:  the head's tensors: unit 0's buffer when tied
 *                        (wout = embed_tokens, norm = model.norm), the
 *                        lm_head unit's otherwise;
 *   llama_block_w_carve: a block unit's buffer (absent biases NULL).
 * The same carving serves the gradients.
 */
void llama_embed_w_carve(const llama_dims *d, nn_dtype t, void *base, llama_embed_w *out);
void llama_head_w_carve(const llama_dims *d, nn_dtype t, void *base, llama_head_w *out);
void llama_block_w_carve(const llama_dims *d, nn_dtype t, void *base, llama_block_w *out);

/* ------------------------------------------------------- activations */

/* The width of a row of the block's q|k|v buffer: (NH + 2 NKV) hd. A row
 * holds q (NH hd, heads side by side), then k (NKV hd), then v (NKV hd). */
int64_t llama_qkv_width(const llama_dims *d);

/*
 * What a block's backward needs from its forward for one (B, T). The input
 * x and output y are the residual stream, which the caller keeps. Tensors
 * in the backend's dtype; the RMSNorm statistics in fp32.
 */
typedef struct llama_block_acts {
    void *xn1;          /* [BT][C]  input_layernorm(x) */
    float *rstd1;       /* [BT]     1 / sqrt(mean(x^2) + eps) */
    void *qkv;          /* [BT][(NH + 2 NKV) hd]: q and k after RoPE, v */
    void *att;          /* [B][NH][T][T] softmax probabilities, 0 above the diagonal */
    void *atty;         /* [BT][NH hd] attention output before o_proj */
    void *res1;         /* [BT][C]  x + attention branch */
    void *xn2;          /* [BT][C]  post_attention_layernorm(res1) */
    float *rstd2;       /* [BT] */
    void *gate;         /* [BT][F]  gate_proj output (SiLU's input) */
    void *up;           /* [BT][F]  up_proj output */
    void *h;            /* [BT][F]  silu(gate) * up: down_proj's input */
} llama_block_acts;

/* Bytes of one block's activations in dtype `t`, each tensor starting at a
 * multiple of NN_ALIGN bytes from base; -1 for B or T < 1. */
int64_t llama_block_acts_bytes(const llama_dims *d, int B, int T, nn_dtype t);
void llama_block_acts_carve(const llama_dims *d, int B, int T, nn_dtype t, void *base,
                            llama_block_acts *out);

/* ------------------------------------------------------------- RoPE */

/*
 * The rotary angles as Hugging Face's LlamaRotaryEmbedding computes them:
 * inverse frequencies inv_freq[i] = 1 / theta^(2i / hd) in fp32 (the
 * exponent 2i/hd computed in fp32, the power in fp32 from the fp32
 * exponent), adjusted by the llama3 scaling when configured (in fp32, as
 * _compute_llama3_parameters does), then angle(t, i) = (float)t *
 * inv_freq[i] rounded once to fp32, and cos/sin of that fp32 angle.
 * Writes cos[t][i] and sin[t][i] for t < T, i < hd / 2 (T <= max_seq).
 * The table is data of the model, made once on the host; the backends
 * read it (the CUDA backend from a device copy), so both rotate by the
 * same bits.
 */
void llama_rope_table(const llama_dims *d, int T, float *cos_out, float *sin_out);

#ifdef __cplusplus
}
#endif
#endif /* LLAMA_MODEL_H */
