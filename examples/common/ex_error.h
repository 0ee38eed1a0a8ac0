/* The examples' error convention: a fallible call takes `char *err, size_t
 * err_cap` (err may be NULL) and writes one line there when it fails. The
 * data side (ex_data.h, gpt2_llmc.h, the models' config readers) returns 0
 * or -1 (ex_fail); the model backends and devices return an nn_status and
 * keep the line for last_error (ex_error). Either is one statement:
 *     return ex_fail(err, err_cap, "...", ...);
 *     return ex_error(err, cap, NN_ERR_ARG, "...", ...); */
#ifndef EX_ERROR_H
#define EX_ERROR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* A size for err that holds any message of ex_data, gpt2_llmc and the
 * models' readers whose file names fit in PATH_MAX (longer messages are
 * truncated, never overflowed). */
#define EX_ERR_CAP 4608

/* vsnprintf into err (cap bytes, err may be NULL); returns `status`. */
static inline int ex_verror(char *err, size_t cap, int status, const char *fmt, va_list ap) {
    if (err && cap > 0) vsnprintf(err, cap, fmt, ap);
    return status;
}

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static inline int ex_error(char *err, size_t cap, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ex_verror(err, cap, status, fmt, ap);
    va_end(ap);
    return status;
}

#define ex_fail(err, cap, ...) ex_error((err), (cap), -1, __VA_ARGS__)

#endif
