/* The integer-literal scanner (see config_scan.h). It follows the lexical rules
 * of libconfig 1.5 closely enough to find every integer literal outside
 * strings and comments: names ([A-Za-z*][-A-Za-z0-9_*]*) are skipped whole so
 * digits inside them are not mistaken for numbers, floats (with a '.' or an
 * exponent) are skipped, and `@include "file"` at the start of a line is
 * followed into the included file. */
#include "core/config_scan.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* libconfig 1.5 refuses to nest includes deeper than 10; the scan runs after a
 * successful parse, so this limit only guards against a file that changed in
 * between. */
#define ZS_SCAN_MAX_DEPTH 10

/* Reads a whole file into a NUL-terminated buffer the caller frees. */
static zs_status read_all(const char *path, char **out, size_t *length) {
    FILE *f = fopen(path, "rb");
    if (!f) return zs__fail(ZS_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    size_t capacity = 4096, used = 0;
    char *text = malloc(capacity);
    if (!text) {
        fclose(f);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory reading '%s'", path);
    }
    for (;;) {
        if (used + 1 >= capacity) {
            char *bigger = realloc(text, capacity * 2);
            if (!bigger) {
                free(text);
                fclose(f);
                return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory reading '%s'", path);
            }
            text = bigger;
            capacity *= 2;
        }
        size_t n = fread(text + used, 1, capacity - 1 - used, f);
        used += n;
        if (n == 0) break;
    }
    int failed = ferror(f);
    int saved_errno = errno;
    fclose(f);
    if (failed) {
        free(text);
        return zs__fail(ZS_ERR_IO, "cannot read '%s': %s", path, strerror(saved_errno));
    }
    text[used] = '\0';
    *out = text;
    *length = used;
    return ZS_OK;
}

zs_status zs__config_scan_file(const char *path, const char *include_dir) {
    char *text = NULL;
    size_t length = 0;
    ZS_CHECK(read_all(path, &text, &length));
    zs_status status = zs__config_scan_text(text, length, path, include_dir, 0);
    free(text);
    return status;
}

static int is_name_start(char c) { return isalpha((unsigned char)c) || c == '*'; }
static int is_name_char(char c) {
    return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '*';
}

/* Checks one integer literal text[begin, end): `negative` and the digits in
 * [digits, digits_end) in base 10 or 16, `is_64` when it carries the L suffix. */
static zs_status check_literal(const char *name, int line, const char *text, size_t begin,
                               size_t end, int negative, size_t digits, size_t digits_end,
                               int base, int is_64) {
    /* Accumulates the magnitude; anything past 2^64 is simply "too big". */
    uint64_t magnitude = 0;
    int overflow = 0;
    for (size_t i = digits; i < digits_end; i++) {
        int d = isdigit((unsigned char)text[i]) ? text[i] - '0'
                                                : tolower((unsigned char)text[i]) - 'a' + 10;
        if (magnitude > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) overflow = 1;
        else magnitude = magnitude * (uint64_t)base + (uint64_t)d;
    }
    /* Hex literals are read as unsigned and then stored into a signed int, so
     * only the non-negative half of the type is safe for them. */
    uint64_t limit;
    if (is_64)
        limit = (negative && base == 10) ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX;
    else
        limit = (negative && base == 10) ? (uint64_t)INT32_MAX + 1u : (uint64_t)INT32_MAX;
    if (!overflow && magnitude <= limit) return ZS_OK;

    int shown = (int)(end - begin);
    if (shown > 64) shown = 64; /* an absurd literal is still reported, just shortened */
    if (is_64)
        return zs__fail(ZS_ERR_CONFIG,
                        "%s:%d: integer literal %.*s does not fit in 64 bits (libconfig would "
                        "silently saturate or wrap it); the largest is 9223372036854775807L",
                        name, line, shown, text + begin);
    if (overflow || magnitude > (uint64_t)INT64_MAX + (negative ? 1u : 0u))
        return zs__fail(ZS_ERR_CONFIG,
                        "%s:%d: integer literal %.*s does not fit in 64 bits (libconfig would "
                        "silently wrap it); the largest is 9223372036854775807L",
                        name, line, shown, text + begin);
    return zs__fail(ZS_ERR_CONFIG,
                    "%s:%d: integer literal %.*s does not fit in 32 bits (libconfig would "
                    "silently wrap it); write it as %.*sL",
                    name, line, shown, text + begin, shown, text + begin);
}

/* Follows `@include "file"`; `p` points just after the opening quote. */
static zs_status scan_include(const char *text, size_t length, size_t *p, const char *name,
                              int line, const char *include_dir, int depth) {
    size_t start = *p;
    while (*p < length && text[*p] != '"' && text[*p] != '\n') (*p)++;
    size_t n = *p - start;
    if (*p < length && text[*p] == '"') (*p)++;
    if (depth + 1 > ZS_SCAN_MAX_DEPTH)
        return zs__fail(ZS_ERR_CONFIG, "%s:%d: @include nested more than %d deep", name, line,
                        ZS_SCAN_MAX_DEPTH);
    /* libconfig 1.5 joins the include directory and the name as written. */
    const char *dir = include_dir ? include_dir : "";
    size_t dir_n = strlen(dir);
    char *path = malloc(dir_n + 1 + n + 1);
    if (!path) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory scanning '%s'", name);
    if (include_dir) {
        memcpy(path, dir, dir_n);
        path[dir_n] = '/';
        memcpy(path + dir_n + 1, text + start, n);
        path[dir_n + 1 + n] = '\0';
    } else {
        memcpy(path, text + start, n);
        path[n] = '\0';
    }
    char *included = NULL;
    size_t included_length = 0;
    zs_status status = read_all(path, &included, &included_length);
    if (status == ZS_OK) {
        status = zs__config_scan_text(included, included_length, path, include_dir, depth + 1);
        free(included);
    } else {
        zs__fail_context(status, "%s:%d: @include", name, line);
    }
    free(path);
    return status;
}

zs_status zs__config_scan_text(const char *text, size_t length, const char *name,
                               const char *include_dir, int depth) {
    int line = 1;
    int line_start = 1; /* only spaces and tabs seen since the last newline */
    size_t p = 0;
    while (p < length) {
        char c = text[p];
        char next = p + 1 < length ? text[p + 1] : '\0';
        if (c == '\n') {
            line++;
            line_start = 1;
            p++;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r') {
            p++;
            continue;
        }
        int at_line_start = line_start;
        line_start = 0;
        if (c == '#' || (c == '/' && next == '/')) {
            while (p < length && text[p] != '\n') p++;
        } else if (c == '/' && next == '*') {
            p += 2;
            while (p < length && !(text[p] == '*' && p + 1 < length && text[p + 1] == '/')) {
                if (text[p] == '\n') line++;
                p++;
            }
            p += 2;
        } else if (c == '"') {
            p++;
            while (p < length && text[p] != '"') {
                if (text[p] == '\\' && p + 1 < length) p++;
                if (text[p] == '\n') line++;
                p++;
            }
            p++;
        } else if (c == '@' && at_line_start && strncmp(text + p, "@include", 8) == 0) {
            p += 8;
            while (p < length && (text[p] == ' ' || text[p] == '\t')) p++;
            if (p < length && text[p] == '"') {
                p++;
                ZS_CHECK(scan_include(text, length, &p, name, line, include_dir, depth));
            }
        } else if (is_name_start(c)) {
            while (p < length && is_name_char(text[p])) p++;
        } else if (isdigit((unsigned char)c) || ((c == '-' || c == '+') &&
                                                 (isdigit((unsigned char)next) || next == '.')) ||
                   (c == '.' && isdigit((unsigned char)next))) {
            size_t begin = p;
            int negative = c == '-';
            if (c == '-' || c == '+') p++;
            if (p + 2 < length && text[p] == '0' && (text[p + 1] == 'x' || text[p + 1] == 'X') &&
                isxdigit((unsigned char)text[p + 2])) {
                p += 2;
                size_t digits = p;
                while (p < length && isxdigit((unsigned char)text[p])) p++;
                size_t digits_end = p;
                int is_64 = 0;
                if (p < length && text[p] == 'L') {
                    is_64 = 1;
                    p++;
                    if (p < length && text[p] == 'L') p++;
                }
                ZS_CHECK(check_literal(name, line, text, begin, p, negative, digits, digits_end, 16,
                                       is_64));
                continue;
            }
            size_t digits = p;
            while (p < length && isdigit((unsigned char)text[p])) p++;
            size_t digits_end = p;
            int is_float = 0;
            if (p < length && text[p] == '.') {
                is_float = 1;
                p++;
                while (p < length && isdigit((unsigned char)text[p])) p++;
            }
            if (p < length && (text[p] == 'e' || text[p] == 'E')) {
                size_t q = p + 1;
                if (q < length && (text[q] == '+' || text[q] == '-')) q++;
                if (q < length && isdigit((unsigned char)text[q])) {
                    is_float = 1;
                    p = q;
                    while (p < length && isdigit((unsigned char)text[p])) p++;
                }
            }
            if (is_float) continue;
            int is_64 = 0;
            if (p < length && text[p] == 'L') {
                is_64 = 1;
                p++;
                if (p < length && text[p] == 'L') p++;
            }
            ZS_CHECK(check_literal(name, line, text, begin, p, negative, digits, digits_end, 10,
                                   is_64));
        } else {
            p++;
        }
    }
    return ZS_OK;
}
