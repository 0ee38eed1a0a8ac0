/* zeroshard on the simulated device (backend = "sim" in the configuration;
 * docs/GPU.md, "The simulated device").
 *
 * The sim device behaves as the CUDA backend does, on any Linux machine:
 * zs_param_data and zs_param_grad return DEVICE addresses, which host code
 * cannot dereference (it crashes, as on a GPU); every zeroshard call that
 * touches them is ordered on the device's one compute stream, which the
 * device's own thread runs later, in order. A program computes on device
 * memory the way a CUDA program does: it launches kernels onto that stream
 * (zs_sim_launch; a kernel here is a host function that the device's
 * thread runs, reading and writing device memory through zs_sim_ptr), and
 * copies data in and out (zs_sim_memcpy). Its own device buffers come from
 * zs_sim_malloc. The runtime's kernels are the CPU backend's, so a program
 * whose kernels compute what its CPU code computes gets the CPU backend's
 * bits.
 *
 * Ranks on one machine share one sim device, as ranks share a GPU: the
 * collectives go through MPI with host staging. Every function below fails
 * with ZS_ERR_UNSUPPORTED on a context whose backend is not "sim".
 * Thread-safe: any thread may enqueue, as onto a CUDA stream. */
#ifndef ZEROSHARD_SIM_H
#define ZEROSHARD_SIM_H

#include <stddef.h>

#include "zeroshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a running kernel is handed: its view of the device. */
typedef struct zs_sim_kernel zs_sim_kernel;

/* The address through which a kernel reads and writes `address`: device
 * memory (and page-locked host memory) through the device thread's own
 * view; other host memory as it is. Valid only inside the kernel. */
void *zs_sim_ptr(const zs_sim_kernel *k, const void *address);

/* A kernel: runs on the device's thread, after every op enqueued before it
 * on the stream. `args` is the launch's copy of its arguments. Returns 0,
 * or nonzero for a failure, which makes the device unusable (as a failed
 * CUDA kernel does) and is reported by the next call that waits. */
typedef int (*zs_sim_kernel_fn)(const zs_sim_kernel *k, void *args);

/* Enqueues fn with a copy of args[0..args_bytes) (at most 192 bytes, like
 * a kernel's parameters) on the compute stream; `name` (a string literal:
 * kept by pointer) names it in messages. Does not wait. */
zs_status zs_sim_launch(zs_ctx *zs, const char *name, zs_sim_kernel_fn fn, const void *args,
                        size_t args_bytes);

/* A byte range a kernel reads (write = 0) or writes (write = 1): declared
 * at launch, so that the stream-order check (on by default on the sim
 * device) finds a kernel that races the host or another thread's ops on
 * it. Device or page-locked host memory, by the addresses the program
 * holds. */
typedef struct zs_sim_access {
    const void *ptr;
    size_t bytes;
    int write;
} zs_sim_access;

/* zs_sim_launch with the kernel's accesses declared (at most 16). */
zs_status zs_sim_launch_access(zs_ctx *zs, const char *name, zs_sim_kernel_fn fn,
                               const void *args, size_t args_bytes, const zs_sim_access *accesses,
                               int count);

/* `bytes` of zero-filled device memory for the program (cudaMalloc), not
 * counted in zs_memory_report (it is the program's), but out of the same
 * device memory: ZS_ERR_OUT_OF_MEMORY when it does not fit. */
zs_status zs_sim_malloc(zs_ctx *zs, size_t bytes, void **out);
/* Frees it after the work that may use it finished (cudaFree); NULL is a
 * no-op. */
zs_status zs_sim_free(zs_ctx *zs, void *ptr);

/* `bytes` of zero-filled page-locked host memory for the program
 * (cudaMallocHost): copies between it and device memory are asynchronous,
 * so a program can fill one buffer while the device copies another. The
 * stream-order check guards it as it guards the runtime's: host code that
 * touches it while a queued copy still owns it is a reported race. */
zs_status zs_sim_host_alloc(zs_ctx *zs, size_t bytes, void **out);
/* Frees it after the work that may use it finished; NULL is a no-op. */
zs_status zs_sim_host_free(zs_ctx *zs, void *ptr);

/* Copies in stream order; either side device or host memory. Returns once
 * the copy finished (cudaMemcpy). */
zs_status zs_sim_memcpy(zs_ctx *zs, void *dst, const void *src, size_t bytes);
/* The same without waiting where CUDA would not (cudaMemcpyAsync): between
 * device memory and page-locked host memory (zs_sim_host_alloc's); a copy
 * from or to ordinary host memory completes before the call returns, as
 * CUDA documents for pageable memory. */
zs_status zs_sim_memcpy_async(zs_ctx *zs, void *dst, const void *src, size_t bytes);

/* Waits for everything enqueued so far (cudaStreamSynchronize), and
 * reports a failure of any of it. */
zs_status zs_sim_synchronize(zs_ctx *zs);

/* Events (cudaEvent_t): a mark in the stream that the host can wait for
 * without waiting for everything enqueued after it. record marks every op
 * enqueued so far (again: the mark moves); synchronize returns once those
 * have finished (at once for an event never recorded), reporting a failure
 * of the stream, and tells the stream-order check, so that page-locked
 * memory a copy before the mark used is the host's again. Not counted in
 * zs_sim_blocking_waits (the program's wait, not zeroshard's). destroy
 * accepts NULL. */
typedef struct zs_sim_event zs_sim_event;
zs_status zs_sim_event_create(zs_ctx *zs, zs_sim_event **out);
zs_status zs_sim_event_record(zs_ctx *zs, zs_sim_event *event);
zs_status zs_sim_event_synchronize(zs_ctx *zs, zs_sim_event *event);
void zs_sim_event_destroy(zs_ctx *zs, zs_sim_event *event);

/* How many times zeroshard has blocked the host on the device so far (not
 * the program's own waits; the CUDA backend counts the same way, and its
 * count is returned on CUDA): what a program checks to see that a step
 * waits only where it must. 0 on the CPU backend. */
unsigned long long zs_sim_blocking_waits(const zs_ctx *zs);

#ifdef __cplusplus
}
#endif

#endif
