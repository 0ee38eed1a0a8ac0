/* Helpers shared by the tests of the examples' data side (examples/trainer): a private
 * temporary directory removed at exit (also when a ZT_REQUIRE aborts the
 * test), small files written into it, and checks of the (0 / -1, message)
 * convention of ex_data and gpt2_llmc. */
#ifndef DATA_TEST_FILES_H
#define DATA_TEST_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ex_data.h"
#include "test_util.h"

/* The test's directory (created on the first call under $TMPDIR or /tmp,
 * removed with its files by an atexit handler). */
const char *gt_dir(void);

/* out: [cap] receives gt_dir()/name. Returns out. */
char *gt_path(char *out, size_t cap, const char *name);

/* Writes n bytes to gt_dir()/name (replacing it); aborts the test on failure. */
void gt_write(const char *name, const void *data, size_t n);

/* Writes an llm.c token shard: a header of 256 int32 (magic, version,
 * declared count, zeros) and then the n tokens as little-endian uint16. */
void gt_write_shard(const char *name, int32_t magic, int32_t version, int32_t declared,
                    const uint16_t *tokens, size_t n);

/* Writes a token shard in llm.c's Llama 3 format: magic 20240801, version 7,
 * the declared count, then n little-endian uint32 tokens. */
void gt_write_shard32(const char *name, int32_t declared, const uint32_t *tokens, size_t n);

/* Writes an llm.c token shard gt_dir()/name of n tokens (n <= 65536) whose
 * token i is i, and opens it: a row's first input then names its window
 * (window w of a view from token b starts at b + w T). Aborts the test on
 * failure. The caller destroys the stream. */
ex_tokens *gt_counting_stream(const char *name, int n);

/* Passes when `call` returns 0; prints the message otherwise. err must be a
 * char array in scope. */
#define GT_OK(call, err)                                                             \
    do {                                                                             \
        (err)[0] = '\0';                                                             \
        int gt_rc_ = (call);                                                         \
        zt_checks++;                                                                 \
        if (gt_rc_ != 0) {                                                           \
            zt_fail_header(__FILE__, __LINE__);                                      \
            fprintf(stderr, "  %s\n  expected 0, got %d with message \"%s\"\n", #call, \
                    gt_rc_, (err));                                                  \
        }                                                                            \
    } while (0)

/* Passes when `call` returns -1 and its message contains every one of the
 * given substrings (a NULL-terminated list is built by the macro). */
#define GT_FAILS_WITH(call, err, ...)                                                \
    do {                                                                             \
        (err)[0] = '\0';                                                             \
        int gt_rc_ = (call);                                                         \
        const char *gt_want_[] = {__VA_ARGS__, NULL};                                \
        gt_check_failure(gt_rc_, (err), gt_want_, #call, __FILE__, __LINE__);        \
    } while (0)

void gt_check_failure(int rc, const char *err, const char *const *want, const char *expr,
                      const char *file, int line);

#endif
