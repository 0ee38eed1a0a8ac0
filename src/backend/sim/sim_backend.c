/* The simulated device (backend = "sim", issue 39): the CUDA backend's
 * behaviour without a GPU, so that the runtime's device path runs, and fails
 * loudly when it is wrong, on every commit.
 *
 *   - Its own memory (sim_arena.h): device addresses the host cannot touch
 *     (a dereference crashes, as on a GPU), charged to the accountant, of
 *     device_memory_bytes (or ZS_SIM_MEMORY_BYTES) at most; out of memory
 *     is reported as CUDA's is.
 *   - Asynchronous (sim_stream.h): one compute stream run later, in order, by
 *     the device's thread, onto which any host thread enqueues; the host
 *     learns of completion only through synchronize, fences and the ops
 *     documented as waiting (download, the sums of squares), each blocking
 *     wait counted as the CUDA backend counts them.
 *   - The host side as CUDA's: host_alloc memory is "page-locked" (its own
 *     arena, registered in chunks by the rule of pinned_chunks.h, shared
 *     with the CUDA backend: a copy that crosses two registrations fails as
 *     cudaMemcpyAsync would), and copies from and to it are asynchronous;
 *     a copy from or to ordinary (pageable) host memory is synchronous for
 *     the host, as CUDA documents for pageable memory.
 *   - The kernels are the CPU backend's, run by the device's thread on its
 *     read-write view of the memory: every result is the CPU's, bit for bit.
 *   - Ranks on one machine share one sim device (its identity is the
 *     machine's boot id), as ranks share a GPU: collectives take the
 *     host-staged MPI path; there is no NCCL.
 *
 * Thread-safe: the program, the comm engine and the host optimizer's thread
 * all enqueue. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_ops.h"
#include "backend/op_access.h"
#include "backend/pinned_chunks.h"
#include "backend/sim/sim_arena.h"
#include "backend/sim/sim_backend.h"
#include "backend/sim/sim_check.h"
#include "backend/sim/sim_stream.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "core/process_identity.h"
#include "core/trace.h"

/* Device memory when device_memory_bytes is 0: a modest GPU's. The file is
 * sparse: only what is allocated and written takes memory. */
#define SIM_MEMORY_DEFAULT ((size_t)16 << 30)
/* Address space for page-locked host memory (sparse as well). */
#define SIM_PINNED_SPACE ((size_t)256 << 30)
/* Blocking waits run the health check this often. */
#define SIM_HEALTH_NS 5000000

typedef struct sim_impl {
    zs__backend *be;
    zs__sim_arena device;
    zs__sim_arena pinned;
    zs__sim_stream *stream;
    size_t pin_chunk;
    char identity[64];
    zs__health_fn health;
    void *health_ctx;
    atomic_uint_fast64_t waits;
    /* The stream-order check and the fault handlers (sim_check.h); its
     * calls about an enqueue happen under enqueue_lock together with the
     * enqueue, so that it sees ops in queue order. */
    zs__sim_check *guard;
    pthread_mutex_t enqueue_lock;
} sim_impl;

static sim_impl *impl_of(const zs__backend *be) { return be->impl; }

/* Declared accesses (op_access.h) are outer addresses, as the program sees
 * them. */
typedef zs__stream_check_range range;
#define rd zs__access_read
#define wr zs__access_write

/* Every enqueue: the op into the queue and, in the same order, into the
 * stream-order check with the bytes it reads and writes; with `fence`, a
 * fence recorded right behind it (for a wait on this op alone). Returns the
 * op's sequence number. */
static uint64_t submit(sim_impl *c, const char *name, zs__sim_op_fn fn, const void *args,
                       size_t args_bytes, zs__sim_kind kind, size_t bytes, const range *ranges,
                       int nranges, const void *fence) {
    pthread_mutex_lock(&c->enqueue_lock);
    const uint64_t seq = zs__sim_stream_enqueue(c->stream, name, fn, args, args_bytes, kind, bytes);
    /* A race aborts inside the check; out of memory leaves it unchecked. */
    (void)zs__sim_check_enqueue(c->guard, name, ranges, nranges);
    if (fence) zs__sim_check_fence_record(c->guard, fence);
    pthread_mutex_unlock(&c->enqueue_lock);
    return seq;
}

/* The device thread's address of any address an op may take: device and
 * page-locked memory through their inner views, other host memory as is. */
static void *inner(const sim_impl *c, const void *p) {
    if (zs__sim_arena_owns(&c->device, p, 1)) return zs__sim_arena_inner(&c->device, p);
    if (zs__sim_arena_owns(&c->pinned, p, 1)) return zs__sim_arena_inner(&c->pinned, p);
    return (void *)p;
}

/* ------------------------------------------------------------------ waits */

/* Every blocking wait: counted, traced as a "device wait" span (as the CUDA
 * backend's), the health check polled; then the stream's first failure, if
 * any, is this wait's. `doing` is a string literal (the trace keeps it).
 * The program's own waits (zeroshard_sim.h) are not counted, as a CUDA
 * program's cudaStreamSynchronize is not the runtime's. */
static zs_status wait_any(sim_impl *c, uint64_t seq, const char *doing, int counted) {
    if (!zs__sim_stream_finished(c->stream, seq)) {
        zs__trace *trace = counted ? c->be->trace : NULL;
        const uint64_t from = zs__trace_clock(trace);
        if (counted) atomic_fetch_add(&c->waits, 1);
        while (!zs__sim_stream_wait_for(c->stream, seq, SIM_HEALTH_NS)) {
            if (!c->health) continue;
            const zs_status s = c->health(c->health_ctx);
            if (s != ZS_OK) return zs__fail_context(s, "sim device: while %s", doing);
        }
        if (trace) {
            zs__trace_args args = ZS_TRACE_ARGS_INIT;
            args.op = doing;
            zs__trace_span(trace, ZS_TRACE_COMPUTE, "device wait", from, zs__clock_ns(), &args);
        }
    }
    char message[2048];
    const zs_status st = zs__sim_stream_error(c->stream, message, sizeof message);
    if (st != ZS_OK)
        return zs__fail(st, "%s (found while %s; the device is unusable from here on, as a CUDA "
                        "context after a failed kernel)", message, doing);
    return ZS_OK;
}

static zs_status wait_seq(sim_impl *c, uint64_t seq, const char *doing) {
    return wait_any(c, seq, doing, 1);
}

/* A wait for everything enqueued so far, told to the check. */
static zs_status wait_all(sim_impl *c, const char *doing, int counted) {
    const uint64_t last = zs__sim_stream_last(c->stream);
    ZS_CHECK(wait_any(c, last, doing, counted));
    zs__sim_check_synchronize(c->guard);
    return ZS_OK;
}

/* A wait for the op `seq` that `fence` was recorded behind (submit). */
static zs_status wait_op(sim_impl *c, uint64_t seq, const void *fence, const char *doing) {
    const zs_status st = wait_seq(c, seq, doing);
    if (st == ZS_OK) zs__sim_check_fence_wait(c->guard, fence);
    zs__sim_check_fence_forget(c->guard, fence);
    return st;
}

static zs_status sim_synchronize(zs__backend *be) {
    return wait_all(impl_of(be), "waiting for the compute stream", 1);
}

/* ----------------------------------------------------------------- memory */

static zs_status sim_alloc(zs__backend *be, zs_mem_tag tag, size_t bytes, void **out) {
    sim_impl *c = impl_of(be);
    *out = NULL;
    if (bytes == 0) return ZS_OK;
    /* Pages come zeroed (fresh, or punched out when freed), so the
     * interface's zero fill costs nothing. */
    if (zs__sim_arena_alloc(&c->device, bytes, ZS__PIN_PAGE, out) != 0)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY,
                        "sim device: out of memory: %zu bytes for '%s' do not fit its %zu bytes "
                        "(%zu held already; device_memory_bytes, or ZS_SIM_MEMORY_BYTES when it "
                        "is 0); raise zero.stage, lower zero.live_bytes, zero.prefetch_bytes or "
                        "comm.segment_bytes, offload (offload.optimizer = \"host\"), or use "
                        "more ranks",
                        bytes, zs_mem_tag_name(tag), c->device.capacity, c->device.used);
    zs__mem_charge(be->mem, tag, bytes);
    return ZS_OK;
}

static void sim_free(zs__backend *be, zs_mem_tag tag, void *ptr, size_t bytes) {
    sim_impl *c = impl_of(be);
    if (!ptr) return;
    /* As cudaFree: work that may still use the memory finishes first. */
    if (sim_synchronize(be) != ZS_OK) ZS_WARN("sim device: freeing '%s': %s", zs_mem_tag_name(tag),
                                              zs_last_error());
    zs__sim_check_forget(c->guard, ptr, bytes);
    if (zs__sim_arena_free(&c->device, ptr) == 0)
        ZS_WARN("sim device: freeing %zu bytes of '%s' at %p: not a block of its memory", bytes,
                zs_mem_tag_name(tag), ptr);
    zs__mem_uncharge(be->mem, tag, bytes);
}

/* Page-locked host memory: a block of the host arena, at a multiple of the
 * chunk size when it spans several chunks, so that the registrations'
 * boundaries are multiples of the chunk (pinned_chunks.h). */
static int place_pinned(sim_impl *c, size_t bytes, void **out) {
    const size_t rounded = (bytes + ZS__PIN_PAGE - 1) / ZS__PIN_PAGE * ZS__PIN_PAGE;
    const size_t align = zs__pin_chunk_count(rounded, c->pin_chunk) > 1 ? c->pin_chunk
                                                                         : ZS__PIN_PAGE;
    return zs__sim_arena_alloc(&c->pinned, bytes, align, out);
}

static zs_status sim_host_alloc(zs__backend *be, zs_mem_tag tag, size_t bytes, void **out) {
    sim_impl *c = impl_of(be);
    *out = NULL;
    if (bytes == 0) return ZS_OK;
    if (place_pinned(c, bytes, out) != 0)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "sim device: cannot page-lock %zu bytes of host "
                        "memory for '%s' (%zu held already); free host memory, or %s",
                        bytes, zs_mem_tag_name(tag), c->pinned.used,
                        tag == ZS_MEM_COMM ? "lower comm.staging_bytes"
                                           : "set offload.pin_memory = false");
    zs__mem_charge(be->mem, tag, bytes);
    return ZS_OK;
}

static void sim_host_free(zs__backend *be, zs_mem_tag tag, void *ptr, size_t bytes) {
    sim_impl *c = impl_of(be);
    if (!ptr) return;
    /* Copies still using it finish first (as unregistering on CUDA). */
    if (sim_synchronize(be) != ZS_OK)
        ZS_WARN("sim device: freeing page-locked memory: %s", zs_last_error());
    zs__sim_check_forget(c->guard, ptr, bytes);
    zs__sim_arena_free(&c->pinned, ptr);
    zs__mem_uncharge(be->mem, tag, bytes);
}

/* ------------------------------------------------------------------- copies */

typedef enum where { WHERE_DEVICE, WHERE_PINNED, WHERE_PAGEABLE } where;

static where where_of(const sim_impl *c, const void *p, size_t bytes) {
    if (zs__sim_arena_owns(&c->device, p, bytes)) return WHERE_DEVICE;
    if (zs__sim_arena_owns(&c->pinned, p, bytes)) return WHERE_PINNED;
    return WHERE_PAGEABLE;
}

typedef struct copy_args {
    void *dst;       /* inner addresses */
    const void *src;
    size_t bytes;
} copy_args;

static zs_status run_copy(void *p) {
    const copy_args *a = p;
    memmove(a->dst, a->src, a->bytes);
    return ZS_OK;
}

/* A piece of page-locked memory must lie inside one registration: one
 * block, and one chunk of a block of several (pinned_chunks.h). CUDA's
 * driver refuses a copy across two registrations (or falls back to a
 * pageable copy); so does this. */
static zs_status check_registration(sim_impl *c, const void *p, size_t bytes) {
    void *start = NULL;
    size_t size = 0;
    if (!zs__sim_arena_block_of(&c->pinned, p, &start, &size))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "sim device: a copy at %p is not in a "
                        "page-locked allocation", p);
    const uintptr_t at = (uintptr_t)p, base = (uintptr_t)start;
    const int one_chunk = zs__pin_chunk_count(size, c->pin_chunk) <= 1;
    const uintptr_t lo = one_chunk ? base : at & ~(uintptr_t)(c->pin_chunk - 1);
    const uintptr_t hi = one_chunk ? base + size : lo + c->pin_chunk;
    if (at + bytes > hi)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "sim device: a copy of %zu bytes at %p crosses two page-locked "
                        "registrations (chunks of %zu bytes, ZS_CUDA_PIN_CHUNK_BYTES): CUDA's "
                        "cudaMemcpyAsync refuses such a copy (cudaErrorInvalidValue) or makes it "
                        "pageable; cut copies at chunk boundaries (backend/pinned_chunks.h)",
                        bytes, p, c->pin_chunk);
    return ZS_OK;
}

/* Enqueues one copy between device and page-locked memory (either side),
 * each piece inside one registration. */
static zs_status enqueue_copy(sim_impl *c, void *dst, const void *src, size_t bytes, where wd,
                              where ws) {
    const uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    const zs__sim_kind kind =
        wd == WHERE_DEVICE && ws == WHERE_DEVICE ? ZS__SIM_DEVICE_COPY : ZS__SIM_HOST_COPY;
    for (size_t done = 0; done < bytes;) {
        const size_t n = zs__pin_piece(d + done, s + done, bytes - done, c->pin_chunk);
        if (wd == WHERE_PINNED) ZS_CHECK(check_registration(c, (void *)(d + done), n));
        if (ws == WHERE_PINNED) ZS_CHECK(check_registration(c, (const void *)(s + done), n));
        const copy_args a = {inner(c, (void *)(d + done)), inner(c, (const void *)(s + done)), n};
        range r[2];
        const int k = zs__access_copy(r, (void *)(d + done), (const void *)(s + done), n);
        submit(c, "copy", run_copy, &a, sizeof a, kind, n, r, k, NULL);
        done += n;
    }
    return ZS_OK;
}

/* memmove semantics, either side device or host memory. Page-locked host
 * memory is copied in stream order, asynchronously; ordinary host memory
 * the way CUDA documents for pageable memory: the stream is waited for and
 * the copy done before the call returns (from host memory: the source may
 * be reused at once; to host memory: the data is there on return). */
static zs_status copy_any(sim_impl *c, void *dst, const void *src, size_t bytes, int counted) {
    if (!bytes || dst == src) return ZS_OK;
    const where wd = where_of(c, dst, bytes), ws = where_of(c, src, bytes);
    if (wd != WHERE_PAGEABLE && ws != WHERE_PAGEABLE) return enqueue_copy(c, dst, src, bytes, wd, ws);
    ZS_CHECK(wait_all(c, "copying pageable host memory", counted));
    memmove(inner(c, dst), inner(c, src), bytes);
    return ZS_OK;
}

static zs_status sim_copy(zs__backend *be, void *dst, const void *src, size_t bytes) {
    return copy_any(impl_of(be), dst, src, bytes, 1);
}

/* Host -> device: on return the host buffer may be reused (its bytes are in
 * a staging copy of the backend's); the device's write may still be queued. */
typedef struct upload_args {
    void *dst;    /* inner */
    void *staged; /* freed by the op */
    size_t bytes;
} upload_args;

static zs_status run_upload(void *p) {
    const upload_args *a = p;
    memcpy(a->dst, a->staged, a->bytes);
    free(a->staged);
    return ZS_OK;
}

static zs_status sim_upload(zs__backend *be, void *dst, const void *host, size_t bytes) {
    sim_impl *c = impl_of(be);
    if (!bytes) return ZS_OK;
    if (!zs__sim_arena_owns(&c->device, dst, bytes)) return sim_copy(be, dst, host, bytes);
    void *staged = zs__malloc(bytes);
    if (!staged)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "sim device: out of host memory staging an "
                        "upload of %zu bytes", bytes);
    memcpy(staged, host, bytes);
    const upload_args a = {inner(c, dst), staged, bytes};
    const range r = wr(dst, bytes);
    submit(c, "upload", run_upload, &a, sizeof a, ZS__SIM_HOST_COPY, bytes, &r, 1, NULL);
    return ZS_OK;
}

/* Device -> host: waits (counted), and the host buffer holds the data on
 * return. */
static zs_status sim_download(zs__backend *be, void *host, const void *src, size_t bytes) {
    sim_impl *c = impl_of(be);
    if (!bytes) return ZS_OK;
    const copy_args a = {host, inner(c, src), bytes};
    const range r = rd(src, bytes);
    char fence;
    const uint64_t seq = submit(c, "download", run_copy, &a, sizeof a, ZS__SIM_HOST_COPY, bytes,
                                &r, 1, &fence);
    return wait_op(c, seq, &fence, "downloading");
}

/* ---------------------------------------------------------------- kernels */

typedef struct zero_args {
    void *ptr;
    size_t bytes;
} zero_args;

static zs_status run_zero(void *p) {
    const zero_args *a = p;
    memset(a->ptr, 0, a->bytes);
    return ZS_OK;
}

static zs_status sim_zero(zs__backend *be, void *ptr, size_t bytes) {
    sim_impl *c = impl_of(be);
    if (!bytes) return ZS_OK;
    const zero_args a = {inner(c, ptr), bytes};
    const range r = wr(ptr, bytes);
    submit(c, "zero", run_zero, &a, sizeof a, ZS__SIM_KERNEL, bytes, &r, 1, NULL);
    return ZS_OK;
}

typedef struct fill_args {
    void *dst;
    zs_dtype dtype;
    int64_t first, count;
    zs_k_init_kind kind;
    double a, b;
    uint64_t key;
} fill_args;

static zs_status run_fill(void *p) {
    const fill_args *f = p;
    return zs__cpu_init_fill(NULL, f->dst, f->dtype, f->first, f->count, f->kind, f->a, f->b,
                             f->key);
}

static zs_status sim_init_fill(zs__backend *be, void *dst, zs_dtype dtype, int64_t first,
                               int64_t count, zs_k_init_kind kind, double a, double b,
                               uint64_t key) {
    sim_impl *c = impl_of(be);
    if (dtype != ZS_DTYPE_FP32)
        return zs__fail(ZS_ERR_UNSUPPORTED, "sim device: initializing %s tensors is not "
                        "supported in this version", zs_dtype_name(dtype));
    if (count <= 0) return ZS_OK;
    const fill_args f = {inner(c, dst), dtype, first, count, kind, a, b, key};
    const range r = wr(dst, (size_t)count * sizeof(float));
    submit(c, "init_fill", run_fill, &f, sizeof f, ZS__SIM_KERNEL, 0, &r, 1, NULL);
    return ZS_OK;
}

typedef struct convert_args {
    void *dst;
    zs_dtype dst_dtype;
    const void *src;
    zs_dtype src_dtype;
    int64_t count;
    int accumulate;
} convert_args;

static zs_status run_convert(void *p) {
    const convert_args *a = p;
    return a->accumulate
               ? zs__cpu_accumulate(NULL, a->dst, a->dst_dtype, a->src, a->src_dtype, a->count)
               : zs__cpu_convert(NULL, a->dst, a->dst_dtype, a->src, a->src_dtype, a->count);
}

static zs_status enqueue_convert(zs__backend *be, void *dst, zs_dtype dst_dtype, const void *src,
                                 zs_dtype src_dtype, int64_t count, int accumulate) {
    sim_impl *c = impl_of(be);
    if (!zs__cpu_dtype_valid(dst_dtype) || !zs__cpu_dtype_valid(src_dtype) || count < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "sim device: %s of %lld elements from %s to %s: "
                        "the dtypes must be fp32, fp16 or bf16", accumulate ? "accumulate" : "convert",
                        (long long)count, zs_dtype_name(src_dtype), zs_dtype_name(dst_dtype));
    if (count == 0) return ZS_OK;
    const convert_args a = {inner(c, dst), dst_dtype, inner(c, src), src_dtype, count, accumulate};
    range r[2];
    const int k = zs__access_convert(r, dst, dst_dtype, src, src_dtype, count);
    submit(c, accumulate ? "accumulate" : "convert", run_convert, &a, sizeof a, ZS__SIM_KERNEL, 0,
           r, k, NULL);
    return ZS_OK;
}

static zs_status sim_convert(zs__backend *be, void *dst, zs_dtype dst_dtype, const void *src,
                             zs_dtype src_dtype, int64_t count) {
    return enqueue_convert(be, dst, dst_dtype, src, src_dtype, count, 0);
}

static zs_status sim_accumulate(zs__backend *be, void *dst, zs_dtype dst_dtype, const void *src,
                                zs_dtype src_dtype, int64_t count) {
    return enqueue_convert(be, dst, dst_dtype, src, src_dtype, count, 1);
}

typedef struct quant_args {
    void *q;
    float *scales;
    void *data;
    zs_dtype dtype;
    int64_t count, block;
    int bits, accumulate, dequantize;
} quant_args;

static zs_status run_quant(void *p) {
    const quant_args *a = p;
    return a->dequantize ? zs__cpu_dequantize(NULL, a->data, a->dtype, a->accumulate, a->q,
                                              a->scales, a->count, a->block, a->bits)
                         : zs__cpu_quantize(NULL, a->q, a->scales, a->data, a->dtype, a->count,
                                            a->block, a->bits);
}

static zs_status sim_quantize(zs__backend *be, void *q, float *scales, const void *src,
                              zs_dtype src_dtype, int64_t count, int64_t block, int bits) {
    sim_impl *c = impl_of(be);
    ZS_CHECK(zs__quant_check("sim", "quantize", q, scales, src, src_dtype, count, block, bits));
    if (count == 0) return ZS_OK;
    const quant_args a = {inner(c, q), inner(c, scales), inner(c, src), src_dtype, count, block,
                          bits, 0, 0};
    range r[3];
    const int k = zs__access_quantize(r, q, scales, src, src_dtype, count, block, bits);
    submit(c, "quantize", run_quant, &a, sizeof a, ZS__SIM_KERNEL, 0, r, k, NULL);
    return ZS_OK;
}

static zs_status sim_dequantize(zs__backend *be, void *dst, zs_dtype dst_dtype, int accumulate,
                                const void *q, const float *scales, int64_t count, int64_t block,
                                int bits) {
    sim_impl *c = impl_of(be);
    ZS_CHECK(zs__quant_check("sim", "dequantize", q, scales, dst, dst_dtype, count, block, bits));
    if (count == 0) return ZS_OK;
    const quant_args a = {inner(c, q), inner(c, scales), inner(c, dst), dst_dtype, count, block,
                          bits, accumulate, 1};
    range r[3];
    const int k = zs__access_dequantize(r, dst, dst_dtype, q, scales, count, block, bits);
    submit(c, "dequantize", run_quant, &a, sizeof a, ZS__SIM_KERNEL, 0, r, k, NULL);
    return ZS_OK;
}

typedef struct update_args {
    zs__update_args u; /* inner addresses */
} update_args;

static zs_status run_update(void *p) {
    const update_args *a = p;
    return zs__cpu_optimizer_update(NULL, &a->u);
}

static zs_status sim_optimizer_update(zs__backend *be, const zs__update_args *u) {
    sim_impl *c = impl_of(be);
    if (u->count <= 0) return ZS_OK;
    update_args a = {*u};
    a.u.master = inner(c, u->master);
    a.u.param = u->param ? inner(c, u->param) : NULL;
    a.u.grad = inner(c, u->grad);
    a.u.m = u->m ? inner(c, u->m) : NULL;
    a.u.v = u->v ? inner(c, u->v) : NULL;
    range r[ZS__ACCESS_MAX];
    const int k = zs__access_update(r, u);
    submit(c, "optimizer_update", run_update, &a, sizeof a, ZS__SIM_KERNEL, 0, r, k, NULL);
    return ZS_OK;
}

typedef struct sums_args {
    int n;
    const void **ptrs; /* inner, owned by the caller, who waits */
    const zs_dtype *dtypes;
    const int64_t *counts;
    double *out;
} sums_args;

static zs_status run_sums(void *p) {
    const sums_args *a = p;
    return zs__cpu_sum_squares_many(NULL, a->n, (const void *const *)a->ptrs, a->dtypes, a->counts,
                                    a->out);
}

/* One blocking wait for every array, as on CUDA. */
static zs_status sim_sum_squares_many(zs__backend *be, int n, const void *const *ptrs,
                                      const zs_dtype *dtypes, const int64_t *counts, double *out) {
    sim_impl *c = impl_of(be);
    if (n <= 0) return ZS_OK;
    const void **mapped = zs__calloc((size_t)n, sizeof *mapped);
    if (!mapped)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "sim device: out of host memory for %d sums", n);
    range *r = zs__calloc((size_t)n, sizeof *r);
    if (!r) {
        free(mapped);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "sim device: out of host memory for %d sums", n);
    }
    for (int i = 0; i < n; i++) {
        mapped[i] = inner(c, ptrs[i]);
        r[i] = rd(ptrs[i], (size_t)counts[i] * zs_dtype_size(dtypes[i]));
    }
    const sums_args a = {n, mapped, dtypes, counts, out};
    char fence;
    const uint64_t seq = submit(c, "sum_squares", run_sums, &a, sizeof a, ZS__SIM_KERNEL, 0, r, n,
                                &fence);
    const zs_status st = wait_op(c, seq, &fence, "summing squares");
    free(r);
    free(mapped);
    return st;
}

static zs_status sim_sum_squares(zs__backend *be, const void *x, zs_dtype dtype, int64_t count,
                                 double *out) {
    return sim_sum_squares_many(be, 1, &x, &dtype, &count, out);
}

/* ----------------------------------------------------------------- fences */

typedef struct sim_fence {
    uint64_t seq; /* the last op enqueued at the last record (0: never recorded) */
} sim_fence;

static zs_status sim_fence_create(zs__backend *be, void **out) {
    (void)be;
    sim_fence *f = zs__calloc(1, sizeof *f);
    *out = f;
    return f ? ZS_OK : zs__fail(ZS_ERR_OUT_OF_MEMORY, "sim device: out of host memory for a fence");
}

static void sim_fence_destroy(zs__backend *be, void *fence) {
    zs__sim_check_fence_forget(impl_of(be)->guard, fence);
    free(fence);
}

static zs_status sim_fence_record(zs__backend *be, void *fence) {
    sim_impl *c = impl_of(be);
    pthread_mutex_lock(&c->enqueue_lock);
    ((sim_fence *)fence)->seq = zs__sim_stream_last(c->stream);
    zs__sim_check_fence_record(c->guard, fence);
    pthread_mutex_unlock(&c->enqueue_lock);
    return ZS_OK;
}

/* A fence the device has passed costs no counted wait (as on CUDA); the
 * check counts the wait either way: its verdict never depends on how far
 * the device has got. */
static zs_status sim_fence_wait(zs__backend *be, void *fence) {
    sim_impl *c = impl_of(be);
    ZS_CHECK(wait_seq(c, ((sim_fence *)fence)->seq, "waiting for a copy out of host memory"));
    zs__sim_check_fence_wait(c->guard, fence);
    return ZS_OK;
}

/* A program's event (zs_sim_event_synchronize): the fence's wait, not
 * counted among the runtime's. */
zs_status zs__sim_backend_program_fence_wait(zs__backend *be, void *fence) {
    sim_impl *c = impl_of(be);
    ZS_CHECK(wait_any(c, ((sim_fence *)fence)->seq, "the program's event wait", 0));
    zs__sim_check_fence_wait(c->guard, fence);
    return ZS_OK;
}

/* ---------------------------------------------------------------- the rest */

static void *sim_get_stream(zs__backend *be) { return impl_of(be); }

static zs_status sim_set_stream(zs__backend *be, void *stream) {
    (void)be;
    (void)stream;
    return zs__fail(ZS_ERR_UNSUPPORTED, "sim device: a program's own stream is not supported: "
                    "enqueue onto the context's (zeroshard_sim.h)");
}

static void sim_device_identity(zs__backend *be, char *out, size_t cap) {
    snprintf(out, cap, "%s", impl_of(be)->identity);
}

static void sim_set_health_check(zs__backend *be, zs__health_fn fn, void *ctx) {
    sim_impl *c = impl_of(be);
    c->health = fn;
    c->health_ctx = ctx;
}

static zs_status sim_host_access(zs__backend *be, const void *ptr, size_t bytes, int write,
                                 const char *what) {
    return zs__sim_check_host_use(impl_of(be)->guard, ptr, bytes, write, what);
}

static void sim_order_release(zs__backend *be, const void *key) {
    zs__sim_check_release(impl_of(be)->guard, key);
}

static void sim_order_acquire(zs__backend *be, const void *key) {
    zs__sim_check_acquire(impl_of(be)->guard, key);
}

static uint64_t sim_blocking_waits(const zs__backend *be) {
    return atomic_load(&impl_of(be)->waits);
}

static void release(zs__backend *be, sim_impl *c) {
    if (c) {
        zs__sim_stream_destroy(c->stream); /* runs what is queued first */
        zs__sim_check_destroy(c->guard);
        zs__sim_arena_destroy(&c->device);
        zs__sim_arena_destroy(&c->pinned);
        pthread_mutex_destroy(&c->enqueue_lock);
        free(c);
    }
    free(be);
}

static void sim_destroy(zs__backend *be) { release(be, impl_of(be)); }

static const zs__backend_ops sim_ops = {
    .name = "sim",
    .host_accessible = 0,
    .device_collectives = 0,
    .alloc = sim_alloc,
    .free = sim_free,
    .zero = sim_zero,
    .copy = sim_copy,
    .init_fill = sim_init_fill,
    .convert = sim_convert,
    .accumulate = sim_accumulate,
    .sum_squares = sim_sum_squares,
    .sum_squares_many = sim_sum_squares_many,
    .optimizer_update = sim_optimizer_update,
    .quantize = sim_quantize,
    .dequantize = sim_dequantize,
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .download = sim_download,
    .upload = sim_upload,
    .synchronize = sim_synchronize,
    .fence_create = sim_fence_create,
    .fence_destroy = sim_fence_destroy,
    .fence_record = sim_fence_record,
    .fence_wait = sim_fence_wait,
    .get_stream = sim_get_stream,
    .set_stream = sim_set_stream,
    .device_identity = sim_device_identity,
    .set_health_check = sim_set_health_check,
    .blocking_waits = sim_blocking_waits,
    .host_access = sim_host_access,
    .order_release = sim_order_release,
    .order_acquire = sim_order_acquire,
    .destroy = sim_destroy,
};

/* The simulated time from the environment (registry: ZS_SIM_*). */
static zs_status read_timing(zs__sim_timing *t, size_t *memory) {
    char why[256];
    double v = 0;
    *t = (zs__sim_timing){ZS__SIM_LAUNCH_US_DEFAULT, ZS__SIM_HOST_GBPS_DEFAULT,
                          ZS__SIM_DEVICE_GBPS_DEFAULT};
    const struct {
        zs__env_var var;
        double *into;
    } knobs[] = {{ZS_ENV_SIM_LAUNCH_US, &t->launch_us},
                 {ZS_ENV_SIM_HOST_GBPS, &t->host_gbps},
                 {ZS_ENV_SIM_DEVICE_GBPS, &t->device_gbps}};
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++) {
        if (!zs__env_text(knobs[i].var)) continue;
        if (zs__env_nonnegative(knobs[i].var, &v, why, sizeof why) != 0)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "sim device: %s", why);
        *knobs[i].into = v;
    }
    if (zs__env_text(ZS_ENV_SIM_MEMORY_BYTES)) {
        if (zs__env_nonnegative(ZS_ENV_SIM_MEMORY_BYTES, &v, why, sizeof why) != 0 || v < 4096)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "sim device: ZS_SIM_MEMORY_BYTES must be a "
                            "number of bytes of at least 4096 (%s)", why);
        *memory = (size_t)v;
    }
    return ZS_OK;
}

zs_status zs__sim_backend_create(const zs__settings *settings, zs__mem *mem, zs__backend **out) {
    *out = NULL;
    zs__backend *be = zs__calloc(1, sizeof *be);
    sim_impl *c = zs__calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "sim device: out of host memory");
    }
    be->ops = &sim_ops;
    be->mem = mem;
    be->impl = c;
    c->be = be;
    zs__sim_timing timing;
    size_t memory = settings->device_memory_bytes > 0 ? (size_t)settings->device_memory_bytes
                                                      : SIM_MEMORY_DEFAULT;
    zs_status s = read_timing(&timing, &memory);
    if (s == ZS_OK && settings->device_memory_bytes > 0) memory = (size_t)settings->device_memory_bytes;
    if (s == ZS_OK) s = zs__pin_chunk_read(&c->pin_chunk);
    if (s == ZS_OK) s = zs__sim_arena_create(&c->device, "device memory", memory, 0);
    if (s == ZS_OK)
        s = zs__sim_arena_create(&c->pinned, "page-locked host memory", SIM_PINNED_SPACE, 1);
    pthread_mutex_init(&c->enqueue_lock, NULL);
    /* The stream-order check: on, unless ZS_STREAM_CHECK=0. */
    const char *check = zs__env_text(ZS_ENV_STREAM_CHECK);
    const int checking = !(check && strcmp(check, "0") == 0);
    if (s == ZS_OK) s = zs__sim_check_create(&c->device, &c->pinned, checking, &c->guard);
    if (s == ZS_OK) s = zs__sim_stream_create(&timing, &c->stream);
    if (s != ZS_OK) {
        release(be, c);
        return s;
    }
    /* Every process of one machine (one running kernel) shares the sim
     * device, as ranks share a GPU. */
    char boot[40];
    uint64_t ns_dev = 0, ns_ino = 0;
    zs__node_identity_read(boot, sizeof boot, &ns_dev, &ns_ino);
    snprintf(c->identity, sizeof c->identity, "SIM-%s", boot[0] ? boot : "unknown-machine");
    ZS_DEBUG("sim device: %zu bytes of device memory, launch %.1f us, host copies %.1f GB/s, "
             "device copies %.1f GB/s", memory, timing.launch_us, timing.host_gbps,
             timing.device_gbps);
    *out = be;
    return ZS_OK;
}

int zs__sim_backend_is(const zs__backend *be) { return be && be->ops == &sim_ops; }

void *zs__sim_backend_inner(const zs__backend *be, const void *p) {
    return inner(impl_of(be), p);
}

zs_status zs__sim_backend_launch(zs__backend *be, const char *name, zs__sim_op_fn fn,
                                 const void *args, size_t args_bytes,
                                 const zs__stream_check_range *ranges, int nranges) {
    if (args_bytes > ZS__SIM_OP_ARGS)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "sim device: kernel \"%s\": %zu bytes of "
                        "arguments, at most %d", name, args_bytes, ZS__SIM_OP_ARGS);
    submit(impl_of(be), name, fn, args, args_bytes, ZS__SIM_KERNEL, 0, ranges, nranges, NULL);
    return ZS_OK;
}

int zs__sim_backend_owns(const zs__backend *be, const void *p, size_t bytes) {
    return zs__sim_arena_owns(&impl_of(be)->device, p, bytes);
}

zs_status zs__sim_backend_program_alloc(zs__backend *be, size_t bytes, void **out) {
    sim_impl *c = impl_of(be);
    *out = NULL;
    if (bytes == 0) return ZS_OK;
    if (zs__sim_arena_alloc(&c->device, bytes, ZS__PIN_PAGE, out) != 0)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_sim_malloc: %zu bytes do not fit the sim "
                        "device's %zu bytes (%zu held already, the runtime's included)",
                        bytes, c->device.capacity, c->device.used);
    return ZS_OK;
}

zs_status zs__sim_backend_program_free(zs__backend *be, void *ptr) {
    sim_impl *c = impl_of(be);
    if (!ptr) return ZS_OK;
    ZS_CHECK(sim_synchronize(be));
    void *start = NULL;
    size_t size = 0;
    if (zs__sim_arena_block_of(&c->device, ptr, &start, &size) && start == ptr)
        zs__sim_check_forget(c->guard, ptr, size);
    if (zs__sim_arena_free(&c->device, ptr) == 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_sim_free: %p is not device memory from "
                        "zs_sim_malloc", ptr);
    return ZS_OK;
}

zs_status zs__sim_backend_program_synchronize(zs__backend *be) {
    return wait_all(impl_of(be), "the program's synchronize", 0);
}

zs_status zs__sim_backend_program_copy(zs__backend *be, void *dst, const void *src, size_t bytes) {
    return copy_any(impl_of(be), dst, src, bytes, 0);
}

zs_status zs__sim_backend_program_host_alloc(zs__backend *be, size_t bytes, void **out) {
    sim_impl *c = impl_of(be);
    *out = NULL;
    if (bytes == 0) return ZS_OK;
    if (place_pinned(c, bytes, out) != 0)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_sim_host_alloc: cannot page-lock %zu bytes "
                        "(%zu held already)", bytes, c->pinned.used);
    return ZS_OK;
}

zs_status zs__sim_backend_program_host_free(zs__backend *be, void *ptr) {
    sim_impl *c = impl_of(be);
    if (!ptr) return ZS_OK;
    ZS_CHECK(sim_synchronize(be));
    void *start = NULL;
    size_t size = 0;
    if (!zs__sim_arena_block_of(&c->pinned, ptr, &start, &size) || start != ptr)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_sim_host_free: %p is not memory from "
                        "zs_sim_host_alloc", ptr);
    zs__sim_check_forget(c->guard, ptr, size);
    zs__sim_arena_free(&c->pinned, ptr);
    return ZS_OK;
}
