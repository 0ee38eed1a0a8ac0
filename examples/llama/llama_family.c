/*
 * The Llama family (Llama 2/3, SmolLM2, TinyLlama, Mistral without a
 * sliding window, Qwen2) as a model of the shared trainer
 * (examples/trainer/ex_model.h).
 *
 * Units (llama_model.h): unit 0 the token embedding (with model.norm when
 * the head is tied), unit 1 + l block l, and for an untied head a last unit
 * with model.norm and lm_head. A micro-step:
 *
 *   fetch embed; x = embed_tokens[tokens]; release                (forward)
 *   per block: fetch; x = block(x); release
 *   the head (tied: fetch embed again, its gradient stays open; untied:
 *       fetch lm_head); loss and the head's backward; release
 *       (untied: grads_ready lm_head first)
 *   per block, reversed: fetch; backward; grads_ready; release
 *   the embedding's backward: tied, into the gradient left open; untied,
 *       into a gradient opened without its parameters (zs_grads_open, so
 *       stage 3 gathers no embedding table for it); grads_ready embed
 *
 * Parameters carry Hugging Face's names, so a checkpoint directory of that
 * library (config.json and model.safetensors, or shards with an index)
 * imports by name, each rank reading only the byte ranges it owns
 * (zs_params_import_safetensors), and `zs-ckpt export --hf` writes what it
 * loads: the model's config.json travels in checkpoints as the user state
 * "hf.config.json".
 *
 * The family's app keys (the trainer's generic ones are in ex_trainer.h):
 *   model [""]            a shape by name: "tiny" (the Shakespeare demo), "llama-3.2-1b",
 *                         "llama-3.1-8b", "llama-3.1-70b"
 *   config [""]           a Hugging Face config.json: the shape, trained from initialization
 *   init_from [""]        a Hugging Face model directory (config.json, model.safetensors or
 *                         model.safetensors.index.json): its shape and weights
 *                         (exactly one of the three)
 *   init_ignore [""]      tensors of app.init_from that are not parameters and are skipped
 *                         rather than refused: fnmatch patterns separated by commas
 *                         ("*.attn.bias,*.scales"); rotary_emb.inv_freq buffers, and for a
 *                         tied head (tie_word_embeddings) the copy of the embedding some
 *                         checkpoints carry as lm_head.weight, are skipped without it
 *   recompute [false]     keep only block inputs; recompute activations in backward
 *   head_chunk_rows [0]   rows of logits the head holds at once; 0: 128 on the CPU, 1024 on CUDA
 *   lora_r [0], lora_alpha [8], lora_dropout [0], lora_target_modules ["q_proj,v_proj"],
 *   lora_init_from [""]
 *                         LoRA on a frozen base (examples/trainer/ex_lora.h): with init_from,
 *                         the base is imported and the adapters start as PEFT's; zs-ckpt
 *                         export --peft writes them as PEFT loads them
 */
#define _DEFAULT_SOURCE /* stat, strdup, realpath */

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ex_cuda_stream.h"
#include "ex_decoder.h"
#include "ex_error.h"
#include "ex_model.h"
#include "ex_trainer.h"
#include "ex_stream.h"
#include "ex_units.h"
#include "llama_backend.h"
#include "nn_sim.h"

#define PROGRAM "llama_train"
#define HEAD_CHUNK_ROWS_CPU 128
#define HEAD_CHUNK_ROWS_GPU 1024
#define CONFIG_NAME "hf.config.json"
/* Patterns app.init_ignore may give, beyond the family's own two. */
#define IGNORE_MAX 16

struct ex_model {
    ex_decoder dec; /* first: the micro-step (ex_decoder.h), over the adapter below */
    llama_dims dims;
    const char *preset, *config_path, *init_from, *init_ignore;
    /* app.init_ignore split at its commas: IGNORE_MAX patterns of at most
     * 255 bytes. */
    char ignore[IGNORE_MAX][256];
    int ignore_count;
    char weights[4096];      /* init_from's safetensors file or index */
    char *config_json;       /* the config.json that travels with checkpoints */
    int recompute;
    int64_t head_chunk_rows;
    ex_lora lora; /* app.lora_*: LoRA on a frozen base (ex_lora.h) */
    ex_units units;
    nn_device *dev;
    llama_backend *be;
    ex_stream ws; /* the micro-step's workspace on the device */
    /* QLoRA: the block being computed, and one matrix dequantized from its
     * quantized unit (compute dtype; fp32 too where the device computes in
     * fp32 on lower-precision parameters), on the device. */
    zs_ctx *zs;
    int block;
    void *matrix, *matrix32;
};
_Static_assert(offsetof(struct ex_model, dec) == 0, "ex_decoder.h: the decoder comes first");

/* ---------------------------------------------------------- settings */

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The config.json and the weights of a Hugging Face model directory (or of
 * a .safetensors / index file with config.json beside it). */
static int locate(const char *init_from, char *config, size_t config_cap, char *weights,
                  size_t weights_cap) {
    char dir[4096];
    if (is_dir(init_from)) {
        snprintf(dir, sizeof dir, "%s", init_from);
        snprintf(weights, weights_cap, "%s", init_from);
    } else {
        snprintf(dir, sizeof dir, "%s", init_from);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, sizeof dir, ".");
        snprintf(weights, weights_cap, "%s", init_from);
    }
    const int n = snprintf(config, config_cap, "%.4000s/config.json", dir);
    return n > 0 && (size_t)n < config_cap && is_file(config) ? 0 : -1;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        const long n = ftell(f);
        if (n >= 0 && n <= (1L << 20) && fseek(f, 0, SEEK_SET) == 0 &&
            (text = calloc(1, (size_t)n + 1)) && fread(text, 1, (size_t)n, f) != (size_t)n) {
            free(text);
            text = NULL;
        }
    }
    fclose(f);
    return text;
}

/* app.init_ignore into m->ignore: patterns separated by commas, blanks
 * around them dropped. 0, or -1 after a message. */
static int split_patterns(ex_model *m) {
    m->ignore_count = 0;
    for (const char *c = m->init_ignore; *c;) {
        while (*c == ',' || *c == ' ' || *c == '\t') c++;
        if (!*c) break;
        size_t n = strcspn(c, ",");
        while (n > 0 && (c[n - 1] == ' ' || c[n - 1] == '\t')) n--;
        if (m->ignore_count == IGNORE_MAX || n >= sizeof m->ignore[0]) {
            fprintf(stderr, PROGRAM ": app.init_ignore = \"%.60s...\": at most %d patterns of "
                            "at most %zu bytes each, separated by commas\n",
                    m->init_ignore, IGNORE_MAX, sizeof m->ignore[0] - 1);
            return -1;
        }
        memcpy(m->ignore[m->ignore_count], c, n);
        m->ignore[m->ignore_count++][n] = '\0';
        c += strcspn(c, ",");
    }
    if (m->ignore_count > 0 && m->init_from[0] == '\0') {
        fprintf(stderr, PROGRAM ": app.init_ignore is set, but app.init_from is not: the "
                        "patterns skip tensors of the checkpoint app.init_from imports\n");
        return -1;
    }
    return 0;
}

static const ex_decoder_ops decoder_ops; /* below: the adapter over the backend */

static void lora_target_shape(const void *dims, int target, int *in, int *out) {
    llama_lora_target_shape(dims, target, in, out);
}

static zs_status configure(zs_config *cfg, ex_model **out, ex_model_facts *facts) {
    ex_model *m = calloc(1, sizeof *m);
    if (!m) return ZS_ERR_OUT_OF_MEMORY;
    *out = m;
    zs_status st;
    char err[EX_ERR_CAP];
    if ((st = zs_config_app_string(cfg, "model", "", &m->preset)) ||
        (st = zs_config_app_string(cfg, "config", "", &m->config_path)) ||
        (st = zs_config_app_string(cfg, "init_from", "", &m->init_from)) ||
        (st = zs_config_app_string(cfg, "init_ignore", "", &m->init_ignore)) ||
        (st = zs_config_app_bool(cfg, "recompute", 0, &m->recompute)) ||
        (st = zs_config_app_int(cfg, "head_chunk_rows", 0, 0, 1 << 16, &m->head_chunk_rows)))
        return st;
    const int given = (m->preset[0] != '\0') + (m->config_path[0] != '\0') +
                      (m->init_from[0] != '\0');
    if (given != 1) {
        fprintf(stderr, PROGRAM ": give exactly one of app.model (a shape: tiny, llama-3.2-1b, "
                        "llama-3.1-8b, llama-3.1-70b), app.config (a Hugging Face config.json) "
                        "and app.init_from (a Hugging Face model directory); %s\n",
                given ? "several are set" : "none is set");
        return ZS_ERR_CONFIG;
    }
    if (split_patterns(m) != 0) return ZS_ERR_CONFIG;
    m->lora = (ex_lora){.n_targets = LLAMA_LORA_TARGETS, .default_targets = "q_proj,v_proj",
                        .target_name = llama_lora_target_name,
                        .target_shape = lora_target_shape, .first_block = 1,
                        .quantizable = 1};
    if ((st = ex_lora_configure(cfg, PROGRAM, &m->lora)) != ZS_OK) return st;
    char config[4096] = "";
    if (m->preset[0] != '\0') {
        if (llama_dims_preset(m->preset, &m->dims) != 0) {
            fprintf(stderr, PROGRAM ": app.model = \"%s\" is not a shape this program knows:",
                    m->preset);
            for (int i = 0; llama_preset_names[i]; i++) fprintf(stderr, " %s", llama_preset_names[i]);
            fprintf(stderr, "\n");
            return ZS_ERR_CONFIG;
        }
    } else {
        if (m->init_from[0] != '\0' &&
            locate(m->init_from, config, sizeof config, m->weights, sizeof m->weights) != 0) {
            fprintf(stderr, PROGRAM ": app.init_from = \"%s\": no config.json beside it (a "
                            "Hugging Face model directory holds config.json and "
                            "model.safetensors or model.safetensors.index.json)\n",
                    m->init_from);
            return ZS_ERR_IO;
        }
        if (m->config_path[0] != '\0') snprintf(config, sizeof config, "%s", m->config_path);
        if (llama_config_read(config, &m->dims, err, sizeof err) != 0) {
            fprintf(stderr, PROGRAM ": %s: %s\n",
                    m->init_from[0] ? "app.init_from" : "app.config", err);
            return ZS_ERR_CONFIG;
        }
        /* The file as given travels with checkpoints (the keys this program
         * ignores, token ids and the like, included). */
        m->config_json = read_text(config);
    }
    if (!m->config_json) {
        char text[4096];
        const int n = llama_config_write(&m->dims, text, sizeof text);
        if (n < 0 || (size_t)n >= sizeof text || !(m->config_json = strdup(text))) {
            fprintf(stderr, PROGRAM ": cannot write the model's config.json\n");
            return ZS_ERR_INTERNAL;
        }
    }
    const llama_dims *d = &m->dims;
    snprintf(facts->name, sizeof facts->name, "%s",
             m->preset[0] ? m->preset : d->model_type);
    snprintf(facts->description, sizeof facts->description,
             "%s: %d layers, %d query / %d key-value heads of %d, %d channels, MLP %d, vocab %d, "
             "%s head%s%s",
             d->model_type, d->n_layer, d->n_head, d->n_kv_head, d->head_dim, d->n_embd, d->n_ff,
             d->vocab, d->tied ? "tied" : "untied",
             d->qkv_bias ? ", q/k/v biases" : "",
             m->recompute ? "; activations recomputed in backward" : "");
    m->lora.n_blocks = d->n_layer;
    if (m->lora.r > 0) {
        const size_t used = strlen(facts->description);
        snprintf(facts->description + used, sizeof facts->description - used,
                 "; LoRA rank %d, alpha %g on a frozen base: %lld trainable adapter parameters",
                 m->lora.r, m->lora.alpha, (long long)ex_lora_params(&m->lora, d));
    }
    facts->vocab = d->vocab;
    facts->max_seq = d->max_seq < (1 << 20) ? d->max_seq : (1 << 20);
    facts->default_seq = facts->max_seq < 2048 ? facts->max_seq : 2048;
    facts->byte_tokens = d->vocab <= 256;
    /* The decoder (ex_decoder.h). Tied, the head is unit 0 again; the
     * embedding's backward adds into embed_tokens alone. */
    m->dec = (ex_decoder){.program = PROGRAM, .table = &llama_param_table, .dims = &m->dims,
                          .ops = &decoder_ops, .model = m, .units = &m->units, .ws = &m->ws,
                          .n_layer = d->n_layer, .head_unit = d->tied ? 0 : llama_head_unit(d),
                          .embed_grads = 0x1u, .recompute = m->recompute,
                          .lora = m->lora.r > 0, .lora_unit0 = llama_param_table.num_units(d),
                          .adapters = &m->lora};
    return ZS_OK;
}

/* ------------------------------------------------------- workspace */

/* QLoRA's weight source (llama_backend.weights): matrix `slot` of the
 * block being computed, dequantized from its unit's records into one
 * matrix's memory (zs_param_dequantize, on the device's stream). */
static int dequantized_matrix(void *user, int slot, const void **out, char *err, size_t cap) {
    ex_model *m = user;
    const int unit = 1 + m->block, i = llama_block_index(&m->dims, (llama_block_param)slot);
    if (i < 0 || !m->units.view[unit])
        return ex_error(err, cap, NN_ERR_ARG, "llama: block %d has no quantized matrix %d",
                        m->block, slot);
    const zs_param *p = m->units.param[m->units.view[unit][i]];
    if (zs_param_dequantize(m->zs, p, m->matrix) != ZS_OK)
        return ex_error(err, cap, NN_ERR_DEVICE, "zs_param_dequantize('%s'): %s",
                        zs_param_name(p), zs_last_error());
    *out = m->matrix;
    if (m->units.direct) return 0;
    if (zs_backend_convert(m->zs, m->matrix32, ZS_DTYPE_FP32, m->matrix, m->units.dtype,
                           zs_param_numel(p)) != ZS_OK)
        return ex_error(err, cap, NN_ERR_DEVICE, "zs_backend_convert('%s'): %s",
                        zs_param_name(p), zs_last_error());
    *out = m->matrix32;
    return 0;
}

/* With quantized blocks: the weight source and its memory, one matrix (the
 * largest) in the compute dtype, and in fp32 where the device computes so. */
static int quantized_matrices(ex_model *m, zs_ctx *zs, char *err, size_t cap) {
    m->zs = zs;
    int64_t largest = 0;
    for (int k = 0; k < m->units.param_count; k++)
        if (zs_param_is_quantized(m->units.param[k]) && m->units.numel[k] > largest)
            largest = m->units.numel[k];
    if (largest == 0) return 0;
    const size_t elem = zs_dtype_size(m->units.dtype);
    if (m->dev->ops->alloc(m->dev, (size_t)largest * elem, &m->matrix) != 0 ||
        (!m->units.direct &&
         m->dev->ops->alloc(m->dev, (size_t)largest * sizeof(float), &m->matrix32) != 0))
        return ex_fail(err, cap, "one dequantized matrix (%lld elements): %s",
                       (long long)largest, m->dev->ops->last_error(m->dev));
    m->be->weights = (llama_weight_source){.get = dequantized_matrix, .user = m};
    return 0;
}

static int start(ex_model *m, zs_ctx *zs, int B, int T, ex_model_facts *facts, char *err,
                 size_t cap) {
    const llama_dims *d = &m->dims;
    const int cuda = strcmp(zs_backend_name(zs), "cuda") == 0;
    if (cuda) {
        const nn_dtype dt = facts->dtype == ZS_DTYPE_BF16   ? NN_BF16
                            : facts->dtype == ZS_DTYPE_FP16 ? NN_F16
                                                            : NN_F32;
        if (nn_cuda_device_create(ex_cuda_stream(zs), dt, &m->dev, err, cap) != 0) return -1;
        if (llama_cuda_backend_create(m->dev, d, T, &m->be, err, cap) != 0) return -1;
    } else if (strcmp(zs_backend_name(zs), "sim") == 0) {
        /* The CPU's layers as kernels on zeroshard's sim stream. */
        if (nn_sim_device_create(zs, &m->dev, err, cap) != 0) return -1;
        if (llama_cpu_backend_create(m->dev, d, T, &m->be, err, cap) != 0) return -1;
    } else {
        if (!(m->dev = nn_cpu_device_create())) {
            snprintf(err, cap, "the model's CPU device: out of host memory");
            return -1;
        }
        if (llama_cpu_backend_create(m->dev, d, T, &m->be, err, cap) != 0) return -1;
    }
    if (llama_backend_set_lora(m->be, m->lora.r, m->lora.alpha, m->lora.dropout, err, cap) != 0)
        return -1;
    if (ex_units_attach(&m->units, m->dev, err, cap) != 0) return -1;
    if (quantized_matrices(m, zs, err, cap) != 0) return -1;
    if (m->head_chunk_rows == 0) m->head_chunk_rows = cuda ? HEAD_CHUNK_ROWS_GPU : HEAD_CHUNK_ROWS_CPU;
    const size_t acts_bytes = (size_t)llama_block_acts_bytes(d, B, T, m->dev->dtype);
    if (ex_stream_alloc(&m->ws, m->dev, d->n_layer, B, T,
                        (size_t)d->n_embd * nn_dtype_size(m->dev->dtype), acts_bytes, m->recompute,
                        m->be->ops->block_scratch_bytes(m->be, B, T),
                        m->be->ops->head_scratch_bytes(m->be, B, T, (int)m->head_chunk_rows),
                        &facts->activation_bytes, err, cap) != 0)
        return -1;
    return 0;
}

static nn_device *device(ex_model *m) { return m->dev; }

static llama_block_acts block_acts(const ex_model *m, int l, int B, int T) {
    llama_block_acts a;
    llama_block_acts_carve(&m->dims, B, T, m->dev->dtype, ex_stream_acts(&m->ws, l), &a);
    return a;
}

/* ------------------------------------------------------ the unit views */

/* A block's registered tensors (pointers in registration order) into the
 * struct, absent biases NULL. */
static void block_view(const llama_dims *d, void *const *p, llama_block_w *w) {
    void *slot[LLAMA_BLOCK_SLOTS] = {0};
    for (int s = 0; s < LLAMA_BLOCK_SLOTS; s++) {
        const int i = llama_block_index(d, (llama_block_param)s);
        if (i >= 0) slot[s] = p[i];
    }
    *w = (llama_block_w){
        .attn_norm = slot[LLAMA_P_ATTN_NORM], .wq = slot[LLAMA_P_WQ], .bq = slot[LLAMA_P_BQ],
        .wk = slot[LLAMA_P_WK], .bk = slot[LLAMA_P_BK], .wv = slot[LLAMA_P_WV],
        .bv = slot[LLAMA_P_BV], .wo = slot[LLAMA_P_WO], .bo = slot[LLAMA_P_BO],
        .mlp_norm = slot[LLAMA_P_MLP_NORM], .wgate = slot[LLAMA_P_WGATE],
        .bgate = slot[LLAMA_P_BGATE], .wup = slot[LLAMA_P_WUP], .bup = slot[LLAMA_P_BUP],
        .wdown = slot[LLAMA_P_WDOWN], .bdown = slot[LLAMA_P_BDOWN]};
}

/* The head's weights in p, its unit's tensors (ex_decoder.head_unit): tied,
 * unit 0 holds (embed_tokens, norm); untied, the head unit (norm, lm_head). */
static void head_view(const ex_model *m, void *const *p, llama_head_w *w) {
    *w = m->dims.tied ? (llama_head_w){.norm = p[1], .wout = p[0]}
                      : (llama_head_w){.norm = p[0], .wout = p[1]};
}

/* ------------------------------------------- the decoder's ops (ex_decoder.h) */

static int op_embed_forward(void *model, int B, int T, void *const *p, const int *tokens,
                            void *x) {
    ex_model *m = model;
    const llama_embed_w w = {.wte = p[0]};
    return m->be->ops->embed_forward(m->be, B, T, &w, tokens, x);
}

static int op_embed_backward(void *model, int B, int T, void *const *g, const int *tokens,
                             const void *dx) {
    ex_model *m = model;
    llama_embed_w w = {.wte = g[0]};
    return m->be->ops->embed_backward(m->be, B, T, &w, tokens, dx);
}

/* The adapters of a block (its adapter unit's tensors: A and B of each
 * adapted Linear, in target order) into the struct's lora_A and lora_B. */
static void lora_view(const ex_model *m, void *const *a, llama_block_w *w) {
    for (int t = 0, i = 0; a != NULL && t < LLAMA_LORA_TARGETS; t++) {
        if (!(m->lora.targets & (1u << t))) continue;
        w->lora_A[t] = a[i++];
        w->lora_B[t] = a[i++];
    }
}

static int op_block_forward(void *model, int l, int B, int T, void *const *p,
                            void *const *lora, const void *x, void *y) {
    ex_model *m = model;
    m->be->lora.seed = ex_lora_block_seed(&m->lora, l);
    m->block = l;
    llama_block_w w;
    block_view(&m->dims, p, &w);
    lora_view(m, lora, &w);
    llama_block_acts a = block_acts(m, l, B, T);
    return m->be->ops->block_forward(m->be, B, T, &w, x, &a, y, m->ws.block_scratch);
}

static int op_block_backward(void *model, int l, int B, int T, void *const *p, void *const *g,
                             void *const *lora, void *const *lora_g, const void *x,
                             const void *dy, void *dx) {
    ex_model *m = model;
    m->be->lora.seed = ex_lora_block_seed(&m->lora, l);
    m->block = l;
    llama_block_w w, bg;
    block_view(&m->dims, p, &w);
    block_view(&m->dims, g, &bg);
    lora_view(m, lora, &w);
    lora_view(m, lora_g, &bg);
    const llama_block_acts a = block_acts(m, l, B, T);
    return m->be->ops->block_backward(m->be, B, T, &w, &bg, x, &a, dy, dx, m->ws.block_scratch);
}

static int op_head_forward_backward(void *model, int B, int T, void *const *p, void *const *g,
                                    const void *x, const int *targets, float dloss, void *dx,
                                    float *losses) {
    ex_model *m = model;
    llama_head_w hw, hg;
    head_view(m, p, &hw);
    head_view(m, g, &hg);
    return m->be->ops->head_forward_backward(m->be, B, T, &hw, &hg, x, targets, dloss, dx,
                                             losses, (int)m->head_chunk_rows, m->ws.head_scratch);
}

static int op_head_forward(void *model, int B, int T, void *const *p, const void *x,
                           const int *targets, float *losses) {
    ex_model *m = model;
    llama_head_w hw;
    head_view(m, p, &hw);
    return m->be->ops->head_forward(m->be, B, T, &hw, x, targets, losses,
                                    (int)m->head_chunk_rows, m->ws.head_scratch);
}

static int op_head_logits(void *model, int B, int T, void *const *p, const void *x, int row,
                          float *host_logits) {
    ex_model *m = model;
    llama_head_w hw;
    head_view(m, p, &hw);
    return m->be->ops->head_logits(m->be, B, T, &hw, x, row, host_logits, m->ws.head_scratch);
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

/* -------------------------------------------------- checkpoints in and out */

/* app.init_from's import options: the ignore patterns into `patterns`
 * [2 + IGNORE_MAX], the base alone with LoRA. */
static zs_safetensors_import base_options(const ex_model *m, const char **patterns) {
    int n = 0;
    /* Old checkpoints carry the rotary table's inverse frequencies, which
     * this model computes (llama_rope_table). */
    patterns[n++] = "*.rotary_emb.inv_freq";
    /* A tied head has no lm_head parameter: its weight is the embedding.
     * Some writers still save it as lm_head.weight; transformers loads such
     * a file and ties the head to the embedding, dropping the copy, and so
     * does this import (its INFO line names the tensors it skipped). */
    if (m->dims.tied) patterns[n++] = "lm_head.weight";
    for (int k = 0; k < m->ignore_count; k++) patterns[n++] = m->ignore[k];
    /* With LoRA the file holds the base alone: the adapters keep their
     * initialization (B = 0: training starts from the base exactly). */
    return (zs_safetensors_import){.ignore = patterns, .ignore_count = n,
                                   .frozen_only = m->lora.r > 0};
}

/* The units; with LoRA, app.init_from declared as the frozen base, which
 * zs_build imports (also when it resumes: checkpoints record the base
 * instead of copying it, zeroshard.h's zs_set_frozen_base). */
static zs_status describe(ex_model *m, zs_ctx *zs, ex_model_facts *facts) {
    zs_status st = ex_decoder_model_describe(m, zs, facts);
    if (st != ZS_OK || m->lora.r == 0 || m->init_from[0] == '\0') return st;
    const char *patterns[2 + IGNORE_MAX];
    const zs_safetensors_import options = base_options(m, patterns);
    facts->init_from_is_base = 1;
    return zs_set_frozen_base(zs, m->weights, &options);
}

/* Without LoRA the weights (app.init_from); with it the adapters
 * (app.lora_init_from), the base being zs_build's. */
static zs_status import(ex_model *m, zs_ctx *zs) {
    if (m->lora.r > 0) return ex_lora_import(&m->lora, zs, PROGRAM);
    if (m->init_from[0] == '\0') return ZS_OK;
    const char *patterns[2 + IGNORE_MAX];
    const zs_safetensors_import options = base_options(m, patterns);
    const zs_status st = zs_params_import_safetensors(zs, m->weights, &options, NULL);
    /* The runtime's refusal of a tensor the model has no parameter for
     * advises an ignore pattern in the API's words; a user of this program
     * sets it with app.init_ignore, so say so (once, before the message the
     * trainer prints on every rank). */
    if (st == ZS_ERR_INVALID_ARGUMENT && zs_rank(zs) == 0 &&
        strstr(zs_last_error(), "unexpected tensor") != NULL)
        fprintf(stderr,
                PROGRAM ": app.init_from = \"%s\" holds a tensor this model has no parameter "
                        "for (named below); if the checkpoint may carry it, skip it with "
                        "app.init_ignore = \"PATTERN[,PATTERN...]\" (fnmatch patterns)\n",
                m->init_from);
    return st;
}

static zs_status save_state(ex_model *m, zs_ctx *zs) {
    zs_status st = zs_user_state_set(zs, CONFIG_NAME, m->config_json, strlen(m->config_json), 0);
    if (st != ZS_OK || m->lora.r == 0) return st;
    /* LoRA: PEFT's adapter_config.json for zs-ckpt export --peft, naming
     * the base it was trained on. */
    char base[4096] = "", text[4096];
    if (m->init_from[0] != '\0' && !realpath(m->init_from, base)) base[0] = '\0';
    const int n = ex_lora_adapter_config(&m->lora, base, text, sizeof text);
    if (n < 0) return ZS_ERR_INTERNAL;
    return zs_user_state_set(zs, EX_LORA_CONFIG_STATE, text, (size_t)n, 0);
}

static double flops_per_token(const ex_model *m, int T) { return llama_flops_per_token(&m->dims, T); }

/* Bytes for a byte-level model; otherwise the ids, which
 * scripts/decode_tokens.py turns into text with the checkpoint's tokenizer. */
static void print_token(ex_model *m, int token, FILE *out) {
    if (m->dims.vocab <= 256) fputc(token, out);
    else fprintf(out, "[%d]", token);
}

static int start_token(ex_model *m) {
    (void)m;
    return 0;
}

static void destroy(ex_model *m) {
    if (!m) return;
    ex_stream_free(&m->ws);
    if (m->dev) {
        m->dev->ops->free(m->dev, m->matrix);
        m->dev->ops->free(m->dev, m->matrix32);
    }
    ex_units_free(&m->units);
    if (m->be) m->be->ops->destroy(m->be);
    if (m->dev) m->dev->ops->destroy(m->dev);
    free(m->config_json);
    free(m);
}

const ex_model_ops llama_model_ops = {
    .program = PROGRAM,
    .family = "llama",
    .configure = configure,
    .describe = describe,
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
