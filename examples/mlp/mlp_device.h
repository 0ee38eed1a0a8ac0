/*
 * mlp_device — where mlp_train's model computes: one table of model ops per
 * backend (the configuration's `backend`), so that the training loop in
 * mlp_train.c is the same for every one of them and never asks where the
 * activations live.
 *
 *   "cpu"   mlp_cpu.c: host memory, the layer math of mlp_model.h.
 *   "cuda"  mlp_cuda_device.c over mlp_cuda.h: CUDA kernels and cuBLAS.
 *   "sim"   mlp_sim.c: the simulated device (zeroshard_sim.h). Its kernels
 *           run the CPU's functions below on device memory, so its results
 *           are the cpu backend's, bit for bit.
 *
 * Conventions (mlp_cuda.h's, which the others follow):
 *   - W, b, dW and db are what zs_param_data and zs_param_grad return on
 *     the backend (device addresses on cuda and sim), in the parameters'
 *     dtype; activations and the math are fp32.
 *   - On a device every op is ordered on the runtime's compute stream, so
 *     the runtime's fetches, reductions and steps are ordered against it
 *     without synchronization here. Only load_batch (as long as its upload
 *     needs) and metrics_read block the host.
 *   - It is an example: a failure prints what failed and aborts the job
 *     (MPI_Abort), since the other ranks would otherwise wait for this one
 *     in their next collective. Only create may return NULL instead, for a
 *     reason that is the same on every rank, so that the caller can stop
 *     every rank in step.
 */
#ifndef MLP_DEVICE_H
#define MLP_DEVICE_H

#include <stdint.h>

#include "mlp_model.h"
#include "zeroshard.h"

typedef struct mlp_device_ops {
    const char *backend; /* as zs_backend_name says it */
    /* The model's state for batches of up to max_batch samples of `shape`,
     * with parameters in `dtype`. Not collective. */
    void *(*create)(zs_ctx *zs, const mlp_shape *shape, int max_batch, zs_dtype dtype);
    /* Waits for the device, then frees. NULL is a no-op. Call before
     * zs_destroy: a device's stream belongs to the context. */
    void (*destroy)(void *model);
    /* Samples first .. first + count - 1 of ds as the input batch and its
     * labels (count <= max_batch). */
    void (*load_batch)(void *model, const mlp_dataset *ds, uint64_t first, int count);
    /* Layer l's forward on its input activations into its output
     * (mlp_layer_forward). W: [dims[l + 1]][dims[l]], b: [dims[l + 1]]. */
    void (*layer_forward)(void *model, int layer, int batch, zs_dtype dtype, const void *W,
                          const void *b);
    /* Softmax cross-entropy of the logits against the loaded labels: adds
     * the loss summed over the batch's samples and the number of correct
     * rows to the metrics; with want_grad also leaves grad_scale *
     * dMeanLoss/dlogits where the last layer's backward reads it. */
    void (*loss)(void *model, int batch, float grad_scale, int want_grad);
    /* Layer l's backward (mlp_layer_backward): ADDS into dW and db, and for
     * l > 0 leaves the input gradient for layer l - 1. Layers go from L - 1
     * down to 0, after every forward and the loss. */
    void (*layer_backward)(void *model, int layer, int batch, zs_dtype dtype, const void *W,
                           void *dW, void *db);
    /* Zeroes the metrics. */
    void (*metrics_reset)(void *model);
    /* The metrics since the last reset, on the host: the loss summed over
     * samples and the correct rows. On a device, the one copy back of a
     * step: call it only where the numbers are needed. */
    void (*metrics_read)(void *model, double *loss_sum, double *correct);
} mlp_device_ops;

extern const mlp_device_ops mlp_cpu_device;  /* mlp_cpu.c */
extern const mlp_device_ops mlp_cuda_device; /* mlp_cuda_device.c */
extern const mlp_device_ops mlp_sim_device;  /* mlp_sim.c */

/* Prints "mlp_train: <what>; aborting the job" and takes the whole job down
 * (MPI_Abort): for a failure that only this rank sees. */
_Noreturn void mlp_abort_job(const char *what);

/* ------------------------------------------------- the CPU's layer math */

/*
 * The CPU backend's math for one layer, in the parameters' dtype, on memory
 * the calling thread can address: mlp_cpu.c runs it on host memory, and the
 * sim device's kernels on device memory through zs_sim_ptr, which is what
 * makes their bits the same.
 *
 * fp32 parameters and gradients are used in place. fp16 and bf16 ones go
 * through fp32 scratch (zs_convert, round to nearest even): the weight and
 * bias are widened before use, and the gradient contribution is computed in
 * fp32 and added into the low-precision gradient with one rounding.
 */
typedef struct mlp_fp32_scratch {
    float *weight;  /* [largest weight]: W widened */
    float *bias;    /* [largest bias]: b widened */
    float *dweight; /* [largest weight]: the fp32 contribution to dW */
    float *dbias;   /* [largest bias]: the fp32 contribution to db */
    float *sum;     /* [largest weight]: a gradient widened to add into */
} mlp_fp32_scratch;

/* The floats of the scratch for `shape`, and its carving out of `memory`
 * (address arithmetic only: the memory may be a device's). */
size_t mlp_fp32_scratch_floats(const mlp_shape *shape);
void mlp_fp32_scratch_carve(mlp_fp32_scratch *s, const mlp_shape *shape, float *memory);

/* mlp_layer_forward with W: [out][in] and b: [out] in `dtype`; s may be
 * NULL for fp32. 0, or -1 when a conversion failed (zs_last_error). */
int mlp_host_layer_forward(int batch, int in, int out, mlp_activation act, zs_dtype dtype,
                           const float *x, const void *W, const void *b, float *y,
                           const mlp_fp32_scratch *s);
/* mlp_layer_backward with W, dW: [out][in] and db: [out] in `dtype`; s may
 * be NULL for fp32. 0, or -1 when a conversion failed (zs_last_error). */
int mlp_host_layer_backward(int batch, int in, int out, mlp_activation act, zs_dtype dtype,
                            const float *x, const float *y, const void *W, float *dy, void *dW,
                            void *db, float *dx, const mlp_fp32_scratch *s);
/* mlp_softmax_xent, adding the batch's summed loss (its mean times batch)
 * into metrics[0] and its correct rows into metrics[1]. */
void mlp_host_loss(int batch, int classes, const float *logits, const int *labels,
                   float grad_scale, float *dlogits, double *metrics);

#endif /* MLP_DEVICE_H */
