/* The NVMe tier of the optimizer (offload.optimizer = "nvme", ZeRO-Infinity):
 * this rank's fp32 master weights and moments live in its swap file
 * (swap.h), not in memory.
 *
 * Layout: the rank's state index space [0, state_numel) (the shard layout
 * of zs_build) is cut into chunks of chunk_numel elements. Chunk k holds,
 * one after another, chunk_numel elements of each array (master, then the
 * first moment, then the second), each a swap block with its own checksum:
 * a chunk moves as one aligned request per array, all in flight at once on
 * as many I/O threads.
 *
 * Two ways in:
 *   - the sweep, for the optimizer step: every chunk in order through three
 *     I/O buffers, reading the next chunk ahead and writing the last one
 *     behind while the caller updates the current one;
 *   - get/put of any range, through a one-chunk write-back cache in a
 *     fourth buffer of its own, for initialization, import, checkpoints,
 *     digests and the gathers of parameters kept on NVMe.
 * A chunk never written (initialization writes only chunks that hold
 * parameters) reads as zeros, which is what the memory tiers hold there.
 *
 * Threads: every call is thread-safe, and a get or put runs beside a sweep
 * (the pipeline's worker sweeps unit u + 1 while a stage-3 gather reads unit
 * u's master weights). Sweeps take turns. A sweep holds a window of at most
 * three chunks (read ahead, visited, written behind) and gives each back
 * once its write is done; a get or put of a chunk in the window waits for
 * it, and sees what the sweep wrote. No lock is held across I/O or the
 * visitor. The swap's I/O threads are internal. */
#ifndef ZS_OFFLOAD_NVME_STATE_H
#define ZS_OFFLOAD_NVME_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "core/memory.h"
#include "zeroshard.h"

/* The layout, computed from the sizes alone (the memory plan uses it to
 * report what zs_build will hold). */
typedef struct zs__nvme_layout {
    int arrays;             /* 1 (master) + moments: 1, 2 or 3 */
    int64_t state_numel;    /* elements of each array on this rank */
    int64_t chunk_numel;    /* elements of each array per chunk */
    int64_t chunks;         /* ceil(state_numel / chunk_numel) */
    size_t io_bytes;        /* chunk_numel x 4: one array's part, a swap block (a multiple of
                               ZS_SWAP_ALIGNMENT) */
    size_t block_bytes;     /* arrays x io_bytes: one chunk, one I/O buffer */
} zs__nvme_layout;

/* Chunks as large as fit `buffer_bytes` (offload.buffer_bytes), in whole
 * pages of each array, and at least one page per array. */
void zs__nvme_layout_make(int arrays, int64_t state_numel, int64_t buffer_bytes,
                          zs__nvme_layout *out);
/* The host memory the tier holds: its four chunk buffers, three for the
 * sweep and one for the get/put cache (tag offload_staging), and the swap
 * file's checksum table (tag host_state). */
uint64_t zs__nvme_buffer_bytes(const zs__nvme_layout *layout);
uint64_t zs__nvme_table_bytes(const zs__nvme_layout *layout);

typedef struct zs__nvme_state zs__nvme_state;

/* Creates the rank's swap file under dir (swap.h: per-run directory named by
 * runid, shared by the ranks of the job) with room for every chunk, and its
 * buffers. The file's bytes are charged to ZS_MEM_NVME_STATE. */
zs_status zs__nvme_state_create(const char *dir, int rank, const char *runid,
                                const zs__nvme_layout *layout, zs__mem *mem,
                                zs__nvme_state **out);
/* Removes the swap file (and the per-run directory when this rank is the
 * last one in it). NULL is a no-op. */
void zs__nvme_state_destroy(zs__nvme_state *ns);

/* Copies `count` elements of `array` (0 master, 1 first moment, 2 second)
 * from state index `index` into dst, or from src into the tier. A put stays
 * in the cache until another chunk is touched, a sweep takes its chunk, or
 * zs__nvme_state_flush. Synchronous; while a sweep runs, a chunk the sweep
 * holds is waited for (a few chunks' I/O at most, not the sweep). Errors
 * name the swap file, the byte offset and the chunk. */
zs_status zs__nvme_state_get(zs__nvme_state *ns, int array, int64_t index, int64_t count,
                             float *dst);
zs_status zs__nvme_state_put(zs__nvme_state *ns, int array, int64_t index, int64_t count,
                             const float *src);
zs_status zs__nvme_state_flush(zs__nvme_state *ns);
/* Starts over with every element zero and the state usable again, even
 * after it was lost (zs_load then writes a checkpoint's values over it).
 * Waits for a running sweep to end. Fails only when a request is still
 * stuck past its deadline. */
zs_status zs__nvme_state_reset(zs__nvme_state *ns);

/* One chunk of the sweep: elements [first, first + count) of the state
 * index space, and each array's values for them (arrays[a][0] is element
 * `first`; arrays past layout.arrays are NULL). The visitor may change them;
 * the sweep writes them back. */
typedef zs_status (*zs__nvme_visit)(void *ctx, int64_t first, int64_t count, float *const *arrays);
/* Visits every chunk that overlaps state elements [first, end), in order,
 * with read-ahead and, with write_back, write-behind (whole chunks are
 * visited: the caller clips). Returns once every request has completed, so
 * a following sweep sees what this one wrote. On an error (the visitor's or
 * the disk's) it waits for the requests in flight and returns the first
 * error; chunks before the failing one are updated, the others are not (the
 * step is lost; the last checkpoint is intact). Thread-safe: sweeps take
 * turns, and gets and puts of chunks outside the window go on meanwhile
 * (the visitor must not get or put a chunk of its own sweep: it would wait
 * for itself). */
zs_status zs__nvme_state_sweep(zs__nvme_state *ns, int64_t first, int64_t end, int write_back,
                               zs__nvme_visit visit, void *ctx);

/* Names what a range of the state index space holds (the zero layer's
 * units), for messages: the chunk's label then reads "... of unit 'h.3'". */
typedef void (*zs__nvme_namer)(void *ctx, int64_t first, int64_t end, char *out, size_t cap);
void zs__nvme_state_set_namer(zs__nvme_state *ns, zs__nvme_namer namer, void *ctx);

const zs__nvme_layout *zs__nvme_state_layout(const zs__nvme_state *ns);
/* The swap file's path (unlinked: for messages), and for tests its
 * descriptor (to flip a byte or truncate it). */
const char *zs__nvme_state_path(const zs__nvme_state *ns);
int zs__nvme_state_fd_for_test(const zs__nvme_state *ns);

#endif
