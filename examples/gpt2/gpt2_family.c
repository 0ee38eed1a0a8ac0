/*
 * GPT-2 as a model of the shared trainer (examples/trainer/ex_model.h).
 *
 * Units: unit 0 holds the embeddings and the final LayerNorm, unit 1 + l
 * block l (gpt2_model.h's table). The micro-step follows the tied embedding:
 *
 *   fetch embed; x = wte[tokens] + wpe; release                (forward)
 *   per block: fetch; x = block(x); release
 *   fetch embed; loss, and the head's backward (dwte, dln_f); release,
 *       its gradient still open (wte is tied to the output projection)
 *   per block, reversed: fetch; backward; grads_ready; release
 *   the embedding's backward into the same open gradient; grads_ready embed
 *
 * The math is gpt2_backend.h's (BLAS in fp32 on "cpu"; cuBLASLt and kernels
 * on "cuda", in zeroshard's compute dtype, on zeroshard's own parameter and
 * gradient buffers). Weights can start from an llm.c model file
 * (app.init_from), each rank reading only the ranges it owns.
 *
 * GPT-2's app keys (the trainer's generic ones are in ex_trainer.h):
 *   model [""]            "124M", "350M", "774M", "1558M", or "" for the sizes below
 *   n_layer [4] n_head [4] n_embd [128] vocab [256] block_size [256]
 *   init_from [""]        an llm.c model file (gpt2_124M.bin, fp32 version 3) to start from
 *   recompute [false]     keep only block inputs; recompute activations in backward
 *   head_chunk_rows [0]   rows of logits the head holds at once; 0: 128 on the CPU, 1024 on
 *                         CUDA (gpt2_model.h)
 *   gelu_fusion [-1]      CUDA: GELU in the c_fc GEMM's epilogue: 0 none, 1 forward, 2 forward
 *                         and backward, -1 the device's default (gpt2_backend.h)
 *   tokenizer [""]        llm.c tokenizer file to decode samples when vocab > 256
 *   lora_r [0], lora_alpha [8], lora_dropout [0], lora_target_modules ["c_attn"],
 *   lora_init_from [""]
 *                         LoRA on a frozen base (examples/trainer/ex_lora.h): the targets
 *                         are Hugging Face's module names c_attn, c_proj (both c_projs;
 *                         attn.c_proj or mlp.c_proj for one), c_fc, or "all-linear"; the
 *                         embeddings, norms, biases and the tied head stay frozen; zs-ckpt
 *                         export --peft writes the adapters as PEFT loads them; with
 *                         init_from the file is the frozen base (zs_params_import_frozen)
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_cuda_stream.h"
#include "ex_decoder.h"
#include "ex_lora.h"
#include "ex_model.h"
#include "ex_trainer.h"
#include "ex_stream.h"
#include "ex_units.h"
#include "gpt2_backend.h"
#include "gpt2_llmc.h"
#include "nn_sim.h"

#define PROGRAM "gpt2_train"

struct ex_model {
    ex_decoder dec; /* first: the micro-step (ex_decoder.h), over the adapter below */
    gpt2_dims dims;
    const char *preset;
    const char *init_from;
    const char *tokenizer_path;
    int recompute;
    int64_t head_chunk_rows, gelu_fusion;
    gpt2_llmc_model *llmc;
    gpt2_llmc_tokenizer *tokenizer;
    ex_lora lora; /* app.lora_*: LoRA on a frozen base (ex_lora.h) */
    ex_units units;
    gpt2_backend *be; /* its device (be->dev) is the trainer's */
    ex_stream ws; /* the micro-step's workspace on the backend's device */
};
_Static_assert(offsetof(struct ex_model, dec) == 0, "ex_decoder.h: the decoder comes first");

/* ---------------------------------------------------------- settings */

/* Reads GPT-2's keys. With a preset (app.model) or an llm.c file
 * (app.init_from) the sizes are not read, so zs_config_app_finish rejects
 * n_layer and friends given beside them instead of silently ignoring them. */
static const ex_decoder_ops decoder_ops; /* below: the adapter over the backend */

static void lora_target_shape(const void *dims, int target, int *in, int *out) {
    gpt2_lora_target_shape(dims, target, in, out);
}

static zs_status configure(zs_config *cfg, ex_model **out, ex_model_facts *facts) {
    ex_model *m = calloc(1, sizeof *m);
    if (!m) return ZS_ERR_OUT_OF_MEMORY;
    *out = m;
    zs_status st;
    char err[EX_ERR_CAP];
    if ((st = zs_config_app_string(cfg, "model", "", &m->preset)) ||
        (st = zs_config_app_string(cfg, "init_from", "", &m->init_from)))
        return st;
    gpt2_dims preset;
    const int have_preset = m->preset[0] != '\0';
    if (have_preset && gpt2_dims_preset(m->preset, &preset) != 0) {
        fprintf(stderr, PROGRAM ": app.model = \"%s\" is not a preset; use \"124M\", \"350M\", "
                        "\"774M\", \"1558M\", or \"\" with app.n_layer etc.\n", m->preset);
        return ZS_ERR_CONFIG;
    }
    gpt2_dims *d = &m->dims;
    if (m->init_from[0] != '\0') {
        if (gpt2_llmc_model_open(m->init_from, &m->llmc, err, sizeof err) != 0) {
            fprintf(stderr, PROGRAM ": app.init_from: %s\n", err);
            return ZS_ERR_IO;
        }
        const gpt2_llmc_config *c = gpt2_llmc_model_config(m->llmc);
        *d = (gpt2_dims){c->num_layers, c->num_heads, c->channels, c->vocab_size, c->max_seq_len};
        if (have_preset && memcmp(&preset, d, sizeof preset) != 0) {
            fprintf(stderr, PROGRAM ": app.model = \"%s\" does not match %s (%d layers, %d heads, "
                            "%d channels, vocab %d, block_size %d)\n", m->preset, m->init_from,
                    d->n_layer, d->n_head, d->n_embd, d->vocab, d->block_size);
            return ZS_ERR_CONFIG;
        }
    } else if (have_preset) {
        *d = preset;
    } else if ((st = ex_config_int(cfg, "n_layer", 4, 1, 1024, &d->n_layer)) ||
               (st = ex_config_int(cfg, "n_head", 4, 1, 1024, &d->n_head)) ||
               (st = ex_config_int(cfg, "n_embd", 128, 1, 1 << 16, &d->n_embd)) ||
               (st = ex_config_int(cfg, "vocab", 256, 2, 1 << 24, &d->vocab)) ||
               (st = ex_config_int(cfg, "block_size", 256, 1, 1 << 20, &d->block_size))) {
        return st;
    }
    if (gpt2_dims_check(d, err, sizeof err) != 0) {
        fprintf(stderr, PROGRAM ": the model's sizes: %s\n", err);
        return ZS_ERR_CONFIG;
    }
    if ((st = zs_config_app_int(cfg, "head_chunk_rows", 0, 0, 1 << 16, &m->head_chunk_rows)) ||
        (st = zs_config_app_int(cfg, "gelu_fusion", -1, -1, 2, &m->gelu_fusion)) ||
        (st = zs_config_app_bool(cfg, "recompute", 0, &m->recompute)) ||
        (st = zs_config_app_string(cfg, "tokenizer", "", &m->tokenizer_path)))
        return st;
    /* PEFT's default targets for GPT-2 are c_attn alone. */
    m->lora = (ex_lora){.n_targets = GPT2_LORA_TARGETS, .default_targets = "c_attn",
                        .target_name = gpt2_lora_target_name,
                        .target_shape = lora_target_shape, .first_block = 1,
                        .n_blocks = d->n_layer};
    if ((st = ex_lora_configure(cfg, PROGRAM, &m->lora)) != ZS_OK) return st;
    snprintf(facts->name, sizeof facts->name, "%s", have_preset ? m->preset : "custom");
    snprintf(facts->description, sizeof facts->description,
             "%d layers, %d heads, %d channels, vocab %d, block %d%s", d->n_layer, d->n_head,
             d->n_embd, d->vocab, d->block_size,
             m->recompute ? "; activations recomputed in backward" : "");
    if (m->lora.r > 0) {
        const size_t used = strlen(facts->description);
        snprintf(facts->description + used, sizeof facts->description - used,
                 "; LoRA rank %d, alpha %g on a frozen base: %lld trainable adapter parameters",
                 m->lora.r, m->lora.alpha, (long long)ex_lora_params(&m->lora, d));
    }
    facts->vocab = d->vocab;
    facts->max_seq = facts->default_seq = d->block_size;
    facts->byte_tokens = d->vocab <= 256;
    /* The decoder (ex_decoder.h). The head is tied: unit 0 again, whose
     * backward adds into wte and wpe. */
    m->dec = (ex_decoder){.program = PROGRAM, .table = &gpt2_param_table, .dims = &m->dims,
                          .ops = &decoder_ops, .model = m, .units = &m->units, .ws = &m->ws,
                          .n_layer = d->n_layer, .head_unit = 0, .embed_grads = 0x3u,
                          .recompute = m->recompute, .lora = m->lora.r > 0,
                          .lora_unit0 = gpt2_param_table.num_units(d), .adapters = &m->lora};
    return ZS_OK;
}

/* ------------------------------------------------------- workspace */

static int start(ex_model *m, zs_ctx *zs, int B, int T, ex_model_facts *facts, char *err,
                 size_t cap) {
    const gpt2_dims *d = &m->dims;
    if (strcmp(zs_backend_name(zs), "cuda") == 0) {
        /* The model computes in zeroshard's compute dtype on its own buffers. */
        const zs_dtype dt = facts->dtype;
        const gpt2_cuda_options options = {
            .dtype = dt == ZS_DTYPE_BF16 ? NN_BF16 : dt == ZS_DTYPE_FP16 ? NN_F16 : NN_F32,
            .gelu_fusion = (int)m->gelu_fusion};
        if (gpt2_cuda_backend_create(ex_cuda_stream(zs), &options, &m->be, err, cap) != 0)
            return -1;
    } else if (strcmp(zs_backend_name(zs), "sim") == 0) {
        /* The CPU's layers as kernels on zeroshard's sim stream. */
        nn_device *dev = NULL;
        if (nn_sim_device_create(zs, &dev, err, cap) != 0 ||
            gpt2_layers_backend_create(dev, &m->be, err, cap) != 0)
            return -1;
    } else if (!(m->be = gpt2_cpu_backend_create())) {
        snprintf(err, cap, "the model's CPU backend: out of host memory");
        return -1;
    }
    const int cuda = strcmp(m->be->ops->name, "cuda") == 0;
    if (gpt2_backend_set_lora(m->be, m->lora.r, m->lora.alpha, m->lora.dropout, err, cap) != 0)
        return -1;
    if (ex_units_attach(&m->units, m->be->dev, err, cap) != 0) return -1;
    if (m->head_chunk_rows == 0)
        m->head_chunk_rows = cuda ? GPT2_HEAD_CHUNK_ROWS_DEFAULT_GPU : GPT2_HEAD_CHUNK_ROWS_DEFAULT;
    const size_t acts_bytes = (size_t)gpt2_block_acts_bytes(d, B, T, m->be->dtype);
    if (ex_stream_alloc(&m->ws, m->be->dev, d->n_layer, B, T,
                        (size_t)d->n_embd * nn_dtype_size(m->be->dtype), acts_bytes, m->recompute,
                        m->be->ops->block_scratch_bytes(m->be, d, B, T),
                        m->be->ops->head_scratch_bytes(m->be, d, (int)m->head_chunk_rows),
                        &facts->activation_bytes, err, cap) != 0)
        return -1;
    /* Every rank opens it: a sample starts from its end-of-text token on
     * every rank alike. */
    char tok_err[EX_ERR_CAP];
    if (d->vocab > 256 && m->tokenizer_path[0] != '\0' &&
        gpt2_llmc_tokenizer_open(m->tokenizer_path, &m->tokenizer, tok_err, sizeof tok_err) != 0) {
        if (zs_rank(zs) == 0)
            fprintf(stderr, PROGRAM ": app.tokenizer: %s (printing token ids)\n", tok_err);
        m->tokenizer = NULL;
    }
    return 0;
}

static nn_device *device(ex_model *m) { return m->be->dev; }

static gpt2_block_acts block_acts(const ex_model *m, int l, int B, int T) {
    gpt2_block_acts a;
    gpt2_block_acts_carve(&m->dims, B, T, m->be->dtype, ex_stream_acts(&m->ws, l), &a);
    return a;
}

/* ------------------------------------------- the decoder's ops (ex_decoder.h) */

/* Unit 0 (wte, wpe, ln_f's weight and bias) and a block's twelve tensors,
 * in registration order, as the backend's structs (no adapters: lora_view
 * adds them). */
static gpt2_embed_w embed_view(void *const *p) {
    return (gpt2_embed_w){.wte = p[0], .wpe = p[1], .lnfw = p[2], .lnfb = p[3]};
}

static gpt2_block_w block_view(void *const *p) {
    return (gpt2_block_w){.ln1w = p[0], .ln1b = p[1], .qkvw = p[2], .qkvb = p[3],
                          .attprojw = p[4], .attprojb = p[5], .ln2w = p[6], .ln2b = p[7],
                          .fcw = p[8], .fcb = p[9], .fcprojw = p[10], .fcprojb = p[11]};
}

static int op_embed_forward(void *model, int B, int T, void *const *p, const int *tokens,
                            void *x) {
    ex_model *m = model;
    const gpt2_embed_w w = embed_view(p);
    return m->be->ops->embed_forward(m->be, &m->dims, B, T, &w, tokens, x);
}

static int op_embed_backward(void *model, int B, int T, void *const *g, const int *tokens,
                             const void *dx) {
    ex_model *m = model;
    gpt2_embed_w w = embed_view(g);
    return m->be->ops->embed_backward(m->be, &m->dims, B, T, &w, tokens, dx);
}

/* The adapters of a block (its adapter unit's tensors: A and B of each
 * adapted Linear, in target order) into the struct's lora_A and lora_B. */
static void lora_view(const ex_model *m, void *const *a, gpt2_block_w *w) {
    for (int t = 0, i = 0; a != NULL && t < GPT2_LORA_TARGETS; t++) {
        if (!(m->lora.targets & (1u << t))) continue;
        w->lora_A[t] = a[i++];
        w->lora_B[t] = a[i++];
    }
}

static int op_block_forward(void *model, int l, int B, int T, void *const *p,
                            void *const *lora, const void *x, void *y) {
    ex_model *m = model;
    m->be->lora.seed = ex_lora_block_seed(&m->lora, l);
    gpt2_block_w w = block_view(p);
    lora_view(m, lora, &w);
    gpt2_block_acts a = block_acts(m, l, B, T);
    return m->be->ops->block_forward(m->be, &m->dims, B, T, &w, x, &a, y, m->ws.block_scratch);
}

static int op_block_backward(void *model, int l, int B, int T, void *const *p, void *const *g,
                             void *const *lora, void *const *lora_g, const void *x,
                             const void *dy, void *dx) {
    ex_model *m = model;
    m->be->lora.seed = ex_lora_block_seed(&m->lora, l);
    gpt2_block_w w = block_view(p), bg = block_view(g);
    lora_view(m, lora, &w);
    lora_view(m, lora_g, &bg);
    const gpt2_block_acts a = block_acts(m, l, B, T);
    return m->be->ops->block_backward(m->be, &m->dims, B, T, &w, &bg, x, &a, dy, dx,
                                      m->ws.block_scratch);
}

/* The head is tied: unit 0's tensors. */
static int op_head_forward_backward(void *model, int B, int T, void *const *p, void *const *g,
                                    const void *x, const int *targets, float dloss, void *dx,
                                    float *losses) {
    ex_model *m = model;
    const gpt2_embed_w w = embed_view(p);
    gpt2_embed_w eg = embed_view(g);
    return m->be->ops->head_forward_backward(m->be, &m->dims, B, T, &w, &eg, x, targets, dloss,
                                             dx, losses, (int)m->head_chunk_rows,
                                             m->ws.head_scratch);
}

static int op_head_forward(void *model, int B, int T, void *const *p, const void *x,
                           const int *targets, float *losses) {
    ex_model *m = model;
    const gpt2_embed_w w = embed_view(p);
    return m->be->ops->head_forward(m->be, &m->dims, B, T, &w, x, targets, losses,
                                    (int)m->head_chunk_rows, m->ws.head_scratch);
}

static int op_head_logits(void *model, int B, int T, void *const *p, const void *x, int row,
                          float *host_logits) {
    ex_model *m = model;
    const gpt2_embed_w w = embed_view(p);
    return m->be->ops->head_logits(m->be, &m->dims, B, T, &w, x, row, host_logits,
                                   m->ws.head_scratch);
}

static const char *op_last_error(void *model) {
    const ex_model *m = model;
    return m->be->ops->last_error(m->be);
}

static const ex_decoder_ops decoder_ops = {
    .embed_forward = op_embed_forward,
    .embed_backward = op_embed_backward,
    .block_forward = op_block_forward,
    .block_backward = op_block_backward,
    .head_forward_backward = op_head_forward_backward,
    .head_forward = op_head_forward,
    .head_logits = op_head_logits,
    .last_error = op_last_error,
};

/* -------------------------------------------------------------- import */

static int llmc_source(void *user, const zs_param *p, int64_t first, int64_t count, float *dst,
                       char *err, size_t err_cap) {
    return gpt2_llmc_param_read(user, zs_param_name(p), zs_param_numel(p), first, count, dst, err,
                                err_cap);
}

/* The weights (app.init_from: with LoRA the frozen base alone, the
 * adapters keeping PEFT's initialization), then the adapters
 * (app.lora_init_from). */
static zs_status import(ex_model *m, zs_ctx *zs) {
    const zs_status st = !m->llmc         ? ZS_OK
                         : m->lora.r > 0 ? zs_params_import_frozen(zs, llmc_source, m->llmc)
                                         : zs_params_import(zs, llmc_source, m->llmc);
    return st != ZS_OK ? st : ex_lora_import(&m->lora, zs, PROGRAM);
}

/* LoRA: PEFT's adapter_config.json for zs-ckpt export --peft. The base is
 * this program's own initialization, which no path names. */
static zs_status save_state(ex_model *m, zs_ctx *zs) {
    if (m->lora.r == 0) return ZS_OK;
    char text[4096];
    const int n = ex_lora_adapter_config(&m->lora, "", text, sizeof text);
    if (n < 0) return ZS_ERR_INTERNAL;
    return zs_user_state_set(zs, EX_LORA_CONFIG_STATE, text, (size_t)n, 0);
}

static double flops_per_token(const ex_model *m, int T) { return gpt2_flops_per_token(&m->dims, T); }

static void print_token(ex_model *m, int token, FILE *out) {
    if (m->dims.vocab <= 256) {
        fputc(token, out);
    } else if (m->tokenizer) {
        size_t len = 0;
        const char *bytes = gpt2_llmc_tokenizer_decode(m->tokenizer, token, &len);
        if (bytes) fwrite(bytes, 1, len, out);
    } else {
        fprintf(out, "[%d]", token);
    }
}

static int start_token(ex_model *m) {
    return m->tokenizer && gpt2_llmc_tokenizer_eot(m->tokenizer) >= 0
               ? gpt2_llmc_tokenizer_eot(m->tokenizer)
               : 0;
}

static void destroy(ex_model *m) {
    if (!m) return;
    ex_stream_free(&m->ws);
    ex_units_free(&m->units);
    if (m->be) m->be->ops->destroy(m->be);
    gpt2_llmc_model_destroy(m->llmc);
    gpt2_llmc_tokenizer_destroy(m->tokenizer);
    free(m);
}

const ex_model_ops gpt2_model_ops = {
    .program = PROGRAM,
    .family = "gpt2",
    .configure = configure,
    .describe = ex_decoder_model_describe,
    .start = start,
    .device = device,
    .import = import,
    .save_state = save_state,
    .flops_per_token = flops_per_token,
    .train_micro_step = ex_decoder_model_train_micro_step,
    .eval_losses = ex_decoder_model_eval_losses,
    .last_logits = ex_decoder_model_last_logits,
    .print_token = print_token,
    .start_token = start_token,
    .destroy = destroy,
};
