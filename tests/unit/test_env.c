/* The registry of environment variables (src/core/env.c):
 *   - docs/env-vars.md is the table's own rendering (regenerate from the
 *     text this test prints when they differ);
 *   - every name in the table is unique and starts with ZS_, but for the
 *     launcher's own variables, which never do (that no file reads a ZS_
 *     one around the registry is tests/layering/check_env.sh's job);
 *   - the typed readers reject what they cannot read whole;
 *   - the fault specs match point, rank and optional step exactly. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "test_util.h"

static void test_markdown_matches_docs(void) {
    const size_t needed = zs__env_markdown(NULL, 0);
    char *generated = malloc(needed + 1);
    ZT_REQUIRE(generated != NULL);
    ZT_EQ_U64(zs__env_markdown(generated, needed + 1), needed);
    ZT_EQ_U64(strlen(generated), needed);
    /* Truncation keeps the string terminated and reports the full length. */
    char small[16];
    ZT_EQ_U64(zs__env_markdown(small, sizeof small), needed);
    ZT_EQ_U64(strlen(small), sizeof small - 1);

    FILE *f = fopen(ZS_SOURCE_DIR "/docs/env-vars.md", "rb");
    ZT_CHECK_MSG(f != NULL, "cannot open docs/env-vars.md");
    if (f) {
        char *text = calloc(needed + 2, 1);
        ZT_REQUIRE(text != NULL);
        const size_t got = fread(text, 1, needed + 1, f);
        fclose(f);
        ZT_CHECK_MSG(got == needed && memcmp(text, generated, needed) == 0,
                     "docs/env-vars.md differs from src/core/env.c; regenerate it:\n%s",
                     generated);
        free(text);
    }
    free(generated);
}

static void test_table(void) {
    for (int i = 0; i < ZS_ENV_COUNT; i++) {
        const zs__env_entry *e = zs__env_entry_of((zs__env_var)i);
        ZT_REQUIRE(e != NULL && e->name && e->type && e->default_text && e->doc);
        /* The user's variables are ZS_; a launcher's never are. */
        ZT_CHECK_MSG((strncmp(e->name, "ZS_", 3) == 0) == !e->from_launcher,
                     "%s: from_launcher is %d but the name %s with ZS_", e->name,
                     e->from_launcher, e->from_launcher ? "starts" : "does not start");
        for (int j = 0; j < i; j++)
            ZT_CHECK_MSG(strcmp(e->name, zs__env_entry_of((zs__env_var)j)->name) != 0,
                         "%s is registered twice", e->name);
    }
    ZT_CHECK(zs__env_entry_of(ZS_ENV_COUNT) == NULL);
}

static void test_readers(void) {
    double v = -1;
    char why[256];
    unsetenv("ZS_COMM_DELAY_US");
    ZT_EQ_INT(zs__env_nonnegative(ZS_ENV_COMM_DELAY_US, &v, why, sizeof why), 0);
    ZT_CHECK(v == 0.0);
    setenv("ZS_COMM_DELAY_US", "", 1); /* empty is unset */
    ZT_EQ_INT(zs__env_nonnegative(ZS_ENV_COMM_DELAY_US, &v, why, sizeof why), 0);
    ZT_CHECK(zs__env_text(ZS_ENV_COMM_DELAY_US) == NULL);
    setenv("ZS_COMM_DELAY_US", "250.5", 1);
    ZT_EQ_INT(zs__env_nonnegative(ZS_ENV_COMM_DELAY_US, &v, why, sizeof why), 0);
    ZT_CHECK(v == 250.5);
    const char *bad[] = {"12us", "-1", "nan", "inf", "1e400", " ", "0x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("ZS_COMM_DELAY_US", bad[i], 1);
        ZT_CHECK_MSG(zs__env_nonnegative(ZS_ENV_COMM_DELAY_US, &v, why, sizeof why) == -1,
                     "'%s' accepted as %g", bad[i], v);
        ZT_CHECK(v == 0.0);
        ZT_CHECK_MSG(strstr(why, "ZS_COMM_DELAY_US") != NULL, "message: %s", why);
    }
    unsetenv("ZS_COMM_DELAY_US");

    setenv("ZS_LOG_ALL_RANKS", "1", 1);
    ZT_EQ_INT(zs__env_flag(ZS_ENV_LOG_ALL_RANKS), 1);
    setenv("ZS_LOG_ALL_RANKS", "yes", 1);
    ZT_EQ_INT(zs__env_flag(ZS_ENV_LOG_ALL_RANKS), 0);
    unsetenv("ZS_LOG_ALL_RANKS");
    ZT_EQ_INT(zs__env_flag(ZS_ENV_LOG_ALL_RANKS), 0);
}

static void test_fault_specs(void) {
    unsetenv("ZS_STEP_FAULT");
    ZT_EQ_INT(zs__env_fault_matches(ZS_ENV_STEP_FAULT, "update", 0, 1), 0);
    setenv("ZS_STEP_FAULT", "update:2", 1);
    ZT_EQ_INT(zs__env_fault_matches(ZS_ENV_STEP_FAULT, "update", 2, 7), 1);
    ZT_EQ_INT(zs__env_fault_matches(ZS_ENV_STEP_FAULT, "update", 1, 7), 0);
    ZT_EQ_INT(zs__env_fault_matches(ZS_ENV_STEP_FAULT, "gather", 2, 7), 0);
    ZT_EQ_INT(zs__env_fault_matches(ZS_ENV_STEP_FAULT, "up", 2, 7), 0);
    setenv("ZS_STEP_FAULT", "update:2:3", 1);
    ZT_EQ_INT(zs__env_fault_matches(ZS_ENV_STEP_FAULT, "update", 2, 3), 1);
    ZT_EQ_INT(zs__env_fault_matches(ZS_ENV_STEP_FAULT, "update", 2, 4), 0);
    setenv("ZS_STEP_FAULT", "update", 1); /* no rank: never matches */
    ZT_EQ_INT(zs__env_fault_matches(ZS_ENV_STEP_FAULT, "update", 0, 1), 0);
    unsetenv("ZS_STEP_FAULT");
}

int main(void) {
    test_markdown_matches_docs();
    test_table();
    test_readers();
    test_fault_specs();
    return zt_finish("test_env");
}
