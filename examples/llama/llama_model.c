/* The Llama family's shapes, parameter table and layouts; see llama_model.h. */
#include "llama_model.h"
#include "ex_error.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Sizes are estimated in double (exact far beyond these limits), so a
 * product that would overflow int64 is caught before anyone computes it. */
#define LLAMA_NUMEL_LIMIT 4.611686018427388e18 /* 2^62 */

int llama_dims_check(const llama_dims *d, char *err, size_t cap) {
    if (d == NULL) return ex_fail(err, cap, "llama dims: NULL");
    if (d->n_layer < 1 || d->n_head < 1 || d->n_kv_head < 1 || d->head_dim < 1 ||
        d->n_embd < 1 || d->n_ff < 1 || d->vocab < 1 || d->max_seq < 1)
        return ex_fail(err, cap, "llama dims: every size must be positive (num_hidden_layers %d, "
                    "num_attention_heads %d, num_key_value_heads %d, head_dim %d, hidden_size "
                    "%d, intermediate_size %d, vocab_size %d, max_position_embeddings %d)",
                    d->n_layer, d->n_head, d->n_kv_head, d->head_dim, d->n_embd, d->n_ff,
                    d->vocab, d->max_seq);
    if (d->n_head % d->n_kv_head != 0)
        return ex_fail(err, cap, "llama dims: num_attention_heads %d is not a multiple of "
                    "num_key_value_heads %d (each K/V head serves a whole group of query "
                    "heads)", d->n_head, d->n_kv_head);
    if (d->head_dim % 2 != 0)
        return ex_fail(err, cap, "llama dims: head_dim %d is odd (rotary embeddings rotate "
                    "pairs of channels)", d->head_dim);
    if (!(d->rms_eps > 0.0) || !isfinite(d->rms_eps))
        return ex_fail(err, cap, "llama dims: rms_norm_eps %g must be a positive number",
                    d->rms_eps);
    if (!(d->rope_theta > 0.0) || !isfinite(d->rope_theta))
        return ex_fail(err, cap, "llama dims: rope_theta %g must be a positive number",
                    d->rope_theta);
    if (!(d->init_std >= 0.0) || !isfinite(d->init_std))
        return ex_fail(err, cap, "llama dims: initializer_range %g must be >= 0", d->init_std);
    if (d->rope_kind == LLAMA_ROPE_LLAMA3 &&
        (!(d->rope_factor >= 1.0) || !(d->rope_low_freq > 0.0) ||
         !(d->rope_high_freq > d->rope_low_freq) || d->rope_orig_max < 1))
        return ex_fail(err, cap, "llama dims: rope_scaling (llama3) needs factor >= 1, "
                    "high_freq_factor > low_freq_factor > 0 and "
                    "original_max_position_embeddings >= 1 (got %g, %g, %g, %d)",
                    d->rope_factor, d->rope_high_freq, d->rope_low_freq, d->rope_orig_max);
    const double C = d->n_embd, F = d->n_ff, V = d->vocab, L = d->n_layer;
    const double Q = (double)d->n_head * d->head_dim, KV = (double)d->n_kv_head * d->head_dim;
    /* GEMM dimensions go to BLAS as int. */
    if (Q + 2.0 * KV > (double)INT_MAX || F > (double)INT_MAX || V > (double)INT_MAX)
        return ex_fail(err, cap, "llama dims: a matrix dimension does not fit in an int "
                    "((NH + 2 NKV) hd = %.0f, intermediate_size %d, vocab_size %d)", Q + 2.0 * KV,
                    d->n_ff, d->vocab);
    const double block = C * (Q + 2.0 * KV) + Q * C + 3.0 * C * F + 2.0 * C + Q + 2.0 * KV +
                         2.0 * F + 2.0 * C;
    const double params = 2.0 * V * C + C + L * block;
    const double S = d->max_seq;
    if (params > LLAMA_NUMEL_LIMIT || S * S * (double)d->n_head > LLAMA_NUMEL_LIMIT)
        return ex_fail(err, cap, "llama dims: sizes overflow int64 (%.3g parameters; "
                    "max_position_embeddings^2 * num_attention_heads = %.3g)", params,
                    S * S * (double)d->n_head);
    return 0;
}

/* The public shapes, from their config.json files. */
static const struct {
    const char *name;
    llama_dims d;
} presets[] = {
    /* The Shakespeare demo: bytes as tokens, grouped-query attention with
     * two query heads per K/V head, untied head. */
    {"tiny", {.n_layer = 4, .n_head = 4, .n_kv_head = 2, .head_dim = 32, .n_embd = 128,
              .n_ff = 352, .vocab = 256, .max_seq = 256, .rms_eps = 1e-5,
              .rope_theta = 10000.0, .init_std = 0.02, .model_type = "llama"}},
    {"llama-3.2-1b", {.n_layer = 16, .n_head = 32, .n_kv_head = 8, .head_dim = 64,
                      .n_embd = 2048, .n_ff = 8192, .vocab = 128256, .max_seq = 131072,
                      .rms_eps = 1e-5, .rope_theta = 500000.0, .rope_kind = LLAMA_ROPE_LLAMA3,
                      .rope_factor = 32.0, .rope_low_freq = 1.0, .rope_high_freq = 4.0,
                      .rope_orig_max = 8192, .tied = 1, .init_std = 0.02,
                      .model_type = "llama"}},
    {"llama-3.1-8b", {.n_layer = 32, .n_head = 32, .n_kv_head = 8, .head_dim = 128,
                      .n_embd = 4096, .n_ff = 14336, .vocab = 128256, .max_seq = 131072,
                      .rms_eps = 1e-5, .rope_theta = 500000.0, .rope_kind = LLAMA_ROPE_LLAMA3,
                      .rope_factor = 8.0, .rope_low_freq = 1.0, .rope_high_freq = 4.0,
                      .rope_orig_max = 8192, .init_std = 0.02, .model_type = "llama"}},
    {"llama-3.1-70b", {.n_layer = 80, .n_head = 64, .n_kv_head = 8, .head_dim = 128,
                       .n_embd = 8192, .n_ff = 28672, .vocab = 128256, .max_seq = 131072,
                       .rms_eps = 1e-5, .rope_theta = 500000.0,
                       .rope_kind = LLAMA_ROPE_LLAMA3, .rope_factor = 8.0,
                       .rope_low_freq = 1.0, .rope_high_freq = 4.0, .rope_orig_max = 8192,
                       .init_std = 0.02, .model_type = "llama"}},
};

const char *const llama_preset_names[] = {"tiny", "llama-3.2-1b", "llama-3.1-8b",
                                          "llama-3.1-70b", NULL};

int llama_dims_preset(const char *name, llama_dims *out) {
    if (name == NULL || out == NULL) return -1;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(name, presets[i].name) == 0) {
            *out = presets[i].d;
            return 0;
        }
    return -1;
}

/* ------------------------------------------------------ parameter table */

int llama_num_units(const llama_dims *d) { return 1 + d->n_layer + (d->tied ? 0 : 1); }

int llama_head_unit(const llama_dims *d) { return d->tied ? -1 : 1 + d->n_layer; }

int llama_unit_block(const llama_dims *d, int unit) {
    return unit >= 1 && unit <= d->n_layer ? unit - 1 : -1;
}

/* Whether a block slot is registered in these dims. */
static int slot_present(const llama_dims *d, int slot) {
    switch (slot) {
    case LLAMA_P_BQ:
    case LLAMA_P_BK:
    case LLAMA_P_BV: return d->qkv_bias;
    case LLAMA_P_BO: return d->o_bias;
    case LLAMA_P_BGATE:
    case LLAMA_P_BUP:
    case LLAMA_P_BDOWN: return d->mlp_bias;
    default: return slot >= 0 && slot < LLAMA_BLOCK_SLOTS;
    }
}

int llama_block_slot(const llama_dims *d, int index) {
    if (index < 0) return -1;
    for (int slot = 0, k = 0; slot < LLAMA_BLOCK_SLOTS; slot++)
        if (slot_present(d, slot) && k++ == index) return slot;
    return -1;
}

int llama_block_index(const llama_dims *d, llama_block_param slot) {
    if (!slot_present(d, (int)slot)) return -1;
    int k = 0;
    for (int s = 0; s < (int)slot; s++) k += slot_present(d, s);
    return k;
}

int llama_unit_num_params(const llama_dims *d, int unit) {
    if (unit < 0 || unit >= llama_num_units(d)) return -1;
    if (unit == 0) return d->tied ? 2 : 1;
    if (unit == llama_head_unit(d)) return 2;
    int n = 0;
    for (int s = 0; s < LLAMA_BLOCK_SLOTS; s++) n += slot_present(d, s);
    return n;
}

int llama_unit_name(const llama_dims *d, int unit, char *buf, size_t cap) {
    if (unit < 0 || unit >= llama_num_units(d) || buf == NULL) return -1;
    int n = unit == 0                      ? snprintf(buf, cap, "model.embed_tokens")
            : unit == llama_head_unit(d)   ? snprintf(buf, cap, "lm_head")
                                           : snprintf(buf, cap, "model.layers.%d", unit - 1);
    return n >= 0 && (size_t)n < cap ? 0 : -1;
}

static void spec_fill(llama_param_spec *out, const char *name, int64_t rows, int64_t cols,
                      llama_init init, double std) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    out->ndim = cols > 0 ? 2 : 1;
    out->shape[0] = rows;
    out->shape[1] = cols > 0 ? cols : 1;
    out->numel = rows * out->shape[1];
    out->init = init;
    out->init_std = init == LLAMA_INIT_NORMAL ? std : 0.0;
    out->no_decay = out->ndim == 1;
}

/* Tensor `index` of `unit` without its offset (llama_param_spec_get adds it). */
static int spec_at(const llama_dims *d, int unit, int index, llama_param_spec *out) {
    const int count = llama_unit_num_params(d, unit);
    if (count < 0 || index < 0 || index >= count || out == NULL) return -1;
    const int64_t C = d->n_embd, V = d->vocab, F = d->n_ff;
    const int64_t Q = (int64_t)d->n_head * d->head_dim, KV = (int64_t)d->n_kv_head * d->head_dim;
    const double std = d->init_std;
    if (unit == 0) {
        if (index == 0) spec_fill(out, "model.embed_tokens.weight", V, C, LLAMA_INIT_NORMAL, std);
        else spec_fill(out, "model.norm.weight", C, 0, LLAMA_INIT_ONES, 0);
        return 0;
    }
    if (unit == llama_head_unit(d)) {
        if (index == 0) spec_fill(out, "model.norm.weight", C, 0, LLAMA_INIT_ONES, 0);
        else spec_fill(out, "lm_head.weight", V, C, LLAMA_INIT_NORMAL, std);
        return 0;
    }
    static const struct {
        const char *suffix;
        int rows, cols; /* 0 C, 1 Q, 2 KV, 3 F; cols -1: a vector */
        llama_init init;
    } rows[LLAMA_BLOCK_SLOTS] = {
        [LLAMA_P_ATTN_NORM] = {"input_layernorm.weight", 0, -1, LLAMA_INIT_ONES},
        [LLAMA_P_WQ] = {"self_attn.q_proj.weight", 1, 0, LLAMA_INIT_NORMAL},
        [LLAMA_P_BQ] = {"self_attn.q_proj.bias", 1, -1, LLAMA_INIT_ZEROS},
        [LLAMA_P_WK] = {"self_attn.k_proj.weight", 2, 0, LLAMA_INIT_NORMAL},
        [LLAMA_P_BK] = {"self_attn.k_proj.bias", 2, -1, LLAMA_INIT_ZEROS},
        [LLAMA_P_WV] = {"self_attn.v_proj.weight", 2, 0, LLAMA_INIT_NORMAL},
        [LLAMA_P_BV] = {"self_attn.v_proj.bias", 2, -1, LLAMA_INIT_ZEROS},
        [LLAMA_P_WO] = {"self_attn.o_proj.weight", 0, 1, LLAMA_INIT_NORMAL},
        [LLAMA_P_BO] = {"self_attn.o_proj.bias", 0, -1, LLAMA_INIT_ZEROS},
        [LLAMA_P_MLP_NORM] = {"post_attention_layernorm.weight", 0, -1, LLAMA_INIT_ONES},
        [LLAMA_P_WGATE] = {"mlp.gate_proj.weight", 3, 0, LLAMA_INIT_NORMAL},
        [LLAMA_P_BGATE] = {"mlp.gate_proj.bias", 3, -1, LLAMA_INIT_ZEROS},
        [LLAMA_P_WUP] = {"mlp.up_proj.weight", 3, 0, LLAMA_INIT_NORMAL},
        [LLAMA_P_BUP] = {"mlp.up_proj.bias", 3, -1, LLAMA_INIT_ZEROS},
        [LLAMA_P_WDOWN] = {"mlp.down_proj.weight", 0, 3, LLAMA_INIT_NORMAL},
        [LLAMA_P_BDOWN] = {"mlp.down_proj.bias", 0, -1, LLAMA_INIT_ZEROS},
    };
    const int64_t size[4] = {C, Q, KV, F};
    const int slot = llama_block_slot(d, index);
    char name[LLAMA_NAME_MAX];
    snprintf(name, sizeof name, "model.layers.%d.%s", unit - 1, rows[slot].suffix);
    spec_fill(out, name, size[rows[slot].rows], rows[slot].cols < 0 ? 0 : size[rows[slot].cols],
              rows[slot].init, std);
    return 0;
}

int llama_param_spec_get(const llama_dims *d, int unit, int index, llama_param_spec *out) {
    if (spec_at(d, unit, index, out) != 0) return -1;
    // The tensors before it in its unit, in registration order, no gaps.
    int64_t offset = 0;
    for (int k = 0; k < index; k++) {
        llama_param_spec before;
        spec_at(d, unit, k, &before);
        offset += before.numel;
    }
    out->offset = offset;
    return 0;
}

static int table_num_units(const void *d) { return llama_num_units(d); }
static int table_unit_num_params(const void *d, int unit) { return llama_unit_num_params(d, unit); }
static int table_unit_name(const void *d, int unit, char *buf, size_t cap) {
    return llama_unit_name(d, unit, buf, cap);
}
static int table_param_spec(const void *d, int unit, int index, nn_param_spec *out) {
    return llama_param_spec_get(d, unit, index, out);
}

static int64_t table_num_params(const void *d) { return llama_num_params(d); }

const nn_param_table llama_param_table = {table_num_units, table_unit_num_params, table_unit_name,
                                          table_param_spec, table_num_params};

int64_t llama_unit_numel(const llama_dims *d, int unit) {
    const int count = llama_unit_num_params(d, unit);
    if (count < 0) return -1;
    int64_t n = 0;
    for (int i = 0; i < count; i++) {
        llama_param_spec s;
        llama_param_spec_get(d, unit, i, &s);
        n += s.numel;
    }
    return n;
}

int64_t llama_num_params(const llama_dims *d) {
    int64_t n = 0;
    for (int u = 0; u < llama_num_units(d); u++) n += llama_unit_numel(d, u);
    return n;
}

double llama_flops_per_token(const llama_dims *d, int T) {
    double N = (double)llama_num_params(d);
    /* The embedding lookup multiplies nothing: it counts only as the tied
     * output projection. */
    if (!d->tied) N -= (double)d->vocab * (double)d->n_embd;
    return 6.0 * N + 12.0 * d->n_layer * (double)d->n_head * d->head_dim * (double)T;
}

/* ------------------------------------------------- one unit's pointers */

void llama_embed_w_carve(const llama_dims *d, nn_dtype t, void *base, llama_embed_w *out) {
    (void)d;
    (void)t;
    out->wte = base; /* embed_tokens is unit 0's first tensor */
}

void llama_head_w_carve(const llama_dims *d, nn_dtype t, void *base, llama_head_w *out) {
    const size_t e = nn_dtype_size(t), VC = (size_t)d->vocab * (size_t)d->n_embd;
    unsigned char *p = base;
    if (d->tied) { /* unit 0: embed_tokens [V][C], model.norm [C] */
        out->wout = p;
        out->norm = p + VC * e;
    } else { /* lm_head unit: model.norm [C], lm_head [V][C] */
        out->norm = p;
        out->wout = p + (size_t)d->n_embd * e;
    }
}

void llama_block_w_carve(const llama_dims *d, nn_dtype t, void *base, llama_block_w *out) {
    void **slots[LLAMA_BLOCK_SLOTS] = {
        [LLAMA_P_ATTN_NORM] = &out->attn_norm, [LLAMA_P_WQ] = &out->wq,
        [LLAMA_P_BQ] = &out->bq,               [LLAMA_P_WK] = &out->wk,
        [LLAMA_P_BK] = &out->bk,               [LLAMA_P_WV] = &out->wv,
        [LLAMA_P_BV] = &out->bv,               [LLAMA_P_WO] = &out->wo,
        [LLAMA_P_BO] = &out->bo,               [LLAMA_P_MLP_NORM] = &out->mlp_norm,
        [LLAMA_P_WGATE] = &out->wgate,         [LLAMA_P_BGATE] = &out->bgate,
        [LLAMA_P_WUP] = &out->wup,             [LLAMA_P_BUP] = &out->bup,
        [LLAMA_P_WDOWN] = &out->wdown,         [LLAMA_P_BDOWN] = &out->bdown};
    memset(out, 0, sizeof *out);
    const size_t e = nn_dtype_size(t);
    unsigned char *p = base;
    const int n = llama_unit_num_params(d, 1);
    for (int i = 0; i < n; i++) {
        llama_param_spec s;
        llama_param_spec_get(d, 1, i, &s);
        *slots[llama_block_slot(d, i)] = p;
        p += (size_t)s.numel * e;
    }
}

/* ------------------------------------------------------- activations */

int64_t llama_qkv_width(const llama_dims *d) {
    return ((int64_t)d->n_head + 2 * (int64_t)d->n_kv_head) * d->head_dim;
}

static int64_t aligned(int64_t bytes) { return (bytes + NN_ALIGN - 1) / NN_ALIGN * NN_ALIGN; }

/* The tensors of llama_block_acts in order, as (elements, element bytes). */
static int acts_layout(const llama_dims *d, int B, int T, nn_dtype t, int64_t n[11],
                       int64_t size[11]) {
    if (B < 1 || T < 1) return -1;
    const int64_t BT = (int64_t)B * T, C = d->n_embd, F = d->n_ff;
    const int64_t e = (int64_t)nn_dtype_size(t);
    const int64_t counts[11] = {BT * C, BT, BT * llama_qkv_width(d),
                                (int64_t)B * d->n_head * T * T, BT * d->n_head * d->head_dim,
                                BT * C, BT * C, BT, BT * F, BT * F, BT * F};
    const int64_t sizes[11] = {e, 4, e, e, e, e, e, 4, e, e, e};
    memcpy(n, counts, sizeof counts);
    memcpy(size, sizes, sizeof sizes);
    return 0;
}

int64_t llama_block_acts_bytes(const llama_dims *d, int B, int T, nn_dtype t) {
    int64_t n[11], size[11];
    if (acts_layout(d, B, T, t, n, size) != 0) return -1;
    int64_t total = 0;
    for (int i = 0; i < 11; i++) total += aligned(n[i] * size[i]);
    return total;
}

void llama_block_acts_carve(const llama_dims *d, int B, int T, nn_dtype t, void *base,
                            llama_block_acts *out) {
    int64_t n[11], size[11];
    memset(out, 0, sizeof *out);
    if (acts_layout(d, B, T, t, n, size) != 0) return;
    void **slots[11] = {&out->xn1, (void **)&out->rstd1, &out->qkv, &out->att, &out->atty,
                        &out->res1, &out->xn2, (void **)&out->rstd2, &out->gate, &out->up,
                        &out->h};
    char *p = base;
    for (int i = 0; i < 11; i++) {
        *slots[i] = p;
        p += aligned(n[i] * size[i]);
    }
}

/* ------------------------------------------------------------- RoPE */

/* 2 pi as Python's math.pi, which PyTorch rounds to fp32 when it divides
 * an fp32 tensor by it. */
#define LLAMA_TWO_PI 6.283185307179586

/* Inverse frequency i, in fp32 at every step as LlamaRotaryEmbedding's
 * rope_init_fn for its rope type computes it. */
static float inv_freq(const llama_dims *d, int i) {
    const float exponent = (float)(2 * i) / (float)d->head_dim;
    const float f = 1.0f / powf((float)d->rope_theta, exponent);
    if (d->rope_kind != LLAMA_ROPE_LLAMA3) return f;
    /* _compute_llama3_parameters: long wavelengths slowed down by factor,
     * short ones kept, the band between interpolated smoothly. */
    const float factor = (float)d->rope_factor, low = (float)d->rope_low_freq,
                old_len = (float)d->rope_orig_max;
    /* The two wavelengths are Python float arithmetic (double), met by the
     * fp32 tensor as fp32 scalars. */
    const float low_wavelen = (float)((double)d->rope_orig_max / d->rope_low_freq);
    const float high_wavelen = (float)((double)d->rope_orig_max / d->rope_high_freq);
    /* (high_freq_factor - low_freq_factor) is Python float arithmetic
     * (double), only then met by the fp32 tensor. */
    const float band = (float)(d->rope_high_freq - d->rope_low_freq);
    const float wavelen = (float)LLAMA_TWO_PI / f;
    float scaled = wavelen > low_wavelen ? f / factor : f;
    if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float smooth = (old_len / wavelen - low) / band;
        scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
    }
    return scaled;
}

void llama_rope_table(const llama_dims *d, int T, float *cos_out, float *sin_out) {
    const int half = d->head_dim / 2;
    for (int i = 0; i < half; i++) {
        const float f = inv_freq(d, i);
        for (int t = 0; t < T; t++) {
            const float angle = (float)t * f;
            cos_out[(size_t)t * half + i] = cosf(angle);
            sin_out[(size_t)t * half + i] = sinf(angle);
        }
    }
}

const char *llama_lora_target_name(int target) {
    static const char *const names[LLAMA_LORA_TARGETS] = {
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
    return target >= 0 && target < LLAMA_LORA_TARGETS ? names[target] : NULL;
}

void llama_lora_target_shape(const llama_dims *d, int target, int *in, int *out) {
    const int C = d->n_embd, Q = d->n_head * d->head_dim, KV = d->n_kv_head * d->head_dim;
    const int F = d->n_ff;
    const int ins[LLAMA_LORA_TARGETS] = {C, C, C, Q, C, C, F};
    const int outs[LLAMA_LORA_TARGETS] = {Q, KV, KV, C, F, F, C};
    *in = ins[target];
    *out = outs[target];
}
