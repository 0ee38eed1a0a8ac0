#include "core/text_append.h"

#include <stdarg.h>
#include <stdio.h>

void zs__text_append(char *out, size_t capacity, size_t *used, const char *fmt, ...) {
    if (capacity == 0 || *used >= capacity) return;
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(out + *used, capacity - *used, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    *used += (size_t)n;
    if (*used >= capacity) *used = capacity - 1;
}
