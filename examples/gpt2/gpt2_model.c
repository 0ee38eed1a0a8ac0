/* GPT-2's shapes, parameter table and layouts; see gpt2_model.h. */
#include "gpt2_model.h"
#include "ex_error.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- dims */

/* Products are estimated in double, which is exact far beyond the limits
 * tested here and cannot itself overflow, so an overflowing int64 product is
 * caught before anyone computes it. The margin (2^62) leaves room for sums of
 * a few such products. */
#define GPT2_NUMEL_LIMIT 4.611686018427388e18 /* 2^62 */

int gpt2_dims_check(const gpt2_dims *d, char *err, size_t cap) {
    if (d == NULL) {
        return ex_fail(err, cap, "gpt2 dims: NULL");
    }
    if (d->n_layer < 1 || d->n_head < 1 || d->n_embd < 1 || d->vocab < 1 ||
        d->block_size < 1) {
        return ex_fail(err, cap,
                          "gpt2 dims: every size must be positive (n_layer %d, n_head %d, "
                          "n_embd %d, vocab %d, block_size %d)",
                          d->n_layer, d->n_head, d->n_embd, d->vocab, d->block_size);
    }
    if (d->n_embd % d->n_head != 0) {
        return ex_fail(err, cap,
                          "gpt2 dims: n_embd %d is not a multiple of n_head %d (the heads split "
                          "the channels evenly)",
                          d->n_embd, d->n_head);
    }
    const double C = d->n_embd, V = d->vocab, L = d->n_layer, S = d->block_size;
    // GEMM dimensions go to BLAS as int: the widest is c_fc's 4C.
    if (4.0 * C > (double)INT_MAX) {
        return ex_fail(err, cap, "gpt2 dims: n_embd %d is too large (4 * n_embd must fit in an int)",
                          d->n_embd);
    }
    const double params = V * C + S * C + 2.0 * C + L * (12.0 * C * C + 13.0 * C);
    if (params > GPT2_NUMEL_LIMIT || S * S * (double)d->n_head > GPT2_NUMEL_LIMIT) {
        return ex_fail(err, cap,
                          "gpt2 dims: sizes overflow int64 (%.3g parameters; block_size^2 * n_head "
                          "= %.3g)",
                          params, S * S * (double)d->n_head);
    }
    return 0;
}

int gpt2_dims_preset(const char *name, gpt2_dims *out) {
    // GPT-2's released models (Radford et al. 2019, table 2; the names are
    // the parameter counts people use for them).
    static const struct {
        const char *name;
        int n_layer, n_head, n_embd;
    } presets[] = {
        {"124M", 12, 12, 768},
        {"350M", 24, 16, 1024},
        {"774M", 36, 20, 1280},
        {"1558M", 48, 25, 1600},
    };
    if (name == NULL || out == NULL) {
        return -1;
    }
    for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++) {
        if (strcmp(name, presets[i].name) == 0) {
            out->n_layer = presets[i].n_layer;
            out->n_head = presets[i].n_head;
            out->n_embd = presets[i].n_embd;
            out->vocab = 50257;
            out->block_size = 1024;
            return 0;
        }
    }
    return -1;
}

int gpt2_head_size(const gpt2_dims *d) {
    return d->n_embd / d->n_head;
}

/* ------------------------------------------------------ parameter table */

int gpt2_num_units(const gpt2_dims *d) {
    return 1 + d->n_layer;
}

int gpt2_unit_num_params(const gpt2_dims *d, int unit) {
    if (unit < 0 || unit > d->n_layer) {
        return -1;
    }
    return unit == 0 ? GPT2_EMBED_PARAMS : GPT2_BLOCK_PARAMS;
}

int gpt2_unit_name(const gpt2_dims *d, int unit, char *buf, size_t cap) {
    if (unit < 0 || unit > d->n_layer || buf == NULL) {
        return -1;
    }
    int n = unit == 0 ? snprintf(buf, cap, "transformer.embed")
                      : snprintf(buf, cap, "transformer.h.%d", unit - 1);
    return n >= 0 && (size_t)n < cap ? 0 : -1;
}

/* One row of the table: the name after "transformer." (or after
 * "transformer.h.<l>."), the shape as multiples of the dims, and the init. */
typedef enum gpt2__dim { D_ONE, D_C, D_3C, D_4C, D_V, D_S } gpt2__dim;

typedef struct gpt2__row {
    const char *suffix;
    gpt2__dim rows, cols; /* cols == D_ONE for 1-D tensors */
    gpt2_init init;
    int residual; /* normal(0, 0.02 / sqrt(2 L)) instead of 0.02 */
} gpt2__row;

static const gpt2__row gpt2__embed_table[GPT2_EMBED_PARAMS] = {
    {"wte.weight", D_V, D_C, GPT2_INIT_NORMAL, 0},
    {"wpe.weight", D_S, D_C, GPT2_INIT_NORMAL, 0},
    {"ln_f.weight", D_C, D_ONE, GPT2_INIT_ONES, 0},
    {"ln_f.bias", D_C, D_ONE, GPT2_INIT_ZEROS, 0},
};

static const gpt2__row gpt2__block_table[GPT2_BLOCK_PARAMS] = {
    {"ln_1.weight", D_C, D_ONE, GPT2_INIT_ONES, 0},
    {"ln_1.bias", D_C, D_ONE, GPT2_INIT_ZEROS, 0},
    {"attn.c_attn.weight", D_3C, D_C, GPT2_INIT_NORMAL, 0},
    {"attn.c_attn.bias", D_3C, D_ONE, GPT2_INIT_ZEROS, 0},
    {"attn.c_proj.weight", D_C, D_C, GPT2_INIT_NORMAL, 1},
    {"attn.c_proj.bias", D_C, D_ONE, GPT2_INIT_ZEROS, 0},
    {"ln_2.weight", D_C, D_ONE, GPT2_INIT_ONES, 0},
    {"ln_2.bias", D_C, D_ONE, GPT2_INIT_ZEROS, 0},
    {"mlp.c_fc.weight", D_4C, D_C, GPT2_INIT_NORMAL, 0},
    {"mlp.c_fc.bias", D_4C, D_ONE, GPT2_INIT_ZEROS, 0},
    {"mlp.c_proj.weight", D_C, D_4C, GPT2_INIT_NORMAL, 1},
    {"mlp.c_proj.bias", D_C, D_ONE, GPT2_INIT_ZEROS, 0},
};

static int64_t gpt2__dim_value(const gpt2_dims *d, gpt2__dim k) {
    switch (k) {
    case D_ONE:
        return 1;
    case D_C:
        return d->n_embd;
    case D_3C:
        return 3 * (int64_t)d->n_embd;
    case D_4C:
        return 4 * (int64_t)d->n_embd;
    case D_V:
        return d->vocab;
    case D_S:
        return d->block_size;
    }
    return 0;
}

static int64_t gpt2__row_numel(const gpt2_dims *d, const gpt2__row *r) {
    return gpt2__dim_value(d, r->rows) * gpt2__dim_value(d, r->cols);
}

int gpt2_param_spec_get(const gpt2_dims *d, int unit, int index, gpt2_param_spec *out) {
    const int count = gpt2_unit_num_params(d, unit);
    if (count < 0 || index < 0 || index >= count || out == NULL) {
        return -1;
    }
    const gpt2__row *table = unit == 0 ? gpt2__embed_table : gpt2__block_table;
    const gpt2__row *r = &table[index];
    gpt2_param_spec s;
    memset(&s, 0, sizeof(s));
    int n = unit == 0 ? snprintf(s.name, sizeof(s.name), "transformer.%s", r->suffix)
                      : snprintf(s.name, sizeof(s.name), "transformer.h.%d.%s", unit - 1,
                                 r->suffix);
    if (n < 0 || (size_t)n >= sizeof(s.name)) {
        return -1; // cannot happen for an int layer index; kept for safety
    }
    s.ndim = r->cols == D_ONE ? 1 : 2;
    s.shape[0] = gpt2__dim_value(d, r->rows);
    s.shape[1] = gpt2__dim_value(d, r->cols);
    s.numel = s.shape[0] * s.shape[1];
    for (int i = 0; i < index; i++) {
        s.offset += gpt2__row_numel(d, &table[i]);
    }
    s.init = r->init;
    if (r->init == GPT2_INIT_NORMAL) {
        s.init_std = r->residual ? 0.02 / sqrt(2.0 * (double)d->n_layer) : 0.02;
    }
    // Weight decay on matrices only (GPT-2/nanoGPT): decaying biases and
    // LayerNorm gains pulls them toward 0, which is no prior anyone wants.
    s.no_decay = s.ndim == 1;
    *out = s;
    return 0;
}

static int table_num_units(const void *d) { return gpt2_num_units(d); }
static int table_unit_num_params(const void *d, int unit) { return gpt2_unit_num_params(d, unit); }
static int table_unit_name(const void *d, int unit, char *buf, size_t cap) {
    return gpt2_unit_name(d, unit, buf, cap);
}
static int table_param_spec(const void *d, int unit, int index, nn_param_spec *out) {
    return gpt2_param_spec_get(d, unit, index, out);
}

static int64_t table_num_params(const void *d) { return gpt2_num_params(d); }

const nn_param_table gpt2_param_table = {table_num_units, table_unit_num_params, table_unit_name,
                                         table_param_spec, table_num_params};

int64_t gpt2_unit_numel(const gpt2_dims *d, int unit) {
    const int count = gpt2_unit_num_params(d, unit);
    if (count < 0) {
        return -1;
    }
    const gpt2__row *table = unit == 0 ? gpt2__embed_table : gpt2__block_table;
    int64_t n = 0;
    for (int i = 0; i < count; i++) {
        n += gpt2__row_numel(d, &table[i]);
    }
    return n;
}

int64_t gpt2_num_params(const gpt2_dims *d) {
    return gpt2_unit_numel(d, 0) + (int64_t)d->n_layer * gpt2_unit_numel(d, 1);
}

double gpt2_flops_per_token(const gpt2_dims *d, int T) {
    const double N = (double)(gpt2_num_params(d) - (int64_t)d->block_size * d->n_embd);
    return 6.0 * N + 12.0 * (double)d->n_layer * (double)d->n_embd * (double)T;
}

/* ------------------------------------------------- one unit's pointers */

/* Hands out consecutive runs of elements from base. */
typedef struct gpt2__cursor {
    unsigned char *at;
    size_t elem;
} gpt2__cursor;

static void *take(gpt2__cursor *c, size_t n) {
    void *p = c->at;
    c->at += n * c->elem;
    return p;
}

void gpt2_embed_w_carve(const gpt2_dims *d, nn_dtype t, void *base, gpt2_embed_w *out) {
    const size_t C = (size_t)d->n_embd;
    gpt2__cursor c = {base, nn_dtype_size(t)};
    out->wte = take(&c, (size_t)d->vocab * C);      // [V][C]
    out->wpe = take(&c, (size_t)d->block_size * C); // [block_size][C]
    out->lnfw = take(&c, C);                        // [C]
    out->lnfb = take(&c, C);                        // [C]
}

void gpt2_block_w_carve(const gpt2_dims *d, nn_dtype t, void *base, gpt2_block_w *out) {
    const size_t C = (size_t)d->n_embd;
    gpt2__cursor c = {base, nn_dtype_size(t)};
    out->ln1w = take(&c, C);             // [C]
    out->ln1b = take(&c, C);             // [C]
    out->qkvw = take(&c, 3 * C * C);     // [3C][C]
    out->qkvb = take(&c, 3 * C);         // [3C]
    out->attprojw = take(&c, C * C);     // [C][C]
    out->attprojb = take(&c, C);         // [C]
    out->ln2w = take(&c, C);             // [C]
    out->ln2b = take(&c, C);             // [C]
    out->fcw = take(&c, 4 * C * C);      // [4C][C]
    out->fcb = take(&c, 4 * C);          // [4C]
    out->fcprojw = take(&c, 4 * C * C);  // [C][4C]
    out->fcprojb = take(&c, C);          // [C]
    for (int t = 0; t < GPT2_LORA_TARGETS; t++) out->lora_A[t] = out->lora_B[t] = NULL;
}

const char *gpt2_lora_target_name(int target) {
    static const char *const names[GPT2_LORA_TARGETS] = {"attn.c_attn", "attn.c_proj",
                                                         "mlp.c_fc", "mlp.c_proj"};
    return target >= 0 && target < GPT2_LORA_TARGETS ? names[target] : NULL;
}

void gpt2_lora_target_shape(const gpt2_dims *d, int target, int *in, int *out) {
    const int C = d->n_embd;
    const int ins[GPT2_LORA_TARGETS] = {C, C, C, 4 * C};
    const int outs[GPT2_LORA_TARGETS] = {3 * C, C, 4 * C, C};
    *in = ins[target];
    *out = outs[target];
}

/* -------------------------------------------------------- activations */

/* Bytes of n elements of `elem` bytes, rounded up to NN_ALIGN. */
static size_t aligned_bytes(size_t n, size_t elem) {
    return (n * elem + NN_ALIGN - 1) / NN_ALIGN * NN_ALIGN;
}

/* Walks the activation layout: with base NULL it only adds up the bytes. */
static size_t acts_layout(const gpt2_dims *d, int B, int T, nn_dtype t, unsigned char *base,
                          gpt2_block_acts *out) {
    const size_t BT = (size_t)B * (size_t)T, C = (size_t)d->n_embd;
    const size_t e = nn_dtype_size(t);
    const size_t att = (size_t)B * (size_t)d->n_head * (size_t)T * (size_t)T;
    const struct {
        void **slot;
        size_t n, elem;
    } parts[] = {
        {out ? &out->ln1 : NULL, BT * C, e},          {out ? &out->qkv : NULL, BT * 3 * C, e},
        {out ? &out->atty : NULL, BT * C, e},         {out ? &out->res1 : NULL, BT * C, e},
        {out ? &out->ln2 : NULL, BT * C, e},          {out ? &out->fch : NULL, BT * 4 * C, e},
        {out ? &out->fch_gelu : NULL, BT * 4 * C, e}, {out ? &out->att : NULL, att, e},
        {out ? (void **)&out->ln1_mean : NULL, BT, 4}, {out ? (void **)&out->ln1_rstd : NULL, BT, 4},
        {out ? (void **)&out->ln2_mean : NULL, BT, 4}, {out ? (void **)&out->ln2_rstd : NULL, BT, 4},
    };
    size_t used = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (base) *parts[i].slot = base + used;
        used += aligned_bytes(parts[i].n, parts[i].elem);
    }
    return used;
}

int64_t gpt2_block_acts_bytes(const gpt2_dims *d, int B, int T, nn_dtype t) {
    if (B < 1 || T < 1) {
        return -1;
    }
    return (int64_t)acts_layout(d, B, T, t, NULL, NULL);
}

void gpt2_block_acts_carve(const gpt2_dims *d, int B, int T, nn_dtype t, void *base,
                           gpt2_block_acts *out) {
    acts_layout(d, B, T, t, base, out);
}
