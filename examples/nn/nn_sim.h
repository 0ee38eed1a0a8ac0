/*
 * nn_sim — the examples' models on zeroshard's simulated device (backend =
 * "sim", zeroshard_sim.h): an nn_device whose memory is sim device memory,
 * which host code cannot touch, and whose every op is enqueued on the
 * context's sim stream, in order with the runtime's gathers, reductions and
 * optimizer steps, as the CUDA device enqueues on zeroshard's CUDA stream.
 * Its layers (nn_layers.h) are kernels that run the CPU's layers on the
 * device's thread, so a model computes the CPU device's bits with CUDA's
 * asynchrony: the stream-order check of the sim device watches the
 * trainer's pinned uploads, its device-side loss sums and the model's
 * kernels against the runtime's ops.
 *
 * The device follows nn_device.h's CUDA conventions: alloc, zero, copy,
 * upload_async, losses_sum and every layer return without waiting;
 * upload, download, synchronize, free and host_wait wait (host_wait only
 * for the transfers of its buffer: an event per host_alloc buffer).
 */
#ifndef NN_SIM_H
#define NN_SIM_H

#include <stddef.h>

#include "nn_device.h"
#include "zeroshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A device on zs's sim stream (zs_backend_name(zs) is "sim"), storing fp32
 * tensors. 0 and *out, or an nn_status with a message in err
 * (NN_ERR_UNAVAILABLE when zs's backend is not "sim"). The context must
 * outlive the device. */
int nn_sim_device_create(zs_ctx *zs, nn_device **out, char *err, size_t cap);

/* The simulated device's layers: each a kernel on the device's stream. */
extern const struct nn_layer_ops nn_sim_layer_ops;

/* The context a sim device enqueues on (for its layers). */
zs_ctx *nn_sim_device_context(const nn_device *dev);

/* Records the failure of a zeroshard call in dev's last_error: NN_ERR_DEVICE. */
int nn_sim_device_failed(nn_device *dev, const char *op);

#ifdef __cplusplus
}
#endif
#endif /* NN_SIM_H */
