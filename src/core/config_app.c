/* The `app` group: keys that belong to the training program. The runtime does
 * not know them, so the program declares each one as it reads it (type,
 * default, range) and zs_config_app_finish then rejects whatever was present
 * but never read, which catches typos in app keys just like runtime keys.
 *
 * Floor (src/floors.txt): calls the validators' typed readers, the schema,
 * the suggestions and the setting helpers, never the loader.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/config_internal.h"
#include "core/config_schema.h"
#include "core/error.h"

#define WHERE_CAPACITY 1024
/* App keys are at most 255 bytes; messages name them as "app.<key>". */
#define ZS_APP_KEY_MAX 255
#define ZS_APP_NAME_CAPACITY (ZS_APP_KEY_MAX + 5)

static char *duplicate(const char *text) {
    size_t n = strlen(text) + 1;
    char *copy = zs__malloc(n);
    if (copy) memcpy(copy, text, n);
    return copy;
}

static zs_status check_key(const zs_config *cfg, const char *key, const char *function) {
    if (!cfg || !key)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: cfg and key must not be NULL", function);
    if (strnlen(key, ZS_APP_KEY_MAX + 1) > ZS_APP_KEY_MAX)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: app key '%.40s...' is longer than %d bytes",
                        function, key, ZS_APP_KEY_MAX);
    const char *segment = key;
    for (;;) {
        const char *dot = strchr(segment, '.');
        size_t n = dot ? (size_t)(dot - segment) : strlen(segment);
        if (!zs__config_valid_name(segment, n))
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: '%s' is not a valid app key (write it without the \"app.\" "
                            "prefix, like \"steps\" or \"model.dim\")",
                            function, key);
        if (!dot) return ZS_OK;
        segment = dot + 1;
    }
}

/* Finds app.<key>; *out is NULL when it is absent. */
static zs_status lookup(const zs_config *cfg, const char *key, const config_setting_t **out) {
    *out = NULL;
    const config_setting_t *node = config_setting_get_member(config_root_setting(cfg->lc), "app");
    const char *segment = key;
    while (node) {
        const char *dot = strchr(segment, '.');
        size_t n = dot ? (size_t)(dot - segment) : strlen(segment);
        char name[256];
        if (n >= sizeof name) return ZS_OK; /* no libconfig name is that long here */
        memcpy(name, segment, n);
        name[n] = '\0';
        const config_setting_t *member = config_setting_get_member(node, name);
        if (!member) return ZS_OK;
        if (!dot) {
            *out = member;
            return ZS_OK;
        }
        if (config_setting_type(member) != CONFIG_TYPE_GROUP) {
            char where[WHERE_CAPACITY];
            zs__config_where(cfg, member, where, sizeof where);
            return zs__fail(ZS_ERR_CONFIG, "%sapp.%.*s is %s, not a group, so app.%s cannot be read",
                            where, (int)(dot - key), key, zs__config_type_noun(member->type), key);
        }
        node = member;
        segment = dot + 1;
    }
    return ZS_OK;
}

/* Records that `key` was read; for strings, keeps a copy that lives as long as
 * cfg and hands it out through *out_string. */
static zs_status remember(zs_config *cfg, const char *key, const char *string,
                          const char **out_string) {
    char *copy = NULL;
    if (string) {
        copy = duplicate(string);
        if (!copy) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory reading app.%s", key);
    }
    zs__app_read *found = NULL;
    for (size_t i = 0; i < cfg->read_count && !found; i++)
        if (strcmp(cfg->reads[i].key, key) == 0) found = &cfg->reads[i];
    if (found) {
        if (found->string) {
            /* The caller may still hold the old string: retire it, do not free. */
            if (cfg->retired_count == cfg->retired_capacity) {
                size_t capacity = cfg->retired_capacity ? 2 * cfg->retired_capacity : 8;
                char **grown = zs__realloc(cfg->retired, capacity * sizeof *grown);
                if (!grown) {
                    free(copy);
                    return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory reading app.%s", key);
                }
                cfg->retired = grown;
                cfg->retired_capacity = capacity;
            }
            cfg->retired[cfg->retired_count++] = found->string;
        }
        found->string = copy;
    } else {
        if (cfg->read_count == cfg->read_capacity) {
            size_t capacity = cfg->read_capacity ? 2 * cfg->read_capacity : 16;
            zs__app_read *grown = zs__realloc(cfg->reads, capacity * sizeof *grown);
            if (!grown) {
                free(copy);
                return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory reading app.%s", key);
            }
            cfg->reads = grown;
            cfg->read_capacity = capacity;
        }
        char *key_copy = duplicate(key);
        if (!key_copy) {
            free(copy);
            return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory reading app.%s", key);
        }
        cfg->reads[cfg->read_count].key = key_copy;
        cfg->reads[cfg->read_count].string = copy;
        found = &cfg->reads[cfg->read_count++];
    }
    if (out_string) *out_string = found->string;
    return ZS_OK;
}

static void int_range_text(int64_t min, int64_t max, char *out, size_t capacity) {
    if (min == INT64_MIN) snprintf(out, capacity, "at most %" PRId64, max);
    else if (max == INT64_MAX) snprintf(out, capacity, "at least %" PRId64, min);
    else snprintf(out, capacity, "from %" PRId64 " to %" PRId64, min, max);
}

zs_status zs_config_app_int(zs_config *cfg, const char *key, int64_t default_value, int64_t min,
                            int64_t max, int64_t *out) {
    static const char fn[] = "zs_config_app_int";
    ZS_CHECK(check_key(cfg, key, fn));
    char name[ZS_APP_NAME_CAPACITY];
    snprintf(name, sizeof name, "app.%s", key);
    char range[128], where[WHERE_CAPACITY];
    int_range_text(min, max, range, sizeof range);
    if (!out || min > max || default_value < min || default_value > max)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: app.%s needs out != NULL, min <= max and a default (%" PRId64
                        ") %s",
                        fn, key, default_value, range);
    const config_setting_t *s;
    ZS_CHECK(lookup(cfg, key, &s));
    int64_t value = default_value;
    if (s) {
        zs__config_where(cfg, s, where, sizeof where);
        ZS_CHECK(zs__config_read_int(where, name, s, &value));
        if (value < min || value > max)
            return zs__fail(ZS_ERR_CONFIG, "%sapp.%s = %" PRId64 " is out of range; it must be %s",
                            where, key, value, range);
    }
    ZS_CHECK(remember(cfg, key, NULL, NULL));
    *out = value;
    return ZS_OK;
}

zs_status zs_config_app_float(zs_config *cfg, const char *key, double default_value, double min,
                              double max, double *out) {
    static const char fn[] = "zs_config_app_float";
    ZS_CHECK(check_key(cfg, key, fn));
    char name[ZS_APP_NAME_CAPACITY];
    snprintf(name, sizeof name, "app.%s", key);
    char lo[64], hi[64], where[WHERE_CAPACITY];
    zs__config_format_double(min, lo, sizeof lo);
    zs__config_format_double(max, hi, sizeof hi);
    if (!out || !(min <= max) || !(default_value >= min && default_value <= max))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: app.%s needs out != NULL, min <= max and a default in [%s, %s]", fn,
                        key, lo, hi);
    const config_setting_t *s;
    ZS_CHECK(lookup(cfg, key, &s));
    double value = default_value;
    if (s) {
        zs__config_where(cfg, s, where, sizeof where);
        ZS_CHECK(zs__config_read_number(where, name, s, &value));
        if (!isfinite(value) || value < min || value > max) {
            char text[64];
            zs__config_format_double(value, text, sizeof text);
            return zs__fail(ZS_ERR_CONFIG, "%sapp.%s = %s is out of range; it must be in [%s, %s]",
                            where, key, text, lo, hi);
        }
    }
    ZS_CHECK(remember(cfg, key, NULL, NULL));
    *out = value;
    return ZS_OK;
}

zs_status zs_config_app_bool(zs_config *cfg, const char *key, int default_value, int *out) {
    static const char fn[] = "zs_config_app_bool";
    ZS_CHECK(check_key(cfg, key, fn));
    char name[ZS_APP_NAME_CAPACITY];
    snprintf(name, sizeof name, "app.%s", key);
    if (!out) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: out must not be NULL", fn);
    const config_setting_t *s;
    ZS_CHECK(lookup(cfg, key, &s));
    int value = default_value ? 1 : 0;
    if (s) {
        char where[WHERE_CAPACITY];
        zs__config_where(cfg, s, where, sizeof where);
        ZS_CHECK(zs__config_read_bool(where, name, s, &value));
    }
    ZS_CHECK(remember(cfg, key, NULL, NULL));
    *out = value;
    return ZS_OK;
}

zs_status zs_config_app_string(zs_config *cfg, const char *key, const char *default_value,
                               const char **out) {
    static const char fn[] = "zs_config_app_string";
    ZS_CHECK(check_key(cfg, key, fn));
    char name[ZS_APP_NAME_CAPACITY];
    snprintf(name, sizeof name, "app.%s", key);
    if (!out) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: out must not be NULL", fn);
    const config_setting_t *s;
    ZS_CHECK(lookup(cfg, key, &s));
    const char *value = default_value;
    if (s) {
        char where[WHERE_CAPACITY];
        zs__config_where(cfg, s, where, sizeof where);
        ZS_CHECK(zs__config_read_string(where, name, s, &value));
    }
    /* A copy, so the string survives later overrides of the tree. */
    const char *kept = NULL;
    ZS_CHECK(remember(cfg, key, value, &kept));
    *out = kept;
    return ZS_OK;
}

static int was_read(const zs_config *cfg, const char *key) {
    for (size_t i = 0; i < cfg->read_count; i++)
        if (strcmp(cfg->reads[i].key, key) == 0) return 1;
    return 0;
}

static zs_status unread_key(const zs_config *cfg, const config_setting_t *s, const char *key) {
    char where[WHERE_CAPACITY], hint[1024] = "";
    zs__config_where(cfg, s, where, sizeof where);
    /* Candidates carry the "app." prefix so distances compare whole paths. */
    char **names = zs__calloc(cfg->read_count + 1, sizeof *names);
    if (!names) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory checking app keys");
    size_t n = 0;
    for (size_t i = 0; i < cfg->read_count; i++) {
        size_t length = strlen(cfg->reads[i].key) + 5;
        names[n] = zs__malloc(length);
        if (!names[n]) break;
        snprintf(names[n], length, "app.%s", cfg->reads[i].key);
        n++;
    }
    char full[600];
    snprintf(full, sizeof full, "app.%s", key);
    const char *nearest = zs__config_nearest(full, (const char *const *)names, n);
    if (nearest) {
        snprintf(hint, sizeof hint, "; did you mean '%s'?", nearest);
    } else if (cfg->read_count == 0) {
        snprintf(hint, sizeof hint, "; the program reads no app keys");
    } else {
        size_t used = (size_t)snprintf(hint, sizeof hint, "; the program reads:");
        for (size_t i = 0; i < n && used < sizeof hint; i++) {
            int w = snprintf(hint + used, sizeof hint - used, " %s", names[i]);
            if (w > 0) used += (size_t)w;
        }
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return zs__fail(ZS_ERR_CONFIG, "%sunknown key '%s'%s", where, full, hint);
}

/* Finds the first present key under `group` (path `prefix`) nobody read. */
static zs_status check_group(const zs_config *cfg, const config_setting_t *group,
                             const char *prefix) {
    int count = config_setting_length(group);
    for (int i = 0; i < count; i++) {
        const config_setting_t *s = config_setting_get_elem(group, (unsigned)i);
        char key[512];
        snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", config_setting_name(s));
        if (config_setting_type(s) == CONFIG_TYPE_GROUP) ZS_CHECK(check_group(cfg, s, key));
        else if (!was_read(cfg, key)) return unread_key(cfg, s, key);
    }
    return ZS_OK;
}

zs_status zs_config_app_finish(zs_config *cfg) {
    if (!cfg) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_config_app_finish: cfg must not be NULL");
    const config_setting_t *app = config_setting_get_member(config_root_setting(cfg->lc), "app");
    if (!app) return ZS_OK;
    return check_group(cfg, app, "");
}
