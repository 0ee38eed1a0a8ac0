/* The live-memory budget: best-fit carving of one buffer (see live.h).
 *
 * Floor (src/floors.txt): A leaf of zero/: no context. The carves room
 * (carves.c) owns the one live budget of a context.
 */
#include "zero/live.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

/* "512 bytes" or "78.6 MiB (82411520 bytes)": the exact count too, since
 * budgets are set in bytes. */
static const char *human(size_t bytes, char *out, size_t cap) {
    if (bytes < 1024 * 1024) {
        snprintf(out, cap, "%zu bytes", bytes);
    } else {
        char text[32];
        snprintf(out, cap, "%s (%zu bytes)", zs__bytes_text(text, sizeof text, (double)bytes), bytes);
    }
    return out;
}

static const char *kind_name(zs__live_kind kind) {
    return kind == ZS__LIVE_PARAMS ? "parameters" : "gradient";
}

static zs_mem_tag kind_tag(zs__live_kind kind) {
    return kind == ZS__LIVE_PARAMS ? ZS_MEM_LIVE_PARAMS : ZS_MEM_LIVE_GRADS;
}

size_t zs__live_span(size_t bytes) {
    size_t span;
    if (!zs__add_size(bytes, ZS__LIVE_ALIGN - 1, &span)) return 0;
    return span - span % ZS__LIVE_ALIGN;
}

zs_status zs__live_create(zs__live *live, zs__backend *be, size_t capacity, int max_blocks) {
    memset(live, 0, sizeof *live);
    live->backend = be;
    if (capacity == 0) return ZS_OK;
    live->blocks = zs__calloc((size_t)(max_blocks > 0 ? max_blocks : 1), sizeof *live->blocks);
    if (!live->blocks) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "live budget: out of host memory");
    live->capacity_blocks = max_blocks;
    /* Whole ZS__LIVE_ALIGN blocks only: the tail could never be carved. */
    capacity -= capacity % ZS__LIVE_ALIGN;
    ZS_CHECK(zs__buf_alloc(be, &live->storage, ZS_MEM_LIVE_FREE, ZS_DTYPE_FP32,
                           (int64_t)(capacity / sizeof(float))));
    live->capacity = (size_t)live->storage.count * sizeof(float);
    live->backend->mem->live_budget = live->capacity;
    return ZS_OK;
}

void zs__live_destroy(zs__live *live) {
    /* Blocks still carved (a context destroyed mid-step) go back first, so
     * the buffer is freed under the tag it was charged to. */
    while (live->count > 0)
        zs__live_give(live, (char *)live->storage.ptr + live->blocks[0].offset);
    if (live->backend) {
        zs__buf_free(&live->storage);
        if (live->capacity > 0) live->backend->mem->live_budget = 0;
    }
    free(live->blocks);
    memset(live, 0, sizeof *live);
}

/* "'u' parameters (1.5 MiB), 'v' gradient (0.2 MiB)" */
static void describe_blocks(const zs__live *live, char *out, size_t cap) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < live->count && used < cap; i++) {
        const zs__live_block *b = &live->blocks[i];
        char size[64];
        int n = snprintf(out + used, cap - used, "%s'%s' %s (%s)", i ? ", " : "", b->owner,
                         kind_name(b->kind), human(b->bytes, size, sizeof size));
        if (n < 0) break;
        used += (size_t)n;
    }
    if (live->count == 0) snprintf(out, cap, "nothing");
}

zs_status zs__live_take(zs__live *live, const char *owner, zs__live_kind kind, size_t bytes,
                        void **out) {
    *out = NULL;
    const size_t span = zs__live_span(bytes);
    /* Two ends: parameters take the lowest gap that holds them (at its
     * bottom), gradients the highest (at its top). Gradients outlive the
     * parameters they came with (a reduction holds its carve; a tied
     * weight's gradient stays open), so keeping the two apart stops a held
     * gradient from splitting the room the next unit needs. */
    size_t best_offset = 0, largest_gap = 0;
    int best_index = -1;
    size_t cursor = 0;
    for (int i = 0; i <= live->count; i++) {
        size_t end = i < live->count ? live->blocks[i].offset : live->capacity;
        size_t gap = end - cursor;
        if (gap > largest_gap) largest_gap = gap;
        if (span > 0 && gap >= span && (kind == ZS__LIVE_GRAD || best_index < 0)) {
            best_offset = kind == ZS__LIVE_GRAD ? end - span : cursor;
            best_index = i;
        }
        if (i < live->count) cursor = live->blocks[i].offset + live->blocks[i].span;
    }
    if (best_index < 0 || live->count >= live->capacity_blocks) {
        char held[1024];
        describe_blocks(live, held, sizeof held);
        size_t free_bytes = live->capacity - live->carved;
        char need[64], budget[64], avail[64], extent[64];
        human(bytes, need, sizeof need);
        human(live->capacity, budget, sizeof budget);
        human(free_bytes, avail, sizeof avail);
        if (span != 0 && free_bytes >= span && live->count < live->capacity_blocks)
            return zs__fail(ZS_ERR_OUT_OF_MEMORY,
                            "'%s' %s needs %s of zero.live_bytes = %s; %s are free but the "
                            "largest free extent is %s (fragmentation); held now: %s",
                            owner, kind_name(kind), need, budget, avail,
                            human(largest_gap, extent, sizeof extent), held);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY,
                        "'%s' %s needs %s of zero.live_bytes = %s, of which %s are free; held "
                        "now: %s",
                        owner, kind_name(kind), need, budget, avail, held);
    }
    memmove(&live->blocks[best_index + 1], &live->blocks[best_index],
            sizeof *live->blocks * (size_t)(live->count - best_index));
    live->blocks[best_index] = (zs__live_block){
        .offset = best_offset, .bytes = bytes, .span = span, .owner = owner, .kind = kind};
    live->count++;
    zs__mem_uncharge(live->backend->mem, ZS_MEM_LIVE_FREE, bytes);
    zs__mem_charge(live->backend->mem, kind_tag(kind), bytes);
    live->carved += bytes;
    if (live->carved > live->carved_peak) live->carved_peak = live->carved;
    *out = (char *)live->storage.ptr + best_offset;
    return ZS_OK;
}

void zs__live_give(zs__live *live, void *ptr) {
    ZS_ASSERT(ptr != NULL && live->count > 0);
    size_t offset = (size_t)((char *)ptr - (char *)live->storage.ptr);
    int i = 0;
    while (i < live->count && live->blocks[i].offset != offset) i++;
    ZS_ASSERT(i < live->count);
    const zs__live_block b = live->blocks[i];
    memmove(&live->blocks[i], &live->blocks[i + 1],
            sizeof *live->blocks * (size_t)(live->count - i - 1));
    live->count--;
    zs__mem_uncharge(live->backend->mem, kind_tag(b.kind), b.bytes);
    zs__mem_charge(live->backend->mem, ZS_MEM_LIVE_FREE, b.bytes);
    live->carved -= b.bytes;
}
