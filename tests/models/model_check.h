/* Assertions for the model tests of every family, which link no zeroshard
 * (the model libraries do not): each failure prints file:line, the expression and both
 * sides, and makes the test exit nonzero through model_check_finish. */
#ifndef MODEL_CHECK_H
#define MODEL_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int model_check_failures = 0;
static int model_check_count = 0;

#define CHECK_MSG(cond, ...)                                                                \
    do {                                                                                    \
        model_check_count++;                                                                 \
        if (!(cond)) {                                                                      \
            model_check_failures++;                                                          \
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

static int model_check_finish(const char *name) {
    if (model_check_failures > 0) {
        fprintf(stderr, "%s: FAILED %d of %d checks\n", name, model_check_failures,
                model_check_count);
        return 1;
    }
    printf("%s: all %d checks passed\n", name, model_check_count);
    return 0;
}

#endif /* MODEL_CHECK_H */
