/* The backend interface: where tensors live and how element-wise kernels run.
 * The ZeRO orchestration (src/zero) calls only these; the CPU backend (cpu.c)
 * runs kernels as OpenMP loops over the math of kernels/ headers, and the CUDA
 * backend (cuda/) runs the same math as grid-stride kernels.
 *
 * Every allocation is charged to a memory tag of the context's accountant.
 *
 * Ordering: every op is ordered after the previous ops of the same backend
 * (the CPU backend runs them on the calling thread; the CUDA backend enqueues
 * them on its compute stream). Ops that return a value to the host
 * (sum_squares, sum_squares_many, download) wait for it. Collectives on
 * device memory are ordered against the compute stream by the communicator
 * (src/comm/nccl).
 * Host code reads or writes backend memory only through upload/download,
 * unless host_accessible is set. */
#ifndef ZS_BACKEND_BACKEND_H
#define ZS_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/memory.h"
#include "core/trace.h"
#include "kernels/init.h"
#include "kernels/optimizer.h"
#include "kernels/quantize.h"
#include "zeroshard.h"

typedef struct zs__backend zs__backend;

/* Called by a backend while it blocks (waiting for a stream), every few
 * milliseconds: a non-OK status ends the wait with that status. The device
 * communicator registers one that polls NCCL for asynchronous errors, so a
 * failed peer turns into an error instead of a hang. */
typedef zs_status (*zs__health_fn)(void *ctx);

/* A typed buffer: `count` elements of `dtype`, charged to `tag`. */
/* A typed buffer, and which backend computes on it: the memory of the
 * backend that allocated it (`owner`), or host memory that the device
 * backend page-locked for a host backend's kernels (zs__buf_alloc_pinned:
 * `be` is then the host backend). Callers run every op on a buffer through
 * buf->be, so no backend has to find out where a pointer lives. */
typedef struct zs__buf {
    void *ptr;
    int64_t count;
    zs_dtype dtype;
    zs_mem_tag tag;
    struct zs__backend *be;    /* runs ops on it */
    struct zs__backend *owner; /* frees it */
    int pinned;                /* owner's host_alloc memory */
} zs__buf;

/* One fused optimizer pass over `count` consecutive elements of one
 * parameter: read the summed gradient (any dtype), unscale and clip it
 * (scalars.grad_div, scalars.clip), update the fp32 master and the fp32
 * state, and write the new value in the compute dtype.
 * In fp32 training the parameter is its own master: master points at the
 * parameter and param is NULL. */
typedef struct zs__update_args {
    zs_k_optim_kind kind;
    float *master;          /* [count] fp32 master weights, updated in place */
    void *param;            /* [count] param_dtype copy written from the new master, or NULL */
    zs_dtype param_dtype;   /* fp16 or bf16 when param != NULL */
    const void *grad;       /* [count] grad_dtype, summed over ranks and micro-steps */
    zs_dtype grad_dtype;
    float *m;               /* [count] first moment / SGD momentum; NULL if none */
    float *v;               /* [count] second moment; NULL for SGD */
    int64_t count;
    zs_k_optim_scalars scalars;
} zs__update_args;

typedef struct zs__backend_ops {
    const char *name;
    /* 1 when the host may read and write backend memory directly (CPU). */
    int host_accessible;
    /* 1 when a device collectives library (NCCL) can work on its memory
     * (CUDA); the others' collectives run over MPI, staged through host
     * memory where the host cannot touch the backend's. */
    int device_collectives;
    /* Zero-filled device (here: host) memory charged to tag. */
    zs_status (*alloc)(zs__backend *be, zs_mem_tag tag, size_t bytes, void **out);
    void (*free)(zs__backend *be, zs_mem_tag tag, void *ptr, size_t bytes);
    zs_status (*zero)(zs__backend *be, void *ptr, size_t bytes);
    zs_status (*copy)(zs__backend *be, void *dst, const void *src, size_t bytes);
    /* dst[j] = init value of element first + j, for j < count. */
    zs_status (*init_fill)(zs__backend *be, void *dst, zs_dtype dtype, int64_t first,
                           int64_t count, zs_k_init_kind kind, double a, double b, uint64_t key);
    /* dst[i] = src[i] converted (round to nearest even); any pair of dtypes. */
    zs_status (*convert)(zs__backend *be, void *dst, zs_dtype dst_dtype, const void *src,
                         zs_dtype src_dtype, int64_t count);
    /* dst[i] += src[i], in fp32 arithmetic, rounded once to dst_dtype. */
    zs_status (*accumulate)(zs__backend *be, void *dst, zs_dtype dst_dtype, const void *src,
                            zs_dtype src_dtype, int64_t count);
    /* Sum of squares of x[0..count) (any dtype) in double, in a fixed order
     * that does not depend on the number of threads (reproducible norms).
     * Any non-finite element makes the result non-finite: this is also the
     * overflow check of mixed precision. */
    zs_status (*sum_squares)(zs__backend *be, const void *x, zs_dtype dtype, int64_t count,
                             double *out);
    /* out[a] = sum_squares of ptrs[a][0..counts[a]) (dtype dtypes[a]), for
     * a < n: each value is the bits sum_squares gives, and the backend
     * blocks the host at most once for the whole call (CUDA: one wait for
     * every array, where sum_squares waits once per call). Synchronous:
     * out holds the values on return. The arrays are this backend's memory
     * (the CUDA backend's kernels read device memory only: host-tier arrays
     * are summed by the host backend, step.c); n >= 0. */
    zs_status (*sum_squares_many)(zs__backend *be, int n, const void *const *ptrs,
                                  const zs_dtype *dtypes, const int64_t *counts, double *out);
    zs_status (*optimizer_update)(zs__backend *be, const zs__update_args *args);
    /* Block quantization, the element rule of kernels/quantize.h (its
     * special blocks, among them Inf/NaN -> a NaN scale, and its error
     * bound): src[0..count) of src_dtype (fp32, fp16 or bf16) is cut into
     * blocks of `block` (>= 1) elements counted from src[0], the last one
     * possibly short; scales[b] = the fp32 scale of block b, for b <
     * zs_k_quant_blocks(count, block); q = the integers, `bits` 8 (one
     * signed byte each) or 4 (two per byte, low nibble first), that is
     * zs_k_quant_value_bytes(count, bits) bytes (zs__quant_bytes below
     * counts values and scales together). Every value depends on its own
     * block alone: the bits do not depend on threads, SIMD level or backend
     * (tests/unit/test_quantize.c, tests/cuda/test_cuda_quantize.c).
     * q, scales and src are this backend's memory and do not overlap;
     * scales 4-byte aligned, src aligned to its element, q any alignment.
     * count >= 0. Stream-ordered like every op (no host wait on CUDA).
     * A part of a quantized array is itself one when it starts on a block
     * boundary first (and, for int4, an even element): values at byte
     * zs_k_quant_value_bytes(first, bits), scales + first / block. */
    zs_status (*quantize)(zs__backend *be, void *q, float *scales, const void *src,
                          zs_dtype src_dtype, int64_t count, int64_t block, int bits);
    /* The inverse, in the layout quantize writes: x = (float)q[i] *
     * scales[i / block], written into dst[i] rounded to dst_dtype (fp32,
     * fp16 or bf16, round to nearest even), or with accumulate != 0 added:
     * dst[i] = round(float(dst[i]) + x), one fp32 multiplication and one
     * fp32 addition per element, no fused multiply-add (the fp32 reduction
     * of received quantized pieces, summed one piece at a time in a fixed
     * order). Every NaN it writes is the quiet NaN 0x7fc00000: a NaN
     * scale's whole block, and a NaN already in dst when adding. Same
     * memory, alignment and ordering rules as quantize; dst does not
     * overlap q or scales. */
    zs_status (*dequantize)(zs__backend *be, void *dst, zs_dtype dst_dtype, int accumulate,
                            const void *q, const float *scales, int64_t count, int64_t block,
                            int bits);
    /* Host memory for transfers: page-locked where the backend copies by DMA
     * (CUDA: cudaHostAlloc), plain host memory otherwise; zero-filled and
     * charged to tag. `copy` moves data between it and backend memory in
     * either direction, in stream order, without a bounce buffer; the host
     * may read what such a copy wrote after `synchronize`. */
    zs_status (*host_alloc)(zs__backend *be, zs_mem_tag tag, size_t bytes, void **out);
    void (*host_free)(zs__backend *be, zs_mem_tag tag, void *ptr, size_t bytes);
    /* Host <-> backend copies; on return the host buffer holds the data
     * (download) or may be reused (upload). */
    zs_status (*download)(zs__backend *be, void *host, const void *src, size_t bytes);
    zs_status (*upload)(zs__backend *be, void *dst, const void *host, size_t bytes);
    /* Waits until every op enqueued so far has finished. */
    zs_status (*synchronize)(zs__backend *be);
    /* Fences: marks in the op order that the host can wait for, so that
     * host memory an asynchronous `copy` reads is written again only after
     * that copy ran, without waiting for everything else enqueued.
     * fence_record marks every op enqueued so far; fence_wait blocks the
     * host until the ops before the fence's last record have finished (it
     * returns at once when they have, or when the fence was never
     * recorded, and only a wait that blocks is counted as one). A backend
     * whose ops have finished when they return (the CPU's) leaves all four
     * NULL; callers go through zs__fence_*, which then do nothing. */
    zs_status (*fence_create)(zs__backend *be, void **out);
    void (*fence_destroy)(zs__backend *be, void *fence);
    zs_status (*fence_record)(zs__backend *be, void *fence);
    zs_status (*fence_wait)(zs__backend *be, void *fence);
    /* The compute stream every op is enqueued on (CUDA: a cudaStream_t), or
     * NULL for a backend without streams; set_stream changes it (the program's
     * own stream, zeroshard_cuda.h). */
    void *(*get_stream)(zs__backend *be);
    zs_status (*set_stream)(zs__backend *be, void *stream);
    /* The physical device this backend computes on, as a string unique
     * across hosts (CUDA: the GPU's UUID, "GPU-" and 32 hex digits, the same
     * whatever CUDA_VISIBLE_DEVICES numbering a rank sees), written into
     * out (cap bytes, NUL-terminated); "" for the CPU, which has no device
     * to share. Ranks whose identities are equal share a device. */
    void (*device_identity)(zs__backend *be, char *out, size_t cap);
    /* Installs the check run while the backend blocks (NULL removes it). */
    void (*set_health_check)(zs__backend *be, zs__health_fn fn, void *ctx);
    /* How many times the backend has blocked the host so far (waits that
     * had to wait; a fence already passed costs none), or NULL where nothing
     * blocks (the CPU): the tests' "one host wait per step". */
    uint64_t (*blocking_waits)(const zs__backend *be);
    /* Host code (the calling thread, the OpenMP threads it starts, or a
     * system call on its behalf: pread, MPI) is about to read (write = 0)
     * or write host_alloc memory [ptr, ptr + bytes): the stream-order check
     * (sim; ZS_STREAM_CHECK on CUDA) checks it against the ops still queued
     * on it and lets it through; `what` names it in a report. NULL where
     * nothing checks (callers use zs__backend_host_access). */
    zs_status (*host_access)(zs__backend *be, const void *ptr, size_t bytes, int write,
                             const char *what);
    /* Host-to-host order the stream-order check cannot see for itself (the
     * runtime's hand-offs between its threads: the host optimizer's pass
     * started by the main thread, its progress waited for): release(key)
     * before the event that lets another thread go on, acquire(key) in that
     * thread after it waited. NULL where nothing checks. */
    void (*order_release)(zs__backend *be, const void *key);
    void (*order_acquire)(zs__backend *be, const void *key);
    void (*destroy)(zs__backend *be);
} zs__backend_ops;

struct zs__backend {
    const zs__backend_ops *ops;
    zs__mem *mem;
    void *impl;
    /* The context's trace, or NULL: a backend that blocks the host records
     * each wait there as a span on the compute track (CUDA: "device wait").
     * Set by the context once its trace exists and cleared before the trace
     * is destroyed; ops run on the thread that drives the context, the
     * recording thread of that track (core/trace.h). */
    zs__trace *trace;
};

/* Bytes of `count` values quantized in blocks of `block` to `bits`: the
 * integers (zs_k_quant_value_bytes: count for int8, ceil(count / 2) for
 * int4) plus one 4-byte fp32 scale per block (zs_k_quant_blocks): what a
 * quantized piece carries (a buffer that puts the scales after the values
 * must also round the values' bytes up to 4, the scales' alignment).
 * count >= 0, block >= 1, bits 8 or 4. */
static inline int64_t zs__quant_bytes(int64_t count, int64_t block, int bits) {
    return zs_k_quant_value_bytes(count, bits) + 4 * zs_k_quant_blocks(count, block);
}

/* Creates the backend named by settings->backend; ZS_ERR_UNSUPPORTED with a
 * message if this build lacks it. local_rank: this process's rank among the
 * ranks on its node (device selection). */
zs_status zs__backend_create(const zs__settings *settings, zs__mem *mem, int local_rank,
                             zs__backend **out);
void zs__backend_destroy(zs__backend *be);

zs_status zs__cpu_backend_create(zs__mem *mem, zs__backend **out);
/* The CPU backend's ops table (cpu_guarded.c wraps it). */
const zs__backend_ops *zs__cpu_backend_ops(void);
/* A CPU backend for a device context's host tiers: every op first declares
 * the bytes it reads and writes to `device`'s host_access (cpu_guarded.c);
 * the plain CPU backend when the device has no host_access. */
zs_status zs__cpu_backend_create_guarded(zs__mem *mem, zs__backend *device, zs__backend **out);
/* The simulated device (src/backend/sim/): the CUDA backend's behaviour
 * (its own memory, an asynchronous stream, page-locked host memory) with
 * the CPU's kernels, on any Linux machine. */
zs_status zs__sim_backend_create(const zs__settings *settings, zs__mem *mem, zs__backend **out);

/* `inner` wrapped in the stream-order check (checked.c: ZS_STREAM_CHECK=1
 * on CUDA); the wrapper owns inner from here on. options as
 * zs__stream_check_create's. */
struct zs__stream_check_options;
struct zs__stream_check;
zs_status zs__backend_checked_create(zs__backend *inner,
                                     const struct zs__stream_check_options *options,
                                     zs__backend **out);
/* The backend a checked wrapper wraps, or be itself. */
zs__backend *zs__backend_unwrapped(zs__backend *be);
/* A checked wrapper's check, or NULL. */
struct zs__stream_check *zs__backend_checked_check(zs__backend *be);

/* What a backend of this kind is, before one exists (the memory plan and
 * zs-estimate choose paths from the settings alone): 1 when the host may
 * touch its memory (cpu), when a device collectives library may run on it
 * (cuda). */
int zs__backend_kind_host_accessible(zs__backend_kind kind);
int zs__backend_kind_device_collectives(zs__backend_kind kind);

/* be's blocking waits so far (0 for a backend that never blocks). */
uint64_t zs__backend_blocking_waits(const zs__backend *be);
/* be's order_release and order_acquire, or nothing where it has none. */
void zs__backend_order_release(zs__backend *be, const void *key);
void zs__backend_order_acquire(zs__backend *be, const void *key);
/* be's host_access, or nothing where it has none. */
zs_status zs__backend_host_access(zs__backend *be, const void *ptr, size_t bytes, int write,
                                  const char *what);
/* The same for elements [first, first + count) of a buffer, when it is a
 * device backend's page-locked memory (buf->pinned); nothing otherwise. */
zs_status zs__buf_host_access(const zs__buf *buf, int64_t first, int64_t count, int write,
                              const char *what);
/* The CUDA backend (src/backend/cuda/); `local_rank` picks the device (local
 * rank modulo the visible devices). Builds without CUDA provide a version
 * that fails with ZS_ERR_UNSUPPORTED and says how to get one. */
zs_status zs__cuda_backend_create(const zs__settings *settings, zs__mem *mem, int local_rank,
                                  zs__backend **out);

/* The fence ops of be, or nothing where be has none (see fence_record):
 * *out is then NULL, which record and wait accept. */
zs_status zs__fence_create(zs__backend *be, void **out);
void zs__fence_destroy(zs__backend *be, void *fence);
zs_status zs__fence_record(zs__backend *be, void *fence);
zs_status zs__fence_wait(zs__backend *be, void *fence);

/* Allocates a zero-filled buffer of count elements (count may be 0) in
 * be's memory. */
zs_status zs__buf_alloc(zs__backend *be, zs__buf *buf, zs_mem_tag tag, zs_dtype dtype,
                        int64_t count);
/* The same in owner's host_alloc memory (page-locked on CUDA, so that copies
 * between it and the device are DMA), computed on by `runner` (the host
 * backend). */
zs_status zs__buf_alloc_pinned(zs__backend *owner, zs__backend *runner, zs__buf *buf,
                               zs_mem_tag tag, zs_dtype dtype, int64_t count);
/* Frees through the allocating backend; a zeroed buffer is a no-op. */
void zs__buf_free(zs__buf *buf);
/* Address of element `index` of the buffer. */
void *zs__buf_at(const zs__buf *buf, int64_t index);

#endif
