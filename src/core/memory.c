#include "core/memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

const char *zs_mem_tag_name(zs_mem_tag tag) {
    switch (tag) {
#define ZS_MEM_TAG_NAME_(name, text, description) \
    case name:                                    \
        return text;
        ZS_MEM_TAG_TABLE(ZS_MEM_TAG_NAME_)
#undef ZS_MEM_TAG_NAME_
    case ZS_MEM_TAG_COUNT:
        break;
    }
    return "unknown";
}

int zs__mem_tag_on_device(zs_mem_tag tag) {
    switch (tag) {
    case ZS_MEM_PARAMS: case ZS_MEM_GRADS: case ZS_MEM_MASTER: case ZS_MEM_OPTIM:
    case ZS_MEM_LIVE_PARAMS: case ZS_MEM_LIVE_GRADS: case ZS_MEM_LIVE_FREE:
    case ZS_MEM_SECONDARY: /* gathered values, kept where the gathers run */
    case ZS_MEM_FROZEN:
        return 1;
    default:
        return 0;
    }
}

int zs__mem_tag_on_disk(zs_mem_tag tag) { return tag == ZS_MEM_NVME_STATE; }

void zs__mem_charge(zs__mem *mem, zs_mem_tag tag, size_t bytes) {
    ZS_ASSERT(tag >= 0 && tag < ZS_MEM_TAG_COUNT);
    if (zs__mem_tag_on_device(tag)) mem->device_current += bytes;
    mem->current[tag] += bytes;
    if (mem->current[tag] > mem->peak[tag]) mem->peak[tag] = mem->current[tag];
    if (zs__mem_tag_on_disk(tag)) return; /* bytes of a file: reported, not memory */
    mem->total_current += bytes;
    if (mem->total_current > mem->total_peak) mem->total_peak = mem->total_current;
    /* Carved live memory is bookkeeping inside one buffer: going past the
     * budget would mean two units share bytes, a bug, never bad input. */
    if (tag == ZS_MEM_LIVE_PARAMS || tag == ZS_MEM_LIVE_GRADS)
        ZS_ASSERT(mem->current[ZS_MEM_LIVE_PARAMS] + mem->current[ZS_MEM_LIVE_GRADS] <=
                  mem->live_budget);
}

void zs__mem_move(zs__mem *mem, zs_mem_tag from, zs_mem_tag to, size_t bytes,
                  uint64_t from_peak_before) {
    ZS_ASSERT(mem->current[from] >= bytes);
    ZS_ASSERT(zs__mem_tag_on_device(from) == zs__mem_tag_on_device(to));
    mem->current[from] -= bytes;
    mem->peak[from] = from_peak_before > mem->current[from] ? from_peak_before : mem->current[from];
    mem->current[to] += bytes;
    if (mem->current[to] > mem->peak[to]) mem->peak[to] = mem->current[to];
}

void zs__mem_uncharge(zs__mem *mem, zs_mem_tag tag, size_t bytes) {
    ZS_ASSERT(tag >= 0 && tag < ZS_MEM_TAG_COUNT);
    ZS_ASSERT(mem->current[tag] >= bytes);
    if (zs__mem_tag_on_device(tag)) mem->device_current -= bytes;
    mem->current[tag] -= bytes;
    if (!zs__mem_tag_on_disk(tag)) mem->total_current -= bytes;
}

zs_status zs__mem_host_alloc(zs__mem *mem, zs_mem_tag tag, size_t bytes, void **out) {
    *out = NULL;
    if (bytes == 0) return ZS_OK;
    size_t rounded;
    if (!zs__add_size(bytes, ZS_HOST_ALIGNMENT - 1, &rounded))
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "allocation of %zu bytes for '%s' overflows",
                        bytes, zs_mem_tag_name(tag));
    rounded -= rounded % ZS_HOST_ALIGNMENT;
    void *ptr = zs__aligned_alloc(ZS_HOST_ALIGNMENT, rounded);
    if (!ptr)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY,
                        "cannot allocate %zu bytes of host memory for '%s' "
                        "(%llu bytes held already); use a higher zero.stage or more ranks",
                        bytes, zs_mem_tag_name(tag), (unsigned long long)mem->total_current);
    zs__host_zero(ptr, rounded);
    zs__mem_charge(mem, tag, bytes);
    *out = ptr;
    return ZS_OK;
}

void zs__host_zero(void *ptr, size_t bytes) {
    /* Fresh memory is mapped page by page as it is first written: one
     * thread faulting in tens of GB of offloaded state takes tens of
     * seconds, the machine's threads together a fraction of it. Small
     * buffers are not worth a parallel region. */
    const size_t piece = (size_t)2 << 20;
    if (bytes < 32 * piece) {
        memset(ptr, 0, bytes);
        return;
    }
    const long pieces = (long)((bytes + piece - 1) / piece);
#pragma omp parallel for schedule(static)
    for (long k = 0; k < pieces; k++) {
        const size_t at = (size_t)k * piece;
        memset((char *)ptr + at, 0, bytes - at < piece ? bytes - at : piece);
    }
}

void zs__mem_host_free(zs__mem *mem, zs_mem_tag tag, void *ptr, size_t bytes) {
    if (!ptr) return;
    zs__mem_uncharge(mem, tag, bytes);
    free(ptr);
}

int zs__mul_size(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

int zs__add_size(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

const char *zs__bytes_text(char *buf, size_t cap, double bytes) {
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 5) {
        bytes /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%.0f B", bytes);
    else snprintf(buf, cap, bytes < 10 ? "%.2f %s" : "%.1f %s", bytes, unit[u]);
    return buf;
}
