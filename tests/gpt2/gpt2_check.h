/* Assertions for the GPT-2 model tests, which link no zeroshard (the model
 * library does not): each failure prints file:line, the expression and both
 * sides, and makes the test exit nonzero through gpt2_check_finish. */
#ifndef GPT2_CHECK_H
#define GPT2_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int gpt2_check_failures = 0;
static int gpt2_check_count = 0;

#define CHECK_MSG(cond, ...)                                                                \
    do {                                                                                    \
        gpt2_check_count++;                                                                 \
        if (!(cond)) {                                                                      \
            gpt2_check_failures++;                                                          \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);        \
            fprintf(stderr, __VA_ARGS__);                                                   \
            fputc('\n', stderr);                                                            \
        }                                                                                   \
    } while (0)

#define CHECK(cond) CHECK_MSG(cond, "(no details)")

/* For setup steps that later checks depend on: stop the test. */
#define REQUIRE(cond)                                                                       \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "%s:%d: required: %s; stopping\n", __FILE__, __LINE__, #cond);  \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

static int gpt2_check_finish(const char *name) {
    if (gpt2_check_failures > 0) {
        fprintf(stderr, "%s: FAILED %d of %d checks\n", name, gpt2_check_failures,
                gpt2_check_count);
        return 1;
    }
    printf("%s: all %d checks passed\n", name, gpt2_check_count);
    return 0;
}

#endif /* GPT2_CHECK_H */
