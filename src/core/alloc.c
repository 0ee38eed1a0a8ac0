/* The one door for host memory (alloc.h). */
#include "core/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The hook costs one relaxed atomic add per allocation; the library
 * allocates at start-up, build, save and load, never per element. */
static _Atomic uint64_t g_count;
static _Atomic uint64_t g_fail_at; /* 0: disarmed */
static _Atomic int g_failed;

/* 1 when this allocation is the one armed to fail. */
static int refuse(void) {
    const uint64_t n = atomic_fetch_add_explicit(&g_count, 1, memory_order_relaxed) + 1;
    const uint64_t at = atomic_load_explicit(&g_fail_at, memory_order_relaxed);
    if (at == 0 || n != at) return 0;
    atomic_store_explicit(&g_failed, 1, memory_order_relaxed);
    return 1;
}

void *zs__malloc(size_t bytes) { return refuse() ? NULL : malloc(bytes); }

void *zs__calloc(size_t count, size_t size) { return refuse() ? NULL : calloc(count, size); }

void *zs__realloc(void *ptr, size_t bytes) { return refuse() ? NULL : realloc(ptr, bytes); }

void *zs__aligned_alloc(size_t alignment, size_t bytes) {
    return refuse() ? NULL : aligned_alloc(alignment, bytes);
}

char *zs__strdup(const char *text) {
    const size_t n = strlen(text) + 1;
    char *copy = zs__malloc(n);
    if (copy) memcpy(copy, text, n);
    return copy;
}

void zs__alloc_fail_nth(uint64_t n) {
    atomic_store(&g_count, 0);
    atomic_store(&g_failed, 0);
    atomic_store(&g_fail_at, n);
}

uint64_t zs__alloc_count(void) { return atomic_load(&g_count); }

int zs__alloc_failed(void) { return atomic_load(&g_failed); }
