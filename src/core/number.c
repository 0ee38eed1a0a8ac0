/* Whole-text number readers (see number.h). The syntax is checked here, by
 * hand, before strtod sees the text: strtod also accepts leading blanks,
 * "inf", "nan" and hexadecimal floats, none of which a setting or an option
 * should silently take. */
#include "core/number.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/error.h"

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

zs__number_fault zs__number_integer(const char *text, size_t length, int64_t min, int64_t max,
                                    int64_t *out) {
    if (length == 0) return ZS__NUMBER_EMPTY;
    size_t p = 0;
    int negative = text[0] == '-';
    if (text[0] == '-' || text[0] == '+') p++;
    int base = 10;
    if (length - p > 2 && text[p] == '0' && (text[p + 1] == 'x' || text[p + 1] == 'X')) {
        base = 16;
        p += 2;
    }
    if (p == length) return ZS__NUMBER_SYNTAX;
    /* The magnitude, in 64 unsigned bits; anything past them is simply "too
     * big" for every range a caller can ask for. */
    uint64_t magnitude = 0;
    int overflow = 0;
    for (; p < length; p++) {
        int d = base == 16 ? hex_value(text[p]) : is_digit(text[p]) ? text[p] - '0' : -1;
        if (d < 0) return ZS__NUMBER_SYNTAX;
        if (magnitude > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) overflow = 1;
        else magnitude = magnitude * (uint64_t)base + (uint64_t)d;
    }
    if (negative) {
        /* -min as an unsigned magnitude, without overflowing for INT64_MIN. */
        uint64_t limit = min < 0 ? (uint64_t)(-(min + 1)) + 1u : 0;
        if (overflow || magnitude > limit) return ZS__NUMBER_TOO_SMALL;
        int64_t value = magnitude == 0 ? 0 : -(int64_t)(magnitude - 1u) - 1;
        if (value > max) return ZS__NUMBER_TOO_LARGE; /* a range entirely below zero */
        *out = value;
        return ZS__NUMBER_OK;
    }
    if (overflow || max < 0 || magnitude > (uint64_t)max) return ZS__NUMBER_TOO_LARGE;
    if ((int64_t)magnitude < min) return ZS__NUMBER_TOO_SMALL;
    *out = (int64_t)magnitude;
    return ZS__NUMBER_OK;
}

zs__number_fault zs__number_double(const char *text, size_t length, double *out) {
    if (length == 0) return ZS__NUMBER_EMPTY;
    /* [sign] (digits [. digits] | . digits) [(e|E) [sign] digits] */
    size_t p = 0, mantissa_digits = 0;
    int nonzero = 0; /* a nonzero digit before the exponent */
    if (text[p] == '-' || text[p] == '+') p++;
    for (; p < length && is_digit(text[p]); p++, mantissa_digits++) nonzero |= text[p] != '0';
    if (p < length && text[p] == '.')
        for (p++; p < length && is_digit(text[p]); p++, mantissa_digits++) nonzero |= text[p] != '0';
    if (mantissa_digits == 0) return ZS__NUMBER_SYNTAX;
    if (p < length && (text[p] == 'e' || text[p] == 'E')) {
        p++;
        if (p < length && (text[p] == '-' || text[p] == '+')) p++;
        size_t exponent_begin = p;
        while (p < length && is_digit(text[p])) p++;
        if (p == exponent_begin) return ZS__NUMBER_SYNTAX;
    }
    if (p != length) return ZS__NUMBER_SYNTAX;

    char small[128];
    char *heap = length < sizeof small ? NULL : zs__malloc(length + 1); /* absurdly long text only */
    char *copy = heap ? heap : small;
    if (length >= sizeof small && !heap) {
        /* Cannot happen for anything typed; treat it as unreadable rather
         * than reading a prefix. */
        return ZS__NUMBER_SYNTAX;
    }
    memcpy(copy, text, length);
    copy[length] = '\0';
    double value = strtod(copy, NULL);
    free(heap);
    if (value > DBL_MAX || value < -DBL_MAX) return ZS__NUMBER_TOO_LARGE;
    if (nonzero && value < DBL_MIN && value > -DBL_MIN) return ZS__NUMBER_TOO_SMALL;
    *out = value;
    return ZS__NUMBER_OK;
}

/* `--unit-params "7.5e9x" is not ...`: the option, the text and what the
 * reader found wrong with it. */
static zs_status option_failure(const char *option, const char *text, zs__number_fault fault,
                                const char *wanted, const char *low, const char *high) {
    switch (fault) {
    case ZS__NUMBER_EMPTY:
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s \"\" is empty; give %s", option,
                        wanted);
    case ZS__NUMBER_SYNTAX:
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s \"%s\" is not %s (nothing may come before or after it)",
                        option, text, wanted);
    case ZS__NUMBER_NOT_WHOLE:
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s \"%s\" is not a whole number; give %s",
                        option, text, wanted);
    case ZS__NUMBER_TOO_LARGE:
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s \"%s\" is too large; the largest accepted is %s",
                        option, text, high);
    case ZS__NUMBER_TOO_SMALL:
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s \"%s\" is too small; the smallest accepted is %s", option, text, low);
    case ZS__NUMBER_OK: break;
    }
    return ZS_OK;
}

zs_status zs__number_option_int64(const char *option, const char *text, int64_t min, int64_t max,
                                  int64_t *out) {
    char low[32], high[32];
    snprintf(low, sizeof low, "%" PRId64, min);
    snprintf(high, sizeof high, "%" PRId64, max);
    size_t length = text ? strlen(text) : 0;
    zs__number_fault fault = zs__number_integer(text, length, min, max, out);
    if (fault == ZS__NUMBER_SYNTAX) {
        /* Counts are often written as 7.5e9: accept float notation when the
         * value is whole and inside the range, exactly. */
        double value = 0;
        fault = zs__number_double(text, length, &value);
        if (fault == ZS__NUMBER_TOO_SMALL) fault = ZS__NUMBER_NOT_WHOLE; /* 1e-400 */
        if (fault == ZS__NUMBER_OK) {
            /* 2^63 is the first double past INT64_MAX; -2^63 is INT64_MIN. */
            if (value != floor(value)) fault = ZS__NUMBER_NOT_WHOLE;
            else if (value >= 9223372036854775808.0) fault = ZS__NUMBER_TOO_LARGE;
            else if (value < -9223372036854775808.0) fault = ZS__NUMBER_TOO_SMALL;
            else if ((int64_t)value > max) fault = ZS__NUMBER_TOO_LARGE;
            else if ((int64_t)value < min) fault = ZS__NUMBER_TOO_SMALL;
            else *out = (int64_t)value;
        }
    }
    return option_failure(option, text ? text : "", fault, "an integer", low, high);
}

zs_status zs__number_option_int(const char *option, const char *text, int min, int max, int *out) {
    int64_t value = 0;
    ZS_CHECK(zs__number_option_int64(option, text, min, max, &value));
    *out = (int)value;
    return ZS_OK;
}

zs_status zs__number_option_double(const char *option, const char *text, double min, double max,
                                   double *out) {
    char low[32], high[32];
    snprintf(low, sizeof low, "%g", min);
    snprintf(high, sizeof high, "%g", max);
    double value = 0;
    zs__number_fault fault = zs__number_double(text, text ? strlen(text) : 0, &value);
    if (fault == ZS__NUMBER_TOO_SMALL)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s \"%s\" is too small for a double (it would be read as 0); write 0 if "
                        "you mean zero",
                        option, text);
    if (fault == ZS__NUMBER_OK && value > max) fault = ZS__NUMBER_TOO_LARGE;
    if (fault == ZS__NUMBER_OK && value < min) fault = ZS__NUMBER_TOO_SMALL;
    if (fault == ZS__NUMBER_OK) *out = value;
    return option_failure(option, text ? text : "", fault, "a number", low, high);
}

zs_status zs__number_option_size(const char *option, const char *text, int64_t min, int64_t max,
                                 int64_t *out) {
    static const struct {
        const char *suffix;
        double factor;
    } units[] = {{"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
                 {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
                 {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0},
                 {"T", 1099511627776.0}, {"B", 1.0}};
    size_t length = text ? strlen(text) : 0;
    double factor = 1.0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        size_t n = strlen(units[i].suffix);
        if (length > n && strcasecmp(text + length - n, units[i].suffix) == 0) {
            factor = units[i].factor;
            length -= n;
            while (length > 0 && text[length - 1] == ' ') length--;
            break;
        }
    }
    char low[32], high[32];
    snprintf(low, sizeof low, "%" PRId64 " bytes", min);
    snprintf(high, sizeof high, "%" PRId64 " bytes", max);
    static const char wanted[] =
        "a size such as 4096, 64K, 1.5GiB or 80GB (units B, K/KiB, M/MiB, G/GiB, T/TiB in "
        "powers of 1024, KB, MB, GB, TB in powers of 1000)";
    /* Plain integers keep all 64 bits; with a unit or a fraction the
     * double is rounded to whole bytes. */
    int64_t whole = 0;
    zs__number_fault fault = zs__number_integer(text, length, INT64_MIN, INT64_MAX, &whole);
    int exact = fault == ZS__NUMBER_OK && factor == 1.0;
    double bytes = (double)whole * factor;
    if (fault == ZS__NUMBER_SYNTAX) {
        double value = 0;
        fault = zs__number_double(text, length, &value);
        if (fault == ZS__NUMBER_TOO_SMALL) fault = ZS__NUMBER_NOT_WHOLE;
        bytes = value * factor;
    }
    if (fault == ZS__NUMBER_OK) {
        int64_t value = whole;
        if (!exact && bytes >= 9223372036854775808.0) fault = ZS__NUMBER_TOO_LARGE;
        else if (!exact && bytes < -9223372036854775808.0) fault = ZS__NUMBER_TOO_SMALL;
        else if (!exact) value = llround(bytes);
        if (fault == ZS__NUMBER_OK) {
            if (value > max) fault = ZS__NUMBER_TOO_LARGE;
            else if (value < min) fault = ZS__NUMBER_TOO_SMALL;
            else *out = value;
        }
    }
    return option_failure(option, text ? text : "", fault, wanted, low, high);
}
