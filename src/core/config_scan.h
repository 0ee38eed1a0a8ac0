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
 *  - NUL bytes, at which strings are cut short, and the escape \x00, which
 *    it drops;
 *  - included files that are not regular files or are too large (see
 *    config_source.h): a directory or `@include ""` makes libconfig exit the
 *    process, a FIFO blocks it forever, a huge string takes it minutes;
 *  - include cycles and nesting deeper than libconfig allows;
 *  - absolute include paths, which 1.5 appends to the include directory.
 * Literals are read by config_literal.c, which the overrides use too. The
 * scan also expands the includes itself (config_scan.c says why), so
 * libconfig parses one text and opens no file. */
#ifndef ZS_CORE_CONFIG_SCAN_H
#define ZS_CORE_CONFIG_SCAN_H

#include <stddef.h>

#include "zeroshard.h"

/* From line `line` of the expanded text on, the lines are those of
 * files[file] from line `file_line` on (until the next span). */
typedef struct zs__config_span {
    int line;
    size_t file;
    int file_line;
} zs__config_span;

/* Where each line of an expanded configuration came from: spans in the order
 * of their lines, and the paths of the files (as opened; the top file as
 * given), which the map owns. */
typedef struct zs__config_lines {
    zs__config_span *spans;
    size_t span_count, span_capacity;
    char **files;
    size_t file_count;
} zs__config_lines;

/* The file that line `line` of the expanded text came from, with its line in
 * that file in *file_line; NULL when the map does not know the line (0, the
 * line libconfig gives settings an override created). */
const char *zs__config_lines_find(const zs__config_lines *lines, int line, int *file_line);

/* Frees what the map holds and empties it; an empty map is fine. */
void zs__config_lines_free(zs__config_lines *lines);

/* Reads the file at `path` (shown in messages as it is given) with
 * zs__config_read_source and scans it and every file it pulls in with
 * @include: a relative name is found in `include_dir` (also in nested
 * includes), an absolute one is itself. On success *text holds the top file
 * with every include replaced by the included text (NUL-terminated, *length
 * bytes; the caller frees it), which is what libconfig should parse, so that
 * the files checked are the files parsed and libconfig opens none; *lines maps
 * its lines back to files (the caller frees it with zs__config_lines_free).
 * Errors are ZS_ERR_CONFIG with "file:line: ..." naming the literal and its
 * key, the NUL byte or the @include at fault, or ZS_ERR_IO when a file cannot
 * be opened; then *text is NULL and *lines empty. */
zs_status zs__config_scan_file(const char *path, const char *include_dir, char **text,
                               size_t *length, zs__config_lines *lines);

/* The same scan over text of `length` bytes held in memory; `name` is used in
 * messages and `depth` counts the enclosing includes. */
zs_status zs__config_scan_text(const char *text, size_t length, const char *name,
                               const char *include_dir, int depth);

#endif
