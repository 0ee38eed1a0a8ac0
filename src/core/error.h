/* Error recording: every failure leaves one message, built where it happened,
 * in a thread-local buffer read back by zs_last_error(). */
#ifndef ZS_CORE_ERROR_H
#define ZS_CORE_ERROR_H

#include <stddef.h>

#include "zeroshard.h"

/* Records "message" as the last error of this thread and returns status, so a
 * failure is reported in one statement: return zs__fail(ZS_ERR_IO, "...", ...);
 * The message should name the file, key, rank or collective and say what to do. */
zs_status zs__fail(zs_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Like zs__fail, but keeps an existing message and adds "context: " in front,
 * so callers can say what they were doing without losing the first cause. */
zs_status zs__fail_context(zs_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clears the last error of this thread. */
void zs__clear_error(void);

/* Propagates a failure with a file:line breadcrumb (like NCCL's CHECK macros).
 * Use only inside functions returning zs_status. */
#define ZS_CHECK(call)                                                          \
    do {                                                                        \
        zs_status zs_check_status_ = (call);                                    \
        if (zs_check_status_ != ZS_OK) {                                        \
            zs__error_breadcrumb(__FILE__, __LINE__);                           \
            return zs_check_status_;                                            \
        }                                                                       \
    } while (0)

/* Same, for cleanup paths: keeps the first error in `status` and jumps to fail. */
#define ZS_CHECK_GOTO(call, status, label)                                      \
    do {                                                                        \
        (status) = (call);                                                      \
        if ((status) != ZS_OK) {                                                \
            zs__error_breadcrumb(__FILE__, __LINE__);                           \
            goto label;                                                         \
        }                                                                       \
    } while (0)

void zs__error_breadcrumb(const char *file, int line);

/* The breadcrumb trail of the last failure, "a.c:10 <- b.c:20", for debug logs. */
void zs__error_trail(char *out, size_t capacity);

/* A violated internal invariant (a bug in zeroshard, not bad input): prints
 * file:line and aborts. Never used for anything a user or a file controls. */
#define ZS_ASSERT(cond)                                                         \
    do {                                                                        \
        if (!(cond)) zs__assert_fail(#cond, __FILE__, __LINE__);                \
    } while (0)

_Noreturn void zs__assert_fail(const char *expr, const char *file, int line);

#endif
