/* The schema of runtime configuration keys: one table (config_schema.c) that
 * lists every key with its type, default, range and documentation. The
 * validator, the unknown-key suggestions, the hash and docs/config-keys.md are
 * all derived from it, so a key is added or changed in exactly one place. */
#ifndef ZS_CORE_CONFIG_SCHEMA_H
#define ZS_CORE_CONFIG_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"

typedef enum zs__key_type {
    ZS__KEY_INT = 0,    /* integer literal only; stored as int, int64_t or uint64_t */
    ZS__KEY_FLOAT = 1,  /* float or integer literal; stored as double */
    ZS__KEY_BOOL = 2,   /* true or false; stored as int */
    ZS__KEY_STRING = 3, /* any string up to the field's capacity; stored as char[] */
    ZS__KEY_ENUM = 4    /* one of `values`; stored as the index, an int-sized enum */
} zs__key_type;

typedef struct zs__key {
    const char *path; /* dotted path, e.g. "zero.stage" */
    zs__key_type type;
    size_t offset; /* the field in zs__settings */
    size_t size;
    int required; /* no default: the file must give it */

    int64_t int_default;
    int64_t int_min;
    int64_t int_max;
    int power_of_two; /* integer keys: the value must also be a power of two */

    double float_default;
    double float_min;
    double float_max;
    int float_min_open; /* the range excludes float_min */
    int float_max_open; /* the range excludes float_max */

    int bool_default;

    const char *string_default;  /* strings and enums */
    const char *const *values;   /* enums: allowed values, NULL-terminated, index = C value */
    int (*parse)(const char *);  /* enums: maps a value to its C value (-1 if not allowed);
                                    NULL means the index in `values` */

    const char *doc;     /* one sentence: what the key means */
    const char *example; /* for required keys: how to write it */
} zs__key;

/* The table, in the order of zs__settings (which is also the hash order). */
extern const zs__key zs__config_keys[];
extern const size_t zs__config_key_count;

/* The key with this dotted path, or NULL. */
const zs__key *zs__config_key_find(const char *path);
/* Whether `path` names a group of keys ("zero", "optimizer", ...). */
int zs__config_is_group(const char *path);

/* Human-readable renderings used by error messages and the generated docs.
 * Each writes a NUL-terminated string, truncated to `capacity`. */
void zs__config_key_default_text(const zs__key *key, char *out, size_t capacity);
void zs__config_key_range_text(const zs__key *key, char *out, size_t capacity);
const char *zs__config_key_type_name(const zs__key *key);

/* Writes docs/config-keys.md (a markdown table of every key) into out and
 * returns the length it needs, like snprintf. */
size_t zs__config_keys_markdown(char *out, size_t capacity);

/* Formats a double so that it reads back exactly and always looks like a float
 * ("2.0", not "2"), which matters in messages about integer-only keys. */
void zs__config_format_double(double value, char *out, size_t capacity);

#endif
