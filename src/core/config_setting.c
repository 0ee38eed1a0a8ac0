/* What the loader and the validators say about a setting: its type as a
 * noun, whether a name is one libconfig accepts, and where it was written
 * (file:line through the include map). A floor below both config.c (the
 * loader) and config_validate.c / config_app.c (the validators), which
 * call it; it calls nothing of theirs. */
#include <stdio.h>

#include "core/config_internal.h"

const char *zs__config_type_noun(int type) {
    switch (type) {
    case CONFIG_TYPE_GROUP: return "a group";
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64: return "an integer";
    case CONFIG_TYPE_FLOAT: return "a float";
    case CONFIG_TYPE_STRING: return "a string";
    case CONFIG_TYPE_BOOL: return "a bool";
    case CONFIG_TYPE_ARRAY: return "an array";
    case CONFIG_TYPE_LIST: return "a list";
    }
    return "an empty setting";
}

int zs__config_valid_name(const char *text, size_t length) {
    if (length == 0) return 0;
    for (size_t i = 0; i < length; i++) {
        unsigned char c = (unsigned char)text[i];
        int letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '*';
        int other = (c >= '0' && c <= '9') || c == '-' || c == '_';
        if (!(letter || (i > 0 && other))) return 0;
    }
    return 1;
}

void zs__config_where(const zs_config *cfg, const config_setting_t *setting, char *out,
                      size_t capacity) {
    if (capacity == 0) return;
    out[0] = '\0';
    if (!setting || config_setting_source_line(setting) == 0) return;
    int line = 0;
    const char *file =
        zs__config_lines_find(&cfg->lines, (int)config_setting_source_line(setting), &line);
    if (file) snprintf(out, capacity, "%s:%d: ", file, line);
}
