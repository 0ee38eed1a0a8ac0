/* The optimizer state store: where a rank's fp32 master weights and moments
 * live (the tier) and which backend computes on them, behind one interface
 * that yields the state in chunks. The zero layer's optimizer step,
 * checkpoints, import, initialization and digests reach the state only
 * through it, so no caller branches on the tier and no backend needs to
 * know that tiers exist.
 *
 * Tiers:
 *   - device: three buffers in the device backend's memory, computed on by
 *     it; one chunk per request. In fp32 without offload there is no
 *     separate master: the parameters are the master (the chunk's master is
 *     NULL and the caller uses its parameters).
 *   - host (offload.optimizer = "host"): three buffers in host memory
 *     (page-locked by the device backend when offload.pin_memory), computed
 *     on by the host backend (the CPU kernels); one chunk per request.
 *   - nvme (offload.optimizer = "nvme"): the swap file of nvme_state.h,
 *     streamed through its three I/O buffers (a fourth holds the get/put
 *     cache); a request is a sweep over the
 *     file's chunks that overlap it, each computed on by the host backend and
 *     written back.
 *
 * The state index space is [0, numel): the zero layer's shard layout (stage
 * 0: the full layout). Not thread-safe, except that one thread may sweep
 * (zs__store_each: the pipeline's worker) while another reads and writes
 * ranges (zs__store_read/write: the stage-3 gathers of parameters on NVMe). */
#ifndef ZS_OFFLOAD_STORE_H
#define ZS_OFFLOAD_STORE_H

#include <stdint.h>

#include <xxhash.h>

#include "backend/backend.h"
#include "offload/nvme_state.h"

typedef enum zs__tier { ZS_TIER_DEVICE = 0, ZS_TIER_HOST = 1, ZS_TIER_NVME = 2 } zs__tier;

const char *zs__tier_name(zs__tier tier);

/* The arrays of the state: master weights, then the moments the optimizer
 * keeps (SGD with momentum: one; Adam: two). */
typedef enum zs__state_array { ZS_STATE_MASTER = 0, ZS_STATE_M = 1, ZS_STATE_V = 2 } zs__state_array;

typedef struct zs__store_spec {
    zs__tier tier;
    int64_t numel;       /* elements of each array on this rank */
    int moments;         /* 0, 1 or 2 */
    int has_master;      /* 0: the parameters are the master (device tier, fp32) */
    zs__backend *device; /* the context's backend: allocates device buffers and page-locked memory */
    zs__backend *host;   /* the host backend: computes on the host and nvme tiers */
    int pin;             /* host tier: page-locked memory (offload.pin_memory) */
    /* nvme tier */
    const zs__nvme_layout *nvme_layout;
    const char *nvme_dir;
    const char *nvme_runid;
    int rank;
    zs__mem *mem;
} zs__store_spec;

typedef struct zs__store {
    zs__tier tier;
    int64_t numel;
    int moments;
    int has_master;
    zs__backend *runner; /* computes on the state's memory */
    zs__buf array[3];    /* device and host tiers (an array not kept has ptr NULL) */
    zs__nvme_state *nvme;
} zs__store;

/* Allocates (zero-filled) or creates the tier. On failure nothing is kept. */
zs_status zs__store_create(zs__store *s, const zs__store_spec *spec);
/* Frees the buffers or removes the swap file; a zeroed store is a no-op. */
void zs__store_destroy(zs__store *s);

/* One chunk: state elements [first, first + count), each array's values for
 * them in the runner's memory (array[a][0] is element `first`; NULL for an
 * array not kept, and for the master when the parameters are the master). */
typedef struct zs__state_chunk {
    int64_t first;
    int64_t count;
    float *array[3];
    zs__backend *runner;
} zs__state_chunk;

typedef zs_status (*zs__store_visit)(void *ctx, const zs__state_chunk *chunk);

/* Visits [first, end) in increasing chunks. With write_back the visitor's
 * changes are kept (nvme: written back; the memory tiers change in place
 * anyway); without it an nvme sweep writes nothing. On the first error the
 * sweep stops and returns it (nvme: after its requests drained; the tier is
 * then lost for good, nvme_state.h). */
zs_status zs__store_each(zs__store *s, int64_t first, int64_t end, int write_back,
                         zs__store_visit visit, void *ctx);

/* Copies `count` elements of an array from state index `index` into host
 * memory (read) or from host memory into the store (write). */
zs_status zs__store_read(zs__store *s, zs__state_array array, int64_t index, int64_t count,
                         float *host);
zs_status zs__store_write(zs__store *s, zs__state_array array, int64_t index, int64_t count,
                          const float *host);
/* The array's memory at `index` for the memory tiers (NULL for nvme and for
 * an array not kept): for the runner's kernels only. */
float *zs__store_at(const zs__store *s, zs__state_array array, int64_t index);
/* 1 when the array is kept. */
int zs__store_keeps(const zs__store *s, zs__state_array array);

/* Makes every write durable in the tier (nvme: the write-back cache). */
zs_status zs__store_flush(zs__store *s);
/* Every element zero again, and a lost nvme tier usable again (zs_load). */
zs_status zs__store_reset(zs__store *s);
/* Adds every kept array's bytes, array by array, to a digest. */
zs_status zs__store_digest(zs__store *s, XXH3_state_t *state);

#endif
