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
 * closing quote opens nothing (here: is refused).
 *
 * Where the scan departs from libconfig 1.5 on purpose is in what it opens:
 * 1.5 opens every name, also an absolute one and also in nested includes, as
 * include_dir + "/" + name, so `@include "/etc/zs/base.cfg"` became
 * "<dir>//etc/zs/base.cfg". Here a relative name is found in include_dir (the
 * directory of the top file, as before, also for nested includes) and an
 * absolute name is itself, as libconfig 1.7 does. Since 1.5 has no hook to
 * open includes (1.7's config_set_include_func), the scan does not let
 * libconfig open anything: it writes out one text in which each directive
 * is replaced by the text of the file it names, and a line map that gives
 * each line of that text back its file and line for messages. */
#include "core/config_scan.h"

#include <ctype.h>
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/config_literal.h"
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
    /* The expanded text handed to libconfig, and where its lines came from. */
    char *out;
    size_t out_length, out_capacity;
    int out_line; /* the line of the expanded text being written, from 1 */
    zs__config_lines *lines;
} scan_state;

/* Appends text[0, n) to the expanded text. */
static zs_status emit(scan_state *s, const char *text, size_t n) {
    if (n + 1 > s->out_capacity - s->out_length) {
        size_t capacity = s->out_capacity ? s->out_capacity : 4096;
        while (n + 1 > capacity - s->out_length) capacity *= 2;
        char *grown = zs__realloc(s->out, capacity);
        if (!grown)
            return zs__fail(ZS_ERR_OUT_OF_MEMORY,
                            "out of memory expanding the includes of '%s' (%zu bytes)", s->top,
                            capacity);
        s->out = grown;
        s->out_capacity = capacity;
    }
    memcpy(s->out + s->out_length, text, n);
    s->out_length += n;
    s->out[s->out_length] = '\0';
    for (size_t i = 0; i < n; i++) s->out_line += text[i] == '\n';
    return ZS_OK;
}

/* Records that the expanded text, from its current line on, comes from
 * line `file_line` of the file lines->files[file]. */
static zs_status map_here(scan_state *s, size_t file, int file_line) {
    zs__config_lines *m = s->lines;
    if (m->span_count > 0 && m->spans[m->span_count - 1].line == s->out_line) {
        m->span_count--; /* nothing of the earlier span is left on this line */
    } else if (m->span_count == m->span_capacity) {
        size_t capacity = m->span_capacity ? 2 * m->span_capacity : 16;
        zs__config_span *grown = zs__realloc(m->spans, capacity * sizeof *grown);
        if (!grown) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory scanning '%s'", s->top);
        m->spans = grown;
        m->span_capacity = capacity;
    }
    m->spans[m->span_count++] = (zs__config_span){s->out_line, file, file_line};
    return ZS_OK;
}

/* Adds `path` to the files of the line map; its index is *index. */
static zs_status map_file(scan_state *s, const char *path, size_t *index) {
    zs__config_lines *m = s->lines;
    char **grown = zs__realloc(m->files, (m->file_count + 1) * sizeof *grown);
    if (!grown) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory scanning '%s'", s->top);
    m->files = grown;
    size_t n = strlen(path) + 1;
    char *copy = zs__malloc(n);
    if (!copy) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory scanning '%s'", s->top);
    memcpy(copy, path, n);
    m->files[m->file_count] = copy;
    *index = m->file_count++;
    return ZS_OK;
}

const char *zs__config_lines_find(const zs__config_lines *lines, int line, int *file_line) {
    if (!lines || lines->span_count == 0 || line < 1) return NULL;
    /* The last span that starts at or before `line`. */
    size_t lo = 0, hi = lines->span_count;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (lines->spans[mid].line <= line) lo = mid;
        else hi = mid;
    }
    const zs__config_span *span = &lines->spans[lo];
    if (span->line > line) return NULL;
    *file_line = span->file_line + (line - span->line);
    return lines->files[span->file];
}

void zs__config_lines_free(zs__config_lines *lines) {
    if (!lines) return;
    for (size_t i = 0; i < lines->file_count; i++) free(lines->files[i]);
    free(lines->files);
    free(lines->spans);
    memset(lines, 0, sizeof *lines);
}

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

/* Reads the name of `@include "name"` the way libconfig 1.5 does; `*p` points
 * just after the opening quote and is left after the closing one, `*line`
 * counts the newlines inside. Returns 0 when the quote is never closed (then
 * libconfig opens nothing), 1 with the name in *out (malloc'd), -1 when out of
 * memory. */
static int include_name(const char *text, size_t length, size_t *p, int *line, char **out) {
    char *name = zs__malloc(length - *p + 1);
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
    /* A relative name is found in the include directory, an absolute name
     * is itself (libconfig 1.5 would join the two: "<dir>//abs/name"). */
    const char *dir = included[0] == '/' ? NULL : s->include_dir;
    size_t dir_n = dir ? strlen(dir) : 0, n = strlen(included);
    char *path = zs__malloc(dir_n + 1 + n + 1);
    if (!path) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory scanning '%s'", name);
    if (dir) snprintf(path, dir_n + 1 + n + 1, "%s/%s", dir, included);
    else memcpy(path, included, n + 1);

    char *text = NULL;
    size_t length = 0;
    zs__file_id id;
    zs_status status = zs__config_read_source(path, ZS_CONFIG_MAX_FILE_BYTES, &text, &length, &id);
    if (status == ZS_ERR_IO) {
        if (included[0] == '/')
            zs__fail_context(status, "%s:%d: @include \"%s\" (an absolute path)", name, line,
                             included);
        else
            zs__fail_context(status,
                             "%s:%d: @include \"%s\" (included files are found relative to "
                             "'%s', the directory of '%s')",
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
    size_t file_index = 0;
    ZS_CHECK(map_file(s, name, &file_index));
    ZS_CHECK(map_here(s, file_index, 1));
    size_t copied = 0;   /* text[0, copied) is in the expanded text */
    size_t extent = 0;   /* of the literal at p */
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
            int comment_line = line;
            p += 2;
            while (p < length && !(text[p] == '*' && p + 1 < length && text[p + 1] == '/')) {
                if (text[p] == '\n') line++;
                p++;
            }
            /* libconfig 1.5 would carry an open comment from an included
             * file on into the file that includes it; the scan could then
             * follow an @include that libconfig skips, or the reverse. */
            if (p >= length && s->depth > 0)
                return zs__fail(ZS_ERR_CONFIG,
                                "%s:%d: a /* comment is never closed (the file ends first); an "
                                "included file must end outside comments: close it with */",
                                name, comment_line);
            p += 2;
        } else if (c == '"') {
            s->name_pending = 0;
            char where[512], key[256];
            snprintf(where, sizeof where, "%s:%d: ", name, line);
            current_key(s, key, sizeof key);
            ZS_CHECK(zs__config_string_read(text + p, length - p, where, key, &extent, NULL, NULL));
            for (size_t i = p; i < p + extent; i++) line += text[i] == '\n';
            p += extent;
        } else if (c == '@' && at_line_start && strncmp(text + p, "@include", 8) == 0 &&
                   p + 8 < length && (text[p + 8] == ' ' || text[p + 8] == '\t')) {
            size_t directive_begin = p, q = p + 8;
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
            if (found == 0)
                return zs__fail(ZS_ERR_CONFIG,
                                "%s:%d: the name after @include is never closed (the file ends "
                                "before its closing '\"'); write @include \"file.cfg\"",
                                name, directive_line);
            /* The directive is replaced by the included text, and what
             * follows it on its line comes after "\n/ * * /" (without the
             * blanks): the newline ends a `#` comment or a token the
             * included file ends with, as the end of the file did for
             * libconfig, and the empty comment keeps the rest of the line
             * from starting a line (where it could start an include that
             * the scan did not follow). */
            ZS_CHECK(emit(s, text + copied, directive_begin - copied));
            /* A NUL cannot be in the name (check_nul ran), so strlen is its length. */
            zs_status status = follow_include(included, name, directive_line, s);
            free(included);
            ZS_CHECK(status);
            ZS_CHECK(emit(s, "\n/**/", 5));
            ZS_CHECK(map_here(s, file_index, line));
            copied = p;
        } else if (is_name_start(c)) {
            size_t begin = p;
            while (p < length && is_name_char(text[p])) p++;
            copy_name(s->last_name, text + begin, p - begin);
            s->name_pending = 1;
        } else if ((extent = zs__config_number_extent(text + p, length - p)) > 0) {
            s->name_pending = 0;
            char where[512], key[256];
            snprintf(where, sizeof where, "%s:%d: ", name, line);
            current_key(s, key, sizeof key);
            zs__config_number ignored;
            ZS_CHECK(zs__config_number_read(text + p, extent, ZS__CONFIG_FROM_FILE, where, key,
                                            &ignored));
            p += extent;
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
    return emit(s, text + copied, length - copied);
}

/* Runs the scan from the top file's text and, on success, hands over the
 * expanded text and the line map. */
static zs_status scan_top(scan_state *s, const char *text, size_t length, const char *name,
                          char **expanded, size_t *expanded_length, zs__config_lines *lines) {
    memset(lines, 0, sizeof *lines);
    s->lines = lines;
    s->out_line = 1;
    s->top = name;
    s->total_bytes = length;
    zs_status status = scan(text, length, name, s);
    if (status == ZS_OK && !s->out) status = emit(s, "", 0); /* an empty file */
    if (status != ZS_OK) {
        free(s->out);
        zs__config_lines_free(lines);
        return status;
    }
    *expanded = s->out;
    *expanded_length = s->out_length;
    return ZS_OK;
}

zs_status zs__config_scan_text(const char *text, size_t length, const char *name,
                               const char *include_dir, int depth) {
    scan_state *s = zs__calloc(1, sizeof *s);
    if (!s) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory scanning '%s'", name);
    s->include_dir = include_dir;
    s->depth = depth;
    char *expanded = NULL;
    size_t expanded_length = 0;
    zs__config_lines lines;
    zs_status status = scan_top(s, text, length, name, &expanded, &expanded_length, &lines);
    if (status == ZS_OK) {
        free(expanded);
        zs__config_lines_free(&lines);
    }
    free(s);
    return status;
}

zs_status zs__config_scan_file(const char *path, const char *include_dir, char **text,
                               size_t *length, zs__config_lines *lines) {
    *text = NULL;
    *length = 0;
    memset(lines, 0, sizeof *lines);
    char *content = NULL;
    size_t content_length = 0;
    zs__file_id id;
    ZS_CHECK(zs__config_read_source(path, ZS_CONFIG_MAX_FILE_BYTES, &content, &content_length, &id));
    scan_state *s = zs__calloc(1, sizeof *s);
    if (!s) {
        free(content);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory scanning '%s'", path);
    }
    s->include_dir = include_dir;
    s->open_files[s->open_count++] = id;
    zs_status status = scan_top(s, content, content_length, path, text, length, lines);
    free(s);
    free(content);
    return status;
}
