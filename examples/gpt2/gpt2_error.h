/* The data side's error convention (gpt2_data.h, gpt2_llmc.h): a fallible
 * call takes `char *err, size_t err_cap` (err may be NULL) and returns 0, or
 * -1 after writing one line there. gpt2_fail writes it and returns -1, so a
 * failure is one statement: return gpt2_fail(err, err_cap, "...", ...). */
#ifndef GPT2_ERROR_H
#define GPT2_ERROR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

__attribute__((format(printf, 3, 4))) static inline int gpt2_fail(char *err, size_t err_cap,
                                                                  const char *fmt, ...) {
    if (err && err_cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_cap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

#endif
