/* Memory accounting: every byte the runtime holds is charged to one tag
 * (zeroshard.h's ZS_MEM_TAG_TABLE), so the report can be compared with the
 * ZeRO formula. One accountant per context; backends charge it when they
 * allocate. Not thread-safe: allocation happens on the calling thread only. */
#ifndef ZS_CORE_MEMORY_H
#define ZS_CORE_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

typedef struct zs__mem {
    uint64_t current[ZS_MEM_TAG_COUNT];
    uint64_t peak[ZS_MEM_TAG_COUNT];
    uint64_t total_current;
    uint64_t total_peak;
    /* zero.live_bytes as allocated (src/zero/live.c): live_params plus
     * live_grads may never exceed it, which every charge checks. */
    uint64_t live_budget;
    /* The device's share (zs__mem_tag_on_device), and the simulated
     * device's size (device_memory_bytes; 0 = none) that the CPU backend
     * enforces. */
    uint64_t device_current;
    uint64_t device_cap;
} zs__mem;

/* 1 for tags that live on the device (parameters, gradients, master
 * weights, moments, the live budget, hpZ's secondary partition), 0 for host memory (offloaded state,
 * staging, communication buffers, scratch). */
int zs__mem_tag_on_device(zs_mem_tag tag);
/* 1 for tags that count bytes of a file (the NVMe tier): reported per tag,
 * left out of the memory totals. */
int zs__mem_tag_on_disk(zs_mem_tag tag);

/* Host allocations are aligned to this many bytes (a cache line, and enough
 * for any SIMD load the kernels use). */
#define ZS_HOST_ALIGNMENT 64

void zs__mem_charge(zs__mem *mem, zs_mem_tag tag, size_t bytes);
void zs__mem_uncharge(zs__mem *mem, zs_mem_tag tag, size_t bytes);
/* Moves `bytes` just charged to `from` (by the allocation that holds them
 * with other bytes) to `to`, as if they had been charged there: from's peak
 * goes back to from_peak_before (its peak before that allocation) unless
 * what it still holds is more. Both tags on the same side (device or host);
 * the totals do not change. */
void zs__mem_move(zs__mem *mem, zs_mem_tag from, zs_mem_tag to, size_t bytes,
                  uint64_t from_peak_before);

/* Zero-filled, ZS_HOST_ALIGNMENT-aligned host memory charged to tag. A
 * zero-byte request succeeds with *out = NULL. The failure message names the
 * tag and the size. */
zs_status zs__mem_host_alloc(zs__mem *mem, zs_mem_tag tag, size_t bytes, void **out);
/* ptr may be NULL; bytes must be what was requested. */
void zs__mem_host_free(zs__mem *mem, zs_mem_tag tag, void *ptr, size_t bytes);
/* Zeroes fresh host memory, large ranges on every OpenMP thread (first
 * touch maps the pages: in parallel it runs at several times one thread's
 * rate; bench/offload/bench_host_alloc measures it). */
void zs__host_zero(void *ptr, size_t bytes);

/* "71.2 GiB", "1.21 GiB", "512 B" into buf (returned): binary units, three
 * digits at least, so that sizes near a device's memory do not round to the
 * same text. The one byte formatter of the library and its tools. */
const char *zs__bytes_text(char *buf, size_t cap, double bytes);

/* Overflow-checked a * b and a + b for sizes; return 0 on overflow. */
int zs__mul_size(size_t a, size_t b, size_t *out);
int zs__add_size(size_t a, size_t b, size_t *out);

#endif
