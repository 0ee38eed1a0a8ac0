/* "--name value" options of the C benchmarks, read from a table: every
 * number whole (core/number.h), an unknown option or a missing value an
 * error that names it. Header-only, like stats.h. */
#ifndef ZS_BENCH_OPTIONS_H
#define ZS_BENCH_OPTIONS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/number.h"

typedef enum { BENCH_OPT_TEXT, BENCH_OPT_INT, BENCH_OPT_SIZE } bench_opt_kind;

typedef struct {
    const char *name;    /* "--dir" */
    bench_opt_kind kind; /* TEXT: out is a const char **; INT, SIZE: an int64_t * */
    int64_t min, max;    /* numbers only */
    void *out;
} bench_option;

/* Returns 0, or prints "<program>: <what is wrong>" and returns 2 (the
 * benchmarks' usage exit status). */
static inline int bench_options_read(const char *program, int argc, char **argv,
                                     const bench_option *options, int count) {
    for (int i = 1; i < argc; i += 2) {
        const char *option = argv[i], *text = i + 1 < argc ? argv[i + 1] : NULL;
        const bench_option *o = NULL;
        for (int k = 0; k < count && !o; k++)
            if (strcmp(option, options[k].name) == 0) o = &options[k];
        zs_status st = ZS_OK;
        if (!o) st = zs__fail(ZS_ERR_INVALID_ARGUMENT, "unknown option %s", option);
        else if (!text) st = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s needs a value", option);
        else if (o->kind == BENCH_OPT_TEXT) *(const char **)o->out = text;
        else if (o->kind == BENCH_OPT_INT)
            st = zs__number_option_int64(option, text, o->min, o->max, (int64_t *)o->out);
        else st = zs__number_option_size(option, text, o->min, o->max, (int64_t *)o->out);
        if (st != ZS_OK) {
            fprintf(stderr, "%s: %s\n", program, zs_last_error());
            return 2;
        }
    }
    return 0;
}

#endif
