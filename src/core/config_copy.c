/* A deep copy of a libconfig tree. libconfig 1.5 has no copy of its own, and
 * an override must be tried on a copy so that a failed one leaves the
 * configuration exactly as it was (see zs_config_override). */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/config_internal.h"
#include "core/error.h"

/* Settings point at their source file name without owning it; libconfig keeps
 * those names in the config_t that parsed them. A copy outlives that config_t,
 * so its settings point at copies of the names that cfg owns instead. */
static const char *intern_file(zs_config *cfg, const char *file) {
    if (!file) return NULL;
    for (size_t i = 0; i < cfg->file_count; i++)
        if (cfg->files[i] == file || strcmp(cfg->files[i], file) == 0) return cfg->files[i];
    char **grown = zs__realloc(cfg->files, (cfg->file_count + 1) * sizeof *grown);
    if (!grown) return NULL;
    cfg->files = grown;
    size_t n = strlen(file) + 1;
    char *copy = zs__malloc(n);
    if (!copy) return NULL;
    memcpy(copy, file, n);
    cfg->files[cfg->file_count++] = copy;
    return copy;
}

static zs_status copy_members(zs_config *cfg, config_setting_t *dst, const config_setting_t *src) {
    int count = config_setting_length(src);
    for (int i = 0; i < count; i++) {
        const config_setting_t *from = config_setting_get_elem(src, (unsigned)i);
        const char *name = config_setting_type(dst) == CONFIG_TYPE_GROUP ? config_setting_name(from)
                                                                        : NULL;
        config_setting_t *to = config_setting_add(dst, name, config_setting_type(from));
        if (!to) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory copying the configuration");
        /* The source position is what error messages point at; libconfig 1.5
         * exposes these fields but has no setter for them. */
        to->line = from->line;
        to->file = intern_file(cfg, from->file);
        if (from->file && !to->file)
            return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory copying the configuration");
        int ok = 1;
        switch (config_setting_type(from)) {
        case CONFIG_TYPE_INT: ok = config_setting_set_int(to, config_setting_get_int(from)); break;
        case CONFIG_TYPE_INT64:
            ok = config_setting_set_int64(to, config_setting_get_int64(from));
            break;
        case CONFIG_TYPE_FLOAT:
            ok = config_setting_set_float(to, config_setting_get_float(from));
            break;
        case CONFIG_TYPE_BOOL: ok = config_setting_set_bool(to, config_setting_get_bool(from)); break;
        case CONFIG_TYPE_STRING:
            ok = config_setting_set_string(to, config_setting_get_string(from));
            break;
        case CONFIG_TYPE_GROUP:
        case CONFIG_TYPE_ARRAY:
        case CONFIG_TYPE_LIST: ZS_CHECK(copy_members(cfg, to, from)); break;
        default: break;
        }
        if (!ok) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory copying the configuration");
        config_setting_set_format(to, config_setting_get_format(from));
    }
    return ZS_OK;
}

zs_status zs__config_copy_tree(zs_config *cfg, const config_t *src, config_t **out) {
    config_t *copy = zs__malloc(sizeof *copy);
    if (!copy) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory copying the configuration");
    config_init(copy);
    config_set_options(copy, config_get_options(src));
    config_set_include_dir(copy, cfg->include_dir);
    zs_status status = copy_members(cfg, config_root_setting(copy), config_root_setting(src));
    if (status != ZS_OK) {
        config_destroy(copy);
        free(copy);
        return status;
    }
    *out = copy;
    return ZS_OK;
}
