/* Assertions for tests: each failure prints file:line, the expression and both
 * sides, counts as a failure, and makes the test exit nonzero. A test's main
 * ends with `return zt_finish("name");`. Under MPI every rank checks and
 * reports for itself; zt_finish's exit status is per rank, and mpirun fails
 * the job if any rank exits nonzero. */
#ifndef ZS_TEST_UTIL_H
#define ZS_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>

#include "zeroshard.h"

extern int zt_failures;
extern int zt_checks;
extern int zt_rank; /* set by tests that run under MPI; -1 otherwise */

void zt_fail_header(const char *file, int line);
int zt_finish(const char *test_name);

#define ZT_CHECK(cond)                                                              \
    do {                                                                            \
        zt_checks++;                                                                \
        if (!(cond)) {                                                              \
            zt_fail_header(__FILE__, __LINE__);                                     \
            fprintf(stderr, "  check failed: %s\n", #cond);                         \
        }                                                                           \
    } while (0)

#define ZT_CHECK_MSG(cond, ...)                                                     \
    do {                                                                            \
        zt_checks++;                                                                \
        if (!(cond)) {                                                              \
            zt_fail_header(__FILE__, __LINE__);                                     \
            fprintf(stderr, "  check failed: %s: ", #cond);                         \
            fprintf(stderr, __VA_ARGS__);                                           \
            fputc('\n', stderr);                                                    \
        }                                                                           \
    } while (0)

#define ZT_EQ_INT(a, b)                                                             \
    do {                                                                            \
        long long zt_a_ = (long long)(a), zt_b_ = (long long)(b);                   \
        zt_checks++;                                                                \
        if (zt_a_ != zt_b_) {                                                       \
            zt_fail_header(__FILE__, __LINE__);                                     \
            fprintf(stderr, "  expected %s == %s\n  left:  %lld\n  right: %lld\n",  \
                    #a, #b, zt_a_, zt_b_);                                          \
        }                                                                           \
    } while (0)

#define ZT_EQ_U64(a, b)                                                             \
    do {                                                                            \
        unsigned long long zt_a_ = (unsigned long long)(a);                         \
        unsigned long long zt_b_ = (unsigned long long)(b);                         \
        zt_checks++;                                                                \
        if (zt_a_ != zt_b_) {                                                       \
            zt_fail_header(__FILE__, __LINE__);                                     \
            fprintf(stderr, "  expected %s == %s\n  left:  %llu\n  right: %llu\n",  \
                    #a, #b, zt_a_, zt_b_);                                          \
        }                                                                           \
    } while (0)

/* Passes when the call returns ZS_OK; otherwise prints the status and message. */
#define ZT_OK(call)                                                                 \
    do {                                                                            \
        zs_status zt_s_ = (call);                                                   \
        zt_checks++;                                                                \
        if (zt_s_ != ZS_OK) {                                                       \
            zt_fail_header(__FILE__, __LINE__);                                     \
            fprintf(stderr, "  %s returned %s: %s\n", #call, zs_status_name(zt_s_), \
                    zs_last_error());                                               \
        }                                                                           \
    } while (0)

/* Passes when the call returns `status` and zs_last_error() contains `text`. */
#define ZT_FAILS_WITH(call, status, text)                                           \
    zt_fails_with_((call), (status), (text), #call, __FILE__, __LINE__)

void zt_fails_with_(zs_status got, zs_status expected, const char *text, const char *expr,
                    const char *file, int line);

/* Reads up to cap - 1 bytes of a small file into out, NUL-terminated; out is
 * "" when the file cannot be opened. */
void zt_read_text(const char *path, char *out, size_t cap);
/* Entries in dir besides . and .. (-1 when it cannot be opened). */
int zt_dir_entries(const char *dir);

/* Abort the test right away (after printing) when continuing makes no sense. */
#define ZT_REQUIRE(cond)                                                            \
    do {                                                                            \
        int zt_ok_ = (cond) ? 1 : 0; /* evaluated once: cond may have effects */     \
        ZT_CHECK(zt_ok_);                                                           \
        if (!zt_ok_) {                                                              \
            fprintf(stderr, "  (%s) failed; cannot continue\n", #cond);              \
            zt_finish("(aborted)");                                                 \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

#include <stdlib.h>

#endif
