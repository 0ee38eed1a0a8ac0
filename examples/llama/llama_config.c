/* Hugging Face's config.json for the Llama family, in and out; see
 * llama_model.h. Parsed with json-c (the runtime's JSON library). */
#include "llama_model.h"
#include "ex_error.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#define CONFIG_MAX_BYTES (1 << 20)

/* Keys that do not change what the model computes: ids of special tokens,
 * the dtype weights were saved in, bookkeeping of the libraries, and the
 * slicing of pretraining_tp (the same products, split). */
static const char *const ignored_keys[] = {
    "architectures", "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype",
    "transformers_version", "use_cache", "pretraining_tp", "_name_or_path", "is_llama_config",
    "tokenizer_class", "max_window_layers", "return_dict", "output_attentions",
    "output_hidden_states", "unsloth_fixed", "unsloth_version", "model_name",
    /* What transformers 5 writes for every model with use_diff=False. */
    "id2label", "label2id", "problem_type", "chunk_size_feed_forward", "is_encoder_decoder",
    NULL};

/* Keys read below (their values are checked where they are read). */
static const char *const known_keys[] = {
    "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta",
    "rope_scaling", "attention_bias", "mlp_bias", "tie_word_embeddings",
    "max_position_embeddings", "initializer_range", "hidden_act", "attention_dropout",
    "sliding_window", "use_sliding_window", "partial_rotary_factor", "rope_interleaved",
    "rope_parameters", "layer_types", NULL};

static int in_list(const char *const *list, const char *key) {
    for (int i = 0; list[i]; i++)
        if (strcmp(list[i], key) == 0) return 1;
    return 0;
}

typedef struct reader {
    json_object *root;
    const char *path;
    char *err;
    size_t cap;
} reader;

/* The value of key, or NULL when absent or JSON null. */
static json_object *value_of(const reader *r, const char *key) {
    json_object *v = NULL;
    if (!json_object_object_get_ex(r->root, key, &v)) return NULL;
    return json_object_get_type(v) == json_type_null ? NULL : v;
}

/* An integer key in [lo, hi]; `def` when absent (required keys pass
 * required = 1). */
static int read_int(const reader *r, const char *key, int required, int def, int lo, int hi,
                    int *out) {
    json_object *v = value_of(r, key);
    if (!v) {
        if (required) return ex_fail(r->err, r->cap, "%s: %s is missing", r->path, key);
        *out = def;
        return 0;
    }
    if (json_object_get_type(v) != json_type_int)
        return ex_fail(r->err, r->cap, "%s: %s must be an integer", r->path, key);
    errno = 0;
    const int64_t x = json_object_get_int64(v);
    if (errno != 0 || x < lo || x > hi)
        return ex_fail(r->err, r->cap, "%s: %s = %lld is outside [%d, %d]", r->path, key,
                    (long long)x, lo, hi);
    *out = (int)x;
    return 0;
}

static int read_number(const reader *r, const char *key, double def, double *out) {
    json_object *v = value_of(r, key);
    if (!v) {
        *out = def;
        return 0;
    }
    const json_type t = json_object_get_type(v);
    if (t != json_type_int && t != json_type_double)
        return ex_fail(r->err, r->cap, "%s: %s must be a number", r->path, key);
    *out = json_object_get_double(v);
    if (!isfinite(*out)) return ex_fail(r->err, r->cap, "%s: %s is not finite", r->path, key);
    return 0;
}

static int read_bool(const reader *r, const char *key, int def, int *out) {
    json_object *v = value_of(r, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (json_object_get_type(v) != json_type_boolean)
        return ex_fail(r->err, r->cap, "%s: %s must be true or false", r->path, key);
    *out = json_object_get_boolean(v);
    return 0;
}

/* A RoPE description: rope_scaling (transformers 4: null, {"rope_type" (or
 * the older "type"): "default"}, or llama3's four numbers) or
 * rope_parameters (transformers 5: the same object with rope_theta inside
 * it, never null). `what` names it in messages. Every other scaling
 * changes the angles in a way this model does not compute. */
static int read_rope_object(const reader *r, json_object *v, const char *what, llama_dims *d) {
    d->rope_kind = LLAMA_ROPE_DEFAULT;
    if (json_object_get_type(v) != json_type_object)
        return ex_fail(r->err, r->cap, "%s: %s must be %san object", r->path, what,
                    strcmp(what, "rope_scaling") == 0 ? "null or " : "");
    json_object *type = NULL;
    if (!json_object_object_get_ex(v, "rope_type", &type)) json_object_object_get_ex(v, "type", &type);
    if (!type || json_object_get_type(type) != json_type_string)
        return ex_fail(r->err, r->cap, "%s: %s has no rope_type string", r->path, what);
    const char *kind = json_object_get_string(type);
    const int llama3 = strcmp(kind, "llama3") == 0;
    if (strcmp(kind, "default") != 0 && !llama3)
        return ex_fail(r->err, r->cap, "%s: %s: rope_type \"%s\" is not implemented "
                    "(only \"default\" and \"llama3\" are); its angles would differ from "
                    "the checkpoint's", r->path, what, kind);
    const reader sub = {v, r->path, r->err, r->cap};
    static const char *const allowed[] = {"rope_type", "type", "rope_theta", "factor",
                                          "low_freq_factor", "high_freq_factor",
                                          "original_max_position_embeddings", NULL};
    json_object_object_foreach(v, key, val) {
        (void)val;
        /* The default type has no parameters but rope_theta; transformers
         * 5 may still carry a partial_rotary_factor of 1 there. */
        const int ok = in_list(allowed, key) &&
                       (llama3 || strcmp(key, "rope_type") == 0 || strcmp(key, "type") == 0 ||
                        strcmp(key, "rope_theta") == 0);
        if (!ok && strcmp(key, "partial_rotary_factor") == 0) {
            double rotary = 1.0;
            if (read_number(&sub, key, 1.0, &rotary) != 0) return -1;
            if (rotary == 1.0) continue;
            return ex_fail(r->err, r->cap, "%s: %s.partial_rotary_factor = %g: partial rotary "
                        "embeddings are not implemented", r->path, what, rotary);
        }
        if (!ok)
            return ex_fail(r->err, r->cap, "%s: %s.%s is not a key of the %s rotary embedding; "
                        "zeroshard cannot tell what it changes", r->path, what, key, kind);
    }
    if (value_of(&sub, "rope_theta")) {
        double t = 0.0;
        if (read_number(&sub, "rope_theta", 0.0, &t) != 0) return -1;
        if (value_of(r, "rope_theta") && d->rope_theta != t)
            return ex_fail(r->err, r->cap, "%s: rope_theta = %g and %s.rope_theta = %g disagree",
                        r->path, d->rope_theta, what, t);
        d->rope_theta = t;
    }
    if (!llama3) return 0;
    d->rope_kind = LLAMA_ROPE_LLAMA3;
    static const char *const needed[] = {"factor", "low_freq_factor", "high_freq_factor", NULL};
    double *slots[] = {&d->rope_factor, &d->rope_low_freq, &d->rope_high_freq};
    for (int i = 0; needed[i]; i++) {
        if (!value_of(&sub, needed[i]))
            return ex_fail(r->err, r->cap, "%s: %s.%s is missing", r->path, what, needed[i]);
        if (read_number(&sub, needed[i], 0.0, slots[i]) != 0) return -1;
    }
    return read_int(&sub, "original_max_position_embeddings", 1, 0, 1, 1 << 30,
                    &d->rope_orig_max);
}

/* rope_scaling (null or an object) and rope_parameters: one of them at most
 * describes the rotation. */
static int read_rope(const reader *r, llama_dims *d) {
    json_object *scaling = value_of(r, "rope_scaling"), *params = value_of(r, "rope_parameters");
    d->rope_kind = LLAMA_ROPE_DEFAULT;
    if (scaling && params)
        return ex_fail(r->err, r->cap, "%s: both rope_scaling and rope_parameters are given; keep "
                    "one (transformers 5 writes rope_parameters, 4 rope_scaling)", r->path);
    if (params) return read_rope_object(r, params, "rope_parameters", d);
    if (scaling) return read_rope_object(r, scaling, "rope_scaling", d);
    return 0;
}

/* layer_types (transformers 5's Qwen2 and Mistral): every layer must attend
 * to the whole sequence. */
static int read_layer_types(const reader *r, const llama_dims *d) {
    json_object *v = value_of(r, "layer_types");
    if (!v) return 0;
    if (json_object_get_type(v) != json_type_array ||
        (int)json_object_array_length(v) != d->n_layer)
        return ex_fail(r->err, r->cap, "%s: layer_types must be a list of num_hidden_layers (%d) "
                    "strings", r->path, d->n_layer);
    for (int i = 0; i < d->n_layer; i++) {
        json_object *t = json_object_array_get_idx(v, (size_t)i);
        if (!t || json_object_get_type(t) != json_type_string)
            return ex_fail(r->err, r->cap, "%s: layer_types[%d] must be a string", r->path, i);
        if (strcmp(json_object_get_string(t), "full_attention") != 0)
            return ex_fail(r->err, r->cap, "%s: layer_types[%d] = \"%s\": only \"full_attention\" "
                        "is implemented (a sliding attention window is not)", r->path, i,
                        json_object_get_string(t));
    }
    return 0;
}

static int parse(reader *r, llama_dims *d) {
    memset(d, 0, sizeof *d);
    json_object_object_foreach(r->root, key, val) {
        (void)val;
        if (!in_list(known_keys, key) && !in_list(ignored_keys, key))
            return ex_fail(r->err, r->cap, "%s: %s is not a key zeroshard's Llama model knows; it "
                        "cannot tell whether it changes the architecture (remove it if it "
                        "does not)", r->path, key);
    }
    json_object *mt = value_of(r, "model_type");
    if (!mt || json_object_get_type(mt) != json_type_string)
        return ex_fail(r->err, r->cap, "%s: model_type is missing (\"llama\", \"mistral\" or "
                    "\"qwen2\")", r->path);
    const char *type = json_object_get_string(mt);
    const int llama = strcmp(type, "llama") == 0, mistral = strcmp(type, "mistral") == 0,
              qwen2 = strcmp(type, "qwen2") == 0;
    if (!llama && !mistral && !qwen2)
        return ex_fail(r->err, r->cap, "%s: model_type \"%s\" is not one this model computes "
                    "(\"llama\", \"mistral\" or \"qwen2\")", r->path, type);
    snprintf(d->model_type, sizeof d->model_type, "%s", type);
    const int big = 1 << 30;
    if (read_int(r, "vocab_size", 1, 0, 1, big, &d->vocab) ||
        read_int(r, "hidden_size", 1, 0, 1, big, &d->n_embd) ||
        read_int(r, "intermediate_size", 1, 0, 1, big, &d->n_ff) ||
        read_int(r, "num_hidden_layers", 1, 0, 1, 1 << 16, &d->n_layer) ||
        read_int(r, "num_attention_heads", 1, 0, 1, 1 << 16, &d->n_head) ||
        read_int(r, "num_key_value_heads", 0, d->n_head, 1, 1 << 16, &d->n_kv_head) ||
        read_int(r, "max_position_embeddings", 0, 2048, 1, big, &d->max_seq))
        return -1;
    if (d->n_embd % d->n_head != 0 && !value_of(r, "head_dim"))
        return ex_fail(r->err, r->cap, "%s: hidden_size %d is not a multiple of "
                    "num_attention_heads %d and head_dim is not given", r->path, d->n_embd,
                    d->n_head);
    if (read_int(r, "head_dim", 0, d->n_embd / d->n_head, 1, 1 << 20, &d->head_dim) ||
        read_number(r, "rms_norm_eps", 1e-6, &d->rms_eps) ||
        read_number(r, "rope_theta", 10000.0, &d->rope_theta) ||
        read_number(r, "initializer_range", 0.02, &d->init_std) ||
        read_bool(r, "tie_word_embeddings", 0, &d->tied) || read_rope(r, d) ||
        read_layer_types(r, d))
        return -1;
    int attention_bias = 0, mlp_bias = 0;
    if (read_bool(r, "attention_bias", 0, &attention_bias) ||
        read_bool(r, "mlp_bias", 0, &mlp_bias))
        return -1;
    if (qwen2) {
        /* Qwen2 has biases on q, k and v and none on o_proj, whatever
         * attention_bias says (its config has no such key). */
        d->qkv_bias = 1;
        d->o_bias = 0;
    } else {
        d->qkv_bias = d->o_bias = attention_bias;
    }
    d->mlp_bias = mlp_bias;
    /* What changes the architecture and is not implemented. */
    json_object *act = value_of(r, "hidden_act");
    if (act && (json_object_get_type(act) != json_type_string ||
                strcmp(json_object_get_string(act), "silu") != 0))
        return ex_fail(r->err, r->cap, "%s: hidden_act must be \"silu\" (SwiGLU); other "
                    "activations are not implemented", r->path);
    double dropout = 0.0, rotary = 1.0;
    int interleaved = 0, use_window = 0;
    if (read_number(r, "attention_dropout", 0.0, &dropout) ||
        read_number(r, "partial_rotary_factor", 1.0, &rotary) ||
        read_bool(r, "rope_interleaved", 0, &interleaved) ||
        read_bool(r, "use_sliding_window", 0, &use_window))
        return -1;
    if (dropout != 0.0)
        return ex_fail(r->err, r->cap, "%s: attention_dropout = %g: dropout is not implemented "
                    "(set it to 0.0)", r->path, dropout);
    if (rotary != 1.0)
        return ex_fail(r->err, r->cap, "%s: partial_rotary_factor = %g: partial rotary "
                    "embeddings are not implemented", r->path, rotary);
    if (interleaved)
        return ex_fail(r->err, r->cap, "%s: rope_interleaved = true: interleaved rotary "
                    "embeddings are not implemented (Hugging Face checkpoints rotate halves)",
                    r->path);
    json_object *window = value_of(r, "sliding_window");
    if (window && (mistral || llama || use_window))
        return ex_fail(r->err, r->cap, "%s: sliding_window = %s: a sliding attention window is not "
                    "implemented (a config with sliding_window null attends to the whole "
                    "sequence)", r->path, json_object_to_json_string(window));
    if (use_window)
        return ex_fail(r->err, r->cap, "%s: use_sliding_window = true: a sliding attention "
                    "window is not implemented", r->path);
    char why[512];
    if (llama_dims_check(d, why, sizeof why) != 0)
        return ex_fail(r->err, r->cap, "%s: %s", r->path, why);
    return 0;
}

int llama_config_parse(const char *text, size_t len, const char *path, llama_dims *out,
                       char *err, size_t cap) {
    if (len > CONFIG_MAX_BYTES)
        return ex_fail(err, cap, "%s: %zu bytes; a config.json is at most %d", path, len,
                    CONFIG_MAX_BYTES);
    json_tokener *tok = json_tokener_new();
    if (!tok) return ex_fail(err, cap, "%s: out of memory", path);
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    const enum json_tokener_error jerr = json_tokener_get_error(tok);
    const size_t used = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    int rc;
    if (!root || jerr != json_tokener_success) {
        rc = ex_fail(err, cap, "%s: not valid JSON (%s)", path,
                  root ? "trailing data" : json_tokener_error_desc(jerr));
    } else if (used < len && strspn(text + used, " \t\r\n") != len - used) {
        rc = ex_fail(err, cap, "%s: not valid JSON (text after the object)", path);
    } else if (json_object_get_type(root) != json_type_object) {
        rc = ex_fail(err, cap, "%s: not a JSON object", path);
    } else {
        /* Messages built from err itself go through a copy. */
        char inner[1024] = "";
        reader r = {root, path, inner, sizeof inner};
        rc = parse(&r, out);
        if (rc != 0) ex_fail(err, cap, "%s", inner);
    }
    json_object_put(root);
    return rc;
}

int llama_config_read(const char *path, llama_dims *out, char *err, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return ex_fail(err, cap, "%s: cannot open: %s", path, strerror(errno));
    char *text = malloc((size_t)CONFIG_MAX_BYTES + 1);
    if (!text) {
        fclose(f);
        return ex_fail(err, cap, "%s: out of memory", path);
    }
    const size_t n = fread(text, 1, (size_t)CONFIG_MAX_BYTES + 1, f);
    const int bad = ferror(f);
    fclose(f);
    int rc;
    if (bad) rc = ex_fail(err, cap, "%s: read error", path);
    else if (n > CONFIG_MAX_BYTES)
        rc = ex_fail(err, cap, "%s: larger than %d bytes; not a config.json", path, CONFIG_MAX_BYTES);
    else rc = llama_config_parse(text, n, path, out, err, cap);
    free(text);
    return rc;
}

/* The shortest decimal that reads back as x (JSON has no other way to keep
 * 1e-05 as 1e-05). */
static void shortest(double x, char *out, size_t cap) {
    for (int p = 1; p <= 17; p++) {
        snprintf(out, cap, "%.*g", p, x);
        if (strtod(out, NULL) == x) break;
    }
    /* JSON numbers of a float key keep a '.' or exponent, as Python writes
     * them (10000.0), so readers take them as floats. */
    if (!strpbrk(out, ".eEn")) {
        const size_t n = strlen(out);
        if (n + 2 < cap) memcpy(out + n, ".0", 3);
    }
}

int llama_config_write(const llama_dims *d, char *out, size_t cap) {
    const int qwen2 = strcmp(d->model_type, "qwen2") == 0,
              mistral = strcmp(d->model_type, "mistral") == 0;
    const char *arch = qwen2 ? "Qwen2ForCausalLM" : mistral ? "MistralForCausalLM"
                                                            : "LlamaForCausalLM";
    char eps[32], theta[32], std[32], factor[32], low[32], high[32];
    shortest(d->rms_eps, eps, sizeof eps);
    shortest(d->rope_theta, theta, sizeof theta);
    shortest(d->init_std, std, sizeof std);
    char scaling[256] = "null";
    if (d->rope_kind == LLAMA_ROPE_LLAMA3) {
        shortest(d->rope_factor, factor, sizeof factor);
        shortest(d->rope_low_freq, low, sizeof low);
        shortest(d->rope_high_freq, high, sizeof high);
        snprintf(scaling, sizeof scaling,
                 "{\"factor\": %s, \"high_freq_factor\": %s, \"low_freq_factor\": %s, "
                 "\"original_max_position_embeddings\": %d, \"rope_type\": \"llama3\"}",
                 factor, high, low, d->rope_orig_max);
    }
    char family[128];
    if (qwen2) snprintf(family, sizeof family, "  \"use_sliding_window\": false,\n");
    else if (mistral) snprintf(family, sizeof family, "  \"sliding_window\": null,\n");
    else snprintf(family, sizeof family, "  \"attention_bias\": %s,\n  \"mlp_bias\": %s,\n",
                  d->o_bias ? "true" : "false", d->mlp_bias ? "true" : "false");
    return snprintf(out, cap,
                    "{\n"
                    "  \"architectures\": [\"%s\"],\n"
                    "  \"model_type\": \"%s\",\n"
                    "  \"vocab_size\": %d,\n"
                    "  \"hidden_size\": %d,\n"
                    "  \"intermediate_size\": %d,\n"
                    "  \"num_hidden_layers\": %d,\n"
                    "  \"num_attention_heads\": %d,\n"
                    "  \"num_key_value_heads\": %d,\n"
                    "  \"head_dim\": %d,\n"
                    "  \"hidden_act\": \"silu\",\n"
                    "  \"max_position_embeddings\": %d,\n"
                    "  \"initializer_range\": %s,\n"
                    "  \"rms_norm_eps\": %s,\n"
                    "  \"rope_theta\": %s,\n"
                    "  \"rope_scaling\": %s,\n"
                    "%s"
                    "  \"attention_dropout\": 0.0,\n"
                    "  \"tie_word_embeddings\": %s\n"
                    "}\n",
                    arch, d->model_type, d->vocab, d->n_embd, d->n_ff, d->n_layer, d->n_head,
                    d->n_kv_head, d->head_dim, d->max_seq, std, eps, theta, scaling, family,
                    d->tied ? "true" : "false");
}
