/* The CUDA backend: device memory charged to the accountant, one compute
 * stream on which every op is enqueued in call order, and the kernels of
 * kernels/cuda_*.cu (through kernels/cuda_launch.h). Ops that hand a value to
 * the host (download, sum_squares, synchronize) block by polling, never by a
 * bare cudaStreamSynchronize: while they wait they call the registered health
 * check, so an NCCL failure of a peer that our stream waits on becomes an
 * error instead of a hang. Every such wait is counted
 * (zs__cuda_backend_waits) and, when the context traces, recorded as a
 * "device wait" span, so that the host synchronizations of a step can be
 * seen and tested: an optimizer step without offload has exactly one, the
 * gradient's sums of squares (sum_squares_many).
 *
 * Not thread-safe, like the rest of a context: one thread drives it. Each op
 * makes the backend's device current first, so a program that switches
 * devices between zeroshard calls still gets its work on the right one. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "backend/cpu_ops.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/pinned_chunks.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"
#include "kernels/cuda_launch.h"

/* Bytes of each of the two halves of the pinned bounce buffer: large enough
 * that a transfer runs near PCIe speed, small enough to be negligible next to
 * model state. Upload and download stream through it in halves, so copying
 * one half on the host overlaps the DMA of the other. */
#define ZS_CUDA_BOUNCE_BYTES ((size_t)4 << 20)

/* Block partials of sums of squares held at once (512 KiB of doubles): one
 * batch covers 2^28 elements, enough threads to fill a GPU. Larger calls
 * run in batches whose partials are folded into the per-array totals before
 * the next batch reuses the buffer, so the scratch does not grow with the
 * model. */
#define ZS_CUDA_NORM_BATCH ((int64_t)1 << 16)

/* A wait spins this long before it starts sleeping (small kernels finish in
 * microseconds), then sleeps this long between polls, and runs the health
 * check at most this often. */
#define ZS_CUDA_SPIN_NS 20000
#define ZS_CUDA_SLEEP_NS 50000
#define ZS_CUDA_HEALTH_NS 5000000

typedef struct cuda_impl {
    zs__backend *be;          /* the backend this is the state of (its trace) */
    int device;
    int devices;              /* visible to this process */
    char identity[48];        /* "GPU-" and the device's UUID (device_identity) */
    int max_blocks;
    cudaStream_t own;         /* created here; destroyed at destroy */
    cudaStream_t stream;      /* the compute stream: `own` or the program's */
    cudaEvent_t done;         /* recorded to wait for "everything so far" */
    cudaEvent_t handoff;      /* orders a new compute stream after the old one */
    zs__health_fn health;
    void *health_ctx;
    /* Lazily allocated scratch (charged to ZS_MEM_SCRATCH). */
    unsigned char *bounce;    /* pinned host, 2 halves */
    cudaEvent_t bounce_free[2]; /* recorded after the copy that last used a half */
    double *norm_dev;         /* device: [ZS_CUDA_NORM_BATCH] block partials, then
                                 [norm_cap] per-array totals */
    double *norm_host;        /* pinned host: [norm_cap] totals, copied from the device */
    int norm_cap;             /* arrays the totals hold */
    size_t norm_bytes;        /* charged to ZS_MEM_SCRATCH for the two above */
    uint64_t waits;           /* blocking waits so far (wait_event calls) */
    size_t pin_chunk;         /* bytes of each cudaHostRegister of pinned_alloc: a power
                                 of two, the alignment of multi-chunk allocations */
} cuda_impl;

static cuda_impl *impl_of(const zs__backend *be) { return be->impl; }

static zs_status status_of(cudaError_t e) {
    return e == cudaErrorMemoryAllocation ? ZS_ERR_OUT_OF_MEMORY : ZS_ERR_INTERNAL;
}

/* The one place CUDA errors become statuses: names the call, CUDA's own
 * words, and what to do. Sticky errors (a faulting kernel) poison the CUDA
 * context, so they say so. */
static zs_status cuda_fail(const cuda_impl *c, cudaError_t e, const char *call,
                           const char *doing) {
    const char *advice;
    switch (e) {
    case cudaErrorMemoryAllocation:
        advice = "the device is out of memory: lower zero.live_bytes (the stage-3 "
                 "budget of gathered parameters and open gradients), zero.prefetch_bytes or "
                 "comm.segment_bytes, raise zero.stage, or use more GPUs";
        break;
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
        advice = "a kernel on this device failed (possibly one of the program's own on "
                 "the same stream); the CUDA context is unusable: rerun under "
                 "compute-sanitizer, or with CUDA_LAUNCH_BLOCKING=1, to find the kernel";
        break;
    default:
        advice = "check that the device is healthy (nvidia-smi) and that the driver "
                 "supports this CUDA runtime; rerun with CUDA_LAUNCH_BLOCKING=1 to "
                 "locate an asynchronous failure";
        break;
    }
    return zs__fail(status_of(e), "cuda backend (device %d): %s while %s failed: %s (%s); %s",
                    c ? c->device : -1, call, doing, cudaGetErrorString(e),
                    cudaGetErrorName(e), advice);
}

#define CU(c, call, doing)                                                      \
    do {                                                                        \
        cudaError_t cu_e_ = (call);                                             \
        if (cu_e_ != cudaSuccess) return cuda_fail((c), cu_e_, #call, (doing)); \
    } while (0)

static zs_status enter(cuda_impl *c, const char *doing) {
    CU(c, cudaSetDevice(c->device), doing);
    return ZS_OK;
}

static zs__cuda_launch launch_of(const cuda_impl *c) {
    zs__cuda_launch l = {c->stream, c->max_blocks};
    return l;
}

/* Polls `event` (already recorded) until it completes: spin briefly, then
 * sleep between queries, and run the health check every ZS_CUDA_HEALTH_NS. */
static zs_status poll_event(cuda_impl *c, cudaEvent_t event, const char *doing) {
    const int64_t start = (int64_t)zs__clock_ns();
    int64_t last_check = start;
    for (;;) {
        cudaError_t e = cudaEventQuery(event);
        if (e == cudaSuccess) return ZS_OK;
        if (e != cudaErrorNotReady) return cuda_fail(c, e, "cudaEventQuery", doing);
        const int64_t t = (int64_t)zs__clock_ns();
        if (c->health && t - last_check >= ZS_CUDA_HEALTH_NS) {
            last_check = t;
            zs_status s = c->health(c->health_ctx);
            if (s != ZS_OK)
                return zs__fail_context(s, "cuda backend (device %d): while %s", c->device,
                                        doing);
        }
        if (t - start >= ZS_CUDA_SPIN_NS) {
            struct timespec nap = {0, ZS_CUDA_SLEEP_NS};
            nanosleep(&nap, NULL);
        }
    }
}

/* Every blocking wait of the backend: counted, and recorded as a span on
 * the context's compute track when it traces (the backend runs on the
 * thread that drives the context, the recording thread of that track).
 * `doing` is a string literal, as the trace keeps it by pointer. */
static zs_status wait_event(cuda_impl *c, cudaEvent_t event, const char *doing) {
    zs__trace *trace = c->be->trace;
    const uint64_t from = zs__trace_clock(trace);
    c->waits++;
    zs_status s = poll_event(c, event, doing);
    if (trace) {
        zs__trace_args args = ZS_TRACE_ARGS_INIT;
        args.op = doing;
        zs__trace_span(trace, ZS_TRACE_COMPUTE, "device wait", from, zs__clock_ns(), &args);
    }
    return s;
}

/* Waits for every op enqueued so far on the compute stream (an event rather
 * than cudaStreamQuery, so work the program enqueues later on a shared
 * stream does not lengthen the wait). */
static zs_status wait_stream(cuda_impl *c, const char *doing) {
    CU(c, cudaEventRecord(c->done, c->stream), doing);
    return wait_event(c, c->done, doing);
}

/* ------------------------------------------------------------------------
 * Host memory. The backend does not know about offload tiers: the zero
 * layer keeps them in host memory it allocates here, page-locked (so that
 * copies between it and the device are DMA), and computes on them with the
 * host backend; every op here takes device memory, except `copy`, whose
 * either side may be host memory (cudaMemcpyDefault).
 *
 * Page-locked host memory charged to tag, made as fast as the machine
 * allows: cudaHostAlloc maps and locks the pages on one thread (about
 * 2 GB/s, a minute for the tens of GB of a large model's offloaded state),
 * so the memory is allocated plainly, zeroed (first touch) on every OpenMP
 * thread, and registered (cudaHostRegister) in chunks of c->pin_chunk
 * bytes, the chunks on several threads at once, and `copy` cuts every copy
 * where it crosses a chunk boundary: the rule of backend/pinned_chunks.h,
 * shared with the simulated device. Freed by unregistering the same
 * chunks. Copies between it and the device are then DMA, asynchronous on
 * the stream. */
#define ZS_CUDA_PAGE ZS__PIN_PAGE

static size_t pin_chunks(const cuda_impl *c, size_t bytes) {
    return zs__pin_chunk_count(bytes, c->pin_chunk);
}

static void unregister_chunks(const cuda_impl *c, void *p, size_t chunks) {
    for (size_t k = 0; k < chunks; k++)
        if (cudaHostUnregister((char *)p + k * c->pin_chunk) != cudaSuccess)
            (void)cudaGetLastError();
}

static zs_status pinned_alloc(zs__backend *be, cuda_impl *c, zs_mem_tag tag, size_t bytes,
                              const char *advice, void **out) {
    const size_t rounded = (bytes + ZS_CUDA_PAGE - 1) / ZS_CUDA_PAGE * ZS_CUDA_PAGE;
    const uint64_t t0 = zs__clock_ns();
    /* Several chunks: aligned to the chunk size, so that the registrations'
     * boundaries are multiples of it. C11 wants the size a multiple of the
     * alignment; the alignment and that rounding cost address space, not
     * memory: pages never touched are never mapped. */
    const size_t chunks = pin_chunks(c, rounded);
    void *p = chunks > 1 ? zs__aligned_alloc(c->pin_chunk, chunks * c->pin_chunk)
                         : zs__aligned_alloc(ZS_CUDA_PAGE, rounded);
    if (!p)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "cuda backend (device %d): cannot allocate %zu "
                        "bytes of host memory for '%s'; free host memory, or %s",
                        c->device, bytes, zs_mem_tag_name(tag), advice);
    zs__host_zero(p, rounded);
    const uint64_t t1 = zs__clock_ns();
    cudaError_t first = cudaSuccess;
    /* Each thread makes the device current for itself before it registers. */
#pragma omp parallel for schedule(dynamic, 1) if (chunks > 1)
    for (long k = 0; k < (long)chunks; k++) {
        const size_t at = (size_t)k * c->pin_chunk;
        const size_t n = rounded - at < c->pin_chunk ? rounded - at : c->pin_chunk;
        cudaError_t e = cudaSetDevice(c->device);
        if (e == cudaSuccess) e = cudaHostRegister((char *)p + at, n, cudaHostRegisterPortable);
        if (e != cudaSuccess) {
#pragma omp critical(zs_cuda_pin)
            if (first == cudaSuccess) first = e;
        }
    }
    if (first != cudaSuccess) {
        (void)cudaGetLastError();
        /* Whichever chunks were registered (the others fail harmlessly). */
        unregister_chunks(c, p, chunks);
        free(p);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "cuda backend (device %d): cudaHostRegister of "
                        "%zu bytes for '%s' failed: %s; free host memory, raise the "
                        "locked-memory limit (ulimit -l), or %s",
                        c->device, bytes, zs_mem_tag_name(tag), cudaGetErrorString(first), advice);
    }
    const uint64_t t2 = zs__clock_ns();
    if (rounded >= ((size_t)1 << 30))
        ZS_INFO("cuda backend (device %d): %.2f GB of page-locked memory for '%s': zeroed in "
                "%.2f s (%.1f GB/s), registered in %.2f s (%.1f GB/s)",
                c->device, (double)rounded / 1e9, zs_mem_tag_name(tag), 1e-9 * (double)(t1 - t0),
                (double)rounded / (double)(t1 - t0 + 1), 1e-9 * (double)(t2 - t1),
                (double)rounded / (double)(t2 - t1 + 1));
    zs__mem_charge(be->mem, tag, bytes);
    *out = p;
    return ZS_OK;
}

static void pinned_free(zs__backend *be, cuda_impl *c, zs_mem_tag tag, void *ptr, size_t bytes) {
    const size_t rounded = (bytes + ZS_CUDA_PAGE - 1) / ZS_CUDA_PAGE * ZS_CUDA_PAGE;
    /* Copies still using it finish first (unregistering does not wait). */
    if (cudaSetDevice(c->device) != cudaSuccess) (void)cudaGetLastError();
    if (wait_stream(c, "freeing page-locked memory") != ZS_OK)
        ZS_WARN("cuda backend (device %d): %s", c->device, zs_last_error());
    unregister_chunks(c, ptr, pin_chunks(c, rounded));
    free(ptr);
    zs__mem_uncharge(be->mem, tag, bytes);
}

/* The backend's host_alloc op: transfer buffers (the staging of comm.impl =
 * "mpi") are always pinned, so their copies are DMA on the stream. */
static zs_status cuda_host_alloc(zs__backend *be, zs_mem_tag tag, size_t bytes, void **out) {
    cuda_impl *c = impl_of(be);
    *out = NULL;
    if (bytes == 0) return ZS_OK;
    ZS_CHECK(enter(c, "allocating pinned host memory"));
    return pinned_alloc(be, c, tag, bytes,
                        tag == ZS_MEM_COMM ? "lower comm.staging_bytes"
                                           : "set offload.pin_memory = false",
                        out);
}

static void cuda_host_free(zs__backend *be, zs_mem_tag tag, void *ptr, size_t bytes) {
    cuda_impl *c = impl_of(be);
    if (!ptr) return;
    if (cudaSetDevice(c->device) != cudaSuccess) (void)cudaGetLastError();
    pinned_free(be, c, tag, ptr, bytes);
}

static zs_status cuda_alloc(zs__backend *be, zs_mem_tag tag, size_t bytes, void **out) {
    cuda_impl *c = impl_of(be);
    *out = NULL;
    if (bytes == 0) return ZS_OK;
    ZS_CHECK(enter(c, "allocating device memory"));
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* out of memory is not sticky: clear it */
        return zs__fail(status_of(e), "cuda backend (device %d): cudaMalloc of %zu bytes for "
                        "'%s' failed: %s; %s", c->device, bytes, zs_mem_tag_name(tag),
                        cudaGetErrorString(e),
                        e == cudaErrorMemoryAllocation
                            ? "raise zero.stage, lower zero.live_bytes, zero.prefetch_bytes "
                              "or comm.segment_bytes, or use more GPUs"
                            : "check the device with nvidia-smi");
    }
    /* The interface promises zeroed memory; the memset is ordered before
     * every later op on the compute stream. */
    e = cudaMemsetAsync(p, 0, bytes, c->stream);
    if (e != cudaSuccess) {
        cudaFree(p);
        return cuda_fail(c, e, "cudaMemsetAsync", "zeroing a new allocation");
    }
    zs__mem_charge(be->mem, tag, bytes);
    *out = p;
    return ZS_OK;
}

static void cuda_free(zs__backend *be, zs_mem_tag tag, void *ptr, size_t bytes) {
    cuda_impl *c = impl_of(be);
    if (!ptr) return;
    /* cudaFree waits for work that may still use the memory. It cannot fail
     * in a way the caller could act on; the error is logged, the memory
     * counted as returned. */
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess) e = cudaFree(ptr);
    if (e != cudaSuccess)
        ZS_WARN("cuda backend (device %d): cudaFree of %zu bytes of '%s' failed: %s",
                c->device, bytes, zs_mem_tag_name(tag), cudaGetErrorString(e));
    zs__mem_uncharge(be->mem, tag, bytes);
}

static zs_status cuda_zero(zs__backend *be, void *ptr, size_t bytes) {
    cuda_impl *c = impl_of(be);
    if (!bytes) return ZS_OK;
    ZS_CHECK(enter(c, "zeroing device memory"));
    CU(c, cudaMemsetAsync(ptr, 0, bytes, c->stream), "zeroing device memory");
    return ZS_OK;
}

/* memmove semantics, like the CPU backend's copy: cudaMemcpy* leaves
 * overlapping ranges undefined, so those go through a stream-ordered
 * temporary. */
static zs_status cuda_copy(zs__backend *be, void *dst, const void *src, size_t bytes) {
    cuda_impl *c = impl_of(be);
    if (!bytes || dst == src) return ZS_OK;
    ZS_CHECK(enter(c, "copying device memory"));
    const uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (d < s + bytes && s < d + bytes) {
        void *tmp = NULL;
        CU(c, cudaMallocAsync(&tmp, bytes, c->stream), "copying overlapping device memory");
        cudaError_t e = cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, c->stream);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, c->stream);
        cudaError_t f = cudaFreeAsync(tmp, c->stream);
        if (e != cudaSuccess)
            return cuda_fail(c, e, "cudaMemcpyAsync", "copying overlapping device memory");
        CU(c, f, "copying overlapping device memory");
        return ZS_OK;
    }
    /* Either side may be host memory (a host tier, a pinned staging buffer
     * of host_alloc): the runtime infers the direction from the addresses
     * (unified addressing). Such a copy is stream-ordered like the others;
     * the host reads its destination only after synchronizing. A piece
     * never crosses a multiple of the pin chunk on either side, so each
     * stays inside one registration of pinned_alloc (device addresses do
     * not care: a device copy is cut only where a boundary happens to lie). */
    for (size_t done = 0; done < bytes;) {
        const uintptr_t at_d = d + done, at_s = s + done;
        const size_t n = zs__pin_piece(at_d, at_s, bytes - done, c->pin_chunk);
        CU(c, cudaMemcpyAsync((void *)at_d, (const void *)at_s, n, cudaMemcpyDefault, c->stream),
           "copying device memory");
        done += n;
    }
    return ZS_OK;
}

static int dtype_valid(zs_dtype dtype) {
    return dtype == ZS_DTYPE_FP32 || dtype == ZS_DTYPE_FP16 || dtype == ZS_DTYPE_BF16;
}

static zs_status cuda_init_fill(zs__backend *be, void *dst, zs_dtype dtype, int64_t first,
                                int64_t count, zs_k_init_kind kind, double a, double b,
                                uint64_t key) {
    cuda_impl *c = impl_of(be);
    if (dtype != ZS_DTYPE_FP32)
        return zs__fail(ZS_ERR_UNSUPPORTED, "cuda backend: initializing %s tensors is not "
                        "supported in this version", zs_dtype_name(dtype));
    if (count <= 0) return ZS_OK;
    ZS_CHECK(enter(c, "initializing parameters"));
    CU(c, zs__cuda_launch_init_fill(launch_of(c), dst, first, count, kind, a, b, key),
       "initializing parameters");
    return ZS_OK;
}

static zs_status cuda_convert(zs__backend *be, void *dst, zs_dtype dst_dtype, const void *src,
                              zs_dtype src_dtype, int64_t count) {
    cuda_impl *c = impl_of(be);
    if (!dtype_valid(dst_dtype) || !dtype_valid(src_dtype) || count < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "cuda backend: convert of %lld elements from "
                        "dtype %d to dtype %d: the count must be >= 0 and the dtypes fp32, "
                        "fp16 or bf16", (long long)count, (int)src_dtype, (int)dst_dtype);
    if (count == 0) return ZS_OK;
    /* Same dtype: a copy, bits and NaN payloads included, as on the CPU. */
    if (dst_dtype == src_dtype)
        return cuda_copy(be, dst, src, (size_t)count * zs_dtype_size(dst_dtype));
    ZS_CHECK(enter(c, "converting"));
    CU(c, zs__cuda_launch_convert(launch_of(c), dst, dst_dtype, src, src_dtype, count),
       "converting");
    return ZS_OK;
}

/* Two kernels on the compute stream, no host wait. */
static zs_status cuda_quantize(zs__backend *be, void *q, float *scales, const void *src,
                               zs_dtype src_dtype, int64_t count, int64_t block, int bits) {
    cuda_impl *c = impl_of(be);
    ZS_CHECK(zs__quant_check("cuda", "quantize", q, scales, src, src_dtype, count, block, bits));
    if (count == 0) return ZS_OK;
    ZS_CHECK(enter(c, "quantizing"));
    CU(c, zs__cuda_launch_quantize(launch_of(c), q, scales, src, src_dtype, count, block, bits),
       "quantizing");
    return ZS_OK;
}

static zs_status cuda_dequantize(zs__backend *be, void *dst, zs_dtype dst_dtype, int accumulate,
                                 const void *q, const float *scales, int64_t count,
                                 int64_t block, int bits) {
    cuda_impl *c = impl_of(be);
    ZS_CHECK(zs__quant_check("cuda", accumulate ? "dequantize-and-add" : "dequantize", q, scales,
                             dst, dst_dtype, count, block, bits));
    if (count == 0) return ZS_OK;
    ZS_CHECK(enter(c, "dequantizing"));
    CU(c, zs__cuda_launch_dequantize(launch_of(c), dst, dst_dtype, accumulate, q, scales, count,
                                     block, bits),
       "dequantizing");
    return ZS_OK;
}

static zs_status cuda_accumulate(zs__backend *be, void *dst, zs_dtype dst_dtype,
                                 const void *src, zs_dtype src_dtype, int64_t count) {
    cuda_impl *c = impl_of(be);
    if (!dtype_valid(dst_dtype) || !dtype_valid(src_dtype) || count < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "cuda backend: accumulate of %lld elements of "
                        "dtype %d into dtype %d: the count must be >= 0 and the dtypes fp32, "
                        "fp16 or bf16", (long long)count, (int)src_dtype, (int)dst_dtype);
    if (count == 0) return ZS_OK;
    ZS_CHECK(enter(c, "accumulating gradients"));
    CU(c, zs__cuda_launch_accumulate(launch_of(c), dst, dst_dtype, src, src_dtype, count),
       "accumulating gradients");
    return ZS_OK;
}

/* Gives back the sum-of-squares scratch (cudaFree and cudaFreeHost wait for
 * work still using it). */
static void norm_scratch_free(zs__backend *be, cuda_impl *c) {
    if (!c->norm_dev) return;
    cudaFree(c->norm_dev);
    cudaFreeHost(c->norm_host);
    zs__mem_uncharge(be->mem, ZS_MEM_SCRATCH, c->norm_bytes);
    c->norm_dev = c->norm_host = NULL;
    c->norm_cap = 0;
    c->norm_bytes = 0;
}

/* The sum-of-squares scratch for calls of up to `arrays` arrays, charged to
 * ZS_MEM_SCRATCH: on the device ZS_CUDA_NORM_BATCH block partials (512 KiB)
 * and one double per array for the totals, and the totals' pinned host copy.
 * Allocated on the first sum of squares and kept, since norms run every
 * step; it is reallocated only when a call has more arrays than any before
 * (zs_step always passes one per unit, so in practice once). The bound is
 * therefore 8 * (ZS_CUDA_NORM_BATCH + 2 * arrays) bytes for the largest
 * call: 512 KiB plus 16 bytes per unit, whatever the size of the model. */
static zs_status ensure_norm_scratch(zs__backend *be, cuda_impl *c, int arrays) {
    if (c->norm_dev && arrays <= c->norm_cap) return ZS_OK;
    const int cap = arrays > c->norm_cap ? arrays : c->norm_cap;
    norm_scratch_free(be, c);
    const size_t dev_bytes = ((size_t)ZS_CUDA_NORM_BATCH + (size_t)cap) * sizeof(double);
    const size_t host_bytes = (size_t)cap * sizeof(double);
    const char *call = "cudaMalloc";
    cudaError_t e = cudaMalloc((void **)&c->norm_dev, dev_bytes);
    if (e == cudaSuccess) {
        call = "cudaMallocHost";
        e = cudaMallocHost((void **)&c->norm_host, host_bytes);
        if (e != cudaSuccess) cudaFree(c->norm_dev);
    }
    if (e != cudaSuccess) {
        c->norm_dev = c->norm_host = NULL;
        (void)cudaGetLastError(); /* out of memory is not sticky: clear it */
        return cuda_fail(c, e, call, "allocating sum-of-squares scratch");
    }
    c->norm_cap = cap;
    c->norm_bytes = dev_bytes + host_bytes;
    zs__mem_charge(be->mem, ZS_MEM_SCRATCH, c->norm_bytes);
    return ZS_OK;
}

/* Enqueues the block partials of every device array of the call and folds
 * them, in block order, into c->norm_dev's totals (slot a for array a),
 * then copies the totals into the pinned c->norm_host; nothing waits. The
 * partials go through the ZS_CUDA_NORM_BATCH buffer in batches: a batch is
 * folded before the next one overwrites it (stream order), and an array
 * cut by a batch boundary continues its running total in the next fold,
 * so every array's additions are exactly the host's sequence
 * 0.0 + p[0] + p[1] + ... */
static zs_status enqueue_sums(cuda_impl *c, int n, const void *const *ptrs,
                              const zs_dtype *dtypes, const int64_t *counts) {
    double *partials = c->norm_dev, *totals = c->norm_dev + ZS_CUDA_NORM_BATCH;
    zs__cuda_fold fold;
    fold.count = 0;
    int64_t used = 0; /* partials of the current batch */
    for (int a = 0; a < n; a++) {
        if (counts[a] == 0) continue;
        const int64_t blocks = (counts[a] + ZS_CUDA_NORM_BLOCK - 1) / ZS_CUDA_NORM_BLOCK;
        for (int64_t done = 0; done < blocks;) {
            const int64_t room = ZS_CUDA_NORM_BATCH - used;
            const int64_t take = blocks - done < room ? blocks - done : room;
            CU(c, zs__cuda_launch_sum_squares(launch_of(c), partials + used, ptrs[a], dtypes[a],
                                              counts[a], done, take),
               "summing squares");
            fold.seg[fold.count++] = (zs__cuda_fold_segment){
                .first = used, .blocks = take, .slot = a, .cont = done > 0};
            used += take;
            done += take;
            /* A full batch is folded before its buffer is reused; a full
             * fold argument is launched before it takes more segments. */
            if (used == ZS_CUDA_NORM_BATCH || fold.count == ZS_CUDA_FOLD_MAX) {
                CU(c, zs__cuda_launch_sum_squares_fold(launch_of(c), totals, partials, &fold),
                   "adding sum-of-squares partials");
                fold.count = 0;
                if (used == ZS_CUDA_NORM_BATCH) used = 0;
            }
        }
    }
    CU(c, zs__cuda_launch_sum_squares_fold(launch_of(c), totals, partials, &fold),
       "adding sum-of-squares partials");
    CU(c, cudaMemcpyAsync(c->norm_host, totals, (size_t)n * sizeof(double),
                          cudaMemcpyDeviceToHost, c->stream),
       "copying sums of squares to the host");
    return ZS_OK;
}

/* Sums of squares of n device arrays with one host synchronization: the
 * partials and totals are enqueued, the n totals copied to pinned memory,
 * and the one wait covers the copy. */
static zs_status cuda_sum_squares_many(zs__backend *be, int n, const void *const *ptrs,
                                       const zs_dtype *dtypes, const int64_t *counts,
                                       double *out) {
    cuda_impl *c = impl_of(be);
    if (n < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "cuda backend: sums of squares of %d arrays; "
                        "the number of arrays must be >= 0", n);
    int any = 0;
    for (int a = 0; a < n; a++) {
        if (!dtype_valid(dtypes[a]) || counts[a] < 0)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "cuda backend: sum of squares of array %d "
                            "of %d (%lld elements of dtype %d): the count must be >= 0 and the "
                            "dtype fp32, fp16 or bf16", a, n, (long long)counts[a],
                            (int)dtypes[a]);
        out[a] = 0.0;
        any |= counts[a] > 0;
    }
    if (!any) return ZS_OK;
    ZS_CHECK(enter(c, "summing squares"));
    ZS_CHECK(ensure_norm_scratch(be, c, n));
    ZS_CHECK(enqueue_sums(c, n, ptrs, dtypes, counts));
    ZS_CHECK(wait_stream(c, "summing squares"));
    for (int a = 0; a < n; a++)
        if (counts[a] > 0) out[a] = c->norm_host[a];
    return ZS_OK;
}

static zs_status cuda_sum_squares(zs__backend *be, const void *x, zs_dtype dtype, int64_t count,
                                  double *out) {
    return cuda_sum_squares_many(be, 1, &x, &dtype, &count, out);
}

static zs_status cuda_optimizer_update(zs__backend *be, const zs__update_args *a) {
    cuda_impl *c = impl_of(be);
    if (a->count < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "cuda backend: optimizer update of %lld "
                        "elements; the count must be >= 0", (long long)a->count);
    if (!dtype_valid(a->grad_dtype) || (a->param && !dtype_valid(a->param_dtype)))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "cuda backend: optimizer update with "
                        "gradient dtype %d and parameter dtype %d: each must be fp32, fp16 "
                        "or bf16", (int)a->grad_dtype, (int)a->param_dtype);
    switch (a->kind) {
    case ZS_K_OPTIM_ADAM:
    case ZS_K_OPTIM_ADAMW:
        if (a->count > 0 && (!a->m || !a->v))
            return zs__fail(ZS_ERR_INTERNAL, "cuda backend: Adam update without %s state",
                            !a->m ? "first-moment" : "second-moment");
        break;
    case ZS_K_OPTIM_SGD:
        break;
    default:
        return zs__fail(ZS_ERR_INTERNAL, "cuda backend: unknown optimizer kind %d",
                        (int)a->kind);
    }
    if (a->count > 0 && (!a->master || !a->grad))
        return zs__fail(ZS_ERR_INTERNAL, "cuda backend: optimizer update without %s",
                        !a->master ? "master weights" : "gradient");
    if (a->count == 0) return ZS_OK;
    ZS_CHECK(enter(c, "updating parameters"));
    CU(c, zs__cuda_launch_update(launch_of(c), a->kind, a->master, a->param, a->param_dtype,
                                 a->grad, a->grad_dtype, a->m, a->v, a->count, a->scalars),
       "updating parameters");
    return ZS_OK;
}

static zs_status ensure_bounce(zs__backend *be, cuda_impl *c) {
    if (c->bounce) return ZS_OK;
    CU(c, cudaMallocHost((void **)&c->bounce, 2 * ZS_CUDA_BOUNCE_BYTES),
       "allocating the pinned transfer buffer");
    zs__mem_charge(be->mem, ZS_MEM_SCRATCH, 2 * ZS_CUDA_BOUNCE_BYTES);
    return ZS_OK;
}

/* Device -> host through the pinned halves: the DMA of piece k + 1 is
 * enqueued before the host copies piece k out, so they overlap. */
static zs_status cuda_download(zs__backend *be, void *host, const void *src, size_t bytes) {
    cuda_impl *c = impl_of(be);
    if (!bytes) return ZS_OK;
    ZS_CHECK(enter(c, "downloading"));
    ZS_CHECK(ensure_bounce(be, c));
    const size_t pieces = (bytes + ZS_CUDA_BOUNCE_BYTES - 1) / ZS_CUDA_BOUNCE_BYTES;
    for (size_t k = 0; k <= pieces; k++) {
        if (k < pieces) {
            /* Half k % 2 was last read by the host in iteration k - 1 (piece
             * k - 2), synchronously, so it is free to overwrite. */
            const size_t off = k * ZS_CUDA_BOUNCE_BYTES;
            const size_t n = bytes - off < ZS_CUDA_BOUNCE_BYTES ? bytes - off : ZS_CUDA_BOUNCE_BYTES;
            unsigned char *half = c->bounce + (k % 2) * ZS_CUDA_BOUNCE_BYTES;
            CU(c, cudaMemcpyAsync(half, (const unsigned char *)src + off, n,
                                  cudaMemcpyDeviceToHost, c->stream),
               "downloading");
            CU(c, cudaEventRecord(c->bounce_free[k % 2], c->stream), "downloading");
        }
        if (k > 0) {
            const size_t j = k - 1, off = j * ZS_CUDA_BOUNCE_BYTES;
            const size_t n = bytes - off < ZS_CUDA_BOUNCE_BYTES ? bytes - off : ZS_CUDA_BOUNCE_BYTES;
            ZS_CHECK(wait_event(c, c->bounce_free[j % 2], "downloading"));
            memcpy((unsigned char *)host + off, c->bounce + (j % 2) * ZS_CUDA_BOUNCE_BYTES, n);
        }
    }
    return ZS_OK;
}

/* Host -> device through the pinned halves. On return the host buffer may be
 * reused (its bytes are in the pinned buffer or already on the device); the
 * DMA of the last pieces may still run, ordered before every later op. */
static zs_status cuda_upload(zs__backend *be, void *dst, const void *host, size_t bytes) {
    cuda_impl *c = impl_of(be);
    if (!bytes) return ZS_OK;
    ZS_CHECK(enter(c, "uploading"));
    ZS_CHECK(ensure_bounce(be, c));
    for (size_t off = 0, k = 0; off < bytes; off += ZS_CUDA_BOUNCE_BYTES, k++) {
        const size_t n = bytes - off < ZS_CUDA_BOUNCE_BYTES ? bytes - off : ZS_CUDA_BOUNCE_BYTES;
        unsigned char *half = c->bounce + (k % 2) * ZS_CUDA_BOUNCE_BYTES;
        /* The previous DMA out of this half (this call or an earlier one)
         * must finish before the host overwrites it. */
        ZS_CHECK(wait_event(c, c->bounce_free[k % 2], "uploading"));
        memcpy(half, (const unsigned char *)host + off, n);
        CU(c, cudaMemcpyAsync((unsigned char *)dst + off, half, n, cudaMemcpyHostToDevice,
                              c->stream),
           "uploading");
        CU(c, cudaEventRecord(c->bounce_free[k % 2], c->stream), "uploading");
    }
    return ZS_OK;
}

static zs_status cuda_synchronize(zs__backend *be) {
    cuda_impl *c = impl_of(be);
    ZS_CHECK(enter(c, "synchronizing"));
    return wait_stream(c, "waiting for the compute stream");
}

/* Fences are CUDA events recorded on the compute stream. A wait first asks
 * whether the event has completed, so a fence the device has long passed
 * (a staging half two gathers old) costs no counted, traced wait. */
static zs_status cuda_fence_create(zs__backend *be, void **out) {
    cuda_impl *c = impl_of(be);
    *out = NULL;
    ZS_CHECK(enter(c, "creating a fence"));
    cudaEvent_t ev = NULL;
    CU(c, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "creating a fence");
    *out = (void *)ev;
    return ZS_OK;
}

static void cuda_fence_destroy(zs__backend *be, void *fence) {
    cuda_impl *c = impl_of(be);
    if (cudaSetDevice(c->device) != cudaSuccess || cudaEventDestroy((cudaEvent_t)fence) != cudaSuccess)
        (void)cudaGetLastError();
}

static zs_status cuda_fence_record(zs__backend *be, void *fence) {
    cuda_impl *c = impl_of(be);
    ZS_CHECK(enter(c, "recording a fence"));
    CU(c, cudaEventRecord((cudaEvent_t)fence, c->stream), "recording a fence");
    return ZS_OK;
}

static zs_status cuda_fence_wait(zs__backend *be, void *fence) {
    cuda_impl *c = impl_of(be);
    ZS_CHECK(enter(c, "waiting for a fence"));
    const cudaError_t e = cudaEventQuery((cudaEvent_t)fence);
    if (e == cudaSuccess) return ZS_OK;
    if (e != cudaErrorNotReady) return cuda_fail(c, e, "cudaEventQuery", "waiting for a fence");
    return wait_event(c, (cudaEvent_t)fence, "waiting for a copy out of host memory");
}

/* The UUID as nvidia-smi prints it (GPU-8-4-4-4-12 hex digits): the same
 * device gives the same string in every process, whatever its index under
 * that process's CUDA_VISIBLE_DEVICES. */
static void format_identity(const cudaUUID_t *uuid, char *out, size_t cap) {
    const unsigned char *b = (const unsigned char *)uuid->bytes;
    size_t at = (size_t)snprintf(out, cap, "GPU-");
    for (int i = 0; i < 16 && at < cap; i++)
        at += (size_t)snprintf(out + at, cap - at, "%s%02x",
                               i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "", b[i]);
}

static void cuda_device_identity(zs__backend *be, char *out, size_t cap) {
    snprintf(out, cap, "%s", impl_of(be)->identity);
}

static void *cuda_get_stream(zs__backend *be) { return (void *)impl_of(be)->stream; }

static zs_status cuda_set_stream(zs__backend *be, void *stream) {
    cuda_impl *c = impl_of(be);
    cudaStream_t next = (cudaStream_t)stream;
    /* NULL is ambiguous (legacy or per-thread default stream, depending on
     * how the program was compiled), and get_stream's NULL means "no
     * streams": the program names the one it means. */
    if (!next)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_cuda_set_stream: the stream is NULL; pass "
                        "cudaStreamLegacy or cudaStreamPerThread to use a default stream");
    if (next == c->stream) return ZS_OK;
    ZS_CHECK(enter(c, "switching the compute stream"));
    /* Everything enqueued on the old stream happens before anything enqueued
     * on the new one, without blocking the host. */
    CU(c, cudaEventRecord(c->handoff, c->stream), "switching the compute stream");
    CU(c, cudaStreamWaitEvent(next, c->handoff, 0), "switching the compute stream");
    c->stream = next;
    return ZS_OK;
}

static void cuda_set_health_check(zs__backend *be, zs__health_fn fn, void *ctx) {
    cuda_impl *c = impl_of(be);
    c->health = fn;
    c->health_ctx = fn ? ctx : NULL;
}

static void release(zs__backend *be, cuda_impl *c) {
    if (cudaSetDevice(c->device) != cudaSuccess) (void)cudaGetLastError();
    /* cudaFree and cudaFreeHost wait for pending work that uses them. */
    norm_scratch_free(be, c);
    if (c->bounce) {
        cudaFreeHost(c->bounce);
        zs__mem_uncharge(be->mem, ZS_MEM_SCRATCH, 2 * ZS_CUDA_BOUNCE_BYTES);
    }
    for (int i = 0; i < 2; i++)
        if (c->bounce_free[i]) cudaEventDestroy(c->bounce_free[i]);
    if (c->handoff) cudaEventDestroy(c->handoff);
    if (c->done) cudaEventDestroy(c->done);
    /* Work still queued on it completes; the program's stream is its own. */
    if (c->own) cudaStreamDestroy(c->own);
    free(c);
    free(be);
}

static void cuda_destroy(zs__backend *be) { release(be, impl_of(be)); }

static uint64_t cuda_blocking_waits(const zs__backend *be) { return impl_of(be)->waits; }

static const zs__backend_ops cuda_ops = {
    .name = "cuda",
    .host_accessible = 0,
    .device_collectives = 1,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .zero = cuda_zero,
    .copy = cuda_copy,
    .init_fill = cuda_init_fill,
    .convert = cuda_convert,
    .accumulate = cuda_accumulate,
    .sum_squares = cuda_sum_squares,
    .sum_squares_many = cuda_sum_squares_many,
    .optimizer_update = cuda_optimizer_update,
    .quantize = cuda_quantize,
    .dequantize = cuda_dequantize,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .download = cuda_download,
    .upload = cuda_upload,
    .synchronize = cuda_synchronize,
    .fence_create = cuda_fence_create,
    .fence_destroy = cuda_fence_destroy,
    .fence_record = cuda_fence_record,
    .fence_wait = cuda_fence_wait,
    .get_stream = cuda_get_stream,
    .set_stream = cuda_set_stream,
    .device_identity = cuda_device_identity,
    .set_health_check = cuda_set_health_check,
    .blocking_waits = cuda_blocking_waits,
    .destroy = cuda_destroy,
};

int zs__cuda_backend_device(const zs__backend *be) {
    if (!be || be->ops != &cuda_ops) return -1;
    return ((const cuda_impl *)be->impl)->device;
}

uint64_t zs__cuda_backend_waits(const zs__backend *be) {
    if (!be || be->ops != &cuda_ops) return 0;
    return ((const cuda_impl *)be->impl)->waits;
}

zs_status zs__cuda_backend_create(const zs__settings *settings, zs__mem *mem, int local_rank,
                                  zs__backend **out) {
    (void)settings; /* everything the backend needs is per call */
    *out = NULL;
    int devices = 0;
    cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices <= 0) {
        (void)cudaGetLastError();
        return zs__fail(ZS_ERR_UNSUPPORTED, "backend = \"cuda\": no usable CUDA device: %s; "
                        "check nvidia-smi, that the driver is at least as new as this CUDA "
                        "runtime (%d), and CUDA_VISIBLE_DEVICES, or use backend = \"cpu\"",
                        e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices",
                        CUDART_VERSION);
    }
    if (local_rank < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "cuda backend: local rank %d is negative",
                        local_rank);
    zs__backend *be = zs__calloc(1, sizeof *be);
    cuda_impl *c = zs__calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "cuda backend: out of host memory");
    }
    be->ops = &cuda_ops;
    be->mem = mem;
    be->impl = c;
    c->be = be;
    c->device = local_rank % devices;
    c->devices = devices;
    zs_status s = zs__pin_chunk_read(&c->pin_chunk);
    if (s != ZS_OK) {
        free(c);
        free(be);
        return s;
    }
    const char *doing = "starting the CUDA backend";
    int sms = 0;
#define CU_INIT(call)                                                           \
    do {                                                                        \
        e = (call);                                                             \
        if (e != cudaSuccess) {                                                 \
            s = cuda_fail(c, e, #call, doing);                                  \
            goto fail;                                                          \
        }                                                                       \
    } while (0)
    CU_INIT(cudaSetDevice(c->device));
    CU_INIT(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, c->device));
    struct cudaDeviceProp prop;
    CU_INIT(cudaGetDeviceProperties(&prop, c->device));
    format_identity(&prop.uuid, c->identity, sizeof c->identity);
    c->max_blocks = (sms > 0 ? sms : 1) * ZS_CUDA_BLOCKS_PER_SM;
    /* Non-blocking: the program's work on the legacy default stream does
     * not serialize against ours. */
    CU_INIT(cudaStreamCreateWithFlags(&c->own, cudaStreamNonBlocking));
    c->stream = c->own;
    CU_INIT(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming));
    CU_INIT(cudaEventCreateWithFlags(&c->handoff, cudaEventDisableTiming));
    for (int i = 0; i < 2; i++)
        CU_INIT(cudaEventCreateWithFlags(&c->bounce_free[i], cudaEventDisableTiming));
#undef CU_INIT
    ZS_DEBUG("cuda backend: local rank %d uses device %d of %d (%d SMs)", local_rank,
             c->device, devices, sms);
    *out = be;
    return ZS_OK;
fail:
    release(be, c);
    return s;
}
