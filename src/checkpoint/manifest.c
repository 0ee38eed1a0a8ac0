/* The checkpoint manifest (manifest.json), written and parsed with json-c.
 *
 * Schema, version 1. Every field is required (but "frozen_base") and no
 * other field is allowed, at every level, so a manifest written by a newer
 * format fails loudly instead of being half understood. "version" is
 * checked before anything else.
 *
 * {
 *   "format": "zeroshard-checkpoint",
 *   "version": 1,
 *   "step": <int >= 0>,                 optimizer steps applied
 *   "skipped_total": <int >= 0>,
 *   "world_size": <int >= 1>,           of the saving run
 *   "stage": <0..3>,
 *   "config_hash": "<16 hex>",          lowercase, exactly 16 digits
 *   "compute_dtype": "fp32" | "fp16" | "bf16",
 *   "optimizer": "sgd" | "adam" | "adamw",
 *   "scaler": {"scale": <number > 0>, "cur_iter": <int >= 0>,
 *              "last_overflow_iter": <int >= -1>, "cur_hysteresis": <int >= 0>,
 *              "consecutive_overflows": <int >= 0>, "overflows_total": <int >= 0>},
 *   "units":   [{"name": <str>}],
 *   "params":  [{"name": <str>, "unit": <index into units>, "shape": [<int >= 1>, ...1..8],
 *                "flags": <ZS_PARAM_* bits>}],
 *   "files":   [{"name": <str>, "rank": <0..world_size-1>, "kind": "master" | "optim" | "user",
 *                "bytes": <int >= 0>, "xxh3": "<16 hex>"}],
 *   "tensors": [{"file": <index into files>, "key": <str>,
 *                "state": "master" | "exp_avg" | "exp_avg_sq" | "momentum" |
 *                         "user_global" | "user_rank",
 *                "param": <index into params; -1 for user states>,
 *                "offset": <int>, "count": <int>, "xxh3": "<16 hex>"}],
 *   "frozen_base": {"path": <str>, "name_prefix": <str>, "xxh3": "<16 hex>",
 *                   "tensors": <int >= 0>}      only when the frozen values
 *                                               are a base's (frozen_base.h)
 * }
 *
 * Integers are JSON integers (json-c int64; the strict lexer refuses any that
 * do not fit instead of letting json-c clamp them). Hashes are strings because
 * a uint64 does not survive JSON readers that use doubles. The semantic rules
 * are in zs__manifest_validate below and in manifest.h. */
#include "checkpoint/manifest.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "checkpoint/json_strict.h"
#include "checkpoint/safetensors.h"
#include "core/alloc.h"
#include "core/config.h"
#include "core/error.h"

static const char *const state_names[] = {
    [ZS_CKPT_STATE_MASTER] = "master",          [ZS_CKPT_STATE_EXP_AVG] = "exp_avg",
    [ZS_CKPT_STATE_EXP_AVG_SQ] = "exp_avg_sq",  [ZS_CKPT_STATE_MOMENTUM] = "momentum",
    [ZS_CKPT_STATE_USER_GLOBAL] = "user_global", [ZS_CKPT_STATE_USER_RANK] = "user_rank",
};
#define STATE_COUNT ((int)(sizeof state_names / sizeof state_names[0]))

static const char *const kind_names[] = {
    [ZS_CKPT_FILE_MASTER] = "master",
    [ZS_CKPT_FILE_OPTIM] = "optim",
    [ZS_CKPT_FILE_USER] = "user",
};
#define KIND_COUNT ((int)(sizeof kind_names / sizeof kind_names[0]))

static const char *const optimizer_names[] = {
    [ZS_OPTIMIZER_SGD] = "sgd",
    [ZS_OPTIMIZER_ADAM] = "adam",
    [ZS_OPTIMIZER_ADAMW] = "adamw",
};
#define OPTIMIZER_COUNT ((int)(sizeof optimizer_names / sizeof optimizer_names[0]))

/* zs_dtype values, named by zs_dtype_name. */
#define DTYPE_COUNT 3

/* Every parameter flag this version knows; others are refused. */
#define KNOWN_PARAM_FLAGS (ZS_PARAM_NO_DECAY | ZS_PARAM_FROZEN)

const char *zs__ckpt_state_name(zs__ckpt_state state) {
    if ((int)state < 0 || (int)state >= STATE_COUNT) return "unknown";
    return state_names[state];
}

const char *zs__ckpt_file_kind_name(zs__ckpt_file_kind kind) {
    if ((int)kind < 0 || (int)kind >= KIND_COUNT) return "unknown";
    return kind_names[kind];
}

void zs__ckpt_shard_name(char *out, size_t cap, int rank, zs__ckpt_file_kind kind) {
    snprintf(out, cap, "rank%05d.%s.safetensors", rank, zs__ckpt_file_kind_name(kind));
}

static int state_is_user(zs__ckpt_state state) {
    return state == ZS_CKPT_STATE_USER_GLOBAL || state == ZS_CKPT_STATE_USER_RANK;
}

zs__ckpt_file_kind zs__ckpt_state_file_kind(zs__ckpt_state state) {
    if (state == ZS_CKPT_STATE_MASTER) return ZS_CKPT_FILE_MASTER;
    if (state_is_user(state)) return ZS_CKPT_FILE_USER;
    return ZS_CKPT_FILE_OPTIM;
}

int64_t zs__ckpt_param_numel(const zs__ckpt_param *p) {
    if (p->ndim < 0 || p->ndim > ZS_CKPT_MAX_DIMS) return -1;
    int64_t n = 1;
    for (int d = 0; d < p->ndim; d++) {
        if (p->shape[d] < 0) return -1;
        if (p->shape[d] != 0 && n > INT64_MAX / p->shape[d]) return -1;
        n *= p->shape[d];
    }
    return n;
}

/* ================================================================ alloc */

zs_status zs__manifest_alloc(int units, int params, int files, int tensors, zs__manifest **out) {
    *out = NULL;
    if (units < 0 || params < 0 || files < 0 || tensors < 0 || units > ZS_CKPT_MAX_ENTRIES ||
        params > ZS_CKPT_MAX_ENTRIES || files > ZS_CKPT_MAX_ENTRIES ||
        tensors > ZS_CKPT_MAX_ENTRIES)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "manifest: counts (%d units, %d params, %d files, %d tensors) must be in "
                        "[0, %d]",
                        units, params, files, tensors, ZS_CKPT_MAX_ENTRIES);
    zs__manifest *m = zs__calloc(1, sizeof *m);
    if (!m) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "manifest: cannot allocate");
    m->version = ZS_CKPT_VERSION;
    m->unit_count = units;
    m->param_count = params;
    m->file_count = files;
    m->tensor_count = tensors;
    /* calloc(0) may return NULL; empty arrays stay NULL on purpose. */
    if (units) m->units = zs__calloc((size_t)units, sizeof *m->units);
    if (params) m->params = zs__calloc((size_t)params, sizeof *m->params);
    if (files) m->files = zs__calloc((size_t)files, sizeof *m->files);
    if (tensors) m->tensors = zs__calloc((size_t)tensors, sizeof *m->tensors);
    if ((units && !m->units) || (params && !m->params) || (files && !m->files) ||
        (tensors && !m->tensors)) {
        zs__manifest_free(m);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY,
                        "manifest: cannot allocate %d units, %d params, %d files, %d tensors",
                        units, params, files, tensors);
    }
    *out = m;
    return ZS_OK;
}

void zs__manifest_free(zs__manifest *m) {
    if (!m) return;
    free(m->units);
    free(m->params);
    free(m->files);
    free(m->tensors);
    free(m);
}

/* ================================================================ validation */

/* Why a name stored in a `capacity`-byte field is refused, or NULL. */
static const char *name_problem(const char *name, size_t capacity) {
    size_t len = strnlen(name, capacity);
    if (len == capacity) return "is not NUL-terminated within its field";
    if (len == 0) return "is empty";
    if (strchr(name, '/')) return "contains '/'";
    if (strstr(name, "..")) return "contains \"..\"";
    if (!zs__json_utf8_valid(name, len)) return "is not valid UTF-8";
    return NULL;
}

static const char *file_name_problem(const char *name) {
    size_t len = strnlen(name, ZS_CKPT_FILE_NAME_MAX + 1);
    if (len > ZS_CKPT_FILE_NAME_MAX) return "is longer than 63 bytes";
    if (len == 0) return "is empty";
    for (size_t k = 0; k < len; k++) {
        char c = name[k];
        int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        if (!ok) return "has a character outside [A-Za-z0-9._-]";
    }
    if (strstr(name, "..") || strcmp(name, ".") == 0) return "contains \"..\" or is \".\"";
    return NULL;
}

typedef struct named {
    const char *name;
    int a; /* a secondary key (the file of a tensor key) */
    int index;
} named;

static int cmp_named(const void *x, const void *y) {
    const named *p = x, *q = y;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    int c = strcmp(p->name, q->name);
    if (c) return c;
    return p->index < q->index ? -1 : p->index > q->index;
}

/* Fails if two items share (a, name); `what` is "unit", "parameter", ... */
static zs_status check_unique(named *items, int count, const char *where, const char *what) {
    if (count > 1) qsort(items, (size_t)count, sizeof *items, cmp_named);
    for (int k = 1; k < count; k++) {
        if (items[k].a == items[k - 1].a && strcmp(items[k].name, items[k - 1].name) == 0)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: %s entries %d and %d have the same name", where, what,
                            items[k - 1].index, items[k].index);
    }
    return ZS_OK;
}

typedef struct range {
    int param;
    int state;
    int64_t offset;
    int64_t count;
    int index;
} range;

static int cmp_range(const void *x, const void *y) {
    const range *p = x, *q = y;
    if (p->param != q->param) return p->param < q->param ? -1 : 1;
    if (p->state != q->state) return p->state < q->state ? -1 : 1;
    if (p->offset != q->offset) return p->offset < q->offset ? -1 : 1;
    if (p->count != q->count) return p->count < q->count ? -1 : 1;
    return p->index < q->index ? -1 : p->index > q->index;
}

/* For each (param, state) present the non-empty tensors tile [0, numel)
 * exactly, and every parameter has a master. Empty tensors cover nothing
 * (their offsets were bounds-checked already). */
static zs_status check_coverage(const zs__manifest *m, const char *where) {
    zs_status status = ZS_OK;
    range *ranges = m->tensor_count ? zs__malloc((size_t)m->tensor_count * sizeof *ranges) : NULL;
    unsigned char *has_master = m->param_count ? zs__calloc((size_t)m->param_count, 1) : NULL;
    if ((m->tensor_count && !ranges) || (m->param_count && !has_master)) {
        status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate the coverage check", where);
        goto done;
    }
    int n = 0;
    for (int t = 0; t < m->tensor_count; t++) {
        const zs__ckpt_tensor *x = &m->tensors[t];
        if (state_is_user(x->state)) continue;
        if (x->state == ZS_CKPT_STATE_MASTER) has_master[x->param] = 1;
        ranges[n++] = (range){x->param, (int)x->state, x->offset, x->count, t};
    }
    if (n > 1) qsort(ranges, (size_t)n, sizeof *ranges, cmp_range);
    for (int k = 0; k < n;) {
        const zs__ckpt_param *p = &m->params[ranges[k].param];
        const char *state = zs__ckpt_state_name((zs__ckpt_state)ranges[k].state);
        int64_t numel = zs__ckpt_param_numel(p), covered = 0;
        int last = -1, g = k;
        for (; g < n && ranges[g].param == ranges[k].param && ranges[g].state == ranges[k].state;
             g++) {
            const range *r = &ranges[g];
            if (r->count == 0) continue;
            if (r->offset < covered) {
                status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                                  "%s: params[%d] %s: tensors[%d] and tensors[%d] overlap at "
                                  "element %lld",
                                  where, ranges[k].param, state, last, r->index,
                                  (long long)r->offset);
                goto done;
            }
            if (r->offset > covered) {
                status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                                  "%s: params[%d] %s: elements [%lld, %lld) are missing "
                                  "(in no tensor)",
                                  where, ranges[k].param, state, (long long)covered, (long long)r->offset);
                goto done;
            }
            covered = r->offset + r->count; /* bounds-checked: no overflow */
            last = r->index;
        }
        if (covered != numel) {
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                              "%s: params[%d] %s: elements [%lld, %lld) are missing (in no "
                              "tensor)",
                              where, ranges[k].param, state, (long long)covered, (long long)numel);
            goto done;
        }
        k = g;
    }
    for (int p = 0; p < m->param_count; p++) {
        /* A recorded base holds the frozen values: no tensor of them here. */
        const int from_base = m->has_base && (m->params[p].flags & ZS_PARAM_FROZEN);
        if (from_base && has_master[p]) {
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                              "%s: params[%d] is frozen and its values are the frozen_base's, "
                              "but it has a master tensor",
                              where, p);
            goto done;
        }
        if (!has_master[p] && !from_base) {
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                              "%s: params[%d] has no master tensor (the checkpoint cannot "
                              "restore its weights)",
                              where, p);
            goto done;
        }
    }
done:
    free(ranges);
    free(has_master);
    return status;
}

static zs_status check_names(const zs__manifest *m, const char *where) {
    zs_status status = ZS_OK;
    int most = m->unit_count;
    if (m->param_count > most) most = m->param_count;
    if (m->file_count > most) most = m->file_count;
    if (m->tensor_count > most) most = m->tensor_count;
    named *items = most ? zs__malloc((size_t)most * sizeof *items) : NULL;
    if (most && !items) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate", where);
    for (int k = 0; k < m->unit_count; k++) items[k] = (named){m->units[k].name, 0, k};
    ZS_CHECK_GOTO(check_unique(items, m->unit_count, where, "unit"), status, done);
    for (int k = 0; k < m->param_count; k++) items[k] = (named){m->params[k].name, 0, k};
    ZS_CHECK_GOTO(check_unique(items, m->param_count, where, "parameter"), status, done);
    for (int k = 0; k < m->file_count; k++) items[k] = (named){m->files[k].name, 0, k};
    ZS_CHECK_GOTO(check_unique(items, m->file_count, where, "file"), status, done);
    /* Tensor keys are unique within their file. */
    for (int k = 0; k < m->tensor_count; k++)
        items[k] = (named){m->tensors[k].key, m->tensors[k].file, k};
    ZS_CHECK_GOTO(check_unique(items, m->tensor_count, where, "tensor key (in one file)"), status,
                  done);
done:
    free(items);
    return status;
}

zs_status zs__manifest_validate(const zs__manifest *m, const char *where) {
    if (!m) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: NULL manifest", where);
    if (m->version != ZS_CKPT_VERSION)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: unsupported version %d (this build reads %d)",
                        where, m->version, ZS_CKPT_VERSION);
    if (m->step < 0 || m->skipped_total < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: step %lld and skipped_total %lld must be >= 0",
                        where, (long long)m->step, (long long)m->skipped_total);
    if (m->world_size < 1)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: world_size %d must be >= 1", where,
                        m->world_size);
    if (m->stage < 0 || m->stage > 3)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: stage %d is not in 0..3", where, m->stage);
    if ((int)m->compute_dtype < 0 || (int)m->compute_dtype >= DTYPE_COUNT)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: unknown compute_dtype %d", where,
                        (int)m->compute_dtype);
    if (m->optimizer < 0 || m->optimizer >= OPTIMIZER_COUNT)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: unknown optimizer %d", where, m->optimizer);
    const zs__ckpt_scaler *sc = &m->scaler;
    if (!isfinite(sc->scale) || sc->scale <= 0.0 || sc->cur_iter < 0 ||
        sc->last_overflow_iter < -1 || sc->cur_hysteresis < 0 || sc->consecutive_overflows < 0 ||
        sc->overflows_total < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: scaler state out of range (scale %g must be finite and > 0, "
                        "last_overflow_iter >= -1, the other counters >= 0)",
                        where, sc->scale);
    if (m->unit_count < 0 || m->unit_count > ZS_CKPT_MAX_ENTRIES || m->param_count < 0 ||
        m->param_count > ZS_CKPT_MAX_ENTRIES || m->file_count < 0 ||
        m->file_count > ZS_CKPT_MAX_ENTRIES || m->tensor_count < 0 ||
        m->tensor_count > ZS_CKPT_MAX_ENTRIES || (m->unit_count && !m->units) ||
        (m->param_count && !m->params) || (m->file_count && !m->files) ||
        (m->tensor_count && !m->tensors))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: entry counts out of [0, %d]", where,
                        ZS_CKPT_MAX_ENTRIES);

    for (int u = 0; u < m->unit_count; u++) {
        const char *why = name_problem(m->units[u].name, sizeof m->units[u].name);
        if (why)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: units[%d]: the name %s", where, u,
                            why);
    }
    for (int i = 0; i < m->param_count; i++) {
        const zs__ckpt_param *p = &m->params[i];
        const char *why = name_problem(p->name, sizeof p->name);
        if (why)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: params[%d]: the name %s", where, i,
                            why);
        if (p->unit < 0 || p->unit >= m->unit_count)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: params[%d] unit index %d is out of range [0, %d)", where,
                            i, p->unit, m->unit_count);
        if (p->ndim < 1 || p->ndim > ZS_CKPT_MAX_DIMS)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: params[%d] has %d dimensions (want 1..%d)", where, i,
                            p->ndim, ZS_CKPT_MAX_DIMS);
        for (int d = 0; d < p->ndim; d++)
            if (p->shape[d] < 1)
                return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                                "%s: params[%d] shape[%d] must be >= 1", where,
                                i, d);
        if (zs__ckpt_param_numel(p) < 0)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: params[%d] shape product overflows 64 bits", where, i);
        if (p->flags & ~(unsigned)KNOWN_PARAM_FLAGS)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: params[%d] has unknown flags 0x%x",
                            where, i, p->flags);
    }
    for (int i = 0; i < m->file_count; i++) {
        const zs__ckpt_file *f = &m->files[i];
        const char *why = file_name_problem(f->name);
        if (why)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: files[%d]: the file name %s", where,
                            i, why);
        if (f->rank < 0 || f->rank >= m->world_size)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: files[%d] rank %d is out of range [0, world_size %d)", where,
                            i, f->rank, m->world_size);
        if ((int)f->kind < 0 || (int)f->kind >= KIND_COUNT)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: files[%d] has unknown kind %d", where,
                            i, (int)f->kind);
        if (f->bytes > (uint64_t)INT64_MAX)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: files[%d] size is out of range", where,
                            i);
    }
    for (int i = 0; i < m->tensor_count; i++) {
        const zs__ckpt_tensor *t = &m->tensors[i];
        const char *why = name_problem(t->key, sizeof t->key);
        if (why)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: tensors[%d]: the key %s", where, i,
                            why);
        if (t->file < 0 || t->file >= m->file_count)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: tensors[%d] file index %d is out of range [0, %d)", where,
                            i, t->file, m->file_count);
        if ((int)t->state < 0 || (int)t->state >= STATE_COUNT)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: tensors[%d] has unknown state %d",
                            where, i, (int)t->state);
        const zs__ckpt_file *f = &m->files[t->file];
        if (f->kind != zs__ckpt_state_file_kind(t->state))
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: tensors[%d] (state %s) is in files[%d] of kind %s; that "
                            "state belongs in %s files",
                            where, i, zs__ckpt_state_name(t->state), t->file,
                            zs__ckpt_file_kind_name(f->kind),
                            zs__ckpt_file_kind_name(zs__ckpt_state_file_kind(t->state)));
        if (t->offset < 0 || t->count < 0)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: tensors[%d] offset %lld and count %lld must be >= 0", where,
                            i, (long long)t->offset, (long long)t->count);
        if (state_is_user(t->state)) {
            if (t->param != -1 || t->offset != 0)
                return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                                "%s: user tensor tensors[%d] must have param -1 and offset 0 (has %d "
                                "and %lld)",
                                where, i, t->param, (long long)t->offset);
            continue;
        }
        if (t->param < 0 || t->param >= m->param_count)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: tensors[%d] param index %d is out of range [0, %d)", where,
                            i, t->param, m->param_count);
        int64_t numel = zs__ckpt_param_numel(&m->params[t->param]);
        if (t->offset > numel || t->count > numel - t->offset)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: tensors[%d] elements [%lld, %lld + %lld) exceed params[%d] "
                            "(%lld elements; offset + count may overflow)",
                            where, i, (long long)t->offset, (long long)t->offset,
                            (long long)t->count, t->param, (long long)numel);
    }
    ZS_CHECK(check_names(m, where));
    ZS_CHECK(check_coverage(m, where));
    return ZS_OK;
}

/* ================================================================ writing */

/* Builds JSON, remembering any allocation failure so the code stays linear;
 * every add takes ownership of its value, even when it fails. */
typedef struct builder {
    int failed;
} builder;

static void b_put(builder *b, struct json_object *obj, const char *key, struct json_object *value) {
    if (!value || !obj || json_object_object_add(obj, key, value) != 0) {
        json_object_put(value);
        b->failed = 1;
    }
}

static void b_push(builder *b, struct json_object *array, struct json_object *value) {
    if (!value || !array || json_object_array_add(array, value) != 0) {
        json_object_put(value);
        b->failed = 1;
    }
}

static struct json_object *hex_string(uint64_t v) {
    char text[17];
    snprintf(text, sizeof text, "%016llx", (unsigned long long)v);
    return json_object_new_string(text);
}

zs_status zs__manifest_to_json(const zs__manifest *m, char **text, size_t *bytes) {
    *text = NULL;
    *bytes = 0;
    ZS_CHECK(zs__manifest_validate(m, "manifest to write"));
    builder b = {0};
    struct json_object *root = json_object_new_object();
    b_put(&b, root, "format", json_object_new_string(ZS_CKPT_FORMAT));
    b_put(&b, root, "version", json_object_new_int64(m->version));
    b_put(&b, root, "step", json_object_new_int64(m->step));
    b_put(&b, root, "skipped_total", json_object_new_int64(m->skipped_total));
    b_put(&b, root, "world_size", json_object_new_int64(m->world_size));
    b_put(&b, root, "stage", json_object_new_int64(m->stage));
    b_put(&b, root, "config_hash", hex_string(m->config_hash));
    b_put(&b, root, "compute_dtype", json_object_new_string(zs_dtype_name(m->compute_dtype)));
    b_put(&b, root, "optimizer", json_object_new_string(optimizer_names[m->optimizer]));

    struct json_object *sc = json_object_new_object();
    b_put(&b, sc, "scale", json_object_new_double(m->scaler.scale));
    b_put(&b, sc, "cur_iter", json_object_new_int64(m->scaler.cur_iter));
    b_put(&b, sc, "last_overflow_iter", json_object_new_int64(m->scaler.last_overflow_iter));
    b_put(&b, sc, "cur_hysteresis", json_object_new_int64(m->scaler.cur_hysteresis));
    b_put(&b, sc, "consecutive_overflows", json_object_new_int64(m->scaler.consecutive_overflows));
    b_put(&b, sc, "overflows_total", json_object_new_int64(m->scaler.overflows_total));
    b_put(&b, root, "scaler", sc);

    struct json_object *units = json_object_new_array_ext(m->unit_count ? m->unit_count : 1);
    for (int i = 0; i < m->unit_count && !b.failed; i++) {
        struct json_object *u = json_object_new_object();
        b_put(&b, u, "name", json_object_new_string(m->units[i].name));
        b_push(&b, units, u);
    }
    b_put(&b, root, "units", units);

    struct json_object *params = json_object_new_array_ext(m->param_count ? m->param_count : 1);
    for (int i = 0; i < m->param_count && !b.failed; i++) {
        const zs__ckpt_param *p = &m->params[i];
        struct json_object *o = json_object_new_object();
        struct json_object *shape = json_object_new_array();
        for (int d = 0; d < p->ndim; d++) b_push(&b, shape, json_object_new_int64(p->shape[d]));
        b_put(&b, o, "name", json_object_new_string(p->name));
        b_put(&b, o, "unit", json_object_new_int64(p->unit));
        b_put(&b, o, "shape", shape);
        b_put(&b, o, "flags", json_object_new_int64(p->flags));
        b_push(&b, params, o);
    }
    b_put(&b, root, "params", params);

    struct json_object *files = json_object_new_array_ext(m->file_count ? m->file_count : 1);
    for (int i = 0; i < m->file_count && !b.failed; i++) {
        const zs__ckpt_file *f = &m->files[i];
        struct json_object *o = json_object_new_object();
        b_put(&b, o, "name", json_object_new_string(f->name));
        b_put(&b, o, "rank", json_object_new_int64(f->rank));
        b_put(&b, o, "kind", json_object_new_string(zs__ckpt_file_kind_name(f->kind)));
        b_put(&b, o, "bytes", json_object_new_int64((int64_t)f->bytes));
        b_put(&b, o, "xxh3", hex_string(f->xxh3));
        b_push(&b, files, o);
    }
    b_put(&b, root, "files", files);

    struct json_object *tensors = json_object_new_array_ext(m->tensor_count ? m->tensor_count : 1);
    for (int i = 0; i < m->tensor_count && !b.failed; i++) {
        const zs__ckpt_tensor *t = &m->tensors[i];
        struct json_object *o = json_object_new_object();
        b_put(&b, o, "file", json_object_new_int64(t->file));
        b_put(&b, o, "key", json_object_new_string(t->key));
        b_put(&b, o, "state", json_object_new_string(zs__ckpt_state_name(t->state)));
        b_put(&b, o, "param", json_object_new_int64(t->param));
        b_put(&b, o, "offset", json_object_new_int64(t->offset));
        b_put(&b, o, "count", json_object_new_int64(t->count));
        b_put(&b, o, "xxh3", hex_string(t->xxh3));
        b_push(&b, tensors, o);
    }
    b_put(&b, root, "tensors", tensors);
    if (m->has_base) {
        struct json_object *base = json_object_new_object();
        b_put(&b, base, "path", json_object_new_string(m->base_path));
        b_put(&b, base, "name_prefix", json_object_new_string(m->base_prefix));
        b_put(&b, base, "xxh3", hex_string(m->base_xxh3));
        b_put(&b, base, "tensors", json_object_new_int64(m->base_tensors));
        b_put(&b, root, "frozen_base", base);
    }

    zs_status status = ZS_OK;
    size_t len = 0;
    const char *json = b.failed ? NULL
                                : json_object_to_json_string_length(
                                      root,
                                      JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                          JSON_C_TO_STRING_NOSLASHESCAPE,
                                      &len);
    char *out = json ? zs__malloc(len + 2) : NULL;
    if (!out) {
        status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "manifest: out of host memory for its JSON text");
    } else {
        memcpy(out, json, len);
        out[len] = '\n'; /* a text file ends with a newline */
        out[len + 1] = '\0';
        *text = out;
        *bytes = len + 1;
    }
    json_object_put(root);
    return status;
}

/* ================================================================ parsing */

typedef struct parser {
    const char *where;
    char ctx[64]; /* "params[12]", for messages */
} parser;

static struct json_object *member(struct json_object *obj, const char *key) {
    struct json_object *v = NULL;
    json_object_object_get_ex(obj, key, &v);
    return v;
}

/* obj must be an object with exactly these fields. */
static zs_status p_fields(parser *ps, struct json_object *obj, const char *const *fields, int n) {
    if (!json_object_is_type(obj, json_type_object))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s must be an object", ps->where, ps->ctx);
    /* Fields are named by position, never by their text (see json_strict.h). */
    int index = -1;
    json_object_object_foreach(obj, key, value) {
        (void)value;
        index++;
        int known = 0;
        for (int k = 0; k < n && !known; k++) known = strcmp(key, fields[k]) == 0;
        if (!known)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: %s has an unknown field (member %d; expected only %d known "
                            "fields; written by a newer zeroshard?)",
                            ps->where, ps->ctx, index, n);
    }
    for (int k = 0; k < n; k++)
        if (!member(obj, fields[k]))
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: missing field \"%s\" in %s", ps->where,
                            fields[k], ps->ctx);
    return ZS_OK;
}

static zs_status p_int(parser *ps, struct json_object *obj, const char *key, int64_t lo, int64_t hi,
                       int64_t *out) {
    struct json_object *v = member(obj, key);
    if (!json_object_is_type(v, json_type_int))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s.%s must be an integer", ps->where,
                        ps->ctx, key);
    int64_t x = json_object_get_int64(v);
    if (x < lo || x > hi)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s.%s is out of range [%lld, %lld]",
                        ps->where, ps->ctx, key, (long long)lo, (long long)hi);
    *out = x;
    return ZS_OK;
}

static zs_status p_int32(parser *ps, struct json_object *obj, const char *key, int64_t lo,
                         int64_t hi, int *out) {
    int64_t x;
    ZS_CHECK(p_int(ps, obj, key, lo, hi, &x));
    *out = (int)x;
    return ZS_OK;
}

/* A string of at most max_len bytes without NUL, copied into dst. */
static zs_status p_string(parser *ps, struct json_object *obj, const char *key, size_t max_len,
                          char *dst) {
    struct json_object *v = member(obj, key);
    if (!json_object_is_type(v, json_type_string))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s.%s must be a string", ps->where, ps->ctx,
                        key);
    const char *s = json_object_get_string(v);
    size_t len = (size_t)json_object_get_string_len(v);
    if (strlen(s) != len)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s.%s contains a NUL byte", ps->where,
                        ps->ctx, key);
    if (len > max_len)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s.%s is longer than %zu bytes", ps->where,
                        ps->ctx, key, max_len);
    memcpy(dst, s, len + 1);
    return ZS_OK;
}

static zs_status p_enum(parser *ps, struct json_object *obj, const char *key,
                        const char *const *names, int count, int *out) {
    char text[32];
    ZS_CHECK(p_string(ps, obj, key, sizeof text - 1, text));
    for (int k = 0; k < count; k++) {
        if (names[k] && strcmp(text, names[k]) == 0) {
            *out = k;
            return ZS_OK;
        }
    }
    return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s.%s is not a known value", ps->where, ps->ctx,
                    key);
}

/* Exactly 16 lowercase hex digits, as written. */
static zs_status p_hex(parser *ps, struct json_object *obj, const char *key, uint64_t *out) {
    char text[17];
    zs_status status = p_string(ps, obj, key, 16, text);
    size_t len = status == ZS_OK ? strlen(text) : 0;
    uint64_t v = 0;
    for (size_t k = 0; status == ZS_OK && k < len; k++) {
        char c = text[k];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0) break;
        v = v << 4 | (uint64_t)d;
        if (k + 1 == len && len == 16) {
            *out = v;
            return ZS_OK;
        }
    }
    return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                    "%s: %s.%s must be a hash of exactly 16 lowercase hex digits", ps->where,
                    ps->ctx, key);
}

static struct json_object *p_array(parser *ps, struct json_object *obj, const char *key,
                                   zs_status *status) {
    struct json_object *v = member(obj, key);
    if (!json_object_is_type(v, json_type_array)) {
        *status = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s.%s must be an array", ps->where,
                           ps->ctx, key);
        return NULL;
    }
    if (json_object_array_length(v) > (size_t)ZS_CKPT_MAX_ENTRIES) {
        *status = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s.%s has more than %d entries",
                           ps->where, ps->ctx, key, ZS_CKPT_MAX_ENTRIES);
        return NULL;
    }
    *status = ZS_OK;
    return v;
}

static void p_ctx(parser *ps, const char *array, int index) {
    snprintf(ps->ctx, sizeof ps->ctx, "%s[%d]", array, index);
}

static zs_status parse_scaler(parser *ps, struct json_object *obj, zs__ckpt_scaler *sc) {
    static const char *const fields[] = {"scale", "cur_iter", "last_overflow_iter",
                                         "cur_hysteresis", "consecutive_overflows",
                                         "overflows_total"};
    snprintf(ps->ctx, sizeof ps->ctx, "scaler");
    ZS_CHECK(p_fields(ps, obj, fields, 6));
    struct json_object *scale = member(obj, "scale");
    if (!json_object_is_type(scale, json_type_double) && !json_object_is_type(scale, json_type_int))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: scaler.scale must be a number", ps->where);
    sc->scale = json_object_get_double(scale);
    ZS_CHECK(p_int(ps, obj, "cur_iter", 0, INT64_MAX, &sc->cur_iter));
    ZS_CHECK(p_int(ps, obj, "last_overflow_iter", -1, INT64_MAX, &sc->last_overflow_iter));
    ZS_CHECK(p_int32(ps, obj, "cur_hysteresis", 0, INT_MAX, &sc->cur_hysteresis));
    ZS_CHECK(p_int(ps, obj, "consecutive_overflows", 0, INT64_MAX, &sc->consecutive_overflows));
    ZS_CHECK(p_int(ps, obj, "overflows_total", 0, INT64_MAX, &sc->overflows_total));
    return ZS_OK;
}

static zs_status parse_param(parser *ps, struct json_object *obj, zs__ckpt_param *p) {
    static const char *const fields[] = {"name", "unit", "shape", "flags"};
    ZS_CHECK(p_fields(ps, obj, fields, 4));
    ZS_CHECK(p_string(ps, obj, "name", ZS_CKPT_NAME_MAX, p->name));
    ZS_CHECK(p_int32(ps, obj, "unit", 0, INT_MAX, &p->unit));
    int64_t flags;
    ZS_CHECK(p_int(ps, obj, "flags", 0, UINT_MAX, &flags));
    p->flags = (unsigned)flags;
    struct json_object *shape = member(obj, "shape");
    if (!json_object_is_type(shape, json_type_array) || json_object_array_length(shape) < 1 ||
        json_object_array_length(shape) > ZS_CKPT_MAX_DIMS)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: %s.shape must be an array of 1..%d integers", ps->where, ps->ctx,
                        ZS_CKPT_MAX_DIMS);
    p->ndim = (int)json_object_array_length(shape);
    for (int d = 0; d < p->ndim; d++) {
        struct json_object *v = json_object_array_get_idx(shape, (size_t)d);
        if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 1)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: %s.shape[%d] must be a positive integer", ps->where, ps->ctx, d);
        p->shape[d] = json_object_get_int64(v);
    }
    return ZS_OK;
}

static zs_status parse_file(parser *ps, struct json_object *obj, zs__ckpt_file *f) {
    static const char *const fields[] = {"name", "rank", "kind", "bytes", "xxh3"};
    int kind = 0;
    int64_t bytes;
    ZS_CHECK(p_fields(ps, obj, fields, 5));
    ZS_CHECK(p_string(ps, obj, "name", ZS_CKPT_FILE_NAME_MAX, f->name));
    ZS_CHECK(p_int32(ps, obj, "rank", 0, INT_MAX, &f->rank));
    ZS_CHECK(p_enum(ps, obj, "kind", kind_names, KIND_COUNT, &kind));
    f->kind = (zs__ckpt_file_kind)kind;
    ZS_CHECK(p_int(ps, obj, "bytes", 0, INT64_MAX, &bytes));
    f->bytes = (uint64_t)bytes;
    ZS_CHECK(p_hex(ps, obj, "xxh3", &f->xxh3));
    return ZS_OK;
}

static zs_status parse_tensor(parser *ps, struct json_object *obj, zs__ckpt_tensor *t) {
    static const char *const fields[] = {"file",   "key",   "state", "param",
                                         "offset", "count", "xxh3"};
    int state = 0;
    ZS_CHECK(p_fields(ps, obj, fields, 7));
    ZS_CHECK(p_int32(ps, obj, "file", 0, INT_MAX, &t->file));
    ZS_CHECK(p_string(ps, obj, "key", sizeof t->key - 1, t->key));
    ZS_CHECK(p_enum(ps, obj, "state", state_names, STATE_COUNT, &state));
    t->state = (zs__ckpt_state)state;
    ZS_CHECK(p_int32(ps, obj, "param", -1, INT_MAX, &t->param));
    ZS_CHECK(p_int(ps, obj, "offset", 0, INT64_MAX, &t->offset));
    ZS_CHECK(p_int(ps, obj, "count", 0, INT64_MAX, &t->count));
    ZS_CHECK(p_hex(ps, obj, "xxh3", &t->xxh3));
    return ZS_OK;
}

static zs_status parse_base(parser *ps, struct json_object *obj, zs__manifest *m) {
    static const char *const fields[] = {"path", "name_prefix", "xxh3", "tensors"};
    snprintf(ps->ctx, sizeof ps->ctx, "frozen_base");
    ZS_CHECK(p_fields(ps, obj, fields, (int)(sizeof fields / sizeof fields[0])));
    ZS_CHECK(p_string(ps, obj, "path", ZS_CKPT_BASE_PATH_MAX, m->base_path));
    ZS_CHECK(p_string(ps, obj, "name_prefix", ZS_CKPT_NAME_MAX, m->base_prefix));
    ZS_CHECK(p_hex(ps, obj, "xxh3", &m->base_xxh3));
    ZS_CHECK(p_int32(ps, obj, "tensors", 0, INT_MAX, &m->base_tensors));
    if (m->base_path[0] == '\0')
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: frozen_base.path is empty", ps->where);
    m->has_base = 1;
    return ZS_OK;
}

static zs_status parse_root(parser *ps, struct json_object *root, zs__manifest **out) {
    static const char *const fields[] = {"format",        "version",    "step",   "skipped_total",
                                         "world_size",    "stage",      "config_hash",
                                         "compute_dtype", "optimizer",  "scaler", "units",
                                         "params",        "files",      "tensors",
                                         "frozen_base"};
    /* "frozen_base", the last, only where there is one. */
    const int has_base = member(root, "frozen_base") != NULL;
    const int field_count = (int)(sizeof fields / sizeof fields[0]) - !has_base;
    zs_status status;
    snprintf(ps->ctx, sizeof ps->ctx, "manifest");
    /* The version first: a newer format must fail as such, not as the first
     * field this build does not know. */
    struct json_object *version = member(root, "version");
    if (!version)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: missing field \"version\" in the manifest",
                        ps->where);
    if (!json_object_is_type(version, json_type_int))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: version must be an integer", ps->where);
    if (json_object_get_int64(version) != ZS_CKPT_VERSION)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: unsupported version %lld (this build reads version %d; was it "
                        "written by a newer zeroshard?)",
                        ps->where, (long long)json_object_get_int64(version), ZS_CKPT_VERSION);
    ZS_CHECK(p_fields(ps, root, fields, field_count));
    struct json_object *fv = member(root, "format");
    if (!json_object_is_type(fv, json_type_string) ||
        (size_t)json_object_get_string_len(fv) != strlen(ZS_CKPT_FORMAT) ||
        strcmp(json_object_get_string(fv), ZS_CKPT_FORMAT) != 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: format is not \"%s\"; not a zeroshard "
                                                 "checkpoint manifest",
                        ps->where, ZS_CKPT_FORMAT);

    struct json_object *units = p_array(ps, root, "units", &status);
    if (!units) return status;
    struct json_object *params = p_array(ps, root, "params", &status);
    if (!params) return status;
    struct json_object *files = p_array(ps, root, "files", &status);
    if (!files) return status;
    struct json_object *tensors = p_array(ps, root, "tensors", &status);
    if (!tensors) return status;

    zs__manifest *m = NULL;
    ZS_CHECK(zs__manifest_alloc((int)json_object_array_length(units),
                                (int)json_object_array_length(params),
                                (int)json_object_array_length(files),
                                (int)json_object_array_length(tensors), &m));
    int dtype = 0, optimizer = 0;
    int64_t v;
    ZS_CHECK_GOTO(p_int(ps, root, "step", 0, INT64_MAX, &m->step), status, fail);
    ZS_CHECK_GOTO(p_int(ps, root, "skipped_total", 0, INT64_MAX, &m->skipped_total), status, fail);
    ZS_CHECK_GOTO(p_int32(ps, root, "world_size", 1, INT_MAX, &m->world_size), status, fail);
    ZS_CHECK_GOTO(p_int(ps, root, "stage", 0, 3, &v), status, fail);
    m->stage = (int)v;
    ZS_CHECK_GOTO(p_hex(ps, root, "config_hash", &m->config_hash), status, fail);
    static const char *const dtype_names[DTYPE_COUNT] = {"fp32", "fp16", "bf16"};
    ZS_CHECK_GOTO(p_enum(ps, root, "compute_dtype", dtype_names, DTYPE_COUNT, &dtype), status,
                  fail);
    m->compute_dtype = (zs_dtype)dtype;
    ZS_CHECK_GOTO(p_enum(ps, root, "optimizer", optimizer_names, OPTIMIZER_COUNT, &optimizer),
                  status, fail);
    m->optimizer = optimizer;
    ZS_CHECK_GOTO(parse_scaler(ps, member(root, "scaler"), &m->scaler), status, fail);

    static const char *const unit_fields[] = {"name"};
    for (int i = 0; i < m->unit_count; i++) {
        struct json_object *u = json_object_array_get_idx(units, (size_t)i);
        p_ctx(ps, "units", i);
        ZS_CHECK_GOTO(p_fields(ps, u, unit_fields, 1), status, fail);
        ZS_CHECK_GOTO(p_string(ps, u, "name", ZS_CKPT_NAME_MAX, m->units[i].name), status, fail);
    }
    for (int i = 0; i < m->param_count; i++) {
        p_ctx(ps, "params", i);
        ZS_CHECK_GOTO(parse_param(ps, json_object_array_get_idx(params, (size_t)i), &m->params[i]),
                      status, fail);
    }
    for (int i = 0; i < m->file_count; i++) {
        p_ctx(ps, "files", i);
        ZS_CHECK_GOTO(parse_file(ps, json_object_array_get_idx(files, (size_t)i), &m->files[i]),
                      status, fail);
    }
    for (int i = 0; i < m->tensor_count; i++) {
        p_ctx(ps, "tensors", i);
        ZS_CHECK_GOTO(
            parse_tensor(ps, json_object_array_get_idx(tensors, (size_t)i), &m->tensors[i]),
            status, fail);
    }
    if (has_base) ZS_CHECK_GOTO(parse_base(ps, member(root, "frozen_base"), m), status, fail);
    ZS_CHECK_GOTO(zs__manifest_validate(m, ps->where), status, fail);
    *out = m;
    return ZS_OK;
fail:
    zs__manifest_free(m);
    return status;
}

zs_status zs__manifest_from_json(const char *text, size_t bytes, const char *where,
                                 zs__manifest **out) {
    *out = NULL;
    if (!where) where = "manifest";
    if (!text) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: no manifest text", where);
    if (bytes > ZS_CKPT_MANIFEST_MAX)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: the manifest is %zu bytes, more than the limit of %u", where, bytes,
                        ZS_CKPT_MANIFEST_MAX);
    /* Depth 4: the manifest, an array, an entry, a shape. */
    const zs__json_rules rules = {4, ZS_CKPT_MAX_ENTRIES, 0};
    struct json_object *root = NULL;
    ZS_CHECK(zs__json_parse_strict(text, bytes, &rules, where, "manifest", &root));
    parser ps = {where, ""};
    zs_status status = parse_root(&ps, root, out);
    json_object_put(root);
    if (status != ZS_OK) zs__error_breadcrumb(__FILE__, __LINE__);
    return status;
}
