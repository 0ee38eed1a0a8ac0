/* GPT-2's units through zeroshard's public API (see gpt2_units.h). */
#include "gpt2_units.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int param_slot(int unit, int index) {
    return unit == 0 ? index : GPT2_EMBED_PARAMS + (unit - 1) * GPT2_BLOCK_PARAMS + index;
}

zs_param *gpt2_units_param(const gpt2_units *u, int unit, int index) {
    return u->param[param_slot(unit, index)];
}

static zs_init initializer(const gpt2_param_spec *spec) {
    switch (spec->init) {
    case GPT2_INIT_NORMAL: return ZS_INIT_NORMAL_STD(spec->init_std);
    case GPT2_INIT_ONES: return ZS_INIT_CONSTANT_VALUE(1.0);
    case GPT2_INIT_ZEROS: break;
    }
    return ZS_INIT_ZEROS_VALUE;
}

zs_status gpt2_units_describe(gpt2_units *u, zs_ctx *zs, const gpt2_dims *dims) {
    memset(u, 0, sizeof *u);
    u->dims = *dims;
    u->zs = zs;
    u->unit_count = gpt2_num_units(dims);
    const int params = GPT2_EMBED_PARAMS + dims->n_layer * GPT2_BLOCK_PARAMS;
    u->unit = calloc((size_t)u->unit_count, sizeof *u->unit);
    u->param = calloc((size_t)params, sizeof *u->param);
    if (!u->unit || !u->param) return ZS_ERR_OUT_OF_MEMORY;
    for (int unit = 0; unit < u->unit_count; unit++) {
        char name[GPT2_NAME_MAX];
        gpt2_unit_name(dims, unit, name, sizeof name);
        zs_status st = zs_unit_begin(zs, name, &u->unit[unit]);
        for (int i = 0; st == ZS_OK && i < gpt2_unit_num_params(dims, unit); i++) {
            gpt2_param_spec spec;
            gpt2_param_spec_get(dims, unit, i, &spec);
            st = zs_param_create(zs, spec.name, spec.ndim, spec.shape, initializer(&spec),
                                 spec.no_decay ? ZS_PARAM_NO_DECAY : 0u,
                                 &u->param[param_slot(unit, i)]);
        }
        if (st == ZS_OK) st = zs_unit_end(zs);
        if (st != ZS_OK) return st;
    }
    return ZS_OK;
}

/* zeroshard's dtype as the model's storage dtype. */
static gpt2_dtype model_dtype(zs_dtype t) {
    return t == ZS_DTYPE_BF16 ? GPT2_BF16 : t == ZS_DTYPE_FP16 ? GPT2_F16 : GPT2_F32;
}

int gpt2_units_attach(gpt2_units *u, gpt2_backend *be, char *err, size_t cap) {
    u->be = be;
    u->dtype = zs_param_dtype(u->param[0]);
    u->direct = be->dtype == model_dtype(u->dtype);
    if (u->direct) return 0;
    if (be->dtype != GPT2_F32) {
        snprintf(err, cap, "the model's %s backend computes in %s, zeroshard's parameters are %s: "
                 "only fp32 views of them can be made", be->ops->name, gpt2_dtype_name(be->dtype),
                 zs_dtype_name(u->dtype));
        return -1;
    }
    int64_t largest = 0;
    for (int unit = 0; unit < u->unit_count; unit++)
        if (gpt2_unit_numel(&u->dims, unit) > largest) largest = gpt2_unit_numel(&u->dims, unit);
    void *p = NULL, *g = NULL;
    if (be->ops->alloc(be, (size_t)largest * sizeof(float), &p) != 0 ||
        be->ops->alloc(be, (size_t)largest * sizeof(float), &g) != 0) {
        snprintf(err, cap, "fp32 views of a unit (%lld floats): %s", (long long)largest,
                 be->ops->last_error(be));
        be->ops->free(be, p);
        return -1;
    }
    u->param32 = p;
    u->grad32 = g;
    return 0;
}

void gpt2_units_free(gpt2_units *u) {
    if (u->be) {
        u->be->ops->free(u->be, u->param32);
        u->be->ops->free(u->be, u->grad32);
    }
    free(u->unit);
    free(u->param);
    memset(u, 0, sizeof *u);
}

static int zs_failed(const char *what, const char *name, char *err, size_t cap) {
    snprintf(err, cap, "%s('%s'): %s", what, name, zs_last_error());
    return -1;
}

/* Fills ptrs[i] with unit `unit`'s parameter i in the backend's dtype:
 * zeroshard's buffer, or its fp32 conversion into the scratch at the table's
 * offset. */
static int unit_params(gpt2_units *u, int unit, void **ptrs, char *err, size_t cap) {
    for (int i = 0; i < gpt2_unit_num_params(&u->dims, unit); i++) {
        zs_param *p = gpt2_units_param(u, unit, i);
        void *data = zs_param_data(p);
        if (!data) return zs_failed("zs_param_data", zs_param_name(p), err, cap);
        if (u->direct) {
            ptrs[i] = data;
            continue;
        }
        gpt2_param_spec spec;
        gpt2_param_spec_get(&u->dims, unit, i, &spec);
        ptrs[i] = u->param32 + spec.offset;
        if (zs_backend_convert(u->zs, ptrs[i], ZS_DTYPE_FP32, data, u->dtype, spec.numel) != ZS_OK)
            return zs_failed("zs_backend_convert", zs_param_name(p), err, cap);
    }
    return 0;
}

/* The gradients to add into: zeroshard's (direct), or a zeroed fp32
 * scratch laid out like the table. `saved` receives zeroshard's pointers. */
static int unit_grads(gpt2_units *u, int unit, void **ptrs, void **saved, char *err, size_t cap) {
    const int n = gpt2_unit_num_params(&u->dims, unit);
    for (int i = 0; i < n; i++) {
        zs_param *p = gpt2_units_param(u, unit, i);
        void *grad = zs_param_grad(p);
        if (!grad) return zs_failed("zs_param_grad", zs_param_name(p), err, cap);
        if (saved) saved[i] = grad;
        ptrs[i] = grad;
    }
    if (u->direct) return 0;
    if (u->be->ops->zero(u->be, u->grad32, (size_t)gpt2_unit_numel(&u->dims, unit) * sizeof(float))) {
        snprintf(err, cap, "zeroing a gradient scratch: %s", u->be->ops->last_error(u->be));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        gpt2_param_spec spec;
        gpt2_param_spec_get(&u->dims, unit, i, &spec);
        ptrs[i] = u->grad32 + spec.offset;
    }
    return 0;
}

/* Converted views: zeroshard's gradient += the scratch, for the tensors of
 * `unit` selected by `mask` (bit i = tensor i), whose gradients are `dst`. */
static int commit(gpt2_units *u, int unit, void *const *dst, unsigned mask, char *err, size_t cap) {
    if (u->direct) return 0;
    for (int i = 0; i < gpt2_unit_num_params(&u->dims, unit); i++) {
        if (!(mask & (1u << i))) continue;
        gpt2_param_spec spec;
        gpt2_param_spec_get(&u->dims, unit, i, &spec);
        if (zs_backend_accumulate(u->zs, dst[i], u->dtype, u->grad32 + spec.offset, ZS_DTYPE_FP32,
                                  spec.numel) != ZS_OK)
            return zs_failed("zs_backend_accumulate", spec.name, err, cap);
    }
    return 0;
}

int gpt2_units_embed_params(gpt2_units *u, gpt2_embed_w *w, char *err, size_t cap) {
    void *p[GPT2_EMBED_PARAMS];
    if (unit_params(u, 0, p, err, cap) != 0) return -1;
    *w = (gpt2_embed_w){.wte = p[0], .wpe = p[1], .lnfw = p[2], .lnfb = p[3]};
    return 0;
}

int gpt2_units_block_params(gpt2_units *u, int l, gpt2_block_w *w, char *err, size_t cap) {
    void *p[GPT2_BLOCK_PARAMS];
    if (unit_params(u, 1 + l, p, err, cap) != 0) return -1;
    *w = (gpt2_block_w){p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]};
    return 0;
}

int gpt2_units_embed_grads(gpt2_units *u, gpt2_embed_w *g, char *err, size_t cap) {
    void *p[GPT2_EMBED_PARAMS];
    if (unit_grads(u, 0, p, u->embed_grad, err, cap) != 0) return -1;
    *g = (gpt2_embed_w){.wte = p[0], .wpe = p[1], .lnfw = p[2], .lnfb = p[3]};
    return 0;
}

int gpt2_units_embed_commit(gpt2_units *u, char *err, size_t cap) {
    return commit(u, 0, u->embed_grad, 0xfu, err, cap);
}

int gpt2_units_embed_grads_again(gpt2_units *u, gpt2_embed_w *g, char *err, size_t cap) {
    void *p[GPT2_EMBED_PARAMS];
    for (int i = 0; i < GPT2_EMBED_PARAMS; i++) p[i] = u->embed_grad[i];
    if (!u->direct) {
        /* Only wte and wpe receive the embedding's contribution. */
        gpt2_param_spec wte, wpe;
        gpt2_param_spec_get(&u->dims, 0, 0, &wte);
        gpt2_param_spec_get(&u->dims, 0, 1, &wpe);
        /* wte and wpe come first in the table, so one zeroing covers both. */
        if (u->be->ops->zero(u->be, u->grad32, (size_t)(wte.numel + wpe.numel) * sizeof(float))) {
            snprintf(err, cap, "zeroing a gradient scratch: %s", u->be->ops->last_error(u->be));
            return -1;
        }
        /* ln_f's entries point into the scratch too (the embedding's
         * backward does not touch them, and the commit skips them). */
        gpt2_embed_w carved;
        gpt2_embed_w_carve(&u->dims, GPT2_F32, u->grad32, &carved);
        p[0] = carved.wte;
        p[1] = carved.wpe;
        p[2] = carved.lnfw;
        p[3] = carved.lnfb;
    }
    *g = (gpt2_embed_w){.wte = p[0], .wpe = p[1], .lnfw = p[2], .lnfb = p[3]};
    return 0;
}

int gpt2_units_embed_commit_again(gpt2_units *u, char *err, size_t cap) {
    return commit(u, 0, u->embed_grad, 0x3u, err, cap);
}

int gpt2_units_block_grads(gpt2_units *u, int l, gpt2_block_w *g, char *err, size_t cap) {
    void *p[GPT2_BLOCK_PARAMS];
    void *saved[GPT2_BLOCK_PARAMS];
    if (unit_grads(u, 1 + l, p, saved, err, cap) != 0) return -1;
    *g = (gpt2_block_w){p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]};
    return 0;
}

int gpt2_units_block_commit(gpt2_units *u, int l, char *err, size_t cap) {
    if (u->direct) return 0;
    void *dst[GPT2_BLOCK_PARAMS];
    for (int i = 0; i < GPT2_BLOCK_PARAMS; i++) {
        zs_param *p = gpt2_units_param(u, 1 + l, i);
        dst[i] = zs_param_grad(p);
        if (!dst[i]) return zs_failed("zs_param_grad", zs_param_name(p), err, cap);
    }
    return commit(u, 1 + l, dst, 0xfffu, err, cap);
}
