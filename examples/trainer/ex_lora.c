/* LoRA's keys, targets and units (ex_lora.h). */
#include "ex_lora.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* The module's own name, the last component of its path ("q_proj"). */
static const char *module_of(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

/* PEFT's rule for a target_modules entry: it names the module whose path
 * is the entry or ends with "." and the entry, so that "c_proj" adapts
 * both of GPT-2's (attn.c_proj, mlp.c_proj) and "attn.c_proj" one. */
static int names_target(const char *entry, const char *path) {
    const size_t n = strlen(entry), len = strlen(path);
    return n > 0 && (strcmp(entry, path) == 0 ||
                     (len > n && path[len - n - 1] == '.' && strcmp(path + len - n, entry) == 0));
}

/* The entry that names exactly target t's module among the family's: its
 * own name ("q_proj") where no other target shares it, else its path in the
 * block ("attn.c_proj"). */
static const char *entry_of(const ex_lora *lora, int t) {
    const char *module = module_of(lora->target_name(t));
    for (int u = 0; u < lora->n_targets; u++)
        if (u != t && names_target(module, lora->target_name(u))) return lora->target_name(t);
    return module;
}

/* The model's Linears for a message: "q_proj, k_proj, ...". */
static void list_modules(const ex_lora *lora, char *out, size_t cap) {
    size_t at = 0;
    out[0] = '\0';
    for (int t = 0; t < lora->n_targets && at < cap; t++)
        at += (size_t)snprintf(out + at, cap - at, "%s%s", t ? ", " : "", entry_of(lora, t));
}

static zs_status parse_targets(const char *text, const char *program, ex_lora *lora) {
    lora->targets = 0;
    if (strcmp(text, "all-linear") == 0) {
        lora->targets = (1u << lora->n_targets) - 1u;
        return ZS_OK;
    }
    char copy[512];
    if (snprintf(copy, sizeof copy, "%s", text) >= (int)sizeof copy) {
        fprintf(stderr, "%s: app.lora_target_modules is longer than %zu bytes\n", program,
                sizeof copy - 1);
        return ZS_ERR_CONFIG;
    }
    char *save = NULL;
    for (char *name = strtok_r(copy, ", ", &save); name; name = strtok_r(NULL, ", ", &save)) {
        unsigned found = 0;
        for (int t = 0; t < lora->n_targets; t++)
            if (names_target(name, lora->target_name(t))) found |= 1u << t;
        if (found == 0) {
            char modules[512];
            list_modules(lora, modules, sizeof modules);
            fprintf(stderr, "%s: app.lora_target_modules names \"%s\", which is not a Linear of "
                            "this model; its Linears are %s (or \"all-linear\")\n",
                    program, name, modules);
            return ZS_ERR_CONFIG;
        }
        lora->targets |= found;
    }
    if (lora->targets == 0) {
        fprintf(stderr, "%s: app.lora_target_modules = \"%s\" names no Linear\n", program, text);
        return ZS_ERR_CONFIG;
    }
    return ZS_OK;
}

zs_status ex_lora_configure(zs_config *cfg, const char *program, ex_lora *lora) {
    int64_t r = 0;
    double dropout = 0.0;
    const char *targets = NULL;
    zs_status st;
    if ((st = zs_config_app_int(cfg, "lora_r", 0, 0, 4096, &r)) ||
        (st = zs_config_app_float(cfg, "lora_alpha", 8.0, 1e-6, 1e6, &lora->alpha)) ||
        (st = zs_config_app_float(cfg, "lora_dropout", 0.0, 0.0, 1.0, &dropout)) ||
        (st = zs_config_app_string(cfg, "lora_target_modules", lora->default_targets,
                                   &targets)) ||
        (st = zs_config_app_string(cfg, "lora_init_from", "", &lora->init_from)))
        return st;
    lora->r = (int)r;
    if (lora->r == 0 && lora->init_from[0] != '\0') {
        fprintf(stderr, "%s: app.lora_init_from = \"%s\" needs app.lora_r (the adapters' rank, "
                        "as their adapter_config.json gives it)\n",
                program, lora->init_from);
        return ZS_ERR_CONFIG;
    }
    if (lora->r == 0) return ZS_OK;
    if (!(dropout < 1.0)) {
        fprintf(stderr, "%s: app.lora_dropout = %g: a dropout probability lies in [0, 1)\n",
                program, dropout);
        return ZS_ERR_CONFIG;
    }
    lora->dropout = dropout;
    if (lora->n_targets > EX_LORA_MAX_TARGETS) return ZS_ERR_INTERNAL;
    return parse_targets(targets, program, lora);
}

int ex_lora_param_name(const char *block, const ex_lora *lora, int t, int which, char *out,
                       size_t cap) {
    const int n = snprintf(out, cap, "%s.%s.lora_%c.weight", block, lora->target_name(t),
                           which ? 'B' : 'A');
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* The adapter unit of the block named `block`: A and B of each target, in
 * target order. */
static zs_status describe_adapters(ex_units *u, const void *dims, const ex_lora *lora,
                                   const char *block) {
    char name[NN_PARAM_NAME_MAX + 16];
    snprintf(name, sizeof name, "%s.lora", block);
    zs_status st = ex_units_begin(u, name);
    for (int t = 0; st == ZS_OK && t < lora->n_targets; t++) {
        if (!(lora->targets & (1u << t))) continue;
        int in = 0, out = 0;
        lora->target_shape(dims, t, &in, &out);
        const double bound = 1.0 / sqrt((double)in);
        const int64_t a_shape[2] = {lora->r, in}, b_shape[2] = {out, lora->r};
        if (ex_lora_param_name(block, lora, t, 0, name, sizeof name) != 0) return ZS_ERR_INTERNAL;
        st = ex_units_add(u, name, 2, a_shape, ZS_INIT_UNIFORM_RANGE(-bound, bound), 0u);
        if (st == ZS_OK && ex_lora_param_name(block, lora, t, 1, name, sizeof name) != 0)
            return ZS_ERR_INTERNAL;
        if (st == ZS_OK) st = ex_units_add(u, name, 2, b_shape, ZS_INIT_ZEROS_VALUE, 0u);
    }
    return st == ZS_OK ? ex_units_end(u) : st;
}

static int is_block(const ex_lora *lora, int unit) {
    return unit >= lora->first_block && unit < lora->first_block + lora->n_blocks;
}

/* QLoRA: block `unit`'s 1-D tensors in a unit "<block>.norms" (registered
 * after every other unit), and the block's view (ex_units_set_view): the
 * table's order over both units. */
static zs_status describe_norms(ex_units *u, const nn_param_table *table, const void *dims,
                                int unit) {
    char name[NN_PARAM_NAME_MAX + 8];
    table->unit_name(dims, unit, name, sizeof name);
    strncat(name, ".norms", sizeof name - strlen(name) - 1);
    zs_status st = ex_units_begin(u, name);
    const int norms = u->unit_count, n = table->unit_num_params(dims, unit);
    int view[EX_UNIT_MAX_PARAMS];
    int matrix = u->first[unit], vector = u->param_count;
    for (int i = 0; st == ZS_OK && i < n; i++) {
        nn_param_spec spec;
        table->param_spec(dims, unit, i, &spec);
        if (spec.ndim == 2) {
            view[i] = matrix++;
            continue;
        }
        view[i] = vector++;
        st = ex_units_add(u, spec.name, spec.ndim, spec.shape, ex_units_initializer(&spec),
                          ZS_PARAM_NO_DECAY | ZS_PARAM_FROZEN);
    }
    if (st == ZS_OK) st = ex_units_end(u);
    if (st != ZS_OK) return st;
    ex_units_set_kind(u, norms, EX_UNITS_NORMS);
    if (ex_units_set_view(u, unit, view, n, norms) != 0) {
        fprintf(stderr, "ex_lora: out of host memory\n");
        return ZS_ERR_OUT_OF_MEMORY;
    }
    return ZS_OK;
}

zs_status ex_lora_describe(ex_units *u, zs_ctx *zs, const nn_param_table *table,
                           const void *dims, const ex_lora *lora, int *units_out) {
    const int lora_on = lora != NULL && lora->r > 0;
    const int base = table->num_units(dims);
    int params = 0, per_block = 0;
    for (int unit = 0; unit < base; unit++) params += table->unit_num_params(dims, unit);
    for (int t = 0; lora_on && t < lora->n_targets; t++) per_block += 2 * !!(lora->targets & (1u << t));
    const int split = lora_on && zs_quantizes_frozen(zs);
    if (!lora_on && zs_quantizes_frozen(zs) && zs_rank(zs) == 0)
        fprintf(stderr, "warning: zero.frozen_storage quantizes a frozen base, and without "
                        "app.lora_r nothing is frozen: every parameter stays in the compute "
                        "dtype\n");
    if (split && !lora->quantizable) {
        fprintf(stderr, "zero.frozen_storage: this model family's layers do not dequantize "
                        "a quantized base (QLoRA runs on the Llama family); set "
                        "zero.frozen_storage = \"compute\"\n");
        return ZS_ERR_CONFIG;
    }
    const int units = base + (lora_on ? lora->n_blocks : 0) + (split ? lora->n_blocks : 0);
    if (units_out) *units_out = units;
    zs_status st = ex_units_init(u, zs, units, params + (lora_on ? lora->n_blocks * per_block : 0));
    const unsigned frozen = lora_on ? ZS_PARAM_FROZEN : 0u;
    for (int unit = 0; st == ZS_OK && unit < base; unit++) {
        char name[NN_PARAM_NAME_MAX];
        table->unit_name(dims, unit, name, sizeof name);
        st = ex_units_begin(u, name);
        /* QLoRA: a block's unit holds its matrices alone (norms_of's). */
        const int block = split && is_block(lora, unit);
        for (int i = 0; st == ZS_OK && i < table->unit_num_params(dims, unit); i++) {
            nn_param_spec spec;
            table->param_spec(dims, unit, i, &spec);
            if (block && spec.ndim != 2) continue;
            st = ex_units_add(u, spec.name, spec.ndim, spec.shape, ex_units_initializer(&spec),
                              (spec.no_decay ? ZS_PARAM_NO_DECAY : 0u) | frozen |
                                  (block ? ZS_PARAM_QUANTIZE : 0u));
        }
        if (st == ZS_OK) st = ex_units_end(u);
    }
    for (int l = 0; st == ZS_OK && lora_on && l < lora->n_blocks; l++) {
        char block[NN_PARAM_NAME_MAX];
        table->unit_name(dims, lora->first_block + l, block, sizeof block);
        st = describe_adapters(u, dims, lora, block);
        if (st == ZS_OK) ex_units_set_kind(u, u->unit_count - 1, EX_UNITS_ADAPTERS);
    }
    for (int l = 0; st == ZS_OK && split && l < lora->n_blocks; l++)
        st = describe_norms(u, table, dims, lora->first_block + l);
    return st;
}

int ex_lora_adapter_config(const ex_lora *lora, const char *base, char *out, size_t cap) {
    char modules[512] = "";
    size_t at = 0;
    for (int t = 0; t < lora->n_targets && at < sizeof modules; t++)
        if (lora->targets & (1u << t))
            at += (size_t)snprintf(modules + at, sizeof modules - at, "%s\"%s\"",
                                   at ? ", " : "", entry_of(lora, t));
    /* The base's path as JSON: no quotes or backslashes to escape in the
     * paths this program writes; anything else is left out. */
    const char *path = base != NULL && strpbrk(base, "\"\\") == NULL ? base : "";
    const int n = snprintf(out, cap,
                           "{\n"
                           "  \"peft_type\": \"LORA\",\n"
                           "  \"task_type\": \"CAUSAL_LM\",\n"
                           "  \"base_model_name_or_path\": \"%s\",\n"
                           "  \"r\": %d,\n"
                           "  \"lora_alpha\": %.17g,\n"
                           "  \"lora_dropout\": %.17g,\n"
                           "  \"target_modules\": [%s],\n"
                           "  \"bias\": \"none\",\n"
                           "  \"fan_in_fan_out\": false,\n"
                           "  \"inference_mode\": true,\n"
                           "  \"init_lora_weights\": true,\n"
                           "  \"modules_to_save\": null\n"
                           "}\n",
                           path, lora->r, lora->alpha, lora->dropout, modules);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

/* SplitMix64's step: independent-looking keys from consecutive inputs. */
static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void ex_lora_dropout_begin(ex_lora *lora, zs_ctx *zs) {
    if (lora == NULL || lora->r == 0 || lora->dropout == 0.0) return;
    const int64_t step = zs_step_count(zs);
    lora->key_micro = step == lora->key_step ? lora->key_micro + 1 : 0;
    lora->key_step = step;
    const uint64_t key = mix(mix(mix((uint64_t)step) ^ (uint64_t)lora->key_micro) ^
                             (uint64_t)zs_rank(zs));
    lora->dropout_key = key != 0 ? key : 1;
}

void ex_lora_dropout_end(ex_lora *lora) {
    if (lora != NULL) lora->dropout_key = 0;
}

uint64_t ex_lora_block_seed(const ex_lora *lora, int layer) {
    if (lora == NULL || lora->dropout_key == 0) return 0;
    const uint64_t seed = mix(lora->dropout_key ^ (uint64_t)layer);
    return seed != 0 ? seed : 1;
}

int64_t ex_lora_params(const ex_lora *lora, const void *dims) {
    int64_t per_block = 0;
    for (int t = 0; lora->r > 0 && t < lora->n_targets; t++) {
        if (!(lora->targets & (1u << t))) continue;
        int in = 0, out = 0;
        lora->target_shape(dims, t, &in, &out);
        per_block += (int64_t)lora->r * (in + out);
    }
    return per_block * lora->n_blocks;
}

/* adapter_config.json against the keys: r, lora_alpha and target_modules
 * as configured, else ZS_ERR_CONFIG naming the file, the key and both
 * values (on stderr). */
static zs_status check_peft_config(const ex_lora *lora, const char *path, const char *program) {
    struct json_object *root = json_object_from_file(path);
    if (!root || !json_object_is_type(root, json_type_object)) {
        fprintf(stderr, "%s: app.lora_init_from: %s is not a readable JSON object (PEFT's "
                        "adapter_config.json)\n",
                program, path);
        json_object_put(root);
        return ZS_ERR_CONFIG;
    }
    zs_status st = ZS_OK;
    struct json_object *v = NULL;
    const int r = json_object_object_get_ex(root, "r", &v) ? json_object_get_int(v) : -1;
    const double alpha =
        json_object_object_get_ex(root, "lora_alpha", &v) ? json_object_get_double(v) : -1.0;
    if (r != lora->r) {
        fprintf(stderr, "%s: %s: r = %d, but app.lora_r = %d; set app.lora_r to the adapters' "
                        "rank\n",
                program, path, r, lora->r);
        st = ZS_ERR_CONFIG;
    } else if (fabs(alpha - lora->alpha) > 1e-9 * fabs(lora->alpha)) {
        fprintf(stderr, "%s: %s: lora_alpha = %g, but app.lora_alpha = %g; set app.lora_alpha "
                        "to the adapters' alpha\n",
                program, path, alpha, lora->alpha);
        st = ZS_ERR_CONFIG;
    }
    /* The same Linears, in any order. */
    unsigned targets = 0;
    if (st == ZS_OK && json_object_object_get_ex(root, "target_modules", &v) &&
        json_object_is_type(v, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(v); i++) {
            const char *name = json_object_get_string(json_object_array_get_idx(v, i));
            for (int t = 0; name && t < lora->n_targets; t++)
                if (names_target(name, lora->target_name(t))) targets |= 1u << t;
        }
    }
    if (st == ZS_OK && targets != lora->targets) {
        fprintf(stderr, "%s: %s: target_modules are not app.lora_target_modules' Linears; set "
                        "app.lora_target_modules to the adapters' modules\n",
                program, path);
        st = ZS_ERR_CONFIG;
    }
    json_object_put(root);
    return st;
}

zs_status ex_lora_import(const ex_lora *lora, zs_ctx *zs, const char *program) {
    if (lora->r == 0 || lora->init_from[0] == '\0') return ZS_OK;
    char config[4096], weights[4096];
    if (snprintf(config, sizeof config, "%s/adapter_config.json", lora->init_from) >=
            (int)sizeof config ||
        snprintf(weights, sizeof weights, "%s/adapter_model.safetensors", lora->init_from) >=
            (int)sizeof weights)
        return ZS_ERR_CONFIG;
    zs_status st = check_peft_config(lora, config, program);
    if (st != ZS_OK) return st;
    const zs_safetensors_import options = {.trainable_only = 1,
                                           .name_prefix = "base_model.model."};
    return zs_params_import_safetensors(zs, weights, &options, NULL);
}
