/* The pre-parse pass (see config_scan.h). It follows the lexical rules of
 * libconfig 1.5 closely enough to find every literal outside strings and
 * comments: names ([A-Za-z*][-A-Za-z0-9_*]*) are skipped whole so digits
 * inside them are not mistaken for numbers, and `@include "file"` at the start
 * of a line is followed into the included file exactly where libconfig would
 * open it, so that every file libconfig opens has been checked here first.
 * The rules below were checked against libconfig 1.5 (Debian 12) by
 * experiment: an include is `^[ \t]*@include[ \t]+"name"` (a '\r' before it,
 * no blank, or anything else earlier on the line make it a syntax error, not
 * an include); in the name `\\` is a backslash, `\"` a quote, a backslash
 * before anything else is dropped, and newlines are kept; a name without its
 * closing quote opens nothing; every name, also an absolute one and also in
 * nested includes, is opened as include_dir + "/" + name. */
#include "core/config_scan.h"

#include <ctype.h>
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_source.h"
#include "core/error.h"

/* Groups, lists and arrays nested deeper than this are still scanned, but the
 * key shown in a message leaves out the levels below it. */
#define ZS_SCAN_MAX_NESTING 32
/* Key components longer than this are shortened in messages. */
#define ZS_SCAN_NAME_CAPACITY 64

/* One open group ('{'), list ('(') or array ('['). */
typedef struct scan_frame {
    char kind;
    char label[ZS_SCAN_NAME_CAPACITY]; /* "name" in a group, "[i]" in a list or array */
    long index;                        /* of the current element, in a list or array */
} scan_frame;

/* Everything one load's scan carries from file to file. */
typedef struct scan_state {
    const char *include_dir; /* NULL: names are opened as written */
    const char *top;         /* the file given to the load, for messages */
    size_t total_bytes;      /* read so far, each include counted every time */
    int includes;            /* @include directives followed so far */
    int depth;               /* of the file being scanned; 0 is the top file */
    /* The files being read, outermost first, to find include cycles. */
    zs__file_id open_files[ZS_CONFIG_MAX_INCLUDE_DEPTH + 1];
    int open_count;
    /* The nesting of values. libconfig's token stream runs on through
     * includes (a group opened in one file may be closed in another), so the
     * nesting is kept across files too. */
    scan_frame frames[ZS_SCAN_MAX_NESTING];
    int nesting;
    int hidden; /* levels deeper than frames[] */
    char setting[ZS_SCAN_NAME_CAPACITY]; /* the setting being defined at this level */
    char last_name[ZS_SCAN_NAME_CAPACITY];
    int name_pending; /* the last token was a name, so '=' or ':' makes it a setting */
} scan_state;

static zs_status scan(const char *text, size_t length, const char *name, scan_state *s);

static void copy_name(char *out, const char *text, size_t n) {
    if (n >= ZS_SCAN_NAME_CAPACITY) {
        memcpy(out, text, ZS_SCAN_NAME_CAPACITY - 4);
        memcpy(out + ZS_SCAN_NAME_CAPACITY - 4, "...", 4);
    } else {
        memcpy(out, text, n);
        out[n] = '\0';
    }
}

/* The dotted key of the value being scanned, e.g. "optimizer.lr" or
 * "app.sizes[2]"; "" when it is not known. */
static void current_key(const scan_state *s, char *out, size_t capacity) {
    size_t used = 0;
    out[0] = '\0';
#define ZS_APPEND(...)                                                              \
    do {                                                                            \
        int n_ = snprintf(out + used, capacity - used, __VA_ARGS__);                \
        if (n_ < 0 || (size_t)n_ >= capacity - used) return;                        \
        used += (size_t)n_;                                                         \
    } while (0)
    for (int i = 0; i < s->nesting; i++) {
        const char *label = s->frames[i].label;
        ZS_APPEND("%s%s", used > 0 && label[0] != '[' ? "." : "", label);
    }
    if (s->hidden > 0) {
        ZS_APPEND("%s...", used > 0 ? "." : "");
        return;
    }
    char kind = s->nesting > 0 ? s->frames[s->nesting - 1].kind : '{';
    if (kind == '{') {
        if (s->setting[0]) ZS_APPEND("%s%s", used > 0 ? "." : "", s->setting);
    } else {
        ZS_APPEND("[%ld]", s->frames[s->nesting - 1].index);
    }
#undef ZS_APPEND
}

static void open_value(scan_state *s, char kind) {
    if (s->hidden > 0 || s->nesting == ZS_SCAN_MAX_NESTING) {
        s->hidden++;
        return;
    }
    scan_frame *f = &s->frames[s->nesting];
    char parent = s->nesting > 0 ? s->frames[s->nesting - 1].kind : '{';
    if (parent == '{')
        snprintf(f->label, sizeof f->label, "%s", s->setting[0] ? s->setting : "?");
    else
        snprintf(f->label, sizeof f->label, "[%ld]", s->frames[s->nesting - 1].index);
    f->kind = kind;
    f->index = 0;
    s->nesting++;
    s->setting[0] = '\0';
}

static void close_value(scan_state *s) {
    if (s->hidden > 0) {
        s->hidden--;
        return;
    }
    if (s->nesting == 0) return; /* unbalanced: libconfig reports the syntax error */
    s->nesting--;
    /* Back in a group, the setting just closed is the current one again. */
    char parent = s->nesting > 0 ? s->frames[s->nesting - 1].kind : '{';
    if (parent == '{') snprintf(s->setting, sizeof s->setting, "%s", s->frames[s->nesting].label);
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


/* Checks the float literal text[begin, end). libconfig 1.5 converts floats
 * with atof, which returns 0 for a literal too small for a double (1e-400)
 * and inf for one too large (1e400), without a word. A zero turns off
 * clipping or weight decay and makes a static loss scale dynamic, so both are
 * errors here. Results below DBL_MIN but above zero (subnormals) are refused
 * too: they keep only a few significant digits of what was written, and no
 * setting has a use for them. */
static zs_status check_float(const char *name, int line, const scan_state *s, const char *text,
                             size_t begin, size_t end) {
    size_t n = end - begin;
    char small[128];
    char *heap = n < sizeof small ? NULL : malloc(n + 1); /* only for absurdly long literals */
    char *copy = heap ? heap : small;
    if (n >= sizeof small && !heap)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory scanning '%s'", name);
    memcpy(copy, text + begin, n);
    copy[n] = '\0';
    double value = strtod(copy, NULL);
    int nonzero = 0; /* a nonzero digit before the exponent */
    for (size_t i = 0; i < n && copy[i] != 'e' && copy[i] != 'E'; i++)
        if (copy[i] >= '1' && copy[i] <= '9') nonzero = 1;
    free(heap);
    int overflow = value > DBL_MAX || value < -DBL_MAX;
    int underflow = nonzero && value < DBL_MIN && value > -DBL_MIN;
    if (!overflow && !underflow) return ZS_OK;

    char key[256];
    current_key(s, key, sizeof key);
    char subject[300];
    if (key[0]) snprintf(subject, sizeof subject, "%s =", key);
    else snprintf(subject, sizeof subject, "float literal");
    int shown = (int)n;
    if (shown > 64) shown = 64;
    if (overflow)
        return zs__fail(ZS_ERR_CONFIG,
                        "%s:%d: %s %.*s is too large for a double (the largest is "
                        "1.7976931348623157e308); libconfig would silently read it as %sinf: "
                        "write a finite value",
                        name, line, subject, shown, text + begin, value < 0 ? "-" : "");
    return zs__fail(ZS_ERR_CONFIG,
                    "%s:%d: %s %.*s is too small for a double (the smallest normal magnitude is "
                    "2.2250738585072014e-308); libconfig would silently read it as %g, which "
                    "can turn a setting off: write 0 if you mean zero",
                    name, line, subject, shown, text + begin, value);
}

/* Reads the name of `@include "name"` the way libconfig 1.5 does; `*p` points
 * just after the opening quote and is left after the closing one, `*line`
 * counts the newlines inside. Returns 0 when the quote is never closed (then
 * libconfig opens nothing), 1 with the name in *out (malloc'd), -1 when out of
 * memory. */
static int include_name(const char *text, size_t length, size_t *p, int *line, char **out) {
    char *name = malloc(length - *p + 1);
    size_t n = 0;
    if (!name) return -1;
    while (*p < length && text[*p] != '"') {
        char c = text[(*p)++];
        if (c == '\n') (*line)++;
        if (c == '\\') {
            /* `\\` and `\"` are the only escapes; libconfig drops any other
             * backslash and keeps the character after it. */
            if (*p < length && (text[*p] == '\\' || text[*p] == '"')) c = text[(*p)++];
            else continue;
        }
        name[n++] = c;
    }
    if (*p >= length) {
        free(name);
        return 0;
    }
    (*p)++;
    name[n] = '\0';
    *out = name;
    return 1;
}

/* Follows an include: checks the file libconfig would open for it, then
 * scans that file. `name`:`line` is where the directive is. */
static zs_status follow_include(const char *included, const char *name, int line, scan_state *s) {
    if (included[0] == '\0')
        return zs__fail(ZS_ERR_CONFIG,
                        "%s:%d: @include \"\" names no file (libconfig would try to read the "
                        "directory '%s' as one); write the path of the file to include, "
                        "relative to '%s'",
                        name, line, s->include_dir ? s->include_dir : ".",
                        s->include_dir ? s->include_dir : ".");
    if (s->depth + 1 > ZS_CONFIG_MAX_INCLUDE_DEPTH)
        return zs__fail(ZS_ERR_CONFIG,
                        "%s:%d: @include \"%s\" is nested more than %d deep, libconfig's limit; "
                        "include the files from fewer levels",
                        name, line, included, ZS_CONFIG_MAX_INCLUDE_DEPTH);
    if (s->includes + 1 > ZS_CONFIG_MAX_INCLUDES)
        return zs__fail(ZS_ERR_CONFIG,
                        "%s:%d: @include \"%s\" is the include number %d of this configuration, "
                        "more than the limit of %d (repeats count each time); include fewer "
                        "files",
                        name, line, included, s->includes + 1, ZS_CONFIG_MAX_INCLUDES);
    s->includes++;
    /* libconfig 1.5 joins the include directory and the name as written. */
    const char *dir = s->include_dir;
    size_t dir_n = dir ? strlen(dir) : 0, n = strlen(included);
    char *path = malloc(dir_n + 1 + n + 1);
    if (!path) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory scanning '%s'", name);
    if (dir) snprintf(path, dir_n + 1 + n + 1, "%s/%s", dir, included);
    else memcpy(path, included, n + 1);

    char *text = NULL;
    size_t length = 0;
    zs__file_id id;
    zs_status status = zs__config_read_source(path, ZS_CONFIG_MAX_FILE_BYTES, &text, &length, &id);
    if (status == ZS_ERR_IO) {
        zs__fail_context(status,
                         "%s:%d: @include \"%s\" (included files are found relative to '%s', "
                         "the directory of '%s')",
                         name, line, included, dir ? dir : ".", s->top);
        goto done;
    }
    if (status != ZS_OK) {
        zs__fail_context(status, "%s:%d: @include \"%s\"", name, line, included);
        goto done;
    }
    for (int i = 0; i < s->open_count; i++) {
        if (s->open_files[i].device == id.device && s->open_files[i].inode == id.inode) {
            status = zs__fail(ZS_ERR_CONFIG,
                              "%s:%d: @include \"%s\" includes '%s', which is already being "
                              "read (an include cycle; libconfig would follow it until it "
                              "gives up): remove the cycle",
                              name, line, included, path);
            goto done;
        }
    }
    if (length > ZS_CONFIG_MAX_TOTAL_BYTES - s->total_bytes) {
        status = zs__fail(ZS_ERR_CONFIG,
                          "%s:%d: @include \"%s\": '%s' (%zu bytes) brings the configuration "
                          "and its includes past the limit of %zu bytes in all (each include "
                          "counts every time it is included); keep large data out of the "
                          "configuration",
                          name, line, included, path, length, (size_t)ZS_CONFIG_MAX_TOTAL_BYTES);
        goto done;
    }
    s->total_bytes += length;
    s->open_files[s->open_count++] = id;
    s->depth++;
    status = scan(text, length, path, s);
    s->depth--;
    s->open_count--;
done:
    free(text);
    free(path);
    return status;
}

/* Reports the first NUL byte of text with its line. libconfig 1.5 ends a
 * string at a NUL without a word ("a\0b" reads as "a"), and elsewhere a NUL
 * gives a bare syntax error; a text file has none. */
static zs_status check_nul(const char *text, size_t length, const char *name) {
    const char *nul = memchr(text, '\0', length);
    if (!nul) return ZS_OK;
    int line = 1;
    for (const char *c = text; c < nul; c++)
        if (*c == '\n') line++;
    return zs__fail(ZS_ERR_CONFIG,
                    "%s:%d: a NUL byte (at byte offset %zu); a configuration is text, and "
                    "libconfig would silently cut a string short at it: remove it (is this "
                    "the right file?)",
                    name, line, (size_t)(nul - text));
}

static zs_status scan(const char *text, size_t length, const char *name, scan_state *s) {
    ZS_CHECK(check_nul(text, length, name));
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
        if (c == ' ' || c == '\t') {
            p++;
            continue;
        }
        if (c == '\r') { /* blank, but libconfig sees no include after it */
            line_start = 0;
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
            s->name_pending = 0;
            p++;
            while (p < length && text[p] != '"') {
                if (text[p] == '\\' && p + 1 < length) p++;
                if (text[p] == '\n') line++;
                p++;
            }
            p++;
        } else if (c == '@' && at_line_start && strncmp(text + p, "@include", 8) == 0 &&
                   p + 8 < length && (text[p + 8] == ' ' || text[p + 8] == '\t')) {
            size_t q = p + 8;
            while (q < length && (text[q] == ' ' || text[q] == '\t')) q++;
            if (q >= length || text[q] != '"') {
                p++; /* not an include: libconfig reports a syntax error at the '@' */
                continue;
            }
            p = q + 1;
            int directive_line = line;
            char *included = NULL;
            int found = include_name(text, length, &p, &line, &included);
            if (found < 0) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory scanning '%s'", name);
            if (found == 0) continue; /* unterminated: libconfig opens nothing */
            /* A NUL cannot be in the name (check_nul ran), so strlen is its length. */
            zs_status status = follow_include(included, name, directive_line, s);
            free(included);
            ZS_CHECK(status);
        } else if (is_name_start(c)) {
            size_t begin = p;
            while (p < length && is_name_char(text[p])) p++;
            copy_name(s->last_name, text + begin, p - begin);
            s->name_pending = 1;
        } else if (isdigit((unsigned char)c) || ((c == '-' || c == '+') &&
                                                 (isdigit((unsigned char)next) || next == '.')) ||
                   (c == '.' && isdigit((unsigned char)next))) {
            s->name_pending = 0;
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
            if (is_float) {
                ZS_CHECK(check_float(name, line, s, text, begin, p));
                continue;
            }
            int is_64 = 0;
            if (p < length && text[p] == 'L') {
                is_64 = 1;
                p++;
                if (p < length && text[p] == 'L') p++;
            }
            ZS_CHECK(check_literal(name, line, text, begin, p, negative, digits, digits_end, 10,
                                   is_64));
        } else {
            if ((c == '=' || c == ':') && s->name_pending)
                snprintf(s->setting, sizeof s->setting, "%s", s->last_name);
            else if (c == '{' || c == '[' || c == '(')
                open_value(s, c);
            else if (c == '}' || c == ']' || c == ')')
                close_value(s);
            else if (c == ',' && s->hidden == 0 && s->nesting > 0 &&
                     s->frames[s->nesting - 1].kind != '{')
                s->frames[s->nesting - 1].index++;
            s->name_pending = 0;
            p++;
        }
    }
    return ZS_OK;
}

zs_status zs__config_scan_text(const char *text, size_t length, const char *name,
                               const char *include_dir, int depth) {
    scan_state *s = calloc(1, sizeof *s);
    if (!s) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory scanning '%s'", name);
    s->include_dir = include_dir;
    s->top = name;
    s->depth = depth;
    s->total_bytes = length;
    zs_status status = scan(text, length, name, s);
    free(s);
    return status;
}

zs_status zs__config_scan_file(const char *path, const char *include_dir, char **text,
                               size_t *length) {
    *text = NULL;
    *length = 0;
    char *content = NULL;
    size_t content_length = 0;
    zs__file_id id;
    ZS_CHECK(zs__config_read_source(path, ZS_CONFIG_MAX_FILE_BYTES, &content, &content_length, &id));
    scan_state *s = calloc(1, sizeof *s);
    if (!s) {
        free(content);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory scanning '%s'", path);
    }
    s->include_dir = include_dir;
    s->top = path;
    s->total_bytes = content_length;
    s->open_files[s->open_count++] = id;
    zs_status status = scan(content, content_length, path, s);
    free(s);
    if (status != ZS_OK) {
        free(content);
        return status;
    }
    *text = content;
    *length = content_length;
    return ZS_OK;
}
