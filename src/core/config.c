/* Loading a configuration, overriding single keys, and the accessors.
 *
 * libconfig parses; we validate (config_validate.c) into zs__settings, which
 * is all the runtime ever reads. A load runs three passes: our scan of the raw
 * text (config_scan.c), which checks every file before libconfig opens it and
 * rejects literals libconfig 1.5 would silently wrap, zero or make infinite;
 * libconfig's parser (syntax errors with its file and line); and the
 * schema-driven validation.
 *
 * @include is supported: a relative name is found in the directory of the
 * file given to zs_config_load (also for includes inside included files), an
 * absolute name is itself. The scan reads and checks every included file and
 * hands libconfig one text with the includes expanded, so libconfig opens
 * no file; its line numbers are mapped back to files with cfg->lines.
 *
 * Overrides (`key=value`) read their value with the same literal readers as
 * the scan (config_literal.c), so a value is refused in an override exactly
 * when it is refused in a file.
 *
 * Floor (src/floors.txt): the loader stands on the validators
 * (config_validate.c, config_app.c), the scan, the literal readers, the hash
 * and the setting helpers (config_setting.c); none of them calls it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/config_internal.h"
#include "core/config_literal.h"
#include "core/config_scan.h"
#include "core/config_schema.h"
#include "core/error.h"

static char *duplicate(const char *text) {
    size_t n = strlen(text) + 1;
    char *copy = zs__malloc(n);
    if (copy) memcpy(copy, text, n);
    return copy;
}

/* The directory part of path, "." when there is none. */
static char *directory_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return duplicate(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *dir = zs__malloc(n + 1);
    if (!dir) return NULL;
    memcpy(dir, path, n);
    dir[n] = '\0';
    return dir;
}

static void free_tree(config_t *lc) {
    if (!lc) return;
    config_destroy(lc);
    free(lc);
}

void zs_config_destroy(zs_config *cfg) {
    if (!cfg) return;
    free_tree(cfg->lc);
    for (size_t i = 0; i < cfg->file_count; i++) free(cfg->files[i]);
    free(cfg->files);
    for (size_t i = 0; i < cfg->read_count; i++) {
        free(cfg->reads[i].key);
        free(cfg->reads[i].string);
    }
    free(cfg->reads);
    for (size_t i = 0; i < cfg->retired_count; i++) free(cfg->retired[i]);
    free(cfg->retired);
    free(cfg->path);
    free(cfg->include_dir);
    zs__config_lines_free(&cfg->lines);
    free(cfg);
}

/* Turns a failed config_read_string into our message and status. */
static zs_status parse_failure(const zs_config *cfg, const config_t *lc) {
    const char *text = config_error_text(lc) ? config_error_text(lc) : "unknown error";
    if (config_error_type(lc) == CONFIG_ERR_FILE_IO)
        return zs__fail(ZS_ERR_IO, "cannot read '%s': %s", cfg->path, text);
    /* libconfig parsed the expanded text (it opened no file), so its line is
     * a line of that text. */
    int line = config_error_line(lc);
    const char *file = zs__config_lines_find(&cfg->lines, line, &line);
    return zs__fail(ZS_ERR_CONFIG,
                    "%s:%d: %s (settings are written `name = value;`, groups `name: { ... };`)",
                    file ? file : cfg->path, line, text);
}

zs_status zs_config_load(const char *path, zs_config **out) {
    if (!path || !out)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_config_load: path and out must not be NULL");
    zs_status status = ZS_OK;
    char *text = NULL;
    size_t length = 0;
    zs_config *cfg = zs__calloc(1, sizeof *cfg);
    if (!cfg) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory loading '%s'", path);
    cfg->path = duplicate(path);
    cfg->include_dir = directory_of(path);
    cfg->lc = zs__malloc(sizeof *cfg->lc);
    if (!cfg->path || !cfg->include_dir || !cfg->lc) {
        free(cfg->lc);
        cfg->lc = NULL;
        status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory loading '%s'", path);
        goto fail;
    }
    config_init(cfg->lc);
    config_set_include_dir(cfg->lc, cfg->include_dir);
    /* The scan opens the file without blocking, checks it and every file it
     * includes, and returns the text it checked with the includes expanded.
     * libconfig parses that text rather than opening any path, so what it
     * parses cannot have been swapped for a FIFO or a directory in between,
     * and an absolute include is not joined to the include directory as
     * libconfig 1.5 would (it has no hook to open includes). The expanded
     * text holds no directive libconfig would follow: the scan lexes as
     * libconfig does and refuses an included file that ends inside a
     * string, a comment or an include name (see config_scan.c). */
    ZS_CHECK_GOTO(zs__config_scan_file(path, cfg->include_dir, &text, &length, &cfg->lines),
                  status, fail);
    if (!config_read_string(cfg->lc, text)) {
        status = parse_failure(cfg, cfg->lc);
        goto fail;
    }
    free(text);
    text = NULL;
    ZS_CHECK_GOTO(zs__config_validate(cfg, cfg->lc, &cfg->settings), status, fail);
    ZS_CHECK_GOTO(zs__config_compute_hash(&cfg->settings, cfg->lc, &cfg->hash), status, fail);
    *out = cfg;
    return ZS_OK;
fail:
    free(text);
    zs_config_destroy(cfg);
    return status;
}

/* The value of an override, typed the way libconfig would type the literal. */
typedef struct override_value {
    int type; /* CONFIG_TYPE_INT, _INT64, _FLOAT, _BOOL or _STRING */
    long long integer;
    double real;
    int boolean;
    char *string; /* owned */
} override_value;

/* Reads the text after '=' for the key `path`: a quoted string, a number
 * (the whole text a libconfig number literal), true/false, or else a bare
 * string ("adam", "run %r.log"). Quoted strings and numbers go through the
 * readers the scan uses on files, so they are refused with the same messages
 * ("optimizer.weight_decay = 1e-400 is too small for a double ..."); an
 * integer that needs 64 bits needs no L here, since nothing can wrap on the
 * way into the tree. */
static zs_status parse_value(const char *path, const char *text, override_value *v) {
    memset(v, 0, sizeof *v);
    size_t n = strlen(text);
    if (n > 0 && text[0] == '"') {
        v->type = CONFIG_TYPE_STRING;
        v->string = zs__malloc(n + 1);
        if (!v->string) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory");
        size_t extent = 0, used = 0;
        ZS_CHECK(zs__config_string_read(text, n, "", path, &extent, v->string, &used));
        if (extent != n)
            return zs__fail(ZS_ERR_CONFIG,
                            "%s = %s: text follows the string's closing quote; write \\\" for a "
                            "quote inside the string",
                            path, text);
        return ZS_OK;
    }
    if (n > 0 && zs__config_number_extent(text, n) == n) {
        zs__config_number number;
        ZS_CHECK(zs__config_number_read(text, n, ZS__CONFIG_FROM_OVERRIDE, "", path, &number));
        v->type = number.type;
        v->integer = number.integer;
        v->real = number.real;
        return ZS_OK;
    }
    if (strcasecmp(text, "true") == 0 || strcasecmp(text, "false") == 0) {
        v->type = CONFIG_TYPE_BOOL;
        v->boolean = strcasecmp(text, "true") == 0;
        return ZS_OK;
    }
    v->type = CONFIG_TYPE_STRING;
    v->string = duplicate(text);
    if (!v->string) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory");
    return ZS_OK;
}

/* Sets path = value in the tree, creating groups on the way and replacing
 * whatever scalar was there. The new setting has no source line, so messages
 * about it carry only the override's own prefix. */
static zs_status apply_override(config_t *lc, const char *path, const override_value *v) {
    config_setting_t *parent = config_root_setting(lc);
    const char *segment = path;
    for (;;) {
        const char *dot = strchr(segment, '.');
        size_t n = dot ? (size_t)(dot - segment) : strlen(segment);
        char name[256];
        if (!zs__config_valid_name(segment, n) || n >= sizeof name)
            return zs__fail(ZS_ERR_CONFIG,
                            "'%s' is not a valid key path (names start with a letter and hold "
                            "letters, digits, '-', '_'; groups are joined by '.')",
                            path);
        memcpy(name, segment, n);
        name[n] = '\0';
        config_setting_t *member = config_setting_get_member(parent, name);
        if (dot) {
            if (!member) {
                member = config_setting_add(parent, name, CONFIG_TYPE_GROUP);
                if (!member) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory");
                member->line = 0;
                member->file = NULL;
            } else if (member->type != CONFIG_TYPE_GROUP) {
                return zs__fail(ZS_ERR_CONFIG, "'%.*s' is %s, not a group", (int)(dot - path),
                                path, zs__config_type_noun(member->type));
            }
            parent = member;
            segment = dot + 1;
            continue;
        }
        if (member) {
            if (config_setting_is_aggregate(member))
                return zs__fail(ZS_ERR_CONFIG,
                                "'%s' is %s; override the keys inside it one by one", path,
                                zs__config_type_noun(member->type));
            if (!config_setting_remove(parent, name))
                return zs__fail(ZS_ERR_INTERNAL, "cannot replace '%s' in the tree", path);
        }
        config_setting_t *leaf = config_setting_add(parent, name, v->type);
        if (!leaf) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory");
        leaf->line = 0;
        leaf->file = NULL;
        int ok = 0;
        switch (v->type) {
        case CONFIG_TYPE_INT: ok = config_setting_set_int(leaf, (int)v->integer); break;
        case CONFIG_TYPE_INT64: ok = config_setting_set_int64(leaf, v->integer); break;
        case CONFIG_TYPE_FLOAT: ok = config_setting_set_float(leaf, v->real); break;
        case CONFIG_TYPE_BOOL: ok = config_setting_set_bool(leaf, v->boolean); break;
        case CONFIG_TYPE_STRING: ok = config_setting_set_string(leaf, v->string); break;
        }
        if (!ok) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory setting '%s'", path);
        return ZS_OK;
    }
}

static void trim(const char **begin, const char **end) {
    while (*begin < *end && (**begin == ' ' || **begin == '\t')) (*begin)++;
    while (*end > *begin && ((*end)[-1] == ' ' || (*end)[-1] == '\t')) (*end)--;
}

/* Everything an override does, on a copy of the tree; cfg changes only when
 * all of it succeeded. */
/* Parses "path=value" and sets it in tree. */
static zs_status apply_assignment(config_t *tree, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    if (!eq)
        return zs__fail(ZS_ERR_CONFIG, "expected path=value, e.g. zero.stage=2 or app.steps=100");
    const char *pb = assignment, *pe = eq, *vb = eq + 1, *ve = eq + strlen(eq);
    trim(&pb, &pe);
    trim(&vb, &ve);
    char *path = zs__malloc((size_t)(pe - pb) + 1);
    char *text = zs__malloc((size_t)(ve - vb) + 1);
    override_value v = {0};
    zs_status status = ZS_OK;
    if (!path || !text) {
        status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    memcpy(path, pb, (size_t)(pe - pb));
    path[pe - pb] = '\0';
    memcpy(text, vb, (size_t)(ve - vb));
    text[ve - vb] = '\0';
    ZS_CHECK_GOTO(parse_value(path, text, &v), status, done);
    ZS_CHECK_GOTO(apply_override(tree, path, &v), status, done);
done:
    free(v.string);
    free(path);
    free(text);
    return status;
}

zs_status zs_config_override_list(zs_config *cfg, int count, const char *const *assignments) {
    if (!cfg || count < 0 || (count > 0 && !assignments))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "zs_config_override_list: cfg and %d assignments are required", count);
    for (int i = 0; i < count; i++)
        if (!assignments[i])
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "zs_config_override_list: assignment %d is NULL", i);
    /* All assignments go into a copy, which is validated once, as a whole:
     * keys that constrain each other (warmup_steps < total_steps) can then
     * be changed together in any order, and a failure leaves cfg untouched. */
    config_t *tree = NULL;
    zs__settings settings;
    uint64_t hash = 0;
    zs_status status = zs__config_copy_tree(cfg, cfg->lc, &tree);
    for (int i = 0; status == ZS_OK && i < count; i++) {
        status = apply_assignment(tree, assignments[i]);
        if (status != ZS_OK) zs__fail_context(status, "override '%s'", assignments[i]);
    }
    if (status == ZS_OK) {
        status = zs__config_validate(cfg, tree, &settings);
        if (status != ZS_OK) {
            if (count == 1) zs__fail_context(status, "override '%s'", assignments[0]);
            else zs__fail_context(status, "overrides (%d given)", count);
        }
    }
    if (status == ZS_OK) status = zs__config_compute_hash(&settings, tree, &hash);
    if (status != ZS_OK) {
        free_tree(tree);
        return status;
    }
    free_tree(cfg->lc);
    cfg->lc = tree;
    cfg->settings = settings;
    cfg->hash = hash;
    return ZS_OK;
}

zs_status zs_config_override(zs_config *cfg, const char *assignment) {
    if (!assignment)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "zs_config_override: cfg and assignment must not be NULL");
    return zs_config_override_list(cfg, 1, &assignment);
}

const char *zs_config_path(const zs_config *cfg) { return cfg ? cfg->path : NULL; }

uint64_t zs_config_hash(const zs_config *cfg) { return cfg ? cfg->hash : 0; }

const zs__settings *zs__config_settings(const zs_config *cfg) {
    return cfg ? &cfg->settings : NULL;
}
