/* zs_set_frozen_base and the base's content hash (frozen_base.h). */
#define _DEFAULT_SOURCE /* realpath */
#include "checkpoint/frozen_base.h"

#include "checkpoint/manifest.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/alloc.h"
#include "core/error.h"
#include "zero/ground.h"

static const char *const *sort_names;
static int compare_by_name(const void *a, const void *b) {
    return strcmp(sort_names[*(const int *)a], sort_names[*(const int *)b]);
}

int zs__frozen_base_digest(int n, const char *const *names, const uint64_t *hashes,
                           uint64_t *out) {
    int *order = zs__malloc(sizeof *order * (size_t)(n > 0 ? n : 1));
    XXH3_state_t *state = XXH3_createState();
    if (!order || !state) {
        free(order);
        XXH3_freeState(state);
        return 0;
    }
    for (int i = 0; i < n; i++) order[i] = i;
    sort_names = names;
    qsort(order, (size_t)n, sizeof *order, compare_by_name);
    XXH3_64bits_reset(state);
    for (int k = 0; k < n; k++) {
        const int i = order[k];
        unsigned char le[8];
        for (int b = 0; b < 8; b++) le[b] = (unsigned char)(hashes[i] >> (8 * b));
        XXH3_64bits_update(state, names[i], strlen(names[i]) + 1);
        XXH3_64bits_update(state, le, sizeof le);
    }
    *out = XXH3_64bits_digest(state);
    XXH3_freeState(state);
    free(order);
    return 1;
}

static char *copy_text(const char *text);

/* The path with its directory made absolute (realpath), the last
 * component kept as given (a Hugging Face cache's file is a link whose
 * target has no .safetensors name), so a checkpoint's record names the same
 * files from any working directory; the path as given when it does not
 * resolve (the import then names it). */
static char *absolute_path(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *leaf = slash ? slash + 1 : path;
    char dir[PATH_MAX], resolved[PATH_MAX];
    if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    const int whole = leaf[0] == '\0' || strcmp(leaf, ".") == 0 || strcmp(leaf, "..") == 0;
    if (!realpath(whole ? path : dir, resolved)) return copy_text(path);
    char *out = zs__malloc(strlen(resolved) + strlen(leaf) + 2);
    if (out) sprintf(out, whole ? "%s" : strcmp(resolved, "/") == 0 ? "%s%s" : "%s/%s", resolved, leaf);
    return out;
}

static char *copy_text(const char *text) {
    const size_t n = strlen(text) + 1;
    char *copy = zs__malloc(n);
    if (copy) memcpy(copy, text, n);
    return copy;
}

zs_status zs_set_frozen_base(zs_ctx *zs, const char *path, const zs_safetensors_import *options) {
    if (!zs || !path || !path[0])
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_set_frozen_base: a context and a path are "
                        "required");
    if (zs->built)
        return zs__fail(ZS_ERR_STATE, "zs_set_frozen_base('%s'): call it before zs_build, which "
                        "imports the base", path);
    if (zs->base.path)
        return zs__fail(ZS_ERR_STATE, "zs_set_frozen_base('%s'): a base is declared already "
                        "('%s')", path, zs->base.path);
    if (options && options->trainable_only)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_set_frozen_base('%s'): a base holds the "
                        "frozen parameters; trainable_only does not apply", path);
    if (strlen(path) > ZS_CKPT_BASE_PATH_MAX)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_set_frozen_base: the path is longer than "
                        "the %d bytes a checkpoint records", ZS_CKPT_BASE_PATH_MAX);
    const int ignores = options ? options->ignore_count : 0;
    if (ignores < 0 || (ignores > 0 && !options->ignore))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_set_frozen_base('%s'): options->ignore must "
                        "hold ignore_count (%d) patterns", path, ignores);
    zs__base_record b = {0};
    b.path = absolute_path(path);
    b.name_prefix = copy_text(options && options->name_prefix ? options->name_prefix : "");
    b.ignore = zs__calloc((size_t)(ignores > 0 ? ignores : 1), sizeof *b.ignore);
    int ok = b.path && b.name_prefix && b.ignore;
    for (int i = 0; ok && i < ignores; i++) ok = (b.ignore[b.ignore_count++] = copy_text(options->ignore[i])) != NULL;
    if (!ok) {
        free(b.path);
        free(b.name_prefix);
        for (int i = 0; i < b.ignore_count; i++) free(b.ignore[i]);
        free(b.ignore);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_set_frozen_base('%s'): out of memory", path);
    }
    zs->base = b;
    return ZS_OK;
}
