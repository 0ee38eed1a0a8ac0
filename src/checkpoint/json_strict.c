/* Strict JSON lexing in front of json-c (json_strict.h). */
#include "checkpoint/json_strict.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>

#include <json-c/json.h>

#include "core/error.h"


/* Length of the well-formed UTF-8 sequence at s (RFC 3629: no overlong forms,
 * no surrogates, nothing above U+10FFFF), or 0 if it is not one. */
static size_t utf8_sequence_length(const unsigned char *s, size_t avail) {
    unsigned c = s[0];
    unsigned lo = 0x80, hi = 0xBF;
    size_t n;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (avail < n || s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k < n; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    return n;
}

int zs__json_utf8_valid(const char *text, size_t len) {
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        size_t n = utf8_sequence_length(s + i, len - i);
        if (n == 0) return 0;
        i += n;
    }
    return 1;
}

static int hex_value(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The four hex digits of a \u escape at s[0..3], or -1. */
static long hex4(const unsigned char *s, size_t avail) {
    if (avail < 4) return -1;
    long v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hex_value(s[k]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

typedef struct json_lexer {
    const unsigned char *s;
    size_t len;
    size_t i;
    const char *error; /* first problem found, a static string */
    int over_limit;    /* the error is the top-level member bound */
} json_lexer;

/* A string starting at the opening quote. Keys may not contain \u0000,
 * because json-c keeps keys as C strings and would silently cut them. */
static int lex_string(json_lexer *lx, int is_key) {
    const unsigned char *s = lx->s;
    size_t i = lx->i + 1;
    for (;;) {
        if (i >= lx->len) {
            lx->error = "unterminated string";
            return 0;
        }
        unsigned c = s[i];
        if (c == '"') break;
        if (c < 0x20) {
            lx->error = "raw control character inside a string";
            return 0;
        }
        if (c == '\\') {
            if (i + 1 >= lx->len) {
                lx->error = "unterminated escape";
                return 0;
            }
            unsigned e = s[i + 1];
            if (e == 'u') {
                long code = hex4(s + i + 2, lx->len - (i + 2));
                if (code < 0) {
                    lx->error = "invalid \\u escape";
                    return 0;
                }
                if (code == 0 && is_key) {
                    lx->error = "a key contains \\u0000 (NUL)";
                    return 0;
                }
                i += 6;
                if (code >= 0xDC00 && code <= 0xDFFF) {
                    lx->error = "unpaired UTF-16 surrogate in a \\u escape";
                    return 0;
                }
                if (code >= 0xD800 && code <= 0xDBFF) {
                    long low = -1;
                    if (i + 1 < lx->len && s[i] == '\\' && s[i + 1] == 'u')
                        low = hex4(s + i + 2, lx->len - (i + 2));
                    if (low < 0xDC00 || low > 0xDFFF) {
                        lx->error = "unpaired UTF-16 surrogate in a \\u escape";
                        return 0;
                    }
                    i += 6;
                }
                continue;
            }
            if (!strchr("\"\\/bfnrt", (int)e) || e == '\0') {
                lx->error = "invalid escape in a string";
                return 0;
            }
            i += 2;
            continue;
        }
        size_t n = utf8_sequence_length(s + i, lx->len - i);
        if (n == 0) {
            lx->error = "invalid UTF-8 inside a string";
            return 0;
        }
        i += n;
    }
    lx->i = i + 1;
    return 1;
}

static int is_digit(unsigned c) { return c >= '0' && c <= '9'; }

/* A number per RFC 8259. Integers (no fraction, no exponent) must fit in
 * int64, because json-c clamps larger ones without telling anyone. */
static int lex_number(json_lexer *lx) {
    const unsigned char *s = lx->s;
    size_t i = lx->i;
    int negative = 0;
    if (s[i] == '-') {
        negative = 1;
        i++;
    }
    size_t digits_start = i;
    if (i >= lx->len || !is_digit(s[i])) {
        lx->error = "invalid number";
        return 0;
    }
    if (s[i] == '0') {
        i++;
        if (i < lx->len && is_digit(s[i])) {
            lx->error = "number with a leading zero";
            return 0;
        }
    } else {
        while (i < lx->len && is_digit(s[i])) i++;
    }
    size_t digits_end = i;
    int integral = 1;
    if (i < lx->len && s[i] == '.') {
        integral = 0;
        i++;
        if (i >= lx->len || !is_digit(s[i])) {
            lx->error = "invalid number";
            return 0;
        }
        while (i < lx->len && is_digit(s[i])) i++;
    }
    if (i < lx->len && (s[i] == 'e' || s[i] == 'E')) {
        integral = 0;
        i++;
        if (i < lx->len && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= lx->len || !is_digit(s[i])) {
            lx->error = "invalid number";
            return 0;
        }
        while (i < lx->len && is_digit(s[i])) i++;
    }
    if (integral) {
        size_t ndigits = digits_end - digits_start;
        uint64_t v = 0;
        if (ndigits > 19) {
            lx->error = "integer out of the 64-bit range";
            return 0;
        }
        for (size_t k = digits_start; k < digits_end; k++) v = v * 10 + (uint64_t)(s[k] - '0');
        if (v > (uint64_t)INT64_MAX + (negative ? 1u : 0u)) {
            lx->error = "integer out of the 64-bit range";
            return 0;
        }
    }
    lx->i = i;
    return 1;
}

static int lex_literal(json_lexer *lx) {
    static const char *const words[] = {"true", "false", "null"};
    size_t i = lx->i;
    while (i < lx->len && lx->s[i] >= 'a' && lx->s[i] <= 'z') i++;
    size_t n = i - lx->i;
    for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) {
        if (strlen(words[w]) == n && memcmp(words[w], lx->s + lx->i, n) == 0) {
            lx->i = i;
            return 1;
        }
    }
    lx->error = "unexpected word (only true, false and null are JSON)";
    return 0;
}

static int is_json_space(unsigned c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

#define JSON_LEX_MAX_DEPTH 16

/* Checks the tokens of the text and its nesting; outputs the number of object
 * members and the offset just after the top-level object. */
static int json_lex(json_lexer *lx, const zs__json_rules *rules, int64_t max_top_members,
                    int64_t *members, size_t *object_end) {
    char stack[JSON_LEX_MAX_DEPTH];           /* '{' or '[' per open container */
    int64_t elements[JSON_LEX_MAX_DEPTH];     /* values seen in each open array */
    int depth = 0, expect_key = 0, closed = 0;
    int64_t top_members = 0;
    int max_depth = rules->max_depth < JSON_LEX_MAX_DEPTH ? rules->max_depth : JSON_LEX_MAX_DEPTH;
    *members = 0;
    if (rules->spaces_only) {
        if (lx->len == 0 || lx->s[0] != '{') {
            lx->error = "does not start with '{'";
            return 0;
        }
    } else {
        while (lx->i < lx->len && is_json_space(lx->s[lx->i])) lx->i++;
        if (lx->i >= lx->len || lx->s[lx->i] != '{') {
            lx->error = "is not a JSON object";
            return 0;
        }
    }
    while (!closed) {
        if (lx->i >= lx->len) {
            lx->error = "ends before its JSON object is closed";
            return 0;
        }
        unsigned c = lx->s[lx->i];
        if (is_json_space(c)) {
            lx->i++;
            continue;
        }
        /* A value (not a key, not punctuation) starting inside an array counts
         * as one element of it. */
        int starts_value = (c == '"' && !expect_key) || c == '{' || c == '[' || c == '-' ||
                           is_digit(c) || (c >= 'a' && c <= 'z');
        if (starts_value && depth > 0 && stack[depth - 1] == '[') {
            elements[depth - 1]++;
            if (rules->max_array > 0 && elements[depth - 1] > rules->max_array) {
                lx->error = "has an array with too many elements";
                return 0;
            }
        }
        if (c == '{' || c == '[') {
            if (depth >= max_depth) {
                lx->error = "is nested too deeply";
                return 0;
            }
            stack[depth] = (char)c;
            elements[depth] = 0;
            depth++;
            expect_key = (c == '{');
            lx->i++;
        } else if (c == '}' || c == ']') {
            if (depth == 0 || stack[depth - 1] != (c == '}' ? '{' : '[')) {
                lx->error = "has mismatched brackets";
                return 0;
            }
            depth--;
            expect_key = 0;
            lx->i++;
            if (depth == 0) closed = 1;
        } else if (c == '"') {
            if (!lex_string(lx, expect_key)) return 0;
            expect_key = 0;
        } else if (c == ':') {
            if (depth == 0 || stack[depth - 1] != '{') {
                lx->error = "has ':' outside an object";
                return 0;
            }
            (*members)++;
            if (depth == 1 && max_top_members > 0 && ++top_members > max_top_members) {
                lx->error = "has more top-level members than allowed";
                lx->over_limit = 1;
                return 0;
            }
            lx->i++;
        } else if (c == ',') {
            expect_key = depth > 0 && stack[depth - 1] == '{';
            lx->i++;
        } else if (c == '-' || is_digit(c)) {
            if (!lex_number(lx)) return 0;
        } else if (c >= 'a' && c <= 'z') {
            if (!lex_literal(lx)) return 0;
        } else {
            lx->error = c < 0x20 || c >= 0x7F ? "has a byte that is not JSON outside a string"
                                              : "has an unexpected character";
            return 0;
        }
    }
    *object_end = lx->i;
    for (size_t i = lx->i; i < lx->len; i++) {
        unsigned c = lx->s[i];
        if (rules->spaces_only ? c != ' ' : !is_json_space(c)) {
            lx->i = i;
            lx->error = rules->spaces_only ? "has trailing bytes after the JSON object (only "
                                             "space padding is allowed)"
                                           : "has trailing bytes after the JSON object";
            return 0;
        }
    }
    return 1;
}

/* Members of all objects in the tree; the lexer bounded the depth. */
static int64_t json_tree_members(struct json_object *o) {
    int64_t n = 0;
    if (json_object_is_type(o, json_type_object)) {
        n += json_object_object_length(o);
        json_object_object_foreach(o, key, value) {
            (void)key;
            n += json_tree_members(value);
        }
    } else if (json_object_is_type(o, json_type_array)) {
        size_t count = json_object_array_length(o);
        for (size_t k = 0; k < count; k++) n += json_tree_members(json_object_array_get_idx(o, k));
    }
    return n;
}

zs_status zs__json_parse_strict(const char *text, size_t bytes, const zs__json_rules *rules,
                                const char *where, const char *what, struct json_object **out) {
    ZS_CHECK(zs__json_parse_strict_bounded(text, bytes, rules, 0, where, what, NULL, out));
    return ZS_OK;
}

zs_status zs__json_parse_strict_bounded(const char *text, size_t bytes,
                                        const zs__json_rules *rules, int64_t max_top_members,
                                        const char *where, const char *what, int *over_limit,
                                        struct json_object **out) {
    *out = NULL;
    if (over_limit) *over_limit = 0;
    if (bytes > (size_t)INT_MAX)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s of %zu bytes is too large to parse",
                        where, what, bytes);
    json_lexer lx = {(const unsigned char *)text, bytes, 0, NULL, 0};
    int64_t members = 0;
    size_t object_end = 0;
    if (!json_lex(&lx, rules, max_top_members, &members, &object_end)) {
        if (over_limit) *over_limit = lx.over_limit;
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s %s (at byte %zu)", where, what, lx.error,
                        lx.i);
    }

    struct json_tokener *tok = json_tokener_new_ex(rules->max_depth + 1);
    if (!tok) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate a JSON parser", where);
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    struct json_object *root = json_tokener_parse_ex(tok, text, (int)object_end);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t parse_end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!root || err != json_tokener_success) {
        json_object_put(root);
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s is not valid JSON: %s (at byte %zu)",
                        where, what, json_tokener_error_desc(err), parse_end);
    }
    if (!json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s is not a JSON object", where, what);
    }
    if (json_tree_members(root) != members) {
        json_object_put(root);
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: %s has a duplicate key in an object (each key may appear once)",
                        where, what);
    }
    *out = root;
    return ZS_OK;
}

