/* A model's units through zeroshard's public API (see ex_units.h). */
#include "ex_units.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_lora.h"

zs_status ex_units_init(ex_units *u, zs_ctx *zs, int unit_count, int param_count) {
    memset(u, 0, sizeof *u);
    u->zs = zs;
    u->units_cap = unit_count;
    u->params_cap = param_count;
    u->unit = calloc((size_t)unit_count, sizeof *u->unit);
    u->first = calloc((size_t)unit_count + 1, sizeof *u->first);
    u->param = calloc((size_t)param_count, sizeof *u->param);
    u->offset = calloc((size_t)param_count, sizeof *u->offset);
    u->unit_of = calloc((size_t)param_count, sizeof *u->unit_of);
    u->numel = calloc((size_t)param_count, sizeof *u->numel);
    u->grad = calloc((size_t)param_count, sizeof *u->grad);
    u->kind = calloc((size_t)unit_count, sizeof *u->kind);
    u->view_at = calloc((size_t)unit_count, sizeof *u->view_at);
    u->view = calloc((size_t)unit_count, sizeof *u->view);
    u->view_n = calloc((size_t)unit_count, sizeof *u->view_n);
    u->companion = malloc((size_t)unit_count * sizeof *u->companion);
    for (int i = 0; u->companion && i < unit_count; i++) u->companion[i] = -1;
    if (!u->unit || !u->first || !u->param || !u->offset || !u->unit_of || !u->numel || !u->grad ||
        !u->kind || !u->view_at || !u->view || !u->view_n || !u->companion) {
        ex_units_free(u);
        fprintf(stderr, "ex_units: out of host memory\n");
        return ZS_ERR_OUT_OF_MEMORY;
    }
    return ZS_OK;
}

zs_status ex_units_begin(ex_units *u, const char *name) {
    if (u->unit_count >= u->units_cap) {
        fprintf(stderr, "ex_units: more units than the %d described\n", u->units_cap);
        return ZS_ERR_INVALID_ARGUMENT;
    }
    u->first[u->unit_count] = u->param_count;
    return zs_unit_begin(u->zs, name, &u->unit[u->unit_count]);
}

zs_status ex_units_add(ex_units *u, const char *name, int ndim, const int64_t *shape, zs_init init,
                       unsigned flags) {
    const int unit = u->unit_count, index = u->param_count;
    if (index >= u->params_cap || index - u->first[unit] >= EX_UNIT_MAX_PARAMS) {
        fprintf(stderr, "ex_units: parameter '%s' is one too many (%d in all, %d per unit)\n",
                name, u->params_cap, EX_UNIT_MAX_PARAMS);
        return ZS_ERR_INVALID_ARGUMENT;
    }
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) numel *= shape[d];
    u->offset[index] = index == u->first[unit] ? 0 : u->offset[index - 1] + u->numel[index - 1];
    u->numel[index] = numel;
    u->unit_of[index] = unit;
    zs_status st = zs_param_create(u->zs, name, ndim, shape, init, flags, &u->param[index]);
    if (st == ZS_OK) u->param_count++;
    return st;
}

zs_status ex_units_end(ex_units *u) {
    zs_status st = zs_unit_end(u->zs);
    if (st == ZS_OK) u->first[++u->unit_count] = u->param_count;
    return st;
}

void ex_units_set_kind(ex_units *u, int unit, int kind) { u->kind[unit] = kind; }

int ex_units_set_view(ex_units *u, int unit, const int *params, int n, int companion) {
    free(u->view[unit]);
    u->view[unit] = malloc((size_t)n * sizeof *u->view[unit]);
    if (!u->view[unit]) return -1;
    memcpy(u->view[unit], params, (size_t)n * sizeof *params);
    u->view_n[unit] = n;
    u->companion[unit] = companion;
    return 0;
}

int ex_units_num_params(const ex_units *u, int unit) { return u->first[unit + 1] - u->first[unit]; }

zs_param *ex_units_param(const ex_units *u, int unit, int index) {
    return u->param[u->first[unit] + index];
}

static int64_t unit_numel(const ex_units *u, int unit) {
    const int last = u->first[unit + 1] - 1;
    return last < u->first[unit] ? 0 : u->offset[last] + u->numel[last];
}

int ex_units_attach(ex_units *u, nn_device *dev, char *err, size_t cap) {
    u->dev = dev;
    u->dtype = zs_param_dtype(u->param[0]);
    const nn_dtype want = u->dtype == ZS_DTYPE_BF16 ? NN_BF16
                          : u->dtype == ZS_DTYPE_FP16 ? NN_F16
                                                      : NN_F32;
    u->direct = dev->dtype == want;
    if (u->direct) return 0;
    if (dev->dtype != NN_F32) {
        snprintf(err, cap, "the model's %s device computes in %s, zeroshard's parameters are %s: "
                 "only fp32 views of them can be made", dev->ops->name, nn_dtype_name(dev->dtype),
                 zs_dtype_name(u->dtype));
        return -1;
    }
    /* The largest unit of each kind, one region per kind. */
    int64_t per_kind[EX_UNITS_KINDS] = {0}, largest = 0;
    for (int unit = 0; unit < u->unit_count; unit++)
        if (unit_numel(u, unit) > per_kind[u->kind[unit]])
            per_kind[u->kind[unit]] = unit_numel(u, unit);
    int64_t region[EX_UNITS_KINDS];
    for (int k = 0; k < EX_UNITS_KINDS; k++) {
        region[k] = largest;
        largest += per_kind[k];
    }
    for (int unit = 0; unit < u->unit_count; unit++) u->view_at[unit] = region[u->kind[unit]];
    void *p = NULL, *g = NULL;
    if (dev->ops->alloc(dev, (size_t)largest * sizeof(float), &p) != 0 ||
        dev->ops->alloc(dev, (size_t)largest * sizeof(float), &g) != 0) {
        snprintf(err, cap, "fp32 views of a unit (%lld floats): %s", (long long)largest,
                 dev->ops->last_error(dev));
        dev->ops->free(dev, p);
        return -1;
    }
    u->param32 = p;
    u->grad32 = g;
    return 0;
}

void ex_units_free(ex_units *u) {
    if (u->dev) {
        u->dev->ops->free(u->dev, u->param32);
        u->dev->ops->free(u->dev, u->grad32);
    }
    free(u->unit);
    free(u->first);
    free(u->param);
    free(u->offset);
    free(u->unit_of);
    free(u->numel);
    free(u->grad);
    for (int unit = 0; u->view && unit < u->units_cap; unit++) free(u->view[unit]);
    free(u->view);
    free(u->view_n);
    free(u->kind);
    free(u->view_at);
    free(u->companion);
    memset(u, 0, sizeof *u);
}

static int zs_failed(const char *what, const char *name, char *err, size_t cap) {
    snprintf(err, cap, "%s('%s'): %s", what, name, zs_last_error());
    return -1;
}

int ex_units_params(ex_units *u, int unit, void **ptrs, char *err, size_t cap) {
    const int n = u->view[unit] ? u->view_n[unit] : u->first[unit + 1] - u->first[unit];
    for (int i = 0; i < n; i++) {
        const int k = u->view[unit] ? u->view[unit][i] : u->first[unit] + i;
        if (zs_param_is_quantized(u->param[k])) { /* its layers dequantize it */
            ptrs[i] = NULL;
            continue;
        }
        void *data = zs_param_data(u->param[k]);
        if (!data) return zs_failed("zs_param_data", zs_param_name(u->param[k]), err, cap);
        if (u->direct) {
            ptrs[i] = data;
            continue;
        }
        ptrs[i] = u->param32 + u->view_at[u->unit_of[k]] + u->offset[k];
        if (zs_backend_convert(u->zs, ptrs[i], ZS_DTYPE_FP32, data, u->dtype, u->numel[k]) != ZS_OK)
            return zs_failed("zs_backend_convert", zs_param_name(u->param[k]), err, cap);
    }
    return 0;
}

/* Zeroes the scratch of the parameters of `unit` in mask. */
static int zero_scratch(ex_units *u, int unit, unsigned mask, char *err, size_t cap) {
    for (int i = 0, k = u->first[unit]; k < u->first[unit + 1]; i++, k++) {
        if (!(mask & (1u << i))) continue;
        if (u->dev->ops->zero(u->dev, u->grad32 + u->offset[k], (size_t)u->numel[k] * sizeof(float))) {
            snprintf(err, cap, "zeroing a gradient scratch: %s", u->dev->ops->last_error(u->dev));
            return -1;
        }
    }
    return 0;
}

int ex_units_grads(ex_units *u, int unit, void **ptrs, char *err, size_t cap) {
    for (int i = 0, k = u->first[unit]; k < u->first[unit + 1]; i++, k++) {
        void *grad = zs_param_grad(u->param[k]);
        if (!grad) return zs_failed("zs_param_grad", zs_param_name(u->param[k]), err, cap);
        u->grad[k] = grad;
        ptrs[i] = u->direct ? grad : (void *)(u->grad32 + u->offset[k]);
    }
    return u->direct ? 0 : zero_scratch(u, unit, EX_UNITS_ALL, err, cap);
}

int ex_units_commit(ex_units *u, int unit, unsigned mask, char *err, size_t cap) {
    if (u->direct) return 0;
    for (int i = 0, k = u->first[unit]; k < u->first[unit + 1]; i++, k++) {
        if (!(mask & (1u << i))) continue;
        if (zs_backend_accumulate(u->zs, u->grad[k], u->dtype, u->grad32 + u->offset[k],
                                  ZS_DTYPE_FP32, u->numel[k]) != ZS_OK)
            return zs_failed("zs_backend_accumulate", zs_param_name(u->param[k]), err, cap);
    }
    return 0;
}

int ex_units_grads_again(ex_units *u, int unit, unsigned mask, void **ptrs, char *err,
                         size_t cap) {
    for (int i = 0, k = u->first[unit]; k < u->first[unit + 1]; i++, k++)
        ptrs[i] = u->direct ? u->grad[k] : (void *)(u->grad32 + u->offset[k]);
    return u->direct ? 0 : zero_scratch(u, unit, mask, err, cap);
}

zs_init ex_units_initializer(const nn_param_spec *spec) {
    switch (spec->init) {
    case NN_INIT_NORMAL: return ZS_INIT_NORMAL_STD(spec->init_std);
    case NN_INIT_ONES: return ZS_INIT_CONSTANT_VALUE(1.0);
    case NN_INIT_ZEROS: break;
    }
    return ZS_INIT_ZEROS_VALUE;
}

zs_status ex_units_describe(ex_units *u, zs_ctx *zs, const nn_param_table *table,
                            const void *dims, int *units_out) {
    return ex_lora_describe(u, zs, table, dims, NULL, units_out);
}
