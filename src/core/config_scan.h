/* The pass over the raw text of a configuration and of every file it
 * includes, run before libconfig sees any of it, for what libconfig 1.5 gets
 * silently or fatally wrong:
 *  - integer literals that do not fit: its scanner converts decimal literals
 *    with atoi and hex literals with strtoul and stores the result in an int,
 *    so `x = 2147483648;` reads as -2147483648 and `x = 4294967296;` as 0;
 *    literals with the L suffix go through atoll/strtoull, which saturate or
 *    wrap past 64 bits;
 *  - float literals that do not fit a double: atof reads 1e-400 as 0 and
 *    1e400 as inf;
 *  - NUL bytes, at which strings are cut short;
 *  - included files that are not regular files or are too large (see
 *    config_source.h): a directory or `@include ""` makes libconfig exit the
 *    process, a FIFO blocks it forever, a huge string takes it minutes;
 *  - include cycles and nesting deeper than libconfig allows. */
#ifndef ZS_CORE_CONFIG_SCAN_H
#define ZS_CORE_CONFIG_SCAN_H

#include <stddef.h>

#include "zeroshard.h"

/* Reads the file at `path` (shown in messages as it is given) with
 * zs__config_read_source and scans it and every file it pulls in with
 * @include, resolved as libconfig resolves them: as include_dir + "/" + name.
 * On success *text holds the text of the top file (NUL-terminated, *length
 * bytes; the caller frees it), which is what should be handed to libconfig,
 * so that the file checked is the file parsed. Errors are ZS_ERR_CONFIG with
 * "file:line: ..." naming the literal (and for floats the key), the NUL byte
 * or the @include at fault, or ZS_ERR_IO when a file cannot be opened. */
zs_status zs__config_scan_file(const char *path, const char *include_dir, char **text,
                               size_t *length);

/* The same scan over text of `length` bytes held in memory; `name` is used in
 * messages and `depth` counts the enclosing includes. */
zs_status zs__config_scan_text(const char *text, size_t length, const char *name,
                               const char *include_dir, int depth);

#endif
