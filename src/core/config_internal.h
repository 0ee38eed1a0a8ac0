/* The body of zs_config and the functions the config_*.c files share. Only the
 * configuration module includes this header; the rest of the runtime reads
 * zs__settings through core/config.h. */
#ifndef ZS_CORE_CONFIG_INTERNAL_H
#define ZS_CORE_CONFIG_INTERNAL_H

#include <libconfig.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/config_scan.h"

/* An app key the program has read, so zs_config_app_finish can tell read keys
 * from unknown ones and suggest the nearest read key. */
typedef struct zs__app_read {
    char *key;    /* without the "app." prefix */
    char *string; /* app_string: the value handed out (NULL for other types) */
} zs__app_read;

struct zs_config {
    char *path;        /* as given to zs_config_load */
    char *include_dir; /* the directory of path; relative @include names are found there */
    config_t *lc;      /* the parsed tree; replaced whole by a successful override */
    /* libconfig parses the text with the includes expanded (config_scan.h), so
     * the lines it records are lines of that text; this maps them back. */
    zs__config_lines lines;
    zs__settings settings;
    uint64_t hash; /* computed with every successful validation */

    /* Source file names that copied trees point at (see config_copy.c). */
    char **files;
    size_t file_count;

    zs__app_read *reads;
    size_t read_count;
    size_t read_capacity;
    /* Strings handed out by zs_config_app_string that a later read of the same
     * key replaced; they must live as long as cfg. */
    char **retired;
    size_t retired_count;
    size_t retired_capacity;
};

/* Writes "file:line: " for a setting, or "" for one an override created (it
 * has no line). Included files are named by the path they were read from. */
void zs__config_where(const zs_config *cfg, const config_setting_t *setting, char *out,
                      size_t capacity);

/* Validates the tree `lc` (cfg gives names for messages) into *out: unknown
 * keys, types, ranges, required keys and cross-key rules. Returns
 * ZS_ERR_CONFIG with a "file:line: ..." message on the first problem. */
zs_status zs__config_validate(const zs_config *cfg, const config_t *lc, zs__settings *out);

/* The hash of validated settings plus the app group of `lc`. */
zs_status zs__config_compute_hash(const zs__settings *settings, const config_t *lc,
                                  uint64_t *out);

/* A deep copy of `src` whose settings keep their source file and line. */
zs_status zs__config_copy_tree(zs_config *cfg, const config_t *src, config_t **out);

/* The candidate nearest to `word` by edit distance over dotted paths (also
 * comparing last components, so "stage" finds "zero.stage"), or NULL when
 * nothing is close enough to be a plausible typo. */
const char *zs__config_nearest(const char *word, const char *const *candidates, size_t count);

/* Whether `text` is a valid libconfig setting name ([A-Za-z*][-A-Za-z0-9_*]*). */
int zs__config_valid_name(const char *text, size_t length);

/* A short noun for a libconfig type: "an integer", "a group", ... */
const char *zs__config_type_noun(int type);

/* Typed readers shared by the runtime schema and the app keys, so both apply
 * the same rules: integers only from integer literals (32- or 64-bit), numbers
 * from integer or float literals ("lr = 1"), booleans only from true/false.
 * `where` is the "file:line: " prefix and `name` the dotted key for messages.
 * Ranges are the caller's business. */
zs_status zs__config_read_int(const char *where, const char *name, const config_setting_t *s,
                              int64_t *out);
zs_status zs__config_read_number(const char *where, const char *name, const config_setting_t *s,
                                 double *out);
zs_status zs__config_read_bool(const char *where, const char *name, const config_setting_t *s,
                               int *out);
zs_status zs__config_read_string(const char *where, const char *name, const config_setting_t *s,
                                 const char **out);

#endif
