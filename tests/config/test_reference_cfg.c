/* configs/reference.cfg is the schema's own rendering (issue 29, item 3: the
 * hand-kept file lacked five documented keys):
 *   - the file is exactly what src/core/config_reference.c writes from the
 *     schema; when they differ, the first differing line is printed with
 *     the command that regenerates the file:
 *         test_reference_cfg --print > configs/reference.cfg
 *   - it loads with zs_config_load, and sets every key of the schema (the
 *     keys it lacks are named);
 *   - the generator keeps snprintf's contract (length needed, truncated
 *     output terminated). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_internal.h" /* the parsed tree, to look keys up */
#include "core/config_reference.h"
#include "core/config_schema.h"
#include "test_util.h"

#define REFERENCE ZS_SOURCE_DIR "/configs/reference.cfg"

static char *generate(size_t *length) {
    const size_t needed = zs__config_reference(NULL, 0);
    char *text = malloc(needed + 1);
    ZT_REQUIRE(text != NULL);
    ZT_EQ_U64(zs__config_reference(text, needed + 1), needed);
    ZT_EQ_U64(strlen(text), needed);
    *length = needed;
    return text;
}

static void test_file_is_generated(const char *generated, size_t length) {
    char *file = calloc(length + 2, 1);
    ZT_REQUIRE(file != NULL);
    FILE *f = fopen(REFERENCE, "rb");
    ZT_CHECK_MSG(f != NULL, "cannot open %s", REFERENCE);
    const size_t got = f ? fread(file, 1, length + 1, f) : 0;
    if (f) fclose(f);
    if (got != length || memcmp(file, generated, length) != 0) {
        size_t at = 0, line = 1;
        while (at < length && at < got && file[at] == generated[at]) line += file[at++] == '\n';
        /* The differing line, from its start, in both texts. */
        const char *want = generated + at;
        while (want > generated && want[-1] != '\n') want--;
        const char *have = file + (want - generated);
        ZT_CHECK_MSG(0,
                     "configs/reference.cfg differs from the schema at line %zu:\n"
                     "  file:      %.*s\n  generated: %.*s\n"
                     "regenerate it: build/tests/config/test_reference_cfg --print > "
                     "configs/reference.cfg",
                     line, (int)strcspn(have, "\n"), have, (int)strcspn(want, "\n"), want);
    }
    free(file);
}

static void test_file_loads_with_every_key(void) {
    zs_config *cfg = NULL;
    ZT_OK(zs_config_load(REFERENCE, &cfg));
    if (!cfg) return;
    ZT_OK(zs_config_app_finish(cfg));
    char missing[4096] = "";
    size_t at = 0;
    int count = 0;
    for (size_t i = 0; i < zs__config_key_count; i++)
        if (!config_lookup(cfg->lc, zs__config_keys[i].path)) {
            count++;
            if (at < sizeof missing)
                at += (size_t)snprintf(missing + at, sizeof missing - at, "%s%s", at ? ", " : "",
                                       zs__config_keys[i].path);
        }
    ZT_CHECK_MSG(count == 0, "configs/reference.cfg does not set %d key(s) of the schema: %s",
                 count, missing);
    zs_config_destroy(cfg);
}

static void test_truncation(size_t length) {
    char small[32];
    memset(small, 'x', sizeof small);
    ZT_EQ_U64(zs__config_reference(small, sizeof small), length);
    ZT_EQ_U64(strlen(small), sizeof small - 1);
}

int main(int argc, char **argv) {
    size_t length = 0;
    char *generated = generate(&length);
    if (argc == 2 && strcmp(argv[1], "--print") == 0) {
        const int ok = fwrite(generated, 1, length, stdout) == length && fflush(stdout) == 0;
        free(generated);
        return ok ? 0 : 1;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: test_reference_cfg [--print]\n");
        free(generated);
        return 2;
    }
    test_file_is_generated(generated, length);
    test_file_loads_with_every_key();
    test_truncation(length);
    free(generated);
    return zt_finish("test_reference_cfg");
}
