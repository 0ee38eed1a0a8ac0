/* configs/reference.cfg, generated from the schema (config_schema.c): every
 * runtime key with its type, range, default and meaning as a comment and its
 * default as the value, grouped by section, as a file zs_config_load
 * accepts. test_reference_cfg checks that the file is this text and that it
 * loads; `test_reference_cfg --print` writes the text (the regeneration). */
#ifndef ZS_CORE_CONFIG_REFERENCE_H
#define ZS_CORE_CONFIG_REFERENCE_H

#include <stddef.h>

/* Writes the reference configuration into out (always NUL-terminated when
 * capacity > 0) and returns the length it needs, like snprintf. */
size_t zs__config_reference(char *out, size_t capacity);

#endif
