/* configs/reference.cfg from the schema (see config_reference.h). Each key's
 * comment and value come from its zs__key alone, so a key added to the
 * schema appears here with nothing else to edit; what the schema does not
 * hold (the file's header and a few sections' introductions) is the prose
 * below, which no key depends on. */
#include "core/config_reference.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/config_schema.h"

/* Comment lines are wrapped to this many columns, indentation included. */
#define REFERENCE_WIDTH 79
#define REFERENCE_INDENT 2 /* spaces per group level */

static const char reference_header[] =
    "# zeroshard reference configuration: every runtime key, with its meaning,\n"
    "# type, default and range, set to its default. Copy what you need; every key\n"
    "# except the required ones (optimizer.lr) may be left out and then takes its\n"
    "# default.\n"
    "#\n"
    "# Generated from the schema (src/core/config_schema.c) by\n"
    "# src/core/config_reference.c; do not edit it by hand. test_reference_cfg\n"
    "# fails when the two differ, and loads this file. Regenerate with\n"
    "#   build/tests/config/test_reference_cfg --print > configs/reference.cfg\n"
    "# (docs/config-keys.md is generated from the same schema.)\n"
    "#\n"
    "# Syntax is libconfig's: `name = value;` for settings, `name: { ... };` for\n"
    "# groups; comments start with #, // or /* */.\n"
    "#\n"
    "# Rules the loader enforces beyond libconfig:\n"
    "#   - Unknown keys are errors (outside the app group), with a suggestion.\n"
    "#   - Integer keys take only integer literals (2, not 2.0); float keys take\n"
    "#     both (lr = 1 is 1.0). Booleans are true/false, not 0/1.\n"
    "#   - An integer literal without the L suffix must fit in 32 bits: libconfig\n"
    "#     1.5 silently wraps 2147483648 to -2147483648, so the loader rejects it;\n"
    "#     write 2147483648L for a 64-bit value.\n"
    "#   - A float literal must fit a double: libconfig 1.5 silently reads 1e-400\n"
    "#     as 0 (which would turn clipping or decay off) and 1e400 as inf.\n"
    "#   - @include \"file\" is supported; a relative path is relative to the\n"
    "#     directory of the file given to zs_config_load (also inside included\n"
    "#     files), an absolute path is itself.\n"
    "#   - The file and every included file must be regular files (not a\n"
    "#     directory, a FIFO or a device) of at most 1 MiB each, 4 MiB in all;\n"
    "#     includes nest at most 10 deep, 256 at most, without cycles. NUL bytes\n"
    "#     are errors.\n"
    "#   - Any key can be overridden on the command line of programs that pass\n"
    "#     their arguments to zs_config_override, e.g. zero.stage=2 app.steps=10.\n";

/* Introductions of sections, by group path; a group not listed here has
 * none (its keys' comments say everything). */
static const struct {
    const char *group;
    const char *text;
} reference_sections[] = {
    {"offload", "Where optimizer state and parameters live (ZeRO-Offload, ZeRO-Infinity)."},
    {"zero", "How model state is partitioned across ranks (the ZeRO stages) and how much "
             "gathered state may be live at once."},
    {"precision",
     "Mixed precision and loss scaling. The keys from initial_scale_power to on_min_scale "
     "tune dynamic loss scaling (fp16 with loss_scale = 0) and are ignored otherwise. The "
     "rules are those of DeepSpeed's DynamicLossScaler: every overflowing step is skipped; "
     "the hysteresis-th overflow since the hysteresis was last refilled, and each one after "
     "it, halves the scale (never below min_loss_scale); after loss_scale_window steps in a "
     "row without overflow the next one doubles it."},
    {"checkpoint",
     "Sharded checkpoints. zs_save(ctx, dir) writes dir/step_NNNNNNNN (one shard file per "
     "rank and a manifest, committed atomically) and updates dir/latest. A checkpoint loads "
     "on any world size and any stage."},
    {"trace",
     "Timeline traces: each rank writes a Chrome / Perfetto JSON trace (open it in "
     "ui.perfetto.dev or chrome://tracing, or draw it with scripts/plot_trace.py)."},
};

/* The app group is not in the schema: it belongs to the training program. */
static const char reference_app[] =
    "The app group belongs to the training program, not the runtime: it may hold any keys, "
    "which the program reads with zs_config_app_int/float/bool/string (each with its own "
    "default and range, and file:line errors). The program then calls zs_config_app_finish, "
    "which rejects every app key it never read, suggesting the nearest key it did read. App "
    "keys count in zs_config_hash, so ranks with different app values refuse to start "
    "together.";

/* ------------------------------------------------------------ the output */

/* snprintf's contract over many pieces: `needed` counts every byte; bytes
 * are copied while they fit, leaving room for the terminator. */
typedef struct sink {
    char *out;
    size_t capacity, needed;
} sink;

static void put_bytes(sink *s, const char *text, size_t n) {
    if (s->out && s->needed + 1 < s->capacity) {
        size_t room = s->capacity - 1 - s->needed;
        memcpy(s->out + s->needed, text, n < room ? n : room);
    }
    s->needed += n;
}

static void put(sink *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sink *s, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0) put_bytes(s, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static void put_indent(sink *s, int depth) {
    for (int i = 0; i < depth * REFERENCE_INDENT; i++) put_bytes(s, " ", 1);
}

/* `text` as comment lines at this depth, words wrapped; a word longer than
 * a line gets a line of its own. */
static void put_comment(sink *s, int depth, const char *text) {
    const int room = REFERENCE_WIDTH - depth * REFERENCE_INDENT - 2; /* "# " */
    const char *p = text;
    while (*p) {
        while (*p == ' ') p++;
        if (!*p) break;
        int used = 0;
        const char *line = p;
        const char *end = p; /* the end of the last word that fits */
        while (*p) {
            const char *word = p;
            while (*p && *p != ' ') p++;
            const int add = (int)(p - word) + (used ? 1 : 0);
            if (used && used + add > room) {
                p = word;
                break;
            }
            used += add;
            end = p;
            while (*p == ' ') p++;
        }
        put_indent(s, depth);
        put(s, "# %.*s\n", (int)(end - line), line);
    }
}

/* ------------------------------------------------------------ one key */

static const char *leaf_of(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

/* The parent group's length in `path` ("zero.stage" -> 4; "seed" -> 0). */
static size_t parent_length(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot ? (size_t)(dot - path) : 0;
}

/* A string as a libconfig literal (its escapes: \" \\ and \xNN). */
static void put_string_literal(sink *s, const char *text) {
    put_bytes(s, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\') put(s, "\\%c", *c);
        else if (*c < 0x20 || *c == 0x7f) put(s, "\\x%02x", *c);
        else put_bytes(s, (const char *)c, 1);
    }
    put_bytes(s, "\"", 1);
}

/* A required key's value: what its example writes after "<leaf> = " (the
 * schema's examples read "optimizer: { lr = 3e-4; }"), or NULL. */
static const char *example_value(const zs__key *key, size_t *length) {
    if (!key->example) return NULL;
    char pattern[128];
    snprintf(pattern, sizeof pattern, "%s = ", leaf_of(key->path));
    const char *at = strstr(key->example, pattern);
    if (!at) return NULL;
    at += strlen(pattern);
    size_t n = strcspn(at, "; }");
    *length = n;
    return n ? at : NULL;
}

/* "<leaf> = <default>;", or the example's value for a required key. */
static void put_setting(sink *s, int depth, const zs__key *key) {
    const char *leaf = leaf_of(key->path);
    if (key->required) {
        size_t n = 0;
        const char *value = example_value(key, &n);
        put_indent(s, depth);
        if (value) put(s, "%s = %.*s;\n", leaf, (int)n, value);
        /* Without an example the file cannot load (the key is required):
         * test_reference_cfg then fails, naming the key. */
        else put(s, "# %s: required, and the schema gives no example value\n", leaf);
        return;
    }
    put_indent(s, depth);
    put(s, "%s = ", leaf);
    switch (key->type) {
    case ZS__KEY_INT:
        /* libconfig 1.5 wraps a literal past 32 bits without the L suffix. */
        put(s, "%" PRId64 "%s;\n", key->int_default,
            key->int_default > INT32_MAX || key->int_default < INT32_MIN ? "L" : "");
        break;
    case ZS__KEY_FLOAT: {
        char text[64];
        zs__config_format_double(key->float_default, text, sizeof text);
        put(s, "%s;\n", text);
        break;
    }
    case ZS__KEY_BOOL: put(s, "%s;\n", key->bool_default ? "true" : "false"); break;
    case ZS__KEY_STRING:
    case ZS__KEY_ENUM:
        put_string_literal(s, key->string_default ? key->string_default : "");
        put(s, ";\n");
        break;
    }
}

static void put_key(sink *s, int depth, const zs__key *key) {
    char range[512], def[160], text[2048];
    zs__config_key_range_text(key, range, sizeof range);
    zs__config_key_default_text(key, def, sizeof def);
    const char *type = key->type == ZS__KEY_ENUM ? "string, one of" : zs__config_key_type_name(key);
    const char *comma = key->type == ZS__KEY_ENUM ? "" : ",";
    if (key->required)
        snprintf(text, sizeof text, "%s%s %s; required (no default). %s", type, comma, range,
                 key->doc);
    else
        snprintf(text, sizeof text, "%s%s %s; default %s. %s", type, comma, range, def, key->doc);
    put_comment(s, depth, text);
    put_setting(s, depth, key);
}

/* ------------------------------------------------------------ groups */

/* The child group of `prefix` (length n, 0 for the top) that key i opens,
 * written into out ("offload" under the top), or 0 when key i is not in a
 * group below prefix. */
static int child_group(size_t i, const char *prefix, size_t n, char *out, size_t cap) {
    const char *path = zs__config_keys[i].path;
    if (n && (strncmp(path, prefix, n) != 0 || path[n] != '.')) return 0;
    const char *rest = n ? path + n + 1 : path;
    const char *dot = strchr(rest, '.');
    if (!dot) return 0; /* a key of prefix itself */
    snprintf(out, cap, "%.*s", (int)(dot - path), path);
    return 1;
}

static const char *section_text(const char *group) {
    for (size_t i = 0; i < sizeof reference_sections / sizeof reference_sections[0]; i++)
        if (strcmp(reference_sections[i].group, group) == 0) return reference_sections[i].text;
    return NULL;
}

/* The keys of group `prefix` (schema order), then its child groups in the
 * order the schema first names them. */
static void put_group(sink *s, const char *prefix, int depth) {
    const size_t n = strlen(prefix);
    int first = 1;
    for (size_t i = 0; i < zs__config_key_count; i++) {
        const zs__key *key = &zs__config_keys[i];
        if (parent_length(key->path) != n || (n && strncmp(key->path, prefix, n) != 0)) continue;
        if (!first) put(s, "\n");
        put_key(s, depth, key);
        first = 0;
    }
    char group[256], earlier[256];
    for (size_t i = 0; i < zs__config_key_count; i++) {
        if (!child_group(i, prefix, n, group, sizeof group)) continue;
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++)
            seen = child_group(j, prefix, n, earlier, sizeof earlier) &&
                   strcmp(group, earlier) == 0;
        if (seen) continue;
        put(s, "\n");
        const char *intro = section_text(group);
        if (intro) put_comment(s, depth, intro);
        put_indent(s, depth);
        put(s, "%s: {\n", leaf_of(group));
        put_group(s, group, depth + 1);
        put_indent(s, depth);
        put(s, "};\n");
    }
}

size_t zs__config_reference(char *out, size_t capacity) {
    sink s = {out, capacity, 0};
    put_bytes(&s, reference_header, sizeof reference_header - 1);
    put(&s, "\n");
    put_group(&s, "", 0);
    put(&s, "\n");
    put_comment(&s, 0, reference_app);
    put(&s, "app: {\n};\n");
    if (out && capacity > 0) out[s.needed < capacity ? s.needed : capacity - 1] = '\0';
    return s.needed;
}
