/* Building a message in a fixed buffer, piece by piece. */
#ifndef ZS_CORE_TEXT_APPEND_H
#define ZS_CORE_TEXT_APPEND_H

#include <stddef.h>

/* printf-formats onto out[*used..capacity) and advances *used; a piece that
 * does not fit is truncated (out stays NUL-terminated) and later pieces are
 * dropped, so a long list ends cut rather than overflowing. */
void zs__text_append(char *out, size_t capacity, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
