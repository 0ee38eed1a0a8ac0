/* The one door for host memory: every allocation of the library goes
 * through these functions (malloc's, calloc's, ... contracts; release with
 * free), so that one test hook can fail the n-th allocation and a test can
 * walk every out-of-memory path (tests/zero/test_alloc_fail.c). The callers
 * turn NULL into ZS_ERR_OUT_OF_MEMORY with a message naming what they were
 * allocating. tests/layering/check_alloc.sh fails on a raw allocation call
 * anywhere else in src/. */
#ifndef ZS_CORE_ALLOC_H
#define ZS_CORE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *zs__malloc(size_t bytes);
void *zs__calloc(size_t count, size_t size);
void *zs__realloc(void *ptr, size_t bytes);
void *zs__aligned_alloc(size_t alignment, size_t bytes); /* bytes: a multiple of alignment */
char *zs__strdup(const char *text);

/* Tests only. zs__alloc_fail_nth(n): the n-th allocation from now fails
 * (returns NULL) and every other succeeds; 0 disarms. The count is for the
 * whole process (every thread). zs__alloc_count: allocations since the last
 * arming; zs__alloc_failed: 1 once the armed one has failed. */
void zs__alloc_fail_nth(uint64_t n);
uint64_t zs__alloc_count(void);
int zs__alloc_failed(void);

#endif
