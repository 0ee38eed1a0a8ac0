/* zs-ckpt export --hf: a checkpoint as a Hugging Face model directory,
 * what transformers' from_pretrained loads unchanged (ckpt_tool.h).
 *
 * The tensors are the parameters under their own names (the models that
 * use this name their parameters as transformers does), split as
 * save_pretrained splits them: in manifest order, a new file when the next
 * tensor would take the current one past --max-shard-bytes (a tensor larger
 * than the limit gets a file of its own), one file named model.safetensors
 * when everything fits, otherwise model-0000i-of-0000N.safetensors and an
 * index. Every file carries the metadata {"format": "pt"}, without which
 * transformers refuses it. The bytes stream through the shared parameter
 * reader (ckpt_export.c), so memory is bounded by --buffer-bytes.
 *
 * Nothing appears under the requested name until everything is written:
 * the files go into a new temporary directory beside it, which is fsynced
 * and renamed to the requested name (which must not exist, or be an empty
 * directory); a failure removes the temporary directory. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>
#include <xxhash.h>

#include "checkpoint/hf_index.h"
#include "checkpoint/json_strict.h"
#include "ckpt_tool.h"
#include "core/error.h"
#include "core/fs.h"

/* The global user state a trainer keeps the model's config.json in. */
#define HF_CONFIG_STATE "hf.config.json"
#define HF_CONFIG_FILE "config.json"
/* A config.json is a few kilobytes; anything past this is not one. */
#define HF_CONFIG_MAX_BYTES ((size_t)16 << 20)
/* config.json nests little (rope_scaling, quantization_config). */
#define HF_CONFIG_MAX_DEPTH 16
/* The largest tokenizer file copied (tokenizer.json of large vocabularies
 * is tens of megabytes). */
#define HF_TOKENIZER_MAX_BYTES ((size_t)512 << 20)

/* What a tokenizer needs beside the weights, copied where present. */
static const char *const tokenizer_files[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "generation_config.json",
};

/* The output directory and its temporary sibling. */
typedef struct hf_out {
    char parent[PATH_MAX]; /* the directory that receives out_dir */
    char name[PATH_MAX];   /* out_dir's last component */
    char tmp_name[PATH_MAX];
    char tmp_path[PATH_MAX];
    int parent_fd, tmp_fd;
    int tmp_made;
} hf_out;

/* Splits out_dir, opens its parent and refuses an existing non-empty
 * directory or any other entry at the name, before any work is done. */
static zs_status out_begin(hf_out *o, const char *out_dir) {
    memset(o, 0, sizeof *o);
    o->parent_fd = o->tmp_fd = -1;
    char copy[PATH_MAX];
    int n = snprintf(copy, sizeof copy, "%s", out_dir);
    if (n <= 0 || (size_t)n >= sizeof copy)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "--hf: the path is empty or too long");
    while (n > 1 && copy[n - 1] == '/') copy[--n] = '\0';
    char a[PATH_MAX], b[PATH_MAX];
    snprintf(a, sizeof a, "%s", copy);
    snprintf(b, sizeof b, "%s", copy);
    snprintf(o->parent, sizeof o->parent, "%s", dirname(a));
    snprintf(o->name, sizeof o->name, "%s", basename(b));
    if (strcmp(o->name, ".") == 0 || strcmp(o->name, "..") == 0 || strcmp(o->name, "/") == 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "--hf %s: name a new directory (not \".\", \"..\" or \"/\")", out_dir);
    ZS_CHECK(zs__fs_open_root(o->parent, 0, &o->parent_fd));
    const zs__fs_kind kind = zs__fs_kind_at(o->parent_fd, o->name);
    if (kind == ZS_FS_KIND_DIR) {
        int fd = -1, count = 0;
        char **names = NULL;
        ZS_CHECK(zs__fs_open_dir_at(o->parent_fd, o->parent, o->name, &fd));
        zs_status s = zs__fs_list_at(fd, out_dir, 0, &names, &count);
        zs__fs_list_free(names, count);
        close(fd);
        if (s != ZS_OK)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "--hf %s: the directory exists and is not empty; name a new one",
                            out_dir);
    } else if (kind != ZS_FS_KIND_MISSING) {
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "--hf %s: something that is not a directory is there; name a new "
                        "directory",
                        out_dir);
    }
    snprintf(o->tmp_name, sizeof o->tmp_name, ".%.200s.tmp.%ld.%016llx", o->name, (long)getpid(),
             (unsigned long long)zs__fs_random());
    ZS_CHECK(zs__tool_join(o->tmp_path, sizeof o->tmp_path, o->parent, o->tmp_name));
    ZS_CHECK(zs__fs_mkdir_new_at(o->parent_fd, o->parent, o->tmp_name));
    o->tmp_made = 1;
    ZS_CHECK(zs__fs_open_dir_at(o->parent_fd, o->parent, o->tmp_name, &o->tmp_fd));
    return ZS_OK;
}

/* Removes the temporary directory and what was written into it. */
static void out_abandon(hf_out *o) {
    if (o->tmp_fd >= 0) {
        char **names = NULL;
        int count = 0;
        if (zs__fs_list_at(o->tmp_fd, o->tmp_path, 1 << 20, &names, &count) == ZS_OK)
            for (int i = 0; i < count; i++) unlinkat(o->tmp_fd, names[i], 0);
        zs__fs_list_free(names, count);
    }
    if (o->tmp_made) unlinkat(o->parent_fd, o->tmp_name, AT_REMOVEDIR);
    o->tmp_made = 0;
}

static void out_close(hf_out *o) {
    if (o->tmp_fd >= 0) close(o->tmp_fd);
    if (o->parent_fd >= 0) close(o->parent_fd);
    o->tmp_fd = o->parent_fd = -1;
}

/* The commit: everything in the temporary directory is durable, then the
 * rename publishes it and the parent's fsync makes the rename durable. */
static zs_status out_commit(hf_out *o) {
    ZS_CHECK(zs__fs_fsync_fd(o->tmp_fd, o->tmp_path));
    ZS_CHECK(zs__fs_rename_at(o->parent_fd, o->parent, o->tmp_name, o->parent_fd, o->parent,
                              o->name));
    o->tmp_made = 0;
    ZS_CHECK(zs__fs_fsync_fd(o->parent_fd, o->parent));
    return ZS_OK;
}

/* ---------------------------------------------------------------- shards */

/* The file of each parameter (shard[p], from 0) and the file count, as
 * save_pretrained splits: greedily in order, never splitting a tensor. A
 * model without parameters still gets its (empty) model.safetensors. */
static int is_adapter(const char *name);

/* (A merged export leaves the adapters out: shard[p] = -1 for them.) */
static int plan_shards(const zs__manifest *m, zs_dtype dtype, uint64_t max_bytes, int *shard) {
    if (m->param_count == 0) return 1;
    int files = 0;
    uint64_t current = 0;
    for (int p = 0; p < m->param_count; p++) {
        if (is_adapter(m->params[p].name)) {
            shard[p] = -1;
            continue;
        }
        const uint64_t bytes =
            (uint64_t)zs__ckpt_param_numel(&m->params[p]) * zs_dtype_size(dtype);
        if (files == 0 || (current > 0 && current + bytes > max_bytes)) {
            files++;
            current = 0;
        }
        current += bytes;
        shard[p] = files - 1;
    }
    return files;
}

static void shard_name(char *out, size_t cap, int shard, int files) {
    if (files == 1)
        snprintf(out, cap, "%s", ZS_HF_SINGLE_FILE);
    else
        snprintf(out, cap, "model-%05d-of-%05d.safetensors", shard + 1, files);
}

/* LoRA merged into the weights (export --hf --merge): for each parameter
 * the indices of its adapters' A and B (-1: none), and alpha / r. */
typedef struct merge_plan {
    int *a, *b;
    double scale;
} merge_plan;

/* W + scale B A, W [out][in], A [r][in], B [out][r], each sum in double and
 * rounded once, appended to the stream in the export's dtype. */
static zs_status append_merged(zs__tool_reader *reader, const zs__manifest *m,
                               const merge_plan *mp, int p, zs_dtype dtype,
                               zs__st_stream *stream) {
    const zs__ckpt_param *w = &m->params[p], *pa = &m->params[mp->a[p]];
    const int64_t out = w->shape[0], in = w->shape[1], r = pa->shape[0];
    float *W = malloc(sizeof(float) * (size_t)(out * in)), *A = malloc(sizeof(float) * (size_t)(r * in));
    float *B = malloc(sizeof(float) * (size_t)(out * r));
    void *narrow = dtype == ZS_DTYPE_FP32 ? NULL : malloc(zs_dtype_size(dtype) * (size_t)in);
    zs_status s = ZS_OK;
    if (!W || !A || !B || (dtype != ZS_DTYPE_FP32 && !narrow))
        s = zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory to merge %s", w->name);
    if (s == ZS_OK) s = zs__tool_reader_read(reader, p, W);
    if (s == ZS_OK) s = zs__tool_reader_read(reader, mp->a[p], A);
    if (s == ZS_OK) s = zs__tool_reader_read(reader, mp->b[p], B);
    for (int64_t o = 0; s == ZS_OK && o < out; o++) {
        float *row = W + o * in;
        for (int64_t i = 0; i < in; i++) {
            double sum = 0.0;
            for (int64_t k = 0; k < r; k++) sum += (double)B[o * r + k] * (double)A[k * in + i];
            row[i] = (float)((double)row[i] + mp->scale * sum);
        }
        if (dtype == ZS_DTYPE_FP32) {
            s = zs__st_stream_append(stream, row, sizeof(float) * (size_t)in);
        } else {
            s = zs_convert(narrow, dtype, row, ZS_DTYPE_FP32, in);
            if (s == ZS_OK) s = zs__st_stream_append(stream, narrow, zs_dtype_size(dtype) * (size_t)in);
        }
    }
    free(W);
    free(A);
    free(B);
    free(narrow);
    return s;
}

/* Writes shard `shard`: its parameters, in manifest order. */
static zs_status write_shard(hf_out *o, zs__tool_reader *reader, const zs__manifest *m,
                             zs_dtype dtype, const int *shard_of, int shard, int files,
                             const merge_plan *mp, zs__st_tensor_spec *specs, int *members) {
    char name[64];
    shard_name(name, sizeof name, shard, files);
    int count = 0;
    for (int p = 0; p < m->param_count; p++) {
        if (shard_of[p] != shard) continue;
        ZS_CHECK(zs__tool_param_spec(m, p, dtype, &specs[count]));
        members[count++] = p;
    }
    /* The one key transformers reads: it refuses files whose format is not
     * pt, tf, flax or mlx. */
    const zs__st_meta meta[] = {{"format", "pt"}};
    zs__st_stream *stream = NULL;
    ZS_CHECK(zs__st_stream_open_at(o->tmp_fd, o->tmp_path, name, specs, count, meta, 1, &stream));
    for (int k = 0; k < count; k++) {
        const int p = members[k];
        zs_status s = mp->a[p] >= 0 ? append_merged(reader, m, mp, p, dtype, stream)
                                    : zs__tool_reader_append(reader, p, stream);
        if (s != ZS_OK) {
            zs__st_stream_abort(stream);
            return s;
        }
    }
    ZS_CHECK(zs__st_stream_close(stream, NULL, NULL));
    return ZS_OK;
}

/* A json-c member, the value's ownership passed in every case. */
static int add_member(struct json_object *obj, const char *key, struct json_object *value) {
    if (!value || json_object_object_add(obj, key, value) != 0) {
        json_object_put(value);
        return 0;
    }
    return 1;
}

typedef struct named_param {
    const char *name;
    int param;
} named_param;

static int compare_named(const void *a, const void *b) {
    return strcmp(((const named_param *)a)->name, ((const named_param *)b)->name);
}

/* model.safetensors.index.json as save_pretrained writes it: metadata
 * {"total_size": tensor bytes} and the weight_map with sorted keys. */
static zs_status write_index(hf_out *o, const zs__manifest *m, const int *shard_of, int files,
                             uint64_t total_size) {
    zs_status s = ZS_OK;
    struct json_object *root = json_object_new_object(), *meta = NULL, *map = NULL;
    named_param *names = malloc(sizeof *names * (size_t)(m->param_count > 0 ? m->param_count : 1));
    /* Each member is created as it is added, so a failure leaks nothing. */
    const int ok =
        root && names && add_member(root, "metadata", meta = json_object_new_object()) &&
        add_member(meta, "total_size", json_object_new_int64((int64_t)total_size)) &&
        add_member(root, "weight_map", map = json_object_new_object());
    if (!ok) {
        s = zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory for the index");
        goto done;
    }
    int named = 0;
    for (int p = 0; p < m->param_count; p++)
        if (shard_of[p] >= 0) names[named++] = (named_param){m->params[p].name, p};
    qsort(names, (size_t)named, sizeof *names, compare_named);
    for (int k = 0; k < named; k++) {
        char file[64];
        shard_name(file, sizeof file, shard_of[names[k].param], files);
        if (!add_member(map, names[k].name, json_object_new_string(file))) {
            s = zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory for the index");
            goto done;
        }
    }
    size_t length = 0;
    const char *text = json_object_to_json_string_length(
        root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE,
        &length);
    char *with_newline = text ? malloc(length + 2) : NULL;
    if (!with_newline) {
        s = zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory for the index text");
        goto done;
    }
    memcpy(with_newline, text, length);
    with_newline[length] = '\n';
    s = zs__fs_write_atomic_at(o->tmp_fd, o->tmp_path, ZS_HF_INDEX_FILE, with_newline, length + 1);
    free(with_newline);
done:
    json_object_put(root);
    free(names);
    return s;
}

/* ---------------------------------------------------------------- config and tokenizer */

/* torch's name of a dtype, as config.json's torch_dtype gives it. */
static const char *torch_dtype_name(zs_dtype dtype) {
    switch (dtype) {
    case ZS_DTYPE_BF16: return "bfloat16";
    case ZS_DTYPE_FP16: return "float16";
    default: return "float32";
    }
}

/* config.json states the dtype of the weights beside it ("torch_dtype";
 * transformers 4.56 and later write it as "dtype" too), which
 * from_pretrained(torch_dtype="auto") loads them in. The checkpoint's copy
 * says what the model came in as, so whichever of the two keys it holds is
 * set to the dtype this export writes (torch_dtype added when it holds
 * neither). *out: the text to write, NULL when `root` already says so (the
 * checkpoint's bytes are then written unchanged); the caller frees it. */
static zs_status config_with_dtype(struct json_object *root, zs_dtype dtype, char **out,
                                   size_t *out_bytes) {
    static const char *const keys[] = {"torch_dtype", "dtype"};
    const char *want = torch_dtype_name(dtype);
    int named = 0, changed = 0;
    *out = NULL;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        struct json_object *value = NULL;
        if (!json_object_object_get_ex(root, keys[k], &value)) continue;
        named = 1;
        if (json_object_is_type(value, json_type_string) &&
            strcmp(json_object_get_string(value), want) == 0)
            continue;
        changed = 1;
        if (!add_member(root, keys[k], json_object_new_string(want)))
            return zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory for config.json");
    }
    if (!named) {
        changed = 1;
        if (!add_member(root, keys[0], json_object_new_string(want)))
            return zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory for config.json");
    }
    if (!changed) return ZS_OK;
    size_t length = 0;
    /* Indented by two spaces, as save_pretrained writes it; json-c keeps
     * the members' order and every number's text as it was read. */
    const char *text = json_object_to_json_string_length(
        root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE,
        &length);
    char *copy = text ? malloc(length + 2) : NULL;
    if (!copy) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory for config.json");
    memcpy(copy, text, length);
    copy[length] = '\n';
    *out = copy;
    *out_bytes = length + 1;
    return ZS_OK;
}

/* The global user state `state` (its key "global:<state>"), which must be
 * one JSON object of at most HF_CONFIG_MAX_BYTES: its bytes checked against
 * the manifest's XXH3 into *text (*bytes), parsed into *root. *found 0 (and
 * ZS_OK) when the checkpoint has no such state. `reader` names who reads it
 * in messages ("transformers could not read it as config.json"). */
static zs_status read_user_object(const zs__ckpt_step *step, const char *state,
                                  const char *reader, int *found, char **text_out,
                                  size_t *bytes, struct json_object **root_out) {
    const zs__manifest *m = step->m;
    *found = 0;
    *text_out = NULL;
    *root_out = NULL;
    char key[256];
    snprintf(key, sizeof key, "global:%s", state);
    const zs__ckpt_tensor *t = NULL;
    for (int i = 0; i < m->tensor_count && !t; i++)
        if (m->tensors[i].state == ZS_CKPT_STATE_USER_GLOBAL && strcmp(m->tensors[i].key, key) == 0)
            t = &m->tensors[i];
    if (!t) return ZS_OK;
    *found = 1;
    if (t->count <= 0 || (uint64_t)t->count > HF_CONFIG_MAX_BYTES)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: user state \"%s\" holds %lld bytes; %s takes 1 to %zu", step->path,
                        state, (long long)t->count, reader, HF_CONFIG_MAX_BYTES);
    zs__st_file *sf = NULL;
    ZS_CHECK(zs__ckpt_open_shard(step, t->file, &sf));
    zs_status s = ZS_OK;
    struct json_object *root = NULL;
    char *text = malloc((size_t)t->count);
    const zs__st_entry *e = zs__st_find(sf, t->key);
    if (!text) {
        s = zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory for %s", state);
        goto done;
    }
    if (!e || e->end - e->begin != (uint64_t)t->count) {
        s = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: the user state \"%s\" is not as the manifest "
                     "lists it", zs__st_path(sf), state);
        goto done;
    }
    ZS_CHECK_GOTO(zs__st_read(sf, e, 0, text, (uint64_t)t->count), s, done);
    if (XXH3_64bits(text, (size_t)t->count) != t->xxh3) {
        s = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                     "%s: the user state \"%s\" does not match its hash in the manifest",
                     zs__st_path(sf), state);
        goto done;
    }
    const zs__json_rules rules = {HF_CONFIG_MAX_DEPTH, 0, 0};
    char what[300];
    snprintf(what, sizeof what, "user state \"%s\"", state);
    s = zs__json_parse_strict(text, (size_t)t->count, &rules, step->path, what, &root);
    if (s != ZS_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", zs_last_error());
        s = zs__fail(s, "%s; %s", why, reader);
        goto done;
    }
    if (!json_object_is_type(root, json_type_object))
        s = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                     "%s: the user state \"%s\" is JSON but not an object; %s", step->path,
                     state, reader);
done:
    zs__st_close(sf);
    if (s != ZS_OK) {
        json_object_put(root);
        free(text);
        return s;
    }
    *text_out = text;
    *bytes = (size_t)t->count;
    *root_out = root;
    return ZS_OK;
}

/* config.json from the checkpoint's global user state, whose bytes are
 * checked against the manifest's XXH3 and must be one JSON object, with the
 * exported dtype (config_with_dtype). */
static zs_status write_config(hf_out *o, const zs__ckpt_step *step, zs_dtype dtype,
                              int *written) {
    *written = 0;
    int found = 0;
    char *text = NULL;
    size_t count = 0;
    struct json_object *root = NULL;
    ZS_CHECK(read_user_object(step, HF_CONFIG_STATE,
                              "transformers could not read it as config.json", &found, &text,
                              &count, &root));
    if (!found) {
        printf("no config.json written: the checkpoint holds no global user state \"%s\" (a "
               "trainer keeps the model's config.json there with zs_user_state_set); copy the "
               "model's config.json into the output directory yourself\n",
               HF_CONFIG_STATE);
        return ZS_OK;
    }
    zs_status s = ZS_OK;
    char *rewritten = NULL;
    size_t rewritten_bytes = 0;
    ZS_CHECK_GOTO(config_with_dtype(root, dtype, &rewritten, &rewritten_bytes), s, done);
    ZS_CHECK_GOTO(zs__fs_write_atomic_at(o->tmp_fd, o->tmp_path, HF_CONFIG_FILE,
                                         rewritten ? rewritten : text,
                                         rewritten ? rewritten_bytes : count),
                  s, done);
    *written = 1;
done:
    json_object_put(root);
    free(rewritten);
    free(text);
    return s;
}

/* The tokenizer files present in `from`, copied byte for byte. */
static zs_status copy_tokenizer(hf_out *o, const char *from, int *copied) {
    *copied = 0;
    if (!from) return ZS_OK;
    if (!zs__fs_is_dir(from))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "--tokenizer-from %s: not a directory", from);
    for (size_t k = 0; k < sizeof tokenizer_files / sizeof tokenizer_files[0]; k++) {
        char path[PATH_MAX];
        ZS_CHECK(zs__tool_join(path, sizeof path, from, tokenizer_files[k]));
        struct stat st;
        if (stat(path, &st) != 0 && errno == ENOENT) continue;
        char *data = NULL;
        size_t bytes = 0;
        ZS_CHECK(zs__fs_read_file_path(path, HF_TOKENIZER_MAX_BYTES, &data, &bytes));
        zs_status s = zs__fs_write_atomic_at(o->tmp_fd, o->tmp_path, tokenizer_files[k], data,
                                             bytes);
        free(data);
        ZS_CHECK(s);
        ++*copied;
    }
    if (*copied == 0)
        printf("--tokenizer-from %s: none of tokenizer.json, tokenizer_config.json, "
               "special_tokens_map.json, tokenizer.model, generation_config.json is there; no "
               "tokenizer file copied\n",
               from);
    return ZS_OK;
}

/* ---------------------------------------------------------------- the export */

/* A LoRA adapter's tensor (ex_lora.h's names: "<module>.lora_A.weight",
 * "<module>.lora_B.weight"). */
static int is_adapter(const char *name) {
    const size_t n = strlen(name), k = strlen(".lora_A.weight");
    return n > k && (strcmp(name + n - k, ".lora_A.weight") == 0 ||
                     strcmp(name + n - k, ".lora_B.weight") == 0);
}

#define PEFT_CONFIG_STATE "peft.adapter_config.json"

/* The parameter named `name`, or -1. */
static int param_named(const zs__manifest *m, const char *name) {
    for (int p = 0; p < m->param_count; p++)
        if (strcmp(m->params[p].name, name) == 0) return p;
    return -1;
}

/* The merge of a checkpoint's adapters into their Linears (--merge), or
 * the refusal to write them into a Hugging Face model without it. */
static zs_status plan_merge(const zs__ckpt_step *step, int merge, merge_plan *mp) {
    const zs__manifest *m = step->m;
    const size_t n = (size_t)(m->param_count > 0 ? m->param_count : 1);
    mp->a = malloc(sizeof *mp->a * n);
    mp->b = malloc(sizeof *mp->b * n);
    if (!mp->a || !mp->b) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory to plan a merge");
    for (int p = 0; p < m->param_count; p++) mp->a[p] = mp->b[p] = -1;
    int adapters = 0;
    for (int p = 0; p < m->param_count; p++) adapters += is_adapter(m->params[p].name);
    if (adapters == 0) return ZS_OK;
    if (!merge)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s holds LoRA adapters, which transformers' model does not have: "
                        "export them with --peft <dir> (PEFT's adapter_model.safetensors and "
                        "adapter_config.json, loaded onto the base), or merge them into the "
                        "weights with --hf <dir> --merge",
                        step->path);
    int found = 0;
    char *text = NULL;
    size_t bytes = 0;
    struct json_object *root = NULL, *v = NULL;
    ZS_CHECK(read_user_object(step, PEFT_CONFIG_STATE,
                              "it is not PEFT's adapter_config.json", &found, &text, &bytes,
                              &root));
    free(text);
    const int r = found && json_object_object_get_ex(root, "r", &v) ? json_object_get_int(v) : 0;
    const double alpha = found && json_object_object_get_ex(root, "lora_alpha", &v)
                             ? json_object_get_double(v)
                             : 0.0;
    json_object_put(root);
    if (r <= 0 || !(alpha > 0))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: --merge needs the adapters' r and lora_alpha from the global user "
                        "state \"%s\", which %s",
                        step->path, PEFT_CONFIG_STATE, found ? "lacks them" : "it does not hold");
    mp->scale = alpha / r;
    /* "<module>.lora_A.weight" merges into "<module>.weight". */
    for (int p = 0; p < m->param_count; p++) {
        const char *name = m->params[p].name;
        const size_t len = strlen(name), tail = strlen(".lora_A.weight");
        if (!is_adapter(name) || strcmp(name + len - tail, ".lora_A.weight") != 0) continue;
        char base[ZS_CKPT_NAME_MAX + 16], other[ZS_CKPT_NAME_MAX + 16];
        snprintf(base, sizeof base, "%.*s.weight", (int)(len - tail), name);
        snprintf(other, sizeof other, "%.*s.lora_B.weight", (int)(len - tail), name);
        const int w = param_named(m, base), b = param_named(m, other);
        if (w < 0 || b < 0 || m->params[w].ndim != 2 || m->params[p].ndim != 2 ||
            m->params[b].ndim != 2 || m->params[p].shape[0] != r ||
            m->params[p].shape[1] != m->params[w].shape[1] ||
            m->params[b].shape[0] != m->params[w].shape[0] || m->params[b].shape[1] != r)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: adapter \"%s\" has no Linear \"%s\" and lora_B of matching "
                            "shapes to merge into (rank %d)",
                            step->path, name, base, r);
        mp->a[w] = p;
        mp->b[w] = b;
    }
    return ZS_OK;
}

zs_status zs__tool_export_hf(const zs__ckpt_step *step, zs_dtype dtype, uint64_t buffer_bytes,
                             uint64_t max_shard_bytes, const char *out_dir,
                             const char *tokenizer_from, int merge, int quiet,
                             zs__tool_hf_summary *summary) {
    const zs__manifest *m = step->m;
    memset(summary, 0, sizeof *summary);
    merge_plan mp = {NULL, NULL, 0.0};
    zs_status planned = plan_merge(step, merge, &mp);
    if (planned != ZS_OK) {
        free(mp.a);
        free(mp.b);
        return planned;
    }
    if (max_shard_bytes == 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "--max-shard-bytes must be positive");
    hf_out o;
    zs_status s = out_begin(&o, out_dir);
    zs__tool_reader *reader = NULL;
    const size_t n = (size_t)(m->param_count > 0 ? m->param_count : 1);
    int *shard_of = malloc(sizeof *shard_of * n), *members = malloc(sizeof *members * n);
    zs__st_tensor_spec *specs = calloc(n, sizeof *specs);
    if (s == ZS_OK && (!shard_of || !members || !specs))
        s = zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory to plan %d tensors", m->param_count);
    if (s != ZS_OK) goto done;

    zs__progress progress;
    uint64_t data_bytes = 0;
    for (int p = 0; p < m->param_count; p++)
        if (!is_adapter(m->params[p].name))
            data_bytes += (uint64_t)zs__ckpt_param_numel(&m->params[p]) * zs_dtype_size(dtype);
    zs__progress_begin(&progress, "zs-ckpt export",
                       zs__ckpt_verify_read_bytes(step, 0, 1, 1) + data_bytes, quiet);
    ZS_CHECK_GOTO(zs__tool_reader_open(step, dtype, buffer_bytes, &progress, &reader), s, done);
    const int files = plan_shards(m, dtype, max_shard_bytes, shard_of);
    for (int f = 0; f < files; f++)
        ZS_CHECK_GOTO(write_shard(&o, reader, m, dtype, shard_of, f, files, &mp, specs, members),
                      s, done);
    if (files > 1) ZS_CHECK_GOTO(write_index(&o, m, shard_of, files, data_bytes), s, done);
    ZS_CHECK_GOTO(write_config(&o, step, dtype, &summary->config_written), s, done);
    ZS_CHECK_GOTO(copy_tokenizer(&o, tokenizer_from, &summary->tokenizer_files), s, done);
    ZS_CHECK_GOTO(out_commit(&o), s, done);
    zs__progress_end(&progress);
    summary->files = files;
    summary->tensor_bytes = data_bytes;
done:
    if (s != ZS_OK) out_abandon(&o);
    out_close(&o);
    zs__tool_reader_close(reader);
    free(shard_of);
    free(members);
    free(specs);
    free(mp.a);
    free(mp.b);
    return s;
}

/* ------------------------------------------------------- PEFT's adapters */

#define PEFT_PREFIX "base_model.model."

zs_status zs__tool_export_peft(const zs__ckpt_step *step, zs_dtype dtype, uint64_t buffer_bytes,
                               const char *out_dir, int quiet, int *tensors_out) {
    const zs__manifest *m = step->m;
    *tensors_out = 0;
    int found = 0;
    char *config = NULL;
    size_t config_bytes = 0;
    struct json_object *root = NULL;
    ZS_CHECK(read_user_object(step, PEFT_CONFIG_STATE,
                              "PEFT could not read it as adapter_config.json", &found, &config,
                              &config_bytes, &root));
    json_object_put(root);
    if (!found)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s holds no LoRA adapters to export: no global user state \"%s\" (a "
                        "trainer with app.lora_r > 0 keeps PEFT's adapter_config.json there)",
                        step->path, PEFT_CONFIG_STATE);
    hf_out o;
    zs_status s = out_begin(&o, out_dir);
    zs__tool_reader *reader = NULL;
    const size_t n = (size_t)(m->param_count > 0 ? m->param_count : 1);
    int *members = malloc(sizeof *members * n);
    zs__st_tensor_spec *specs = calloc(n, sizeof *specs);
    char(*names)[ZS_CKPT_NAME_MAX + 32] = calloc(n, sizeof *names);
    if (s == ZS_OK && (!members || !specs || !names))
        s = zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory to plan %d tensors", m->param_count);
    if (s != ZS_OK) goto done;
    /* The adapters under PEFT's names, in manifest order. */
    int count = 0;
    uint64_t data_bytes = 0;
    for (int p = 0; p < m->param_count; p++) {
        if (!is_adapter(m->params[p].name)) continue;
        ZS_CHECK_GOTO(zs__tool_param_spec(m, p, dtype, &specs[count]), s, done);
        snprintf(names[count], sizeof names[count], PEFT_PREFIX "%s", m->params[p].name);
        specs[count].name = names[count];
        data_bytes += specs[count].bytes;
        members[count++] = p;
    }
    if (count == 0) {
        s = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: no parameter is a LoRA adapter "
                     "(\"*.lora_A.weight\", \"*.lora_B.weight\")", step->path);
        goto done;
    }
    zs__progress progress;
    zs__progress_begin(&progress, "zs-ckpt export",
                       zs__ckpt_verify_read_bytes(step, 0, 1, 1) + data_bytes, quiet);
    ZS_CHECK_GOTO(zs__tool_reader_open(step, dtype, buffer_bytes, &progress, &reader), s, done);
    const zs__st_meta meta[] = {{"format", "pt"}};
    zs__st_stream *stream = NULL;
    ZS_CHECK_GOTO(zs__st_stream_open_at(o.tmp_fd, o.tmp_path, "adapter_model.safetensors", specs,
                                        count, meta, 1, &stream),
                  s, done);
    for (int k = 0; k < count && s == ZS_OK; k++)
        s = zs__tool_reader_append(reader, members[k], stream);
    if (s != ZS_OK) {
        zs__st_stream_abort(stream);
        goto done;
    }
    ZS_CHECK_GOTO(zs__st_stream_close(stream, NULL, NULL), s, done);
    ZS_CHECK_GOTO(zs__fs_write_atomic_at(o.tmp_fd, o.tmp_path, "adapter_config.json", config,
                                         config_bytes),
                  s, done);
    ZS_CHECK_GOTO(out_commit(&o), s, done);
    zs__progress_end(&progress);
    *tensors_out = count;
done:
    if (s != ZS_OK) out_abandon(&o);
    out_close(&o);
    zs__tool_reader_close(reader);
    free(members);
    free(specs);
    free(names);
    free(config);
    return s;
}
