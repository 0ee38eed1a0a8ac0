/* Configuration literals (see config_literal.h); the conversion of the digits
 * themselves is core/number.c's, shared with the tools' options. */
#include "core/config_literal.h"

#include <ctype.h>
#include <libconfig.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/number.h"

/* Literals shown in messages are cut to this many characters. */
#define ZS_LITERAL_SHOWN 64

static int is_digit(char c) { return isdigit((unsigned char)c) != 0; }
static int is_hex(char c) { return isxdigit((unsigned char)c) != 0; }

size_t zs__config_number_extent(const char *text, size_t length) {
    if (length == 0) return 0;
    char c = text[0], next = length > 1 ? text[1] : '\0';
    int starts = is_digit(c) || ((c == '-' || c == '+') && (is_digit(next) || next == '.')) ||
                 (c == '.' && is_digit(next));
    if (!starts) return 0;
    size_t p = (c == '-' || c == '+') ? 1 : 0;
    if (p + 2 < length && text[p] == '0' && (text[p + 1] == 'x' || text[p + 1] == 'X') &&
        is_hex(text[p + 2])) {
        p += 2;
        while (p < length && is_hex(text[p])) p++;
    } else {
        while (p < length && is_digit(text[p])) p++;
        int is_float = 0;
        if (p < length && text[p] == '.') {
            is_float = 1;
            p++;
            while (p < length && is_digit(text[p])) p++;
        }
        if (p < length && (text[p] == 'e' || text[p] == 'E')) {
            size_t q = p + 1;
            if (q < length && (text[q] == '+' || text[q] == '-')) q++;
            if (q < length && is_digit(text[q])) {
                is_float = 1;
                p = q;
                while (p < length && is_digit(text[p])) p++;
            }
        }
        if (is_float) return p;
    }
    if (p < length && text[p] == 'L') {
        p++;
        if (p < length && text[p] == 'L') p++;
    }
    return p;
}

/* "key = " when the key is known, else "<kind> literal " (the text of the
 * message then reads "optimizer.lr = 1e400 is ..." or "float literal 1e400
 * is ..."). */
static void subject(const char *key, const char *kind, char *out, size_t capacity) {
    if (key && key[0]) snprintf(out, capacity, "%s =", key);
    else snprintf(out, capacity, "%s literal", kind);
}

static zs_status read_float(const char *text, size_t length, const char *where, const char *key,
                            zs__config_number *out) {
    char who[300];
    subject(key, "float", who, sizeof who);
    int shown = length > ZS_LITERAL_SHOWN ? ZS_LITERAL_SHOWN : (int)length;
    double value = 0;
    switch (zs__number_double(text, length, &value)) {
    case ZS__NUMBER_OK:
        out->type = CONFIG_TYPE_FLOAT;
        out->real = value;
        return ZS_OK;
    case ZS__NUMBER_TOO_LARGE:
        return zs__fail(ZS_ERR_CONFIG,
                        "%s%s %.*s is too large for a double (the largest is "
                        "1.7976931348623157e308); it would silently be read as %sinf: write a "
                        "finite value",
                        where, who, shown, text, text[0] == '-' ? "-" : "");
    case ZS__NUMBER_TOO_SMALL:
        /* Results below DBL_MIN but above zero (subnormals) are refused too:
         * they keep only a few significant digits of what was written, and
         * no setting has a use for them. A zero turns off clipping or
         * weight decay and makes a static loss scale dynamic. */
        return zs__fail(ZS_ERR_CONFIG,
                        "%s%s %.*s is too small for a double (the smallest normal magnitude is "
                        "2.2250738585072014e-308); it would silently be read as 0 or close to "
                        "it, which can turn a setting off: write 0 if you mean zero",
                        where, who, shown, text);
    default:
        return zs__fail(ZS_ERR_CONFIG,
                        "%s%s %.*s is not a number (a float is written like 0.5, 3e-4 or "
                        "-1.25e2)",
                        where, who, shown, text);
    }
}

zs_status zs__config_number_read(const char *text, size_t length, zs__config_origin origin,
                                 const char *where, const char *key, zs__config_number *out) {
    memset(out, 0, sizeof *out);
    size_t sign = length > 0 && (text[0] == '-' || text[0] == '+');
    int hex = length > sign + 1 && text[sign] == '0' && (text[sign + 1] == 'x' || text[sign + 1] == 'X');
    size_t digits_end = length;
    int is_64 = 0;
    if (digits_end > 0 && text[digits_end - 1] == 'L') {
        is_64 = 1;
        digits_end--;
        if (digits_end > 0 && text[digits_end - 1] == 'L') digits_end--;
    }
    /* libconfig's float rule needs a '.' or an exponent; a hex literal's
     * digits may hold an 'e', and an L suffix makes it an integer. */
    int is_float = !hex && !is_64 &&
                   (memchr(text, '.', length) || memchr(text, 'e', length) ||
                    memchr(text, 'E', length));
    if (is_float) return read_float(text, length, where, key, out);

    char who[300];
    subject(key, "integer", who, sizeof who);
    int shown = length > ZS_LITERAL_SHOWN ? ZS_LITERAL_SHOWN : (int)length;
    /* Hex literals are read as unsigned and then stored into a signed type,
     * so only the non-negative half of the type is safe for them; a negative
     * decimal reaches one further. */
    int64_t min64 = hex ? -INT64_MAX : INT64_MIN;
    int64_t min32 = hex ? -(int64_t)INT32_MAX : (int64_t)INT32_MIN;
    int64_t value = 0;
    zs__number_fault fits64 = zs__number_integer(text, digits_end, min64, INT64_MAX, &value);
    int fits32 = fits64 == ZS__NUMBER_OK && value >= min32 && value <= INT32_MAX;
    int from_file = origin == ZS__CONFIG_FROM_FILE;
    if (fits64 == ZS__NUMBER_SYNTAX || fits64 == ZS__NUMBER_EMPTY)
        return zs__fail(ZS_ERR_CONFIG,
                        "%s%s %.*s is not a number (an integer is written like 42, -7, 0x1F or "
                        "4294967296L)",
                        where, who, shown, text);
    if (fits64 != ZS__NUMBER_OK)
        return zs__fail(ZS_ERR_CONFIG,
                        "%s%s %.*s does not fit in 64 bits (it would silently saturate or wrap); "
                        "it must be from %lld to %lld",
                        where, who, shown, text, (long long)min64, (long long)INT64_MAX);
    if (!fits32 && !is_64 && from_file)
        return zs__fail(ZS_ERR_CONFIG,
                        "%s%s %.*s does not fit in 32 bits (libconfig would silently wrap it); "
                        "write it as %.*sL",
                        where, who, shown, text, shown, text);
    out->type = fits32 && !is_64 ? CONFIG_TYPE_INT : CONFIG_TYPE_INT64;
    out->integer = value;
    return ZS_OK;
}

zs_status zs__config_string_read(const char *text, size_t length, const char *where,
                                 const char *key, size_t *extent, char *out, size_t *out_length) {
    char who[300];
    if (key && key[0]) snprintf(who, sizeof who, "%s = ", key);
    else who[0] = '\0';
    size_t p = 1, used = 0; /* text[0] is the opening quote */
    while (p < length && text[p] != '"') {
        char c = text[p++];
        if (c == '\\' && p < length) {
            char e = text[p];
            if (e == 'x' && p + 2 < length && is_hex(text[p + 1]) && is_hex(text[p + 2])) {
                char hex[3] = {text[p + 1], text[p + 2], '\0'};
                c = (char)strtol(hex, NULL, 16);
                if (c == '\0')
                    return zs__fail(ZS_ERR_CONFIG,
                                    "%s%sa string holds the escape \\x00, a NUL byte, which a "
                                    "string cannot hold (libconfig would silently drop it, so "
                                    "\"a\\x00b\" would read \"ab\"): remove it",
                                    where, who);
                p += 3;
            } else if (e == 'n' || e == 'r' || e == 't' || e == 'f' || e == '\\' || e == '"') {
                c = e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e == 'f' ? '\f' : e;
                p++;
            }
            /* else: a backslash before anything else is itself */
        }
        if (out) out[used] = c;
        used++;
    }
    if (p >= length)
        return zs__fail(ZS_ERR_CONFIG,
                        "%s%sa string is never closed (the text ends before its closing '\"'); "
                        "add the '\"', and write \\\" for a quote inside it",
                        where, who);
    if (out) out[used] = '\0';
    if (out_length) *out_length = used;
    *extent = p + 1;
    return ZS_OK;
}
