/* The literals of a configuration: numbers and strings, read once, by the
 * same code, whether they come from a file (config_scan.c, before libconfig
 * sees the text) or from a `key=value` override (config.c, which never gives
 * the text to libconfig). So a value an override sets is refused exactly when
 * the same value in a file is, with the same message.
 *
 * The lexical rules are libconfig 1.5's (scanner.l):
 *  - integers: [-+]?[0-9]+ or 0x[0-9A-Fa-f]+, with L or LL for 64 bits;
 *    libconfig converts them with atoi/strtoul into an int (so 2147483648
 *    wraps) and with atoll/strtoull for L (which saturate or wrap);
 *  - floats: digits with a '.' or an exponent; libconfig converts them with
 *    atof, which reads 1e-400 as 0 and 1e400 as inf;
 *  - strings: "..." with the escapes \n \r \t \f \\ \" and \xHH; a
 *    backslash before anything else stands for itself; \x00 is dropped
 *    without a word ("a\x00b" reads "ab"). */
#ifndef ZS_CORE_CONFIG_LITERAL_H
#define ZS_CORE_CONFIG_LITERAL_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

/* A number literal's value, typed as libconfig types it. */
typedef struct zs__config_number {
    int type; /* CONFIG_TYPE_INT, CONFIG_TYPE_INT64 or CONFIG_TYPE_FLOAT */
    int64_t integer;
    double real;
} zs__config_number;

/* The length of the number literal at the start of text[0, length) as
 * libconfig's scanner takes it (sign, digits, fraction, exponent, L suffix),
 * or 0 when the text does not start with a number. */
size_t zs__config_number_extent(const char *text, size_t length);

/* Where a literal came from, which decides one rule and the wording: in a
 * file an integer without L must fit in 32 bits (libconfig would wrap it);
 * an override has no such limit, since its value never passes libconfig's
 * scanner. */
typedef enum zs__config_origin {
    ZS__CONFIG_FROM_FILE,
    ZS__CONFIG_FROM_OVERRIDE,
} zs__config_origin;

/* Reads the number literal text[0, length) (as measured by
 * zs__config_number_extent) into *out. Refuses integers that do not fit
 * (see zs__config_origin) and floats that libconfig would read as 0 or inf
 * (nonzero but below DBL_MIN, or beyond DBL_MAX): ZS_ERR_CONFIG with a
 * message that starts with `where` ("file:line: " or "") and names `key`
 * (the dotted key, or "" when it is not known) and what to write instead. */
zs_status zs__config_number_read(const char *text, size_t length, zs__config_origin origin,
                                 const char *where, const char *key, zs__config_number *out);

/* Reads the string literal at text[0] (which must be '"') up to its closing
 * quote; *extent is its length in text, both quotes included. When `out` is
 * not NULL (room for at least `length` bytes), it receives the bytes
 * libconfig makes of the literal, NUL-terminated, and *out_length their
 * count. Refuses \x00 and a string that is never closed, with messages as
 * zs__config_number_read's. */
zs_status zs__config_string_read(const char *text, size_t length, const char *where,
                                 const char *key, size_t *extent, char *out, size_t *out_length);

#endif
