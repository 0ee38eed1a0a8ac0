/* A second look at the raw text of a configuration file, for the one thing
 * libconfig 1.5 gets silently wrong: integer literals that do not fit. Its
 * scanner converts decimal literals with atoi and hex literals with strtoul
 * and stores the result in an int, so `x = 2147483648;` reads as -2147483648
 * and `x = 4294967296;` as 0, with no error. Literals with the L suffix are
 * converted with atoll/strtoull, which saturate or wrap past 64 bits. */
#ifndef ZS_CORE_CONFIG_SCAN_H
#define ZS_CORE_CONFIG_SCAN_H

#include "zeroshard.h"

/* Scans the file at `path` (shown in messages as it is given) and every file
 * it pulls in with @include, resolved as libconfig resolves them: as
 * include_dir + "/" + name. Returns ZS_ERR_CONFIG with "file:line: integer
 * literal ... does not fit ..." for the first literal that does not fit its
 * type (32 bits without a suffix, 64 bits with L), ZS_ERR_IO if a file cannot
 * be read. Meant to run after libconfig parsed the file successfully, so the
 * text is known to be well formed. */
zs_status zs__config_scan_file(const char *path, const char *include_dir);

/* The same scan over NUL-terminated text of `length` bytes held in memory;
 * `name` is used in messages and `depth` counts the enclosing includes. */
zs_status zs__config_scan_text(const char *text, size_t length, const char *name,
                               const char *include_dir, int depth);

#endif
