/* The optimizer state's NVMe tier (nvme_state.h). */
#include "offload/nvme_state.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "offload/swap.h"

/* Slots 0-2 are the sweep's (read-ahead, update, write-behind); slot 3 is
 * the get/put cache's own, so a get never waits for a sweep to give a slot
 * back. */
#define SWEEP_SLOTS 3
#define CACHE_SLOT 3
#define SLOTS 4
#define PAGE_FLOATS (ZS_SWAP_ALIGNMENT / (int64_t)sizeof(float))

struct zs__nvme_state {
    zs__swap *swap;
    zs__mem *mem;
    zs__nvme_layout layout;
    float *slot[SLOTS];
    /* One request per array of the slot's chunk. The sweep's slots are used
     * by the sweeping thread only, the cache's by the holder of the cache
     * (cache_busy): neither needs the lock. */
    zs__swap_req *req[SLOTS][3];
    /* Two threads use the tier at once: the host optimizer's sweeps a unit
     * while the main thread (or the comm engine's) gathers the unit before
     * it, with parameters on NVMe, through the cache. So that a gather waits
     * only for the chunks the sweep holds (a boundary chunk the two units
     * share), not for the unit's whole update, no lock is held across I/O
     * or the visitor:
     *   - sweep_lock serializes sweeps (the next unit's sweep reads what
     *     this one wrote where they share a chunk);
     *   - lock guards the fields below, for bookkeeping only; `changed` is
     *     signalled whenever the window shrinks, the cache is given back or
     *     the state is lost. */
    pthread_mutex_t sweep_lock;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    /* Chunks [window_lo, window_hi) belong to the running sweep: being read,
     * visited or written behind. The swap may not have two requests on one
     * block in flight (a write marks its blocks unwritten until it is done,
     * so a read beside it fails), and a copy taken while the sweep changes a
     * chunk would be stale: the cache touches none of them. Empty (lo == hi)
     * between sweeps. */
    int64_t window_lo, window_hi;
    /* The get/put cache: blocks of one chunk in the cache slot. A reader of
     * one array (a stage-3 gather of master weights) reads only that
     * array's blocks. The cached chunk is never in the window: the sweep
     * flushes and forgets it before taking it. */
    int64_t cached;    /* the chunk whose blocks the cache slot holds, or -1 */
    unsigned valid;    /* bit a: array a's block of `cached` is in the cache slot */
    unsigned dirty;    /* bit a: ... and was changed by a put */
    /* The cache slot is in use (I/O or a copy, with the lock dropped) by one
     * caller, moving to chunk busy_chunk: other gets and puts wait, and the
     * sweep waits before taking busy_chunk or the cached chunk. A holder
     * waits for nothing but its own I/O, so the sweep's wait is short and
     * cannot close a cycle. */
    int cache_busy;
    int64_t busy_chunk;
    int stuck;         /* a request passed its deadline (see destroy) */
    uint64_t charged;  /* bytes charged to ZS_MEM_NVME_STATE */
    /* After a failed read or write the state on disk is not what the
     * optimizer last computed; every later use fails with the first reason
     * instead of training on from it. Under `lock`. */
    zs_status lost;
    char lost_message[768];
    zs__nvme_namer namer;
    void *namer_ctx;
};

void zs__nvme_layout_make(int arrays, int64_t state_numel, int64_t buffer_bytes,
                          zs__nvme_layout *out) {
    memset(out, 0, sizeof *out);
    out->arrays = arrays;
    out->state_numel = state_numel;
    int64_t pages = buffer_bytes / (int64_t)sizeof(float) / arrays / PAGE_FLOATS;
    if (pages < 1) pages = 1;
    out->chunk_numel = pages * PAGE_FLOATS;
    /* No chunk larger than the state itself (rounded to a page). */
    const int64_t state_pages = (state_numel + PAGE_FLOATS - 1) / PAGE_FLOATS;
    if (state_pages > 0 && out->chunk_numel > state_pages * PAGE_FLOATS)
        out->chunk_numel = state_pages * PAGE_FLOATS;
    out->chunks = (state_numel + out->chunk_numel - 1) / out->chunk_numel;
    out->io_bytes = (size_t)out->chunk_numel * sizeof(float);
    out->block_bytes = (size_t)arrays * out->io_bytes;
}

uint64_t zs__nvme_buffer_bytes(const zs__nvme_layout *layout) {
    return (uint64_t)SLOTS * layout->block_bytes;
}

uint64_t zs__nvme_table_bytes(const zs__nvme_layout *layout) {
    return (uint64_t)layout->chunks * (uint64_t)layout->arrays * ZS_SWAP_META_BYTES_PER_BLOCK;
}

/* Both of these with the lock held. */
static zs_status check_usable(const zs__nvme_state *ns) {
    if (ns->lost == ZS_OK) return ZS_OK;
    return zs__fail(ns->lost, "%s: the optimizer state on NVMe was lost by an earlier failure "
                    "(%s); load the last checkpoint (zs_load, or a new run with "
                    "checkpoint.resume)", zs__swap_path(ns->swap), ns->lost_message);
}

static zs_status lose(zs__nvme_state *ns, zs_status st) {
    if (st != ZS_OK && ns->lost == ZS_OK) {
        ns->lost = st;
        snprintf(ns->lost_message, sizeof ns->lost_message, "%s", zs_last_error());
        /* A get waiting for a chunk of a failed sweep gives up now. */
        pthread_cond_broadcast(&ns->changed);
    }
    return st;
}

static void chunk_label(const zs__nvme_state *ns, int64_t chunk, int array, char *out, size_t cap) {
    /* Two arrays are SGD's master and momentum; three are Adam's. */
    static const char *const adam[3] = {"master weights", "first moments", "second moments"};
    static const char *const sgd[2] = {"master weights", "momentum"};
    const char *const *arrays = ns->layout.arrays == 2 ? sgd : adam;
    const int64_t first = chunk * ns->layout.chunk_numel;
    int64_t end = first + ns->layout.chunk_numel;
    if (end > ns->layout.state_numel) end = ns->layout.state_numel;
    char what[160] = "";
    if (ns->namer) ns->namer(ns->namer_ctx, first, end, what, sizeof what);
    snprintf(out, cap, "%s of optimizer state chunk %lld (state elements [%lld, %lld)%s%s)",
             arrays[array], (long long)chunk, (long long)first, (long long)end,
             what[0] ? " of " : "", what);
}

/* Array a of chunk k: one swap block (its own request and checksum), so a
 * chunk moves as `arrays` requests at once, one per I/O thread. */
static uint64_t block_offset(const zs__nvme_state *ns, int64_t k, int a) {
    return ((uint64_t)k * (uint64_t)ns->layout.arrays + (uint64_t)a) * ns->layout.io_bytes;
}

static float *block_at(const zs__nvme_state *ns, int s, int a) {
    return ns->slot[s] + (size_t)a * (size_t)ns->layout.chunk_numel;
}

static int64_t chunk_count(const zs__nvme_state *ns, int64_t chunk) {
    const int64_t first = chunk * ns->layout.chunk_numel;
    const int64_t left = ns->layout.state_numel - first;
    return left < ns->layout.chunk_numel ? left : ns->layout.chunk_numel;
}

/* Starts moving array a of chunk k out of slot s (is_write) or into it; a
 * block never written reads as zeros, at once. Only the sweep and the
 * cache's holder call this, on chunks no one else is moving (the window),
 * so the block's written flag cannot change under the check. */
static zs_status submit_block(zs__nvme_state *ns, int64_t k, int a, int s, int is_write) {
    ns->req[s][a] = NULL;
    if (!is_write && !zs__swap_written(ns->swap, block_offset(ns, k, a))) {
        memset(block_at(ns, s, a), 0, ns->layout.io_bytes);
        return ZS_OK;
    }
    char label[320];
    chunk_label(ns, k, a, label, sizeof label);
    return is_write ? zs__swap_write(ns->swap, block_offset(ns, k, a), block_at(ns, s, a),
                                     ns->layout.io_bytes, label, &ns->req[s][a])
                    : zs__swap_read(ns->swap, block_offset(ns, k, a), block_at(ns, s, a),
                                    ns->layout.io_bytes, label, &ns->req[s][a]);
}

/* A whole chunk: every array at once, one request each. */
static zs_status start_chunk(zs__nvme_state *ns, int64_t k, int s, int is_write) {
    for (int a = 0; a < ns->layout.arrays; a++) ZS_CHECK(submit_block(ns, k, a, s, is_write));
    return ZS_OK;
}

/* Waits for every request of slot s; the first failure is returned (all
 * are waited for, so the slot's buffer is free either way). Called without
 * the lock: this is the wait the other thread must not sit behind. */
static zs_status finish(zs__nvme_state *ns, int s) {
    zs_status first = ZS_OK;
    char message[768] = "";
    for (int a = 0; a < 3; a++) {
        zs__swap_req *r = ns->req[s][a];
        ns->req[s][a] = NULL;
        zs_status st = r ? zs__swap_wait(ns->swap, r) : ZS_OK;
        if (st == ZS_ERR_TIMEOUT) {
            pthread_mutex_lock(&ns->lock);
            ns->stuck = 1;
            pthread_mutex_unlock(&ns->lock);
        }
        if (st != ZS_OK && first == ZS_OK) {
            first = st;
            snprintf(message, sizeof message, "%s", zs_last_error());
        }
    }
    return first == ZS_OK ? ZS_OK : zs__fail(first, "%s", message);
}

zs_status zs__nvme_state_create(const char *dir, int rank, const char *runid,
                                const zs__nvme_layout *layout, zs__mem *mem,
                                zs__nvme_state **out) {
    *out = NULL;
    zs__nvme_state *ns = zs__calloc(1, sizeof *ns);
    if (!ns) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "offload.nvme: out of host memory");
    ns->layout = *layout;
    ns->mem = mem;
    ns->cached = -1;
    pthread_mutex_init(&ns->sweep_lock, NULL);
    pthread_mutex_init(&ns->lock, NULL);
    pthread_cond_init(&ns->changed, NULL);
    zs__swap_config cfg = ZS__SWAP_CONFIG_INIT;
    cfg.runid = runid;
    cfg.io_threads = layout->arrays; /* a chunk's arrays move at once */
    const uint64_t capacity = (uint64_t)layout->chunks * layout->block_bytes;
    zs_status st = zs__swap_create_with(dir, rank, capacity, layout->io_bytes, &cfg, mem, &ns->swap);
    for (int s = 0; s < SLOTS && st == ZS_OK; s++)
        st = zs__swap_buffer_alloc(ns->swap, layout->block_bytes, ZS_MEM_OFFLOAD_STAGING,
                                   (void **)&ns->slot[s]);
    if (st != ZS_OK) {
        zs__nvme_state_destroy(ns);
        return st;
    }
    if (mem) {
        zs__mem_charge(mem, ZS_MEM_NVME_STATE, (size_t)capacity);
        ns->charged = capacity;
    }
    *out = ns;
    return ZS_OK;
}

void zs__nvme_state_destroy(zs__nvme_state *ns) {
    if (!ns) return;
    if (ns->charged) zs__mem_uncharge(ns->mem, ZS_MEM_NVME_STATE, (size_t)ns->charged);
    /* A request past its deadline still owns its buffer until the swap is
     * destroyed (which then leaks itself rather than free what a stuck
     * thread uses): then the buffers are left alone too. */
    for (int s = 0; s < SLOTS && !ns->stuck; s++)
        if (ns->slot[s]) zs__swap_buffer_free(ns->swap, ns->slot[s], ns->layout.block_bytes,
                                              ZS_MEM_OFFLOAD_STAGING);
    zs__swap_destroy(ns->swap);
    pthread_cond_destroy(&ns->changed);
    pthread_mutex_destroy(&ns->lock);
    pthread_mutex_destroy(&ns->sweep_lock);
    free(ns);
}

/* One block (array a of chunk k) into or out of slot s, waited for. */
static zs_status move_block(zs__nvme_state *ns, int64_t k, int a, int s, int is_write) {
    zs_status st = submit_block(ns, k, a, s, is_write);
    if (st == ZS_OK) st = finish(ns, s);
    return st;
}

/* Writes back the blocks of chunk k that puts changed (bits of `dirty`),
 * from the cache slot. The caller holds the cache (cache_busy), not the
 * lock; k is outside the window, so no sweep moves it meanwhile. */
static zs_status write_dirty(zs__nvme_state *ns, int64_t k, unsigned dirty) {
    for (int a = 0; a < ns->layout.arrays; a++)
        if (dirty & (1u << a)) ZS_CHECK(move_block(ns, k, a, CACHE_SLOT, 1));
    return ZS_OK;
}

/* The lock is held on entry and on return; it is dropped while the cache
 * slot is written, with the cache held (cache_busy) so no one else uses the
 * slot or takes the chunk. */
static zs_status flush_locked(zs__nvme_state *ns) {
    while (ns->cache_busy) pthread_cond_wait(&ns->changed, &ns->lock);
    ZS_CHECK(check_usable(ns));
    if (!ns->dirty) return ZS_OK;
    const int64_t k = ns->cached;
    const unsigned dirty = ns->dirty;
    ns->cache_busy = 1;
    ns->busy_chunk = k;
    pthread_mutex_unlock(&ns->lock);
    zs_status st = write_dirty(ns, k, dirty);
    pthread_mutex_lock(&ns->lock);
    /* Clean even after a failure: the state is lost then, and a write is
     * not tried twice. */
    ns->dirty = 0;
    ns->cache_busy = 0;
    pthread_cond_broadcast(&ns->changed);
    return lose(ns, st);
}

zs_status zs__nvme_state_flush(zs__nvme_state *ns) {
    pthread_mutex_lock(&ns->lock);
    zs_status st = flush_locked(ns);
    pthread_mutex_unlock(&ns->lock);
    return st;
}

zs_status zs__nvme_state_reset(zs__nvme_state *ns) {
    /* No sweep and no cache I/O may be in flight while the swap forgets its
     * blocks. The callers (zs_load) have waited for the pipeline's pass
     * already; taking the sweep lock makes it so regardless. */
    pthread_mutex_lock(&ns->sweep_lock);
    pthread_mutex_lock(&ns->lock);
    while (ns->cache_busy) pthread_cond_wait(&ns->changed, &ns->lock);
    zs_status st = ZS_OK;
    if (ns->stuck) {
        st = zs__fail(ZS_ERR_IO, "%s: a read or write is still stuck in the kernel; the NVMe tier "
                      "cannot start over in this process (%s)", zs__swap_path(ns->swap),
                      ns->lost_message);
    } else {
        zs__swap_forget(ns->swap);
        ns->cached = -1;
        ns->valid = ns->dirty = 0;
        ns->lost = ZS_OK;
        ns->lost_message[0] = '\0';
    }
    pthread_mutex_unlock(&ns->lock);
    pthread_mutex_unlock(&ns->sweep_lock);
    return st;
}

static int in_window(const zs__nvme_state *ns, int64_t k) {
    return k >= ns->window_lo && k < ns->window_hi;
}

/* Elements [at, at + n) of `array` in chunk k, into dst or from src,
 * through the cache. The lock is held on entry and on return, and dropped
 * for the I/O and the copy while this caller holds the cache. */
static zs_status copy_chunk(zs__nvme_state *ns, int64_t k, int array, int64_t at, int64_t n,
                            float *dst, const float *src) {
    /* A chunk in the sweep's window is waited for: the disk holds an old
     * copy of it (or, mid-write, one the swap refuses to read), and the
     * sweep's copy is not ours to read. */
    while (ns->lost == ZS_OK && (ns->cache_busy || in_window(ns, k)))
        pthread_cond_wait(&ns->changed, &ns->lock);
    ZS_CHECK(check_usable(ns));
    /* Held from here: the sweep will not take k (nor the cached chunk,
     * which may be written back below) until it is given back. The cache's
     * fields change under the lock only, at the end; locals until then. */
    ns->cache_busy = 1;
    ns->busy_chunk = k;
    int64_t cached = ns->cached;
    unsigned valid = ns->valid, dirty = ns->dirty;
    pthread_mutex_unlock(&ns->lock);
    zs_status st = ZS_OK;
    if (cached != k) {
        /* The cached chunk is outside the window (the sweep forgets a
         * chunk before taking it), so writing it back races nothing. */
        if (cached >= 0) st = write_dirty(ns, cached, dirty);
        cached = k;
        valid = dirty = 0;
    }
    const unsigned bit = 1u << array;
    if (st == ZS_OK && !(valid & bit)) {
        st = move_block(ns, k, array, CACHE_SLOT, 0);
        if (st == ZS_OK) valid |= bit;
    }
    if (st == ZS_OK) {
        float *cell = block_at(ns, CACHE_SLOT, array) + (size_t)at;
        if (dst) {
            memcpy(dst, cell, (size_t)n * sizeof(float));
        } else {
            memcpy(cell, src, (size_t)n * sizeof(float));
            dirty |= bit;
        }
    }
    pthread_mutex_lock(&ns->lock);
    if (st == ZS_OK) {
        ns->cached = cached;
        ns->valid = valid;
        ns->dirty = dirty;
    } else {
        /* The state is lost; the cache holds nothing worth writing. */
        ns->cached = -1;
        ns->valid = ns->dirty = 0;
    }
    ns->cache_busy = 0;
    pthread_cond_broadcast(&ns->changed);
    return lose(ns, st);
}

/* get and put: the same walk over the chunks of a range, with the lock. */
static zs_status copy_range(zs__nvme_state *ns, int array, int64_t index, int64_t count, float *dst,
                            const float *src) {
    ZS_CHECK(check_usable(ns));
    const zs__nvme_layout *l = &ns->layout;
    if (array < 0 || array >= l->arrays || index < 0 || count < 0 || index + count > l->state_numel)
        return zs__fail(ZS_ERR_INTERNAL, "%s: state range [%lld, %lld) of array %d is outside "
                        "the %lld x %d elements held", zs__swap_path(ns->swap), (long long)index,
                        (long long)(index + count), array, (long long)l->state_numel, l->arrays);
    while (count > 0) {
        const int64_t k = index / l->chunk_numel;
        const int64_t at = index - k * l->chunk_numel;
        const int64_t n = l->chunk_numel - at < count ? l->chunk_numel - at : count;
        ZS_CHECK(copy_chunk(ns, k, array, at, n, dst, src));
        if (dst) dst += n;
        else src += n;
        index += n;
        count -= n;
    }
    return ZS_OK;
}

zs_status zs__nvme_state_get(zs__nvme_state *ns, int array, int64_t index, int64_t count,
                             float *dst) {
    pthread_mutex_lock(&ns->lock);
    zs_status st = copy_range(ns, array, index, count, dst, NULL);
    pthread_mutex_unlock(&ns->lock);
    return st;
}

zs_status zs__nvme_state_put(zs__nvme_state *ns, int array, int64_t index, int64_t count,
                             const float *src) {
    pthread_mutex_lock(&ns->lock);
    zs_status st = copy_range(ns, array, index, count, NULL, src);
    pthread_mutex_unlock(&ns->lock);
    return st;
}

/* The sweep takes chunk k into its window, before reading it. If the cache
 * holds k, its changes are written back first (the sweep must read them)
 * and it is forgotten (the sweep is about to change k on the disk). The lock
 * is held on entry and on return; dropped while the cache is written. */
static zs_status take_chunk(zs__nvme_state *ns, int64_t k) {
    /* Wait only for a holder that moves k; one moving another chunk goes on
     * beside the sweep. */
    while (ns->cache_busy && (ns->busy_chunk == k || ns->cached == k))
        pthread_cond_wait(&ns->changed, &ns->lock);
    /* A get that failed meanwhile lost the state: stop with its reason. */
    ZS_CHECK(check_usable(ns));
    zs_status st = ZS_OK;
    if (ns->cached == k) {
        if (ns->dirty) {
            const unsigned dirty = ns->dirty;
            ns->cache_busy = 1;
            ns->busy_chunk = k;
            pthread_mutex_unlock(&ns->lock);
            st = write_dirty(ns, k, dirty);
            pthread_mutex_lock(&ns->lock);
            ns->cache_busy = 0;
        }
        ns->cached = -1;
        ns->valid = ns->dirty = 0;
    }
    /* Taken in the same hold of the lock that gave the cache back, so no
     * get slips in between and reads k. */
    if (st == ZS_OK) {
        if (ns->window_lo == ns->window_hi) ns->window_lo = k;
        ns->window_hi = k + 1;
    }
    pthread_cond_broadcast(&ns->changed);
    return lose(ns, st);
}

static zs_status take(zs__nvme_state *ns, int64_t k) {
    pthread_mutex_lock(&ns->lock);
    zs_status st = take_chunk(ns, k);
    pthread_mutex_unlock(&ns->lock);
    return st;
}

/* The sweep is done with every chunk before k: a get waiting for one goes
 * on. */
static void release_before(zs__nvme_state *ns, int64_t k) {
    pthread_mutex_lock(&ns->lock);
    if (k > ns->window_hi) k = ns->window_hi;
    if (k > ns->window_lo) {
        ns->window_lo = k;
        pthread_cond_broadcast(&ns->changed);
    }
    pthread_mutex_unlock(&ns->lock);
}

static zs_status sweep(zs__nvme_state *ns, int64_t first, int64_t end, int write_back,
                       zs__nvme_visit visit, void *ctx);

zs_status zs__nvme_state_sweep(zs__nvme_state *ns, int64_t first, int64_t end, int write_back,
                               zs__nvme_visit visit, void *ctx) {
    pthread_mutex_lock(&ns->sweep_lock);
    zs_status st = sweep(ns, first, end, write_back, visit, ctx);
    pthread_mutex_unlock(&ns->sweep_lock);
    return st;
}

static zs_status sweep(zs__nvme_state *ns, int64_t first, int64_t end, int write_back,
                       zs__nvme_visit visit, void *ctx) {
    pthread_mutex_lock(&ns->lock);
    zs_status st = check_usable(ns);
    pthread_mutex_unlock(&ns->lock);
    ZS_CHECK(st);
    const zs__nvme_layout *l = &ns->layout;
    if (first < 0) first = 0;
    if (end > l->state_numel) end = l->state_numel;
    if (first >= end) return ZS_OK;
    /* Chunks k0 .. k1 - 1 overlap [first, end); slot k % SWEEP_SLOTS holds
     * chunk k. The window holds at most three chunks (k - 1 written behind,
     * k visited, k + 1 read ahead), one per slot. */
    const int64_t k0 = first / l->chunk_numel;
    const int64_t k1 = (end + l->chunk_numel - 1) / l->chunk_numel;
    st = take(ns, k0);
    if (st == ZS_OK) st = start_chunk(ns, k0, (int)(k0 % SWEEP_SLOTS), 0);
    for (int64_t k = k0; k < k1 && st == ZS_OK; k++) {
        const int s = (int)(k % SWEEP_SLOTS);
        if (k + 1 < k1) {
            /* The next chunk's slot held chunk k - 2, written behind; once
             * that write is done, chunk k - 2 is the cache's again. */
            const int next = (int)((k + 1) % SWEEP_SLOTS);
            st = finish(ns, next);
            if (st != ZS_OK) break;
            if (write_back) release_before(ns, k - 1);
            st = take(ns, k + 1);
            if (st == ZS_OK) st = start_chunk(ns, k + 1, next, 0);
            if (st != ZS_OK) break;
        }
        st = finish(ns, s);
        if (st != ZS_OK) break;
        float *arrays[3] = {NULL, NULL, NULL};
        for (int a = 0; a < l->arrays; a++) arrays[a] = block_at(ns, s, a);
        st = visit(ctx, k * l->chunk_numel, chunk_count(ns, k), arrays);
        if (st != ZS_OK) break;
        /* Read only: the disk still holds k as it is, so it is released at
         * once; otherwise once its write-behind is done. */
        if (write_back) st = start_chunk(ns, k, s, 1);
        else release_before(ns, k + 1);
    }
    /* A failure loses the state before any chunk is released, so a get
     * waiting for one fails too instead of reading what a failed write left
     * (a block marked unwritten reads as zeros). */
    char first_error[768] = "";
    if (st != ZS_OK) {
        snprintf(first_error, sizeof first_error, "%s", zs_last_error());
        pthread_mutex_lock(&ns->lock);
        lose(ns, st);
        pthread_mutex_unlock(&ns->lock);
    }
    /* Drain, in chunk order, releasing each chunk once its requests are
     * done: every request in flight is one of a chunk in the window, so none
     * is left on return and the next sweep reads what this one wrote. */
    pthread_mutex_lock(&ns->lock);
    const int64_t lo = ns->window_lo, hi = ns->window_hi;
    pthread_mutex_unlock(&ns->lock);
    for (int64_t j = lo; j < hi; j++) {
        zs_status d = finish(ns, (int)(j % SWEEP_SLOTS));
        if (d != ZS_OK && st == ZS_OK) {
            st = d;
            snprintf(first_error, sizeof first_error, "%s", zs_last_error());
            pthread_mutex_lock(&ns->lock);
            lose(ns, d);
            pthread_mutex_unlock(&ns->lock);
        }
        if (st == ZS_OK) release_before(ns, j + 1);
    }
    pthread_mutex_lock(&ns->lock);
    ns->window_lo = ns->window_hi = 0;
    pthread_cond_broadcast(&ns->changed);
    pthread_mutex_unlock(&ns->lock);
    return st == ZS_OK ? ZS_OK : zs__fail(st, "%s", first_error);
}

void zs__nvme_state_set_namer(zs__nvme_state *ns, zs__nvme_namer namer, void *ctx) {
    ns->namer = namer;
    ns->namer_ctx = ctx;
}

const zs__nvme_layout *zs__nvme_state_layout(const zs__nvme_state *ns) { return &ns->layout; }
const char *zs__nvme_state_path(const zs__nvme_state *ns) { return zs__swap_path(ns->swap); }
int zs__nvme_state_fd_for_test(const zs__nvme_state *ns) { return zs__swap_fd_for_test(ns->swap); }
