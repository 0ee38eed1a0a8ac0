/* Reading the text of a configuration file (the top file or one it pulls in
 * with @include) without trusting what the path names. libconfig 1.5 opens
 * files with fopen and reads them through its flex scanner, which calls
 * exit(2) when a read fails (a directory, which fopen opens happily on
 * Linux), blocks forever on a FIFO with no writer, and parses long strings in
 * quadratic time (a 50 MB string takes more than 12 minutes). So every file is
 * opened here first, without blocking, and must be a regular file within the
 * size limits before libconfig is allowed to see it. */
#ifndef ZS_CORE_CONFIG_SOURCE_H
#define ZS_CORE_CONFIG_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

/* The largest configuration file, in bytes. Real configurations are a few
 * kilobytes; at 1 MiB libconfig still parses a single string in about 0.4 s,
 * while at 4 MiB it already takes 5 s (quadratic). */
#define ZS_CONFIG_MAX_FILE_BYTES ((size_t)1 << 20)
/* The most bytes one load may read: the top file and every included file,
 * counted each time it is included. Bounds the work of includes that fan out
 * (a file included many times, each time including more). */
#define ZS_CONFIG_MAX_TOTAL_BYTES ((size_t)4 << 20)
/* libconfig 1.5 refuses to nest @include deeper than 10 (MAX_INCLUDE_DEPTH in
 * its scanctx.h); we stop at the same depth, with a message that says why. */
#define ZS_CONFIG_MAX_INCLUDE_DEPTH 10
/* The most @include directives one load follows, counting repeats. With the
 * byte limit alone, thousands of includes of an empty file would still pass. */
#define ZS_CONFIG_MAX_INCLUDES 256

/* Identifies a file independently of how its path is spelled, so an include
 * cycle is found even through "./a.cfg" and "a.cfg". */
typedef struct zs__file_id {
    uint64_t device;
    uint64_t inode;
} zs__file_id;

/* Reads the regular file at `path` into a NUL-terminated buffer (*text, which
 * the caller frees; *length excludes the terminator) and identifies it in *id.
 * The file is opened with O_NONBLOCK, so a FIFO or device never blocks, and
 * checked with fstat before anything is read. `limit` is the most bytes the
 * file may hold (a file that grows past it while being read fails too).
 * Returns ZS_ERR_IO "cannot open 'path': <reason>" when it cannot be opened or
 * is a directory, ZS_ERR_CONFIG when it is not a regular file or is too large;
 * the messages name `path` and say what to do. NUL bytes are not checked here
 * (the scanner reports them with their line). */
zs_status zs__config_read_source(const char *path, size_t limit, char **text, size_t *length,
                                 zs__file_id *id);

#endif
