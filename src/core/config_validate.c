/* Validation of a parsed libconfig tree into zs__settings, driven by the
 * schema table: every setting outside `app` must be a known key of the right
 * type and range, required keys must be present, and a few rules that involve
 * two keys must hold. The first problem is reported as "file:line: ...".
 *
 * Floor (src/floors.txt): below the loader (config.c), which calls it; calls
 * the schema, the suggestions and the setting helpers (config_setting.c),
 * never the loader.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/config_internal.h"
#include "core/config_schema.h"
#include "core/error.h"

#define WHERE_CAPACITY 1024

typedef struct validation {
    const zs_config *cfg;
    zs__settings *out;
    /* The setting that gave each schema key (NULL while it is defaulted), so
     * cross-key errors can point at the line of the key at fault. */
    const config_setting_t **seen;
} validation;

/* Every dotted path a user could have meant: keys, their groups, and "app". */
static zs_status suggest(const char *path, char *out, size_t capacity) {
    size_t cap = 2 * zs__config_key_count + 1, n = 0;
    const char **candidates = zs__malloc(cap * sizeof *candidates);
    char *groups = zs__malloc(zs__config_key_count * 64);
    if (!candidates || !groups) {
        free(candidates);
        free(groups);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory suggesting a key for '%s'", path);
    }
    for (size_t i = 0; i < zs__config_key_count; i++) {
        const char *key = zs__config_keys[i].path;
        const char *dot = strrchr(key, '.');
        if (dot && (size_t)(dot - key) < 64) {
            char *group = groups + i * 64;
            memcpy(group, key, (size_t)(dot - key));
            group[dot - key] = '\0';
            int duplicate = 0;
            for (size_t j = 0; j < n; j++) duplicate |= strcmp(candidates[j], group) == 0;
            if (!duplicate) candidates[n++] = group;
        }
        candidates[n++] = key;
    }
    candidates[n++] = "app";
    const char *nearest = zs__config_nearest(path, candidates, n);
    if (nearest) {
        snprintf(out, capacity, "; did you mean '%s'?", nearest);
    } else {
        /* No plausible typo: list what the enclosing group accepts instead. */
        const char *dot = strrchr(path, '.');
        size_t prefix = dot ? (size_t)(dot - path) : 0;
        size_t used = 0;
        int w = dot ? snprintf(out, capacity, "; the keys of group '%.*s' are:", (int)prefix, path)
                    : snprintf(out, capacity, "; the known top-level keys are:");
        used = w > 0 ? (size_t)w : 0;
        for (size_t j = 0; j < n && used < capacity; j++) {
            const char *c = candidates[j];
            int in_group = dot ? (strncmp(c, path, prefix) == 0 && c[prefix] == '.')
                               : strchr(c, '.') == NULL;
            if (!in_group) continue;
            w = snprintf(out + used, capacity - used, " %s", c);
            if (w > 0) used += (size_t)w;
        }
    }
    free(candidates);
    free(groups);
    return ZS_OK;
}

static zs_status unknown_key(const validation *v, const config_setting_t *s, const char *path) {
    char where[WHERE_CAPACITY], hint[1024];
    zs__config_where(v->cfg, s, where, sizeof where);
    ZS_CHECK(suggest(path, hint, sizeof hint));
    return zs__fail(ZS_ERR_CONFIG, "%sunknown key '%s'%s", where, path, hint);
}

static int is_power_of_two(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

static void store(zs__settings *out, const zs__key *key, const void *value, size_t size) {
    memcpy((char *)out + key->offset, value, size);
}

static void store_int(zs__settings *out, const zs__key *key, int64_t value) {
    if (key->size == sizeof(int)) {
        int narrow = (int)value; /* the range check made it fit */
        store(out, key, &narrow, sizeof narrow);
    } else {
        /* int64_t and uint64_t fields alike: ranges keep values non-negative
         * where the field is unsigned, and the bits are then the same. */
        store(out, key, &value, sizeof value);
    }
}

/* Fills every field with its default (required keys get zero until given). */
static void fill_defaults(zs__settings *out) {
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < zs__config_key_count; i++) {
        const zs__key *key = &zs__config_keys[i];
        switch (key->type) {
        case ZS__KEY_INT: store_int(out, key, key->int_default); break;
        case ZS__KEY_FLOAT: store(out, key, &key->float_default, sizeof(double)); break;
        case ZS__KEY_BOOL: store(out, key, &key->bool_default, sizeof(int)); break;
        case ZS__KEY_ENUM: {
            int index = 0;
            if (key->parse) index = key->parse(key->string_default);
            else
                while (strcmp(key->values[index], key->string_default) != 0) index++;
            store(out, key, &index, sizeof index);
            break;
        }
        case ZS__KEY_STRING:
            snprintf((char *)out + key->offset, key->size, "%s", key->string_default);
            break;
        }
    }
}

zs_status zs__config_read_int(const char *where, const char *name, const config_setting_t *s,
                              int64_t *out) {
    if (s->type == CONFIG_TYPE_INT || s->type == CONFIG_TYPE_INT64) {
        *out = config_setting_get_int64(s);
        return ZS_OK;
    }
    if (s->type == CONFIG_TYPE_FLOAT) {
        char text[64];
        zs__config_format_double(config_setting_get_float(s), text, sizeof text);
        return zs__fail(ZS_ERR_CONFIG,
                        "%s%s = %s is a float, but %s takes only an integer literal (write it "
                        "without a decimal point or exponent)",
                        where, name, text, name);
    }
    return zs__fail(ZS_ERR_CONFIG, "%s%s must be an integer, not %s", where, name,
                    zs__config_type_noun(s->type));
}

zs_status zs__config_read_number(const char *where, const char *name, const config_setting_t *s,
                                 double *out) {
    if (s->type == CONFIG_TYPE_FLOAT) *out = config_setting_get_float(s);
    else if (s->type == CONFIG_TYPE_INT || s->type == CONFIG_TYPE_INT64)
        *out = (double)config_setting_get_int64(s);
    else
        return zs__fail(ZS_ERR_CONFIG, "%s%s must be a number, not %s", where, name,
                        zs__config_type_noun(s->type));
    return ZS_OK;
}

zs_status zs__config_read_bool(const char *where, const char *name, const config_setting_t *s,
                               int *out) {
    if (s->type != CONFIG_TYPE_BOOL)
        return zs__fail(ZS_ERR_CONFIG, "%s%s must be true or false, not %s", where, name,
                        zs__config_type_noun(s->type));
    *out = config_setting_get_bool(s) ? 1 : 0;
    return ZS_OK;
}

zs_status zs__config_read_string(const char *where, const char *name, const config_setting_t *s,
                                 const char **out) {
    if (s->type != CONFIG_TYPE_STRING)
        return zs__fail(ZS_ERR_CONFIG, "%s%s must be a string, not %s", where, name,
                        zs__config_type_noun(s->type));
    *out = config_setting_get_string(s);
    return ZS_OK;
}

static zs_status apply_int(const char *where, const zs__key *key, const config_setting_t *s,
                           zs__settings *out) {
    int64_t value = 0;
    ZS_CHECK(zs__config_read_int(where, key->path, s, &value));
    char range[256];
    zs__config_key_range_text(key, range, sizeof range);
    if (value < key->int_min || value > key->int_max)
        return zs__fail(ZS_ERR_CONFIG, "%s%s = %" PRId64 " is out of range; it must be %s", where,
                        key->path, value, range);
    if (key->power_of_two && !is_power_of_two(value))
        return zs__fail(ZS_ERR_CONFIG, "%s%s = %" PRId64 " is not a power of two; it must be %s",
                        where, key->path, value, range);
    store_int(out, key, value);
    return ZS_OK;
}

static zs_status apply_float(const char *where, const zs__key *key, const config_setting_t *s,
                             zs__settings *out) {
    double value = 0.0;
    ZS_CHECK(zs__config_read_number(where, key->path, s, &value));
    char text[64], range[256];
    zs__config_format_double(value, text, sizeof text);
    zs__config_key_range_text(key, range, sizeof range);
    int below = key->float_min_open ? !(value > key->float_min) : !(value >= key->float_min);
    int above = key->float_max_open ? !(value < key->float_max) : !(value <= key->float_max);
    if (!isfinite(value) || below || above)
        return zs__fail(ZS_ERR_CONFIG, "%s%s = %s is out of range; it must be in %s", where,
                        key->path, text, range);
    store(out, key, &value, sizeof value);
    return ZS_OK;
}

static zs_status apply_setting(const validation *v, const zs__key *key, const config_setting_t *s) {
    char where[WHERE_CAPACITY], range[256];
    zs__config_where(v->cfg, s, where, sizeof where);
    switch (key->type) {
    case ZS__KEY_INT: return apply_int(where, key, s, v->out);
    case ZS__KEY_FLOAT: return apply_float(where, key, s, v->out);
    case ZS__KEY_BOOL: {
        int value = 0;
        ZS_CHECK(zs__config_read_bool(where, key->path, s, &value));
        store(v->out, key, &value, sizeof value);
        return ZS_OK;
    }
    case ZS__KEY_ENUM: {
        zs__config_key_range_text(key, range, sizeof range);
        if (s->type != CONFIG_TYPE_STRING)
            return zs__fail(ZS_ERR_CONFIG, "%s%s must be a string, one of %s; not %s", where,
                            key->path, range, zs__config_type_noun(s->type));
        const char *text = config_setting_get_string(s);
        int index = -1;
        if (key->parse) {
            index = key->parse(text);
        } else {
            for (int i = 0; key->values[i]; i++)
                if (strcmp(key->values[i], text) == 0) index = i;
        }
        if (index < 0)
            return zs__fail(ZS_ERR_CONFIG, "%s%s = \"%s\" is not an allowed value; it must be %s",
                            where, key->path, text, range);
        store(v->out, key, &index, sizeof index);
        return ZS_OK;
    }
    case ZS__KEY_STRING: {
        const char *text = NULL;
        ZS_CHECK(zs__config_read_string(where, key->path, s, &text));
        size_t n = strlen(text);
        if (n >= key->size)
            return zs__fail(ZS_ERR_CONFIG, "%s%s is %zu bytes long; it must be at most %zu bytes",
                            where, key->path, n, key->size - 1);
        memcpy((char *)v->out + key->offset, text, n + 1);
        return ZS_OK;
    }
    }
    return zs__fail(ZS_ERR_INTERNAL, "config key '%s' has no type", key->path);
}

/* Checks the members of a runtime group (or the root when prefix is NULL). */
static zs_status walk_group(validation *v, const config_setting_t *group, const char *prefix) {
    int count = config_setting_length(group);
    for (int i = 0; i < count; i++) {
        const config_setting_t *s = config_setting_get_elem(group, (unsigned)i);
        const char *name = config_setting_name(s);
        char where[WHERE_CAPACITY];
        char path[512];
        snprintf(path, sizeof path, "%s%s%s", prefix ? prefix : "", prefix ? "." : "",
                 name ? name : "?");
        zs__config_where(v->cfg, s, where, sizeof where);
        if (!prefix && strcmp(path, "app") == 0) {
            /* The app group belongs to the program; zs_config_app_* check it. */
            if (s->type != CONFIG_TYPE_GROUP)
                return zs__fail(ZS_ERR_CONFIG,
                                "%sapp must be a group of the program's own keys "
                                "(app: { steps = 100; };), not %s",
                                where, zs__config_type_noun(s->type));
            continue;
        }
        const zs__key *key = zs__config_key_find(path);
        if (key) {
            ZS_CHECK(apply_setting(v, key, s));
            v->seen[key - zs__config_keys] = s;
        } else if (zs__config_is_group(path)) {
            if (s->type != CONFIG_TYPE_GROUP)
                return zs__fail(ZS_ERR_CONFIG, "%s%s must be a group (%s: { ... };), not %s", where,
                                path, path, zs__config_type_noun(s->type));
            ZS_CHECK(walk_group(v, s, path));
        } else {
            return unknown_key(v, s, path);
        }
    }
    return ZS_OK;
}

static const config_setting_t *seen(const validation *v, const char *path) {
    const zs__key *key = zs__config_key_find(path);
    return key ? v->seen[key - zs__config_keys] : NULL;
}

/* The first of `paths` that the file (or an override) gave, else NULL: the
 * line a cross-key error should point at, in order of blame. */
static const config_setting_t *first_seen(const validation *v, const char *const *paths) {
    for (; *paths; paths++) {
        const config_setting_t *at = seen(v, *paths);
        if (at) return at;
    }
    return NULL;
}

/* Rules between the precision keys. */
static zs_status check_precision(const validation *v) {
    const zs__settings *s = v->out;
    char where[WHERE_CAPACITY], a[64], b[64];

    /* Without the check an fp16 overflow goes straight into the optimizer and
     * writes Inf/NaN into the master weights, silently and for good. */
    if (s->precision.dtype == ZS_DTYPE_FP16 && !s->precision.check_overflow) {
        static const char *const blame[] = {"precision.check_overflow", "precision.dtype", NULL};
        zs__config_where(v->cfg, first_seen(v, blame), where, sizeof where);
        return zs__fail(ZS_ERR_CONFIG,
                        "%sprecision.check_overflow = false is not allowed with precision.dtype = "
                        "\"fp16\": an fp16 gradient that overflows would write Inf/NaN into the "
                        "weights without a word; set check_overflow = true (the default), or use "
                        "\"bf16\" or \"fp32\"",
                        where);
    }
    /* The dynamic scale starts at 2^initial_scale_power and never goes below
     * min_loss_scale; a minimum above the start would leave no room to halve. */
    const int dynamic = s->precision.dtype == ZS_DTYPE_FP16 && s->precision.loss_scale == 0.0;
    const double initial = ldexp(1.0, s->precision.initial_scale_power);
    if (dynamic && s->precision.min_loss_scale > initial) {
        static const char *const blame[] = {"precision.min_loss_scale",
                                            "precision.initial_scale_power", NULL};
        zs__config_where(v->cfg, first_seen(v, blame), where, sizeof where);
        zs__config_format_double(s->precision.min_loss_scale, a, sizeof a);
        zs__config_format_double(initial, b, sizeof b);
        return zs__fail(ZS_ERR_CONFIG,
                        "%sprecision.min_loss_scale = %s is greater than the initial dynamic loss "
                        "scale 2^precision.initial_scale_power = 2^%d = %s; lower min_loss_scale "
                        "or raise initial_scale_power",
                        where, a, s->precision.initial_scale_power, b);
    }
    return ZS_OK;
}

/* Rules that involve two keys; each error points at the key at fault. */
/* Hybrid sharding, the secondary partition and the quantized collectives
 * (issue 28): which stages they apply to and which of them combine. Nodes
 * of equal size are checked at zs_create, where the topology is known. */
static zs_status check_sharding(const validation *v) {
    const zs__settings *s = v->out;
    char where[WHERE_CAPACITY];
    const char *fail = NULL;
    const char *key = NULL;
    if (s->zero.shard_group == ZS_SHARD_GROUP_NODE && s->zero.stage == 0) {
        key = "zero.shard_group";
        fail = "zero.shard_group = \"node\" needs zero.stage 1, 2 or 3: stage 0 shards nothing "
               "(every rank keeps all of the model state), so there is nothing to shard inside a "
               "node; set zero.stage = 3 for FSDP's HYBRID_SHARD";
    } else if (s->zero.secondary_partition == ZS_SECONDARY_NODE && s->zero.stage != 3) {
        key = "zero.secondary_partition";
        fail = "zero.secondary_partition = \"node\" needs zero.stage = 3: only stage 3 gathers "
               "parameters during the forward and the backward (stages 1-2 keep them whole); set "
               "zero.stage = 3 or zero.secondary_partition = \"none\"";
    } else if (s->zero.secondary_partition == ZS_SECONDARY_NODE &&
               s->zero.shard_group == ZS_SHARD_GROUP_NODE) {
        key = "zero.secondary_partition";
        fail = "zero.secondary_partition = \"node\" with zero.shard_group = \"node\": hybrid "
               "sharding already gathers inside the node only, so a secondary partition would "
               "hold a second copy of the same shard; drop one of the two";
    } else if (s->zero.frozen_double_quant && s->zero.frozen_storage == ZS_FROZEN_COMPUTE) {
        key = "zero.frozen_double_quant";
        fail = "zero.frozen_double_quant quantizes the scales of a quantized frozen base, and "
               "zero.frozen_storage = \"compute\" keeps none; set zero.frozen_storage = "
               "\"nf4\" or \"int8\", or zero.frozen_double_quant = false";
    } else if (s->zero.frozen_storage != ZS_FROZEN_COMPUTE &&
               s->zero.secondary_partition == ZS_SECONDARY_NODE) {
        key = "zero.frozen_storage";
        fail = "zero.frozen_storage = \"int8\" or \"nf4\" with zero.secondary_partition = "
               "\"node\": hpZ keeps every unit's node slice in the compute dtype, which would "
               "hold the quantized base in full precision; drop one of the two";
    } else if (s->comm.quantize_weights != ZS_QUANTIZE_NONE && s->zero.stage != 3) {
        key = "comm.quantize_weights";
        fail = "comm.quantize_weights = \"int8\" needs zero.stage = 3: it quantizes the "
               "parameter gathers of the forward and backward, which only stage 3 has; set "
               "zero.stage = 3 or comm.quantize_weights = \"none\"";
    } else if (s->comm.quantize_grads != ZS_QUANTIZE_NONE && s->zero.stage == 0) {
        key = "comm.quantize_grads";
        fail = "comm.quantize_grads needs zero.stage 1, 2 or 3: it replaces the gradient "
               "reduce-scatter, and stage 0 all-reduces the whole gradient; set zero.stage >= 1 "
               "or comm.quantize_grads = \"none\"";
    } else if (s->comm.quantize_grads != ZS_QUANTIZE_NONE &&
               s->zero.shard_group == ZS_SHARD_GROUP_NODE) {
        key = "comm.quantize_grads";
        fail = "comm.quantize_grads with zero.shard_group = \"node\": hybrid sharding "
               "reduce-scatters inside a node and all-reduces across nodes, while the quantized "
               "reduction is a reduce-scatter over every rank in two all-to-all hops; use one of "
               "the two";
    }
    if (!fail) return ZS_OK;
    zs__config_where(v->cfg, seen(v, key), where, sizeof where);
    return zs__fail(ZS_ERR_CONFIG, "%s%s", where, fail);
}

static zs_status check_cross_keys(const validation *v) {
    const zs__settings *s = v->out;
    char where[WHERE_CAPACITY], a[64], b[64];

    if (s->scheduler.kind == ZS_SCHEDULE_WARMUP_COSINE &&
        !(s->scheduler.total_steps > s->scheduler.warmup_steps)) {
        const config_setting_t *at = seen(v, "scheduler.total_steps");
        if (!at) at = seen(v, "scheduler.warmup_steps");
        if (!at) at = seen(v, "scheduler.type");
        zs__config_where(v->cfg, at, where, sizeof where);
        return zs__fail(ZS_ERR_CONFIG,
                        "%sscheduler.type = \"warmup_cosine\" needs scheduler.total_steps > "
                        "scheduler.warmup_steps, but total_steps = %" PRId64
                        " and warmup_steps = %" PRId64
                        "; set scheduler.total_steps to the length of the run in optimizer steps",
                        where, s->scheduler.total_steps, s->scheduler.warmup_steps);
    }
    if (s->scheduler.min_lr > s->optimizer.lr) {
        const config_setting_t *at = seen(v, "scheduler.min_lr");
        zs__config_where(v->cfg, at, where, sizeof where);
        zs__config_format_double(s->scheduler.min_lr, a, sizeof a);
        zs__config_format_double(s->optimizer.lr, b, sizeof b);
        return zs__fail(ZS_ERR_CONFIG,
                        "%sscheduler.min_lr = %s is greater than optimizer.lr = %s; it must be "
                        "in [0, optimizer.lr]",
                        where, a, b);
    }
    if (s->optimizer.nesterov && !(s->optimizer.momentum > 0.0)) {
        const config_setting_t *at = seen(v, "optimizer.nesterov");
        zs__config_where(v->cfg, at, where, sizeof where);
        zs__config_format_double(s->optimizer.momentum, a, sizeof a);
        return zs__fail(ZS_ERR_CONFIG,
                        "%soptimizer.nesterov = true needs optimizer.momentum > 0, but momentum = "
                        "%s; set a momentum such as 0.9 or turn nesterov off",
                        where, a);
    }
    ZS_CHECK(check_precision(v));
    if (s->offload.params != ZS_OFFLOAD_NONE && s->zero.stage != 3) {
        zs__config_where(v->cfg, seen(v, "offload.params"), where, sizeof where);
        return zs__fail(ZS_ERR_CONFIG,
                        "%soffload.params = \"%s\" needs zero.stage = 3 (only stage 3 shards "
                        "the parameters; stages 0-2 keep them whole on every device); set "
                        "zero.stage = 3 or offload.params = \"none\"",
                        where, s->offload.params == ZS_OFFLOAD_NVME ? "nvme" : "host");
    }
    if (s->offload.params == ZS_OFFLOAD_NVME && s->offload.optimizer != ZS_OFFLOAD_NVME) {
        zs__config_where(v->cfg, seen(v, "offload.params"), where, sizeof where);
        return zs__fail(ZS_ERR_CONFIG,
                        "%soffload.params = \"nvme\" needs offload.optimizer = \"nvme\": the "
                        "parameters on NVMe are read from the fp32 master weights in the "
                        "optimizer's swap file; set offload.optimizer = \"nvme\" (and "
                        "offload.nvme_path), or offload.params = \"host\"", where);
    }
    if (s->offload.optimizer == ZS_OFFLOAD_NVME && s->offload.nvme_path[0] == '\0') {
        zs__config_where(v->cfg, seen(v, "offload.optimizer"), where, sizeof where);
        return zs__fail(ZS_ERR_CONFIG,
                        "%soffload.optimizer = \"nvme\" needs offload.nvme_path, an existing "
                        "directory on a fast local disk for the per-rank swap files; set "
                        "offload: { nvme_path = \"/local/nvme/zs\"; }", where);
    }
    if (s->offload.optimizer == ZS_OFFLOAD_NVME && s->zero.stage == 0) {
        zs__config_where(v->cfg, seen(v, "offload.optimizer"), where, sizeof where);
        return zs__fail(ZS_ERR_CONFIG,
                        "%soffload.optimizer = \"nvme\" needs zero.stage >= 1 (stage 0 keeps the "
                        "whole optimizer state on every rank, so every rank would swap all of "
                        "it); set zero.stage = 1, 2 or 3, or offload.optimizer = \"host\"", where);
    }
    ZS_CHECK(check_sharding(v));
    /* Periodic saves and automatic resume need a place to look. */
    const int auto_resume = strcmp(s->checkpoint.resume, "auto") == 0;
    const int timed = s->checkpoint.every_seconds > 0;
    if ((s->checkpoint.every > 0 || timed || auto_resume) && s->checkpoint.dir[0] == '\0') {
        static const char *const blame[] = {"checkpoint.every", "checkpoint.every_seconds",
                                            "checkpoint.resume", NULL};
        zs__config_where(v->cfg, first_seen(v, blame), where, sizeof where);
        return zs__fail(ZS_ERR_CONFIG,
                        "%s%s needs checkpoint.dir, the directory that holds the step "
                        "directories; set checkpoint: { dir = \"ckpt\"; }",
                        where, s->checkpoint.every > 0 ? "checkpoint.every > 0"
                               : timed                 ? "checkpoint.every_seconds > 0"
                                                       : "checkpoint.resume = \"auto\"");
    }
    return ZS_OK;
}

zs_status zs__config_validate(const zs_config *cfg, const config_t *lc, zs__settings *out) {
    validation v = {cfg, out, zs__calloc(zs__config_key_count, sizeof(config_setting_t *))};
    if (!v.seen) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory validating '%s'", cfg->path);
    fill_defaults(out);
    zs_status status = walk_group(&v, config_root_setting(lc), NULL);
    for (size_t i = 0; status == ZS_OK && i < zs__config_key_count; i++) {
        const zs__key *key = &zs__config_keys[i];
        if (key->required && !v.seen[i])
            status = zs__fail(ZS_ERR_CONFIG, "%s: missing required key '%s' (%s)", cfg->path,
                              key->path, key->example ? key->example : key->doc);
    }
    if (status == ZS_OK) status = check_cross_keys(&v);
    free(v.seen);
    return status;
}
