/* Reading a number written as text, all of it or not at all. atoi, atoll and
 * atof stop at the first character they do not understand and return 0 for
 * text they cannot read, so "7.5e9" became 7 parameters and "1e-400" a weight
 * decay of 0 without a word. Everything that turns text into a number (the
 * configuration literals of config_literal.c, the command-line options of the
 * tools and benchmarks) goes through these two readers, which refuse empty
 * text, trailing characters and values that do not fit, and say which. */
#ifndef ZS_CORE_NUMBER_H
#define ZS_CORE_NUMBER_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

/* Why text is not the number asked for. */
typedef enum zs__number_fault {
    ZS__NUMBER_OK = 0,
    ZS__NUMBER_EMPTY,     /* no characters at all */
    ZS__NUMBER_SYNTAX,    /* not a number, or characters after it */
    ZS__NUMBER_TOO_LARGE, /* above the maximum (floats: beyond ±DBL_MAX, read as inf) */
    ZS__NUMBER_TOO_SMALL, /* below the minimum (floats: nonzero, but smaller in magnitude
                             than DBL_MIN, read as 0 or as a subnormal keeping a few digits) */
    ZS__NUMBER_NOT_WHOLE, /* an integer was asked for and the value has a fraction */
} zs__number_fault;

/* The integer written as the whole of text[0, length): an optional sign, then
 * decimal digits, or 0x and hexadecimal digits. It must lie in [min, max];
 * values past 64 bits are TOO_LARGE or TOO_SMALL by their sign. *out is set
 * only on ZS__NUMBER_OK. */
zs__number_fault zs__number_integer(const char *text, size_t length, int64_t min, int64_t max,
                                    int64_t *out);

/* The double written as the whole of text[0, length) in strtod's decimal
 * syntax (no hexadecimal floats, inf or nan: none is a value a setting or an
 * option wants). Zero written any way (0, 0.0, 0e-999) is zero. *out is set
 * only on ZS__NUMBER_OK. */
zs__number_fault zs__number_double(const char *text, size_t length, double *out);

/* Command-line options of the tools and benchmarks. `option` names the option
 * in the message ("--unit-params"), which says what is wrong with `text` and
 * what is accepted; the status is ZS_ERR_INVALID_ARGUMENT. An integer may be
 * written in float notation when it is whole ("7.5e9" is 7500000000). */
zs_status zs__number_option_int64(const char *option, const char *text, int64_t min, int64_t max,
                                  int64_t *out);
/* The same for an int (min and max are ints), for the many options held in one. */
zs_status zs__number_option_int(const char *option, const char *text, int min, int max, int *out);
zs_status zs__number_option_double(const char *option, const char *text, double min, double max,
                                   double *out);
/* A size in bytes: a number (integer or float notation) and an optional unit,
 * with or without a blank between: B; K, M, G, T and KiB, MiB, GiB, TiB
 * (powers of 1024); KB, MB, GB, TB (powers of 1000); any case. "80GiB",
 * "1.5 TB", "64K" and "4096" are sizes; the result is rounded to whole
 * bytes and must lie in [min, max]. */
zs_status zs__number_option_size(const char *option, const char *text, int64_t min, int64_t max,
                                 int64_t *out);

#endif
