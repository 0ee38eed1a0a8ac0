/*
 * mlp_cuda — the example MLP's math (mlp_model.h) on the GPU, for mlp_train
 * on a context whose backend is "cuda" (zeroshard_cuda.h).
 *
 * The trainer stays plain C: this header uses no CUDA type, and the build
 * chooses its implementation (examples/mlp/CMakeLists.txt): mlp_cuda.cu when
 * CMake found CUDA, mlp_cuda_absent.c otherwise, which only reports that the
 * build has no CUDA. So mlp_train.c needs no #ifdef.
 *
 * Conventions:
 *   - Tensors are row-major with the shapes of mlp_model.h; parameters and
 *     gradients are the DEVICE pointers zeroshard returns (zs_param_data,
 *     zs_param_grad) in the parameters' compute dtype; activations and the
 *     per-layer math are fp32 whatever that dtype is.
 *   - Everything is enqueued on zeroshard's compute stream (zs_cuda_stream),
 *     so the runtime's fetches, gradient reductions and steps are ordered
 *     against it without any synchronization here. Only mlp_cuda_stage and
 *     mlp_cuda_metrics_read block the host, and only as long as they must.
 *   - It is an example: a failing CUDA or cuBLAS call prints the call and the
 *     error and aborts the job (MPI_Abort), since the other ranks would
 *     otherwise wait for this one in their next collective.
 */
#ifndef MLP_CUDA_H
#define MLP_CUDA_H

#include "mlp_model.h"
#include "zeroshard.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mlp_cuda mlp_cuda; /* device activations, scratch and cuBLAS state */

/* Allocates device activations for batches of up to max_batch samples of
 * `shape`, fp32 scratch for the largest layer, and pinned host staging, on
 * the context's device and compute stream. NULL after printing why when this
 * build has no CUDA (the failure is the same on every rank, so the caller can
 * stop collectively); aborts the job on a CUDA failure. Not collective. */
mlp_cuda *mlp_cuda_create(zs_ctx *zs, const mlp_shape *shape, int max_batch);
/* Waits for the stream, then frees everything. NULL is a no-op. Call before
 * zs_destroy: the stream belongs to the context. */
void mlp_cuda_destroy(mlp_cuda *mc);

/* Pinned host buffers for the next batch: *x: [max_batch][dims[0]], *labels:
 * [max_batch]. Two sets alternate, so the host fills one while the previous
 * upload may still be in flight; this waits only if the upload made from the
 * returned set two batches ago has not finished. */
void mlp_cuda_stage(mlp_cuda *mc, float **x, int **labels);
/* Copies the first `batch` samples of the set last returned by
 * mlp_cuda_stage to the device input (acts[0]) and labels, asynchronously. */
void mlp_cuda_upload(mlp_cuda *mc, int batch);

/* Layer l's forward on acts[l] into acts[l + 1] (mlp_layer_forward).
 * W: [dims[l + 1]][dims[l]], b: [dims[l + 1]], device, in `dtype`. */
void mlp_cuda_layer_forward(mlp_cuda *mc, int layer, int batch, zs_dtype dtype, const void *W,
                            const void *b);

/* Softmax cross-entropy of the logits acts[L] against the uploaded labels.
 * Adds the loss summed over the batch and the number of correct rows into the
 * device metrics (mlp_cuda_metrics_read); with want_grad, writes
 * grad_scale * dMeanLoss/dlogits where mlp_cuda_layer_backward of the last
 * layer reads it (mlp_softmax_xent). */
void mlp_cuda_loss(mlp_cuda *mc, int batch, float grad_scale, int want_grad);

/* Layer l's backward (mlp_layer_backward): reads the output gradient left by
 * mlp_cuda_loss (l = L - 1) or by the backward of layer l + 1, ADDS into
 * dW: [dims[l + 1]][dims[l]] and db: [dims[l + 1]] (device, in `dtype`), and
 * for l > 0 writes the input gradient that layer l - 1 reads. Layers must go
 * from L - 1 down to 0, after the forward of every layer and the loss. */
void mlp_cuda_layer_backward(mlp_cuda *mc, int layer, int batch, zs_dtype dtype, const void *W,
                             void *dW, void *db);

/* Zeroes the device metrics (asynchronously). */
void mlp_cuda_metrics_reset(mlp_cuda *mc);
/* Copies the metrics to the host and waits for them: the loss summed over
 * every sample since the last reset, and the correct predictions. This is the
 * one device-to-host copy of a training step, so call it only to log. */
void mlp_cuda_metrics_read(mlp_cuda *mc, double *loss_sum, double *correct);

#ifdef __cplusplus
}
#endif
#endif /* MLP_CUDA_H */
