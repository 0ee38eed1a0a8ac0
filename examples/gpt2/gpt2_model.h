/*
 * gpt2_model — GPT-2's shapes, parameter table, FLOP count and the layout of
 * its activations, on plain pointers: nothing here knows of zeroshard.
 *
 * The model is GPT-2 as in OpenAI's release (and nanoGPT, llm.c): token plus
 * position embeddings; L pre-LayerNorm blocks
 *     x = x + c_proj(causal multi-head self-attention(ln_1(x)))   (fused qkv)
 *     x = x + mlp.c_proj(gelu_tanh(c_fc(ln_2(x))))                (4x MLP)
 * a final LayerNorm, logits = ln_f(x) . wte^T (the token embedding is tied to
 * the output projection), and softmax cross-entropy over the positions.
 *
 * The trainer runs it one "unit" at a time: unit 0 holds the embeddings and
 * the final LayerNorm, unit 1 + l holds block l. The math lives behind
 * gpt2_backend.h (CPU and CUDA); this header only describes sizes and layouts.
 *
 * Conventions:
 *   - Tensors are row-major in a backend's storage dtype (nn_dtype: fp32,
 *     bf16 or fp16; parameters, gradients and activations alike), while
 *     LayerNorm statistics and losses are always fp32. Linear weights are
 *     [out][in], as in PyTorch's state_dict (nanoGPT's names), so
 *     y = x . W^T + b.
 *   - B sequences of T tokens make B*T rows; "BT" below means B*T.
 *   - Sizes are element counts, never bytes, unless a name says so.
 *   - Functions here are pure and reentrant; none allocates.
 */
#ifndef GPT2_MODEL_H
#define GPT2_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "nn_dtype.h"
#include "nn_param.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- dims */

typedef struct gpt2_dims {
    int n_layer;    /* L: transformer blocks */
    int n_head;     /* NH: attention heads; n_embd % n_head == 0 */
    int n_embd;     /* C: channels */
    int vocab;      /* V: rows of wte (50257 for GPT-2's tokenizer) */
    int block_size; /* rows of wpe = the longest sequence the model accepts */
} gpt2_dims;

/* 0 when the dims describe a model every function here and in gpt2_backend.h
 * can handle; otherwise -1 and a message in err (cap bytes, may be NULL/0)
 * naming the bad field. Checks: every field positive, n_embd % n_head == 0,
 * and that the largest sizes (vocab * n_embd, 4 * n_embd * n_embd, the
 * parameter count, block_size^2 * n_head) fit in int64 and that the GEMM
 * dimensions handed to BLAS (vocab, 4 * n_embd) fit in an int. */
int gpt2_dims_check(const gpt2_dims *d, char *err, size_t cap);

/* GPT-2's released sizes by name: "124M" (12 layers, 12 heads, 768 channels),
 * "350M" (24, 16, 1024), "774M" (36, 20, 1280), "1558M" (48, 25, 1600); all
 * with vocab 50257 and block_size 1024. Returns 0, or -1 for an unknown name
 * (out untouched). */
int gpt2_dims_preset(const char *name, gpt2_dims *out);

/* The head size C / NH. */
int gpt2_head_size(const gpt2_dims *d);

/* ------------------------------------------------------ parameter table */

#define GPT2_EMBED_PARAMS 4  /* tensors in unit 0 */
#define GPT2_BLOCK_PARAMS 12 /* tensors in each block unit */
/* Longest name: "transformer.h.<int>.attn.c_attn.weight" and the like. */
#define GPT2_NAME_MAX 64

/* GPT-2's initializations: nn_param.h's. */
typedef nn_init gpt2_init;
#define GPT2_INIT_NORMAL NN_INIT_NORMAL /* normal(0, init_std) */
#define GPT2_INIT_ZEROS NN_INIT_ZEROS   /* biases */
#define GPT2_INIT_ONES NN_INIT_ONES     /* LayerNorm weights */

/* A tensor of the table (nn_param.h): nanoGPT's state_dict name, its
 * shape, its offset in its unit, its initialization; no_decay for every
 * 1-D tensor (biases, LayerNorm). */
typedef nn_param_spec gpt2_param_spec;

/* 1 + n_layer. */
int gpt2_num_units(const gpt2_dims *d);
/* GPT2_EMBED_PARAMS for unit 0, GPT2_BLOCK_PARAMS otherwise, -1 when unit is
 * out of range. */
int gpt2_unit_num_params(const gpt2_dims *d, int unit);
/* "transformer.embed" or "transformer.h.<l>"; 0, or -1 when unit is out of
 * range or the name does not fit in cap bytes. */
int gpt2_unit_name(const gpt2_dims *d, int unit, char *buf, size_t cap);
/* Tensor `index` of `unit`, in this order:
 *   unit 0: transformer.wte.weight [V, C], transformer.wpe.weight [block_size, C],
 *           transformer.ln_f.weight [C], transformer.ln_f.bias [C]
 *   unit 1+l: transformer.h.<l>.ln_1.weight [C], .ln_1.bias [C],
 *           .attn.c_attn.weight [3C, C], .attn.c_attn.bias [3C],
 *           .attn.c_proj.weight [C, C], .attn.c_proj.bias [C],
 *           .ln_2.weight [C], .ln_2.bias [C], .mlp.c_fc.weight [4C, C],
 *           .mlp.c_fc.bias [4C], .mlp.c_proj.weight [C, 4C], .mlp.c_proj.bias [C]
 * Initialization as GPT-2: weights and embeddings normal(0, 0.02), the two
 * residual projections (attn.c_proj.weight, mlp.c_proj.weight) normal(0,
 * 0.02 / sqrt(2 L)) so the residual stream's variance does not grow with
 * depth; biases 0; LayerNorm weights 1. Returns 0, or -1 when unit or index
 * is out of range (out untouched). */
int gpt2_param_spec_get(const gpt2_dims *d, int unit, int index, gpt2_param_spec *out);
/* Elements of one unit (the sum of its tensors), -1 when out of range. */
int64_t gpt2_unit_numel(const gpt2_dims *d, int unit);
/* Elements of all units: every parameter, wpe included, wte counted once. */
int64_t gpt2_num_params(const gpt2_dims *d);
/* The functions above as the shared table (nn_param.h), over a gpt2_dims. */
extern const nn_param_table gpt2_param_table;

/*
 * Training FLOPs per token at sequence length T, nanoGPT's estimate (after
 * the PaLM paper's appendix B): 6 N + 12 L C T, where N is every parameter
 * except wpe. 6 N counts a multiply-add as 2 FLOPs, forward (2) plus
 * backward (4) over every weight a token passes through (wte once: as the
 * output projection; the embedding lookup is free); 12 L C T is attention's
 * QK^T and att.V, forward and backward, over the full T x T (causal masking
 * is not credited). LayerNorm, GELU and softmax are not counted. Use it for
 * achieved FLOP/s = flops_per_token * tokens / seconds.
 */
double gpt2_flops_per_token(const gpt2_dims *d, int T);

/* ------------------------------------------------- one unit's pointers */

/* Used for parameters and, with the same shapes, for their gradients; every
 * pointer is to elements of the backend's dtype. */
typedef struct gpt2_embed_w {
    void *wte;  /* [V][C] */
    void *wpe;  /* [block_size][C] */
    void *lnfw; /* [C] */
    void *lnfb; /* [C] */
} gpt2_embed_w;

/* The Linears of a block LoRA can adapt (issue 42), by their paths in the
 * block as Hugging Face (and PEFT) name them: the fused q/k/v projection,
 * attention's output projection, the MLP's two. PEFT's target "c_proj"
 * names both c_projs (ex_lora.h's suffix rule). */
typedef enum gpt2_lora_target {
    GPT2_LORA_C_ATTN = 0, /* attn.c_attn: C -> 3C */
    GPT2_LORA_ATTN_PROJ,  /* attn.c_proj: C -> C */
    GPT2_LORA_C_FC,       /* mlp.c_fc: C -> 4C (its output is GELU's input) */
    GPT2_LORA_MLP_PROJ,   /* mlp.c_proj: 4C -> C */
    GPT2_LORA_TARGETS
} gpt2_lora_target;

/* "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"; NULL out of range. */
const char *gpt2_lora_target_name(int target);
/* The target Linear's inputs and outputs. */
void gpt2_lora_target_shape(const gpt2_dims *d, int target, int *in, int *out);

typedef struct gpt2_block_w {
    void *ln1w;     /* [C] */
    void *ln1b;     /* [C] */
    void *qkvw;     /* [3C][C]: rows 0..C-1 make q, C..2C-1 k, 2C..3C-1 v */
    void *qkvb;     /* [3C] */
    void *attprojw; /* [C][C] */
    void *attprojb; /* [C] */
    void *ln2w;     /* [C] */
    void *ln2b;     /* [C] */
    void *fcw;      /* [4C][C] */
    void *fcb;      /* [4C] */
    void *fcprojw;  /* [C][4C] */
    void *fcprojb;  /* [C] */
    /* LoRA adapters (gpt2_backend_set_lora): A [r][in] and B [out][r] of
     * each adapted Linear, NULL for the others (and without LoRA). In a
     * gradient struct the twelve base tensors are NULL when the base is
     * frozen. */
    void *lora_A[GPT2_LORA_TARGETS], *lora_B[GPT2_LORA_TARGETS];
} gpt2_block_w;

/* Point the struct's members into base, laid out in table order without gaps
 * (gpt2_unit_numel(d, 0) or gpt2_unit_numel(d, 1) elements of `t`); a
 * block's adapters are set NULL (none). base may be host or backend memory:
 * this only does pointer arithmetic. */
void gpt2_embed_w_carve(const gpt2_dims *d, nn_dtype t, void *base, gpt2_embed_w *out);
void gpt2_block_w_carve(const gpt2_dims *d, nn_dtype t, void *base, gpt2_block_w *out);

/* -------------------------------------------------------- activations */

/*
 * What a block's backward needs from its forward, for one (B, T). The
 * block's input x and output y are not in here: they are the residual
 * stream, which the caller keeps (y of block l is x of block l + 1).
 * Tensors are in the backend's dtype; the statistics are fp32.
 */
typedef struct gpt2_block_acts {
    void *ln1;       /* [BT][C]  ln_1(x) */
    float *ln1_mean; /* [BT] */
    float *ln1_rstd; /* [BT]     1 / sqrt(var + eps) */
    void *qkv;       /* [BT][3C] per row: q (C), k (C), v (C); head h at h*hs in each */
    void *att;       /* [B][NH][T][T] softmax probabilities, 0 above the diagonal */
    void *atty;      /* [BT][C]  attention output before c_proj, heads side by side */
    void *res1;      /* [BT][C]  x + attention branch (the input of ln_2) */
    void *ln2;       /* [BT][C]  ln_2(res1) */
    float *ln2_mean; /* [BT] */
    float *ln2_rstd; /* [BT] */
    void *fch;       /* [BT][4C] c_fc output (GELU's input) */
    void *fch_gelu;  /* [BT][4C] GELU's output (mlp.c_proj's input) */
} gpt2_block_acts;

/* Bytes of one block's activations in dtype `t`: 15 BT C + B NH T T
 * elements and 4 BT floats, each tensor starting at a multiple of
 * NN_ALIGN bytes from base. -1 for B or T < 1. */
int64_t gpt2_block_acts_bytes(const gpt2_dims *d, int B, int T, nn_dtype t);
/* Carves them from base (gpt2_block_acts_bytes bytes, host or backend, at
 * least NN_ALIGN-aligned): the [BT][k C] tensors, att, then the four [BT]
 * statistics. */
void gpt2_block_acts_carve(const gpt2_dims *d, int B, int T, nn_dtype t, void *base,
                           gpt2_block_acts *out);


/* The head (final LayerNorm, logits, cross-entropy) works on chunks of
 * chunk_rows rows so that only chunk_rows * V logits exist at once (V is
 * 50257: B*T rows at once would be 200 KB per row in fp32). Larger chunks
 * give the logits GEMMs better shapes: 128 rows take 26 MB of fp32 logits
 * at V = 50257 (the CPU's default), 1024 rows 103 MB in bf16 (the GPU's,
 * where 128 would leave the logits GEMM too small to fill the device). */
#define GPT2_HEAD_CHUNK_ROWS_DEFAULT 128
#define GPT2_HEAD_CHUNK_ROWS_DEFAULT_GPU 1024

#ifdef __cplusplus
}
#endif
#endif /* GPT2_MODEL_H */
