/*
 * nn_device — where the examples' models keep their tensors and how bytes
 * move: the CPU (host memory), a CUDA device (device memory, one stream) or
 * zeroshard's simulated device (nn_sim.h: device memory the host cannot
 * touch, zeroshard's sim stream).
 * Every model backend (gpt2_backend.h, llama_backend.h) computes on one
 * device, and the shared trainer (examples/trainer) allocates its
 * activations, token buffers and loss slots through it, so that nothing
 * above the device knows which kind it is.
 *
 *     nn_device *dev = nn_cpu_device_create();
 *     if (dev->ops->alloc(dev, bytes, &p) != 0)
 *         fprintf(stderr, "%s\n", dev->ops->last_error(dev));
 *
 * Conventions (every model backend inherits them):
 *   - Device memory comes from alloc (zero-filled, 64-byte aligned at
 *     least); only upload/download/host_* and the ops that say so take host
 *     pointers.
 *   - Every fallible op returns 0 on success and nonzero on failure (an
 *     nn_status); then ops->last_error(dev) says what failed and what to do,
 *     until the next failing op. Nothing exits or prints.
 *   - CUDA: every op is enqueued on the device's stream and returns without
 *     waiting, except download (returns host data), upload (returns when
 *     the host buffer may be reused), host_wait, synchronize, free and
 *     destroy. A training step therefore never blocks the host: tokens go
 *     up with upload_async and the loss comes back with losses_sum, both
 *     through host_alloc memory. A failure during asynchronous execution is
 *     reported by the next op that waits.
 *   - Not thread-safe: one thread at a time per device.
 */
#ifndef NN_DEVICE_H
#define NN_DEVICE_H

#include <stddef.h>

#include "nn_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nn_status {
    NN_OK = 0,
    NN_ERR_ARG = 1,        /* a bad argument: sizes, NULL, a token out of range */
    NN_ERR_NOMEM = 2,      /* host or device memory ran out */
    NN_ERR_DEVICE = 3,     /* a CUDA or cuBLAS call failed */
    NN_ERR_UNAVAILABLE = 4 /* this build or machine lacks the backend */
} nn_status;

/* "ok", "bad argument", ... */
const char *nn_status_name(int status);

/* Bytes of a device's or backend's last_error message. */
#define NN_ERR_CAP 512

typedef struct nn_device nn_device;

typedef struct nn_device_ops {
    const char *name; /* "cpu" or "cuda" */
    /* *out = bytes of zero-filled device memory (bytes 0 gives a valid
     * pointer to free). */
    int (*alloc)(nn_device *dev, size_t bytes, void **out);
    /* NULL is a no-op. CUDA: waits for the device. */
    void (*free)(nn_device *dev, void *ptr);
    int (*zero)(nn_device *dev, void *ptr, size_t bytes);
    /* Host -> device; returns when host_src may be reused. */
    int (*upload)(nn_device *dev, void *dst, const void *host_src, size_t bytes);
    /* Device -> host; returns when host_dst holds the data. */
    int (*download)(nn_device *dev, void *host_dst, const void *src, size_t bytes);
    /* Device -> device; the ranges must not overlap. */
    int (*copy)(nn_device *dev, void *dst, const void *src, size_t bytes);
    /* Waits for everything queued; reports asynchronous failures. */
    int (*synchronize)(nn_device *dev);
    /* Host memory for transfers that do not block: page-locked on CUDA,
     * zero-filled. host_free(NULL) is a no-op. */
    int (*host_alloc)(nn_device *dev, size_t bytes, void **out);
    void (*host_free)(nn_device *dev, void *host);
    /* Host -> device from host_alloc memory, enqueued: host_src must not be
     * written again before host_wait(dev, host_src). */
    int (*upload_async)(nn_device *dev, void *dst, const void *host_src, size_t bytes);
    /* Waits until every transfer enqueued to or from this host_alloc
     * buffer (upload_async, losses_sum) has completed. */
    int (*host_wait)(nn_device *dev, const void *host);
    /* Enqueues the sum of losses[0..n) in double, in a fixed order, and its
     * transfer into *host_out (a host_alloc buffer of at least one
     * double), readable after host_wait(dev, host_out). */
    int (*losses_sum)(nn_device *dev, const float *losses, int n, double *host_out);
    const char *(*last_error)(const nn_device *dev);
    /* How many times the device's ops have blocked the host on its stream
     * so far (upload, download, synchronize: the waits a step must not
     * make), or NULL where the device does not count them (the CPU's ops
     * never wait; CUDA's are counted by the runtime's profile). */
    unsigned long long (*blocking_waits)(const nn_device *dev);
    /* Frees the device (not memory from alloc: free that first). NULL is a
     * no-op. CUDA: waits for the stream, which stays the caller's. */
    void (*destroy)(nn_device *dev);
} nn_device_ops;

struct nn_layer_ops; /* nn_layers.h */

struct nn_device {
    const nn_device_ops *ops;
    nn_dtype dtype; /* what the models on it store tensors in, fixed at creation */
    /* The layers that compute on this device's memory (nn_layers.h): the
     * CPU's, the simulated device's or CUDA's; the models' orchestration
     * is the same on all three. */
    const struct nn_layer_ops *layers;
    void *impl;
};

/* Host memory; its models compute in fp32 (dtype NN_F32) with OpenMP.
 * NULL only when host memory runs out. */
nn_device *nn_cpu_device_create(void);
/* 1 when dev came from nn_cpu_device_create (the CPU backends accept no
 * other device), else 0. */
int nn_device_is_cpu(const nn_device *dev);

/* A CUDA device on the current device, enqueuing everything on cuda_stream
 * (a cudaStream_t; the trainer passes zeroshard's compute stream, so that
 * the runtime's fetches and reductions are ordered against the model's
 * work without extra synchronization), its models storing tensors in
 * dtype (fp32: exact, no TF32; bf16 or fp16: tensor cores). 0 and *out, or
 * an nn_status with a message in err: NN_ERR_UNAVAILABLE in builds without
 * CUDA (nn_cuda_absent.c) or without a usable device. */
int nn_cuda_device_create(void *cuda_stream, nn_dtype dtype, nn_device **out, char *err,
                          size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* NN_DEVICE_H */
