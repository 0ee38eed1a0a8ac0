/* A Hugging Face checkpoint's layout: the single file, or the index's
 * weight_map (hf_index.h). */
#include "checkpoint/hf_index.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "checkpoint/json_strict.h"
#include "checkpoint/safetensors.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/fs.h"

/* Top-level keys an index may have: save_pretrained writes "metadata" and
 * "weight_map"; other writers add a few. The lexer stops beyond this. */
#define HF_INDEX_MAX_KEYS 64
/* Room for a name from the index, escaped for a message. */
#define HF_SHOWN_BYTES (4 * ZS_ST_NAME_MAX + 8)

static char *join(const char *dir, const char *name) {
    const size_t bytes = strlen(dir) + 1 + strlen(name) + 1;
    char *out = zs__malloc(bytes);
    if (out) snprintf(out, bytes, "%s/%s", dir, name);
    return out;
}

char *zs__hf_layout_path(const zs__hf_layout *l, int file) { return join(l->dir, l->files[file]); }

static int ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int is_regular(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

void zs__hf_layout_free(zs__hf_layout *l) {
    if (!l) return;
    for (int f = 0; f < l->file_count; f++) free(l->files[f]);
    for (int e = 0; e < l->entry_count; e++) free(l->entries[e].name);
    free(l->files);
    free(l->entries);
    free(l->source);
    free(l->dir);
    free(l);
}

static int compare_entries(const void *a, const void *b) {
    return strcmp(((const zs__hf_entry *)a)->name, ((const zs__hf_entry *)b)->name);
}

int zs__hf_layout_file_of(const zs__hf_layout *l, const char *tensor) {
    if (!l->indexed) return 0;
    const zs__hf_entry probe = {(char *)tensor, 0};
    const zs__hf_entry *hit = l->entry_count > 0
                                  ? bsearch(&probe, l->entries, (size_t)l->entry_count,
                                            sizeof *l->entries, compare_entries)
                                  : NULL;
    return hit ? hit->file : -1;
}

/* The layout's source and directory: `path` and the part before its last
 * '/' ("." without one). For a single file, its name is file 0. */
static zs_status layout_begin(zs__hf_layout *l, const char *path, int single) {
    const char *slash = strrchr(path, '/');
    l->source = zs__strdup(path);
    l->dir = slash ? zs__malloc((size_t)(slash - path) + 2) : zs__strdup(".");
    if (l->dir && slash) {
        /* "/model.safetensors" lives in "/", not in "". */
        const size_t n = slash == path ? 1 : (size_t)(slash - path);
        memcpy(l->dir, path, n);
        l->dir[n] = '\0';
    }
    if (!l->source || !l->dir)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate the checkpoint's layout", path);
    if (!single) return ZS_OK;
    l->files = zs__calloc(1, sizeof *l->files);
    if (l->files) l->files[0] = zs__strdup(slash ? slash + 1 : path);
    if (!l->files || !l->files[0])
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate the checkpoint's layout", path);
    l->file_count = 1;
    return ZS_OK;
}

/* Why `name` is not a plain file name in the index's directory, or NULL. */
static const char *file_name_problem(const char *name, size_t len) {
    if (len == 0) return "is empty";
    if (len > ZS_ST_NAME_MAX) return "is longer than 255 bytes";
    if (strlen(name) != len) return "contains a NUL byte";
    if (strchr(name, '/')) return "contains '/' (files must be in the index's directory)";
    if (strstr(name, "..") || strcmp(name, ".") == 0)
        return "contains \"..\" or is \".\" (files must be in the index's directory)";
    return NULL;
}

/* The file index of `name`, added to the layout when new. */
static zs_status layout_file(zs__hf_layout *l, const char *name, int *file) {
    for (int f = 0; f < l->file_count; f++)
        if (strcmp(l->files[f], name) == 0) {
            *file = f;
            return ZS_OK;
        }
    char **grown = zs__realloc(l->files, sizeof *grown * (size_t)(l->file_count + 1));
    if (!grown) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate its files", l->source);
    l->files = grown;
    l->files[l->file_count] = zs__strdup(name);
    if (!l->files[l->file_count])
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate its files", l->source);
    *file = l->file_count++;
    return ZS_OK;
}

static zs_status read_weight_map(zs__hf_layout *l, struct json_object *map,
                                 const zs__hf_index_limits *limits) {
    const char *where = l->source;
    char shown[HF_SHOWN_BYTES], file_shown[HF_SHOWN_BYTES];
    const int count = json_object_object_length(map);
    if (count > limits->max_entries)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: weight_map lists %d tensors, more than the %d %s allows", where,
                        count, limits->max_entries, limits->expected);
    if (count == 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: weight_map lists no tensor", where);
    l->entries = zs__calloc((size_t)count, sizeof *l->entries);
    if (!l->entries)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate %d entries", where, count);
    int index = 0;
    json_object_object_foreach(map, name, value) {
        zs__st_printable(name, shown, sizeof shown);
        if (strlen(name) > ZS_ST_NAME_MAX)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: weight_map entry %d (\"%s\"): a tensor name longer than %d "
                            "bytes, which no safetensors file holds",
                            where, index, shown, ZS_ST_NAME_MAX);
        if (!json_object_is_type(value, json_type_string))
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: weight_map entry %d (\"%s\") is not a string (each tensor "
                            "maps to the name of the file that holds it)",
                            where, index, shown);
        const char *file = json_object_get_string(value);
        const char *why = file_name_problem(file, (size_t)json_object_get_string_len(value));
        zs__st_printable(file, file_shown, sizeof file_shown);
        if (why)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: weight_map entry %d (\"%s\"): the file name \"%s\" %s", where,
                            index, shown, file_shown, why);
        zs__hf_entry *e = &l->entries[l->entry_count];
        e->name = zs__strdup(name);
        if (!e->name)
            return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate entry %d", where, index);
        l->entry_count++;
        const int known = l->file_count;
        ZS_CHECK(layout_file(l, file, &e->file));
        if (e->file == known) {
            /* A file named for the first time must be there now, so that a
             * missing shard is reported before any is read. */
            char *path = zs__hf_layout_path(l, e->file);
            if (!path) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate a path", where);
            const int present = is_regular(path);
            free(path);
            if (!present)
                return zs__fail(ZS_ERR_IO,
                                "%s: weight_map entry %d (\"%s\") names \"%s\", which is not a "
                                "regular file in %s (was a shard left out of the download?)",
                                where, index, shown, file_shown, l->dir);
        }
        index++;
    }
    qsort(l->entries, (size_t)l->entry_count, sizeof *l->entries, compare_entries);
    return ZS_OK;
}

static zs_status read_index(zs__hf_layout *l, const zs__hf_index_limits *limits) {
    char *text = NULL;
    size_t bytes = 0;
    zs_status status = zs__fs_read_file_path(l->source, limits->max_bytes, &text, &bytes);
    if (status != ZS_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", zs_last_error());
        return zs__fail(status, "%s (an index for %s needs at most %zu bytes)", why,
                        limits->expected, limits->max_bytes);
    }
    struct json_object *root = NULL, *map = NULL;
    /* Depth 4: the index, metadata or weight_map, and room for a writer's
     * nested metadata, which is not used. */
    const zs__json_rules rules = {4, 0, 0};
    status = zs__json_parse_strict_bounded(text, bytes, &rules, HF_INDEX_MAX_KEYS, l->source,
                                           "index", NULL, &root);
    free(text);
    ZS_CHECK(status);
    if (!json_object_object_get_ex(root, "weight_map", &map) ||
        !json_object_is_type(map, json_type_object))
        status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                          "%s: has no \"weight_map\" object (a Hugging Face index maps each "
                          "tensor to the file that holds it there)",
                          l->source);
    else
        status = read_weight_map(l, map, limits);
    json_object_put(root);
    return status;
}

zs_status zs__hf_layout_open(const char *path, const zs__hf_index_limits *limits,
                             zs__hf_layout **out) {
    *out = NULL;
    if (!path || !*path || !limits || limits->max_bytes == 0 || limits->max_entries <= 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "Hugging Face checkpoint: a path and positive limits are required");
    zs__hf_layout *l = zs__calloc(1, sizeof *l);
    if (!l) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate a layout", path);
    char *inside = NULL;
    zs_status status = ZS_OK;
    int indexed = ends_with(path, ".json");
    if (zs__fs_is_dir(path)) {
        /* The index wins when both are present: it names the file of every
         * tensor, so a single file left beside a later sharded save is not
         * what gets read. */
        inside = join(path, ZS_HF_INDEX_FILE);
        if (inside && !is_regular(inside)) {
            free(inside);
            inside = join(path, ZS_HF_SINGLE_FILE);
        }
        if (!inside) {
            status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate a path", path);
            goto fail;
        }
        if (!is_regular(inside)) {
            status = zs__fail(ZS_ERR_IO,
                              "%s: holds neither %s nor %s (a Hugging Face checkpoint directory "
                              "has one of them)",
                              path, ZS_HF_INDEX_FILE, ZS_HF_SINGLE_FILE);
            goto fail;
        }
        indexed = ends_with(inside, ".json");
        path = inside;
    }
    ZS_CHECK_GOTO(layout_begin(l, path, !indexed), status, fail);
    l->indexed = indexed;
    if (indexed) ZS_CHECK_GOTO(read_index(l, limits), status, fail);
    free(inside);
    *out = l;
    return ZS_OK;
fail:
    free(inside);
    zs__hf_layout_free(l);
    return status;
}
