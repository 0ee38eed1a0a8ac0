/* The optimizer state's NVMe tier (nvme_state.h). */
#include "offload/nvme_state.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "offload/swap.h"

#define SLOTS 3 /* read-ahead, update, write-behind */
#define PAGE_FLOATS (ZS_SWAP_ALIGNMENT / (int64_t)sizeof(float))

struct zs__nvme_state {
    zs__swap *swap;
    zs__mem *mem;
    zs__nvme_layout layout;
    float *slot[SLOTS];
    zs__swap_req *req[SLOTS][3]; /* one request per array of the slot's chunk */
    /* The get/put cache lives in slot 0 between sweeps, block by block: a
     * reader of one array (a stage-3 gather of master weights) reads only
     * that array's blocks. */
    int64_t cached;    /* the chunk whose blocks slot 0 holds, or -1 */
    unsigned valid;    /* bit a: array a's block of `cached` is in slot 0 */
    unsigned dirty;    /* bit a: ... and was changed by a put */
    /* Callers may be two threads (the program's, and the comm engine's for
     * stage-3 gathers of parameters kept on NVMe); every entry point holds
     * this, so they take turns. */
    pthread_mutex_t lock;
    int stuck;         /* a request passed its deadline (see destroy) */
    uint64_t charged;  /* bytes charged to ZS_MEM_NVME_STATE */
    /* After a failed read or write the state on disk is not what the
     * optimizer last computed; every later use fails with the first reason
     * instead of training on from it. */
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
 * block never written reads as zeros, at once. */
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
 * are waited for, so the slot's buffer is free either way). */
static zs_status finish(zs__nvme_state *ns, int s) {
    zs_status first = ZS_OK;
    char message[768] = "";
    for (int a = 0; a < 3; a++) {
        zs__swap_req *r = ns->req[s][a];
        ns->req[s][a] = NULL;
        zs_status st = r ? zs__swap_wait(ns->swap, r) : ZS_OK;
        if (st == ZS_ERR_TIMEOUT) ns->stuck = 1;
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
    pthread_mutex_init(&ns->lock, NULL);
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
    pthread_mutex_destroy(&ns->lock);
    free(ns);
}

/* One block (array a of chunk k) into or out of slot s, waited for. */
static zs_status move_block(zs__nvme_state *ns, int64_t k, int a, int s, int is_write) {
    zs_status st = submit_block(ns, k, a, s, is_write);
    if (st == ZS_OK) st = finish(ns, s);
    return st;
}

static zs_status flush_cache(zs__nvme_state *ns) {
    for (int a = 0; a < ns->layout.arrays; a++)
        if (ns->dirty & (1u << a)) {
            ns->dirty &= ~(1u << a);
            ZS_CHECK(lose(ns, move_block(ns, ns->cached, a, 0, 1)));
        }
    return ZS_OK;
}

zs_status zs__nvme_state_flush(zs__nvme_state *ns) {
    pthread_mutex_lock(&ns->lock);
    zs_status st = check_usable(ns);
    if (st == ZS_OK) st = flush_cache(ns);
    pthread_mutex_unlock(&ns->lock);
    return st;
}

zs_status zs__nvme_state_reset(zs__nvme_state *ns) {
    pthread_mutex_lock(&ns->lock);
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
    return st;
}

static zs_status cache_block(zs__nvme_state *ns, int64_t k, int a) {
    if (ns->cached != k) {
        ZS_CHECK(flush_cache(ns));
        ns->cached = k;
        ns->valid = 0;
    }
    if (ns->valid & (1u << a)) return ZS_OK;
    ZS_CHECK(lose(ns, move_block(ns, k, a, 0, 0)));
    ns->valid |= 1u << a;
    return ZS_OK;
}

/* get and put: the same walk over the chunks of a range. */
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
        ZS_CHECK(cache_block(ns, k, array));
        float *cell = ns->slot[0] + (size_t)array * (size_t)l->chunk_numel + (size_t)at;
        if (dst) {
            memcpy(dst, cell, (size_t)n * sizeof(float));
            dst += n;
        } else {
            memcpy(cell, src, (size_t)n * sizeof(float));
            src += n;
            ns->dirty |= 1u << array;
        }
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

static zs_status sweep(zs__nvme_state *ns, int64_t first, int64_t end, int write_back,
                       zs__nvme_visit visit, void *ctx);

zs_status zs__nvme_state_sweep(zs__nvme_state *ns, int64_t first, int64_t end, int write_back,
                               zs__nvme_visit visit, void *ctx) {
    pthread_mutex_lock(&ns->lock);
    zs_status st = sweep(ns, first, end, write_back, visit, ctx);
    pthread_mutex_unlock(&ns->lock);
    return st;
}

static zs_status sweep(zs__nvme_state *ns, int64_t first, int64_t end, int write_back,
                       zs__nvme_visit visit, void *ctx) {
    ZS_CHECK(check_usable(ns));
    ZS_CHECK(flush_cache(ns));
    ns->cached = -1; /* slot 0 is the sweep's now */
    ns->valid = 0;
    const zs__nvme_layout *l = &ns->layout;
    if (first < 0) first = 0;
    if (end > l->state_numel) end = l->state_numel;
    if (first >= end) return ZS_OK;
    /* Chunks k0 .. k1 - 1 overlap [first, end); slot k % SLOTS holds chunk k. */
    const int64_t k0 = first / l->chunk_numel;
    const int64_t k1 = (end + l->chunk_numel - 1) / l->chunk_numel;
    zs_status st = start_chunk(ns, k0, (int)(k0 % SLOTS), 0);
    for (int64_t k = k0; k < k1 && st == ZS_OK; k++) {
        const int s = (int)(k % SLOTS);
        if (k + 1 < k1) {
            /* The next chunk's slot held chunk k - 2, written behind. */
            const int next = (int)((k + 1) % SLOTS);
            st = finish(ns, next);
            if (st == ZS_OK) st = start_chunk(ns, k + 1, next, 0);
            if (st != ZS_OK) break;
        }
        st = finish(ns, s);
        if (st != ZS_OK) break;
        float *arrays[3] = {NULL, NULL, NULL};
        for (int a = 0; a < l->arrays; a++) arrays[a] = ns->slot[s] + (size_t)a * (size_t)l->chunk_numel;
        st = visit(ctx, k * l->chunk_numel, chunk_count(ns, k), arrays);
        if (st == ZS_OK && write_back) st = start_chunk(ns, k, s, 1);
    }
    /* Drain: every request waited for, so no buffer is in use on return and
     * the next sweep reads what this one wrote. */
    char first_error[768] = "";
    if (st != ZS_OK) snprintf(first_error, sizeof first_error, "%s", zs_last_error());
    zs_status drained = ZS_OK;
    for (int s = 0; s < SLOTS; s++) {
        zs_status d = finish(ns, s);
        if (d != ZS_OK && drained == ZS_OK) drained = d;
    }
    if (st != ZS_OK) {
        lose(ns, zs__fail(st, "%s", first_error));
        return zs__fail(st, "%s", first_error);
    }
    return lose(ns, drained);
}

void zs__nvme_state_set_namer(zs__nvme_state *ns, zs__nvme_namer namer, void *ctx) {
    ns->namer = namer;
    ns->namer_ctx = ctx;
}

const zs__nvme_layout *zs__nvme_state_layout(const zs__nvme_state *ns) { return &ns->layout; }
const char *zs__nvme_state_path(const zs__nvme_state *ns) { return zs__swap_path(ns->swap); }
int zs__nvme_state_fd_for_test(const zs__nvme_state *ns) { return zs__swap_fd_for_test(ns->swap); }
