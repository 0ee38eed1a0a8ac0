/* File name patterns shared by the log file (log.file, ZS_LOG_FILE) and the
 * trace file (trace.file): %h is the host name, %p the process id, %r the
 * rank and %% a percent sign; any other %x stands for x, and a % at the end
 * stays as it is. One expansion, so both files name themselves the same way. */
#ifndef ZS_CORE_FILE_PATTERN_H
#define ZS_CORE_FILE_PATTERN_H

#include <stddef.h>

/* Writes the expansion of `pattern` for `rank` into out (NUL-terminated,
 * truncated to capacity - 1 bytes) and returns the length the whole expansion
 * needs without its NUL, like snprintf: a result >= capacity means `out` was
 * truncated. capacity may be 0 (then out is not touched). */
size_t zs__file_pattern_expand(const char *pattern, int rank, char *out, size_t capacity);

#endif
