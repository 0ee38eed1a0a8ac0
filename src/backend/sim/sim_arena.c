/* Memory of the simulated device (sim_arena.h). */
#define _GNU_SOURCE /* memfd_create, fallocate's FALLOC_FL_* */
#include "backend/sim/sim_arena.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"

#define ARENA_PAGE ((size_t)4096)

zs_status zs__sim_arena_create(zs__sim_arena *a, const char *name, size_t capacity,
                               int host_visible) {
    memset(a, 0, sizeof *a);
    a->fd = -1;
    a->name = name;
    capacity = (capacity + ARENA_PAGE - 1) / ARENA_PAGE * ARENA_PAGE;
    a->fd = memfd_create("zeroshard-sim", MFD_CLOEXEC);
    if (a->fd < 0 || ftruncate(a->fd, (off_t)capacity) != 0) {
        const int e = errno;
        if (a->fd >= 0) close(a->fd);
        a->fd = -1;
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "sim device: cannot create the memory file of "
                        "%zu bytes for %s: %s", capacity, name, strerror(e));
    }
    void *outer = mmap(NULL, capacity, host_visible ? PROT_READ | PROT_WRITE : PROT_NONE,
                       MAP_SHARED | MAP_NORESERVE, a->fd, 0);
    void *inner = mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, a->fd,
                       0);
    if (outer == MAP_FAILED || inner == MAP_FAILED) {
        const int e = errno;
        if (outer != MAP_FAILED) munmap(outer, capacity);
        if (inner != MAP_FAILED) munmap(inner, capacity);
        close(a->fd);
        a->fd = -1;
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "sim device: cannot map %zu bytes of %s twice: "
                        "%s (the address space or vm.max_map_count)", capacity, name, strerror(e));
    }
    a->outer = outer;
    a->inner = inner;
    a->capacity = capacity;
    pthread_mutex_init(&a->lock, NULL);
    return ZS_OK;
}

void zs__sim_arena_destroy(zs__sim_arena *a) {
    if (!a->outer) return;
    munmap(a->outer, a->capacity);
    munmap(a->inner, a->capacity);
    close(a->fd);
    pthread_mutex_destroy(&a->lock);
    free(a->blocks);
    memset(a, 0, sizeof *a);
    a->fd = -1;
}

int zs__sim_arena_alloc(zs__sim_arena *a, size_t bytes, size_t align, void **out) {
    *out = NULL;
    const size_t placed = (bytes + ARENA_PAGE - 1) / ARENA_PAGE * ARENA_PAGE;
    if (bytes == 0 || placed < bytes) return -1;
    pthread_mutex_lock(&a->lock);
    int rc = -1;
    if (a->count == a->cap) {
        const int grown = a->cap ? 2 * a->cap : 64;
        zs__sim_block *more = zs__realloc(a->blocks, sizeof *more * (size_t)grown);
        if (!more) goto done;
        a->blocks = more;
        a->cap = grown;
    }
    /* First fit: the gap before block i (or after the last). */
    size_t at = 0;
    int i = 0;
    for (;; i++) {
        at = (at + align - 1) / align * align;
        const size_t end = i < a->count ? a->blocks[i].offset : a->capacity;
        if (at <= end && end - at >= placed) break;
        if (i == a->count) goto done;
        at = a->blocks[i].offset + a->blocks[i].bytes;
    }
    memmove(&a->blocks[i + 1], &a->blocks[i], sizeof *a->blocks * (size_t)(a->count - i));
    a->blocks[i] = (zs__sim_block){at, placed};
    a->count++;
    a->used += placed;
    *out = a->outer + at;
    rc = 0;
done:
    pthread_mutex_unlock(&a->lock);
    return rc;
}

/* The index of the block that starts at `offset`, or -1 (binary search). */
static int find(const zs__sim_arena *a, size_t offset) {
    int lo = 0, hi = a->count - 1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        if (a->blocks[mid].offset == offset) return mid;
        if (a->blocks[mid].offset < offset) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

size_t zs__sim_arena_free(zs__sim_arena *a, void *outer) {
    if (!zs__sim_arena_owns(a, outer, 1)) return 0;
    const size_t offset = (size_t)((unsigned char *)outer - a->outer);
    pthread_mutex_lock(&a->lock);
    const int i = find(a, offset);
    size_t bytes = 0;
    if (i >= 0) {
        bytes = a->blocks[i].bytes;
        /* The pages go back to the kernel and read as zeros next time:
         * allocations are zero-filled without a pass over them. */
        if (fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset,
                      (off_t)bytes) != 0)
            memset(a->inner + offset, 0, bytes);
        memmove(&a->blocks[i], &a->blocks[i + 1], sizeof *a->blocks * (size_t)(a->count - i - 1));
        a->count--;
        a->used -= bytes;
    }
    pthread_mutex_unlock(&a->lock);
    return bytes;
}

int zs__sim_arena_block_of(zs__sim_arena *a, const void *outer, void **start, size_t *bytes) {
    if (!zs__sim_arena_owns(a, outer, 1)) return 0;
    const size_t offset = (size_t)((const unsigned char *)outer - a->outer);
    pthread_mutex_lock(&a->lock);
    int lo = 0, hi = a->count - 1, found = 0;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        const zs__sim_block *b = &a->blocks[mid];
        if (offset < b->offset) hi = mid - 1;
        else if (offset >= b->offset + b->bytes) lo = mid + 1;
        else {
            *start = a->outer + b->offset;
            *bytes = b->bytes;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&a->lock);
    return found;
}
