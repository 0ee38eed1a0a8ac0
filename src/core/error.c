#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Large enough for a config path, a key and a suggestion. Longer messages are
 * truncated, never overflowed. */
#define ZS_ERROR_CAPACITY 2048
#define ZS_BREADCRUMB_CAPACITY 8

static _Thread_local char tls_message[ZS_ERROR_CAPACITY];
static _Thread_local const char *tls_crumb_file[ZS_BREADCRUMB_CAPACITY];
static _Thread_local int tls_crumb_line[ZS_BREADCRUMB_CAPACITY];
static _Thread_local int tls_crumb_count;

const char *zs_status_name(zs_status status) {
    switch (status) {
#define ZS_STATUS_NAME_(name, value, message) \
    case name:                                \
        return #name;
        ZS_STATUS_TABLE(ZS_STATUS_NAME_)
#undef ZS_STATUS_NAME_
    }
    return "ZS_UNKNOWN_STATUS";
}

const char *zs_status_message(zs_status status) {
    switch (status) {
#define ZS_STATUS_MESSAGE_(name, value, message) \
    case name:                                   \
        return message;
        ZS_STATUS_TABLE(ZS_STATUS_MESSAGE_)
#undef ZS_STATUS_MESSAGE_
    }
    return "unknown status";
}

const char *zs_last_error(void) { return tls_message; }

void zs__clear_error(void) {
    tls_message[0] = '\0';
    tls_crumb_count = 0;
}

zs_status zs__fail(zs_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_message, sizeof tls_message, fmt, ap);
    va_end(ap);
    tls_crumb_count = 0;
    return status;
}

zs_status zs__fail_context(zs_status status, const char *fmt, ...) {
    char previous[ZS_ERROR_CAPACITY];
    memcpy(previous, tls_message, sizeof previous);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tls_message, sizeof tls_message, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof tls_message && previous[0] != '\0')
        snprintf(tls_message + n, sizeof tls_message - (size_t)n, ": %s", previous);
    return status;
}

void zs__error_breadcrumb(const char *file, int line) {
    /* Breadcrumbs are kept for debug logging; the message itself stays clean. */
    if (tls_crumb_count < ZS_BREADCRUMB_CAPACITY) {
        tls_crumb_file[tls_crumb_count] = file;
        tls_crumb_line[tls_crumb_count] = line;
        tls_crumb_count++;
    }
}

_Noreturn void zs__assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "zeroshard: internal invariant failed at %s:%d: %s\n"
                    "This is a bug in zeroshard; please report it with this line.\n",
            file, line, expr);
    fflush(stderr);
    abort();
}

void zs__error_trail(char *out, size_t capacity) {
    size_t used = 0;
    if (capacity == 0) return;
    out[0] = '\0';
    for (int i = 0; i < tls_crumb_count && used < capacity; i++) {
        int n = snprintf(out + used, capacity - used, "%s%s:%d", i ? " <- " : "",
                         tls_crumb_file[i], tls_crumb_line[i]);
        if (n < 0) break;
        used += (size_t)n;
    }
}
