/* Memory of the simulated device: one memfd, mapped twice.
 *
 * A GPU's memory is not the host's: a device address dereferenced by host
 * code faults. The simulated device makes that true on Linux by mapping one
 * memfd twice: the outer view, whose addresses the backend hands out, and
 * the inner view, read-write, through which the device's thread (and only
 * it) reads and writes. A device arena's outer view has no access at all,
 * so host code that touches device memory crashes as on a GPU; a host arena
 * (the page-locked memory of host_alloc) is read-write outside too, and the
 * stream-order check protects its pages while queued copies own them. Not
 * shm_open: /dev/shm is small in containers, a memfd is not bounded by it.
 * The file is sparse (MAP_NORESERVE; pages exist once written), and a freed
 * block's pages are punched out, so memory comes back zeroed, as the
 * backend interface promises, and the arena does not grow.
 *
 * Blocks are placed first-fit at the given alignment; the arena holds no
 * pointer into itself, so its table can grow. Thread-safe: a mutex guards
 * the table (host threads allocate while the device's thread runs). */
#ifndef ZS_BACKEND_SIM_ARENA_H
#define ZS_BACKEND_SIM_ARENA_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

typedef struct zs__sim_block {
    size_t offset;
    size_t bytes; /* as placed (rounded up to the arena's page) */
} zs__sim_block;

typedef struct zs__sim_arena {
    const char *name;          /* "device memory", "page-locked host memory" (static) */
    int fd;
    unsigned char *outer;      /* the addresses handed out */
    unsigned char *inner;      /* the same memory, read-write, for the device's thread */
    size_t capacity;
    pthread_mutex_t lock;
    zs__sim_block *blocks;     /* used blocks, sorted by offset */
    int count, cap;
    size_t used;               /* bytes of the blocks */
} zs__sim_arena;

/* Maps `capacity` bytes (a multiple of the page size) twice; host_visible
 * = 0 gives the outer view no access (device memory), 1 read-write (host
 * memory the device copies to and from). */
zs_status zs__sim_arena_create(zs__sim_arena *a, const char *name, size_t capacity,
                               int host_visible);
/* Unmaps both views and closes the file; a zeroed arena is a no-op. */
void zs__sim_arena_destroy(zs__sim_arena *a);

/* A zeroed block of at least `bytes` (> 0), at a multiple of `align` (a
 * power of two, at least the page size), as an outer address. 0 on
 * success, -1 when no gap is large enough (the caller reports it). */
int zs__sim_arena_alloc(zs__sim_arena *a, size_t bytes, size_t align, void **out);
/* Frees the block at `outer` (punching its pages out: they read as zeros
 * when reused); returns its placed bytes, 0 if no block starts there. */
size_t zs__sim_arena_free(zs__sim_arena *a, void *outer);

/* 1 when [p, p + bytes) lies inside the arena's outer view. */
static inline int zs__sim_arena_owns(const zs__sim_arena *a, const void *p, size_t bytes) {
    const uintptr_t at = (uintptr_t)p, base = (uintptr_t)a->outer;
    return a->outer && at >= base && bytes <= a->capacity && at - base <= a->capacity - bytes;
}

/* The inner (read-write) address of an outer one. */
static inline void *zs__sim_arena_inner(const zs__sim_arena *a, const void *outer) {
    return a->inner + ((const unsigned char *)outer - a->outer);
}

/* The start and size of the block holding `outer`, or 0 (not in a block). */
int zs__sim_arena_block_of(zs__sim_arena *a, const void *outer, void **start, size_t *bytes);

#endif
