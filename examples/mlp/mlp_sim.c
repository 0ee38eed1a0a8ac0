/* The MLP on the simulated device (backend = "sim"; mlp_device.h,
 * zeroshard_sim.h): the cuda backend's shape with the cpu backend's bits.
 *
 * The activations, the batch, the labels, the fp32 scratch of fp16/bf16
 * parameters and the metrics live in sim device memory (one zs_sim_malloc),
 * which this thread cannot touch. Each layer's forward and backward and the
 * loss are kernels on the runtime's compute stream (zs_sim_launch): the
 * device's thread runs them later, in order with the runtime's fetches,
 * reductions and optimizer steps, and they call the very functions the cpu
 * backend calls (mlp_host_*, mlp_cpu.c) on the addresses zs_sim_ptr gives
 * them. So every value, the parameters after each step included, is the cpu
 * backend's, bit for bit.
 *
 * A kernel's arguments are values, as a CUDA kernel's are: device addresses
 * and sizes, never a pointer to this file's host state.
 *
 * Waits: the metrics come back with one copy, when the loop asks (a step
 * that logs, the evaluation). The batch goes up from ordinary host memory,
 * since zeroshard_sim.h gives a program no page-locked memory of its own;
 * such a copy waits for the stream first, as cudaMemcpyAsync from pageable
 * memory does, so each micro-step's upload waits for the previous step's
 * device work. The batch is generated before the upload, while that work
 * still runs.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cpu_blas.h"
#include "mlp_device.h"
#include "zeroshard_sim.h"

typedef struct mlp_sim {
    zs_ctx *zs;
    mlp_shape shape;
    int max_batch;
    void *device;          /* the one allocation everything below is carved from */
    mlp_workspace ws;      /* device addresses: acts, grad ping-pong, labels */
    mlp_fp32_scratch wide; /* device addresses; fp16/bf16 parameters only */
    double *metrics;       /* device: [2], loss summed over samples, correct rows */
    float *host_x;         /* [max_batch][dims[0]]: the batch before its upload */
    int *host_labels;      /* [max_batch] */
} mlp_sim;

/* A zeroshard call that failed on this rank only; the job goes down. */
static void check(zs_status st, const char *call) {
    if (st == ZS_OK) return;
    fprintf(stderr, "mlp_train: %s: %s: %s\n", call, zs_status_name(st), zs_last_error());
    mlp_abort_job("the sim device failed");
}

/* Rounds up to 256 bytes, so that each piece starts as cudaMalloc's would. */
static size_t align_up(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

/* ---------------------------------------------------------------- kernels */

/* A kernel that failed: the stream's failure, which the runtime's next wait
 * reports on this rank (and its next collective on every rank). Said here
 * too, with zeroshard's reason, which the stream's message does not carry. */
static int kernel_failed(const char *kernel) {
    fprintf(stderr, "mlp_train: sim kernel %s: %s\n", kernel, zs_last_error());
    return 1;
}

typedef struct forward_args {
    int batch, in, out;
    mlp_activation act;
    zs_dtype dtype;
    const float *x;        /* [batch][in] */
    const void *W, *b;     /* [out][in], [out] in dtype */
    float *y;              /* [batch][out] */
    mlp_fp32_scratch wide; /* NULLs in fp32 */
} forward_args;

/* The scratch as the kernel addresses it. */
static mlp_fp32_scratch wide_ptr(const zs_sim_kernel *k, const mlp_fp32_scratch *s) {
    mlp_fp32_scratch t = {zs_sim_ptr(k, s->weight), zs_sim_ptr(k, s->bias),
                          zs_sim_ptr(k, s->dweight), zs_sim_ptr(k, s->dbias),
                          zs_sim_ptr(k, s->sum)};
    return t;
}

static int forward_kernel(const zs_sim_kernel *k, void *args) {
    const forward_args *a = args;
    const mlp_fp32_scratch wide = wide_ptr(k, &a->wide);
    if (mlp_host_layer_forward(a->batch, a->in, a->out, a->act, a->dtype, zs_sim_ptr(k, a->x),
                               zs_sim_ptr(k, a->W), zs_sim_ptr(k, a->b), zs_sim_ptr(k, a->y),
                               &wide) != 0)
        return kernel_failed("mlp_forward");
    return 0;
}

typedef struct backward_args {
    int batch, in, out;
    mlp_activation act;
    zs_dtype dtype;
    const float *x, *y; /* the layer's input and output activations */
    const void *W;      /* [out][in] in dtype */
    float *dy;          /* [batch][out], overwritten */
    void *dW, *db;      /* the runtime's gradients, in dtype */
    float *dx;          /* [batch][in], or NULL for the first layer */
    mlp_fp32_scratch wide;
} backward_args;

static int backward_kernel(const zs_sim_kernel *k, void *args) {
    const backward_args *a = args;
    const mlp_fp32_scratch wide = wide_ptr(k, &a->wide);
    if (mlp_host_layer_backward(a->batch, a->in, a->out, a->act, a->dtype, zs_sim_ptr(k, a->x),
                                zs_sim_ptr(k, a->y), zs_sim_ptr(k, a->W), zs_sim_ptr(k, a->dy),
                                zs_sim_ptr(k, a->dW), zs_sim_ptr(k, a->db),
                                zs_sim_ptr(k, a->dx), &wide) != 0)
        return kernel_failed("mlp_backward");
    return 0;
}

typedef struct loss_args {
    int batch, classes;
    float grad_scale;
    const float *logits; /* [batch][classes] */
    const int *labels;   /* [batch] */
    float *dlogits;      /* [batch][classes], or NULL */
    double *metrics;     /* [2] */
} loss_args;

static int loss_kernel(const zs_sim_kernel *k, void *args) {
    const loss_args *a = args;
    mlp_host_loss(a->batch, a->classes, zs_sim_ptr(k, a->logits), zs_sim_ptr(k, a->labels),
                  a->grad_scale, zs_sim_ptr(k, a->dlogits), zs_sim_ptr(k, a->metrics));
    return 0;
}

static int metrics_reset_kernel(const zs_sim_kernel *k, void *args) {
    double *metrics = zs_sim_ptr(k, *(double *const *)args);
    metrics[0] = metrics[1] = 0.0;
    return 0;
}

/* ------------------------------------------------------------------- ops */

static void sim_destroy(void *model) {
    mlp_sim *m = model;
    if (m == NULL) return;
    // zs_sim_free waits for the kernels that may still use the memory.
    const zs_status st = zs_sim_free(m->zs, m->device);
    if (st != ZS_OK)
        fprintf(stderr, "mlp_train: zs_sim_free: %s: %s\n", zs_status_name(st), zs_last_error());
    free(m->host_x);
    free(m->host_labels);
    free(m);
}

static void *sim_create(zs_ctx *zs, const mlp_shape *shape, int max_batch, zs_dtype dtype) {
    // The kernels' products run on the device's thread through ex_sgemm.
    ex_blas_init();
    mlp_sim *m = calloc(1, sizeof *m);
    if (m == NULL) mlp_abort_job("out of host memory for the model");
    m->zs = zs;
    m->shape = *shape;
    m->max_batch = max_batch;
    const size_t B = (size_t)max_batch;
    m->host_x = malloc(sizeof(float) * B * (size_t)shape->dims[0]);
    m->host_labels = malloc(sizeof(int) * B);
    if (m->host_x == NULL || m->host_labels == NULL)
        mlp_abort_job("out of host memory for the batch");

    const size_t ws_bytes = align_up(mlp_workspace_bytes(shape, max_batch));
    const size_t wide_bytes =
        dtype == ZS_DTYPE_FP32 ? 0 : align_up(sizeof(float) * mlp_fp32_scratch_floats(shape));
    check(zs_sim_malloc(zs, ws_bytes + wide_bytes + sizeof(double) * 2, &m->device),
          "zs_sim_malloc");
    // Device memory comes zero-filled: the metrics start at zero.
    char *base = m->device;
    mlp_workspace_carve(&m->ws, shape, max_batch, base);
    if (wide_bytes > 0) mlp_fp32_scratch_carve(&m->wide, shape, (float *)(void *)(base + ws_bytes));
    m->metrics = (double *)(void *)(base + ws_bytes + wide_bytes);
    return m;
}

static void launch(mlp_sim *m, const char *name, zs_sim_kernel_fn fn, const void *args,
                   size_t bytes) {
    check(zs_sim_launch(m->zs, name, fn, args, bytes), name);
}

static void sim_load_batch(void *model, const mlp_dataset *ds, uint64_t first, int count) {
    mlp_sim *m = model;
    if (count <= 0) return;
    mlp_dataset_batch(ds, first, count, m->host_x, m->host_labels);
    const size_t x_bytes = sizeof(float) * (size_t)count * (size_t)m->shape.dims[0];
    check(zs_sim_memcpy_async(m->zs, m->ws.acts[0], m->host_x, x_bytes), "zs_sim_memcpy_async");
    check(zs_sim_memcpy_async(m->zs, m->ws.labels, m->host_labels, sizeof(int) * (size_t)count),
          "zs_sim_memcpy_async");
}

static void sim_layer_forward(void *model, int l, int batch, zs_dtype dtype, const void *W,
                              const void *b) {
    mlp_sim *m = model;
    const mlp_shape *sh = &m->shape;
    const forward_args a = {batch, sh->dims[l], sh->dims[l + 1], mlp_layer_activation(sh, l),
                            dtype, m->ws.acts[l], W, b, m->ws.acts[l + 1], m->wide};
    launch(m, "mlp_forward", forward_kernel, &a, sizeof a);
}

static void sim_loss(void *model, int batch, float grad_scale, int want_grad) {
    mlp_sim *m = model;
    const int L = m->shape.num_layers;
    const loss_args a = {batch, m->shape.dims[L], grad_scale, m->ws.acts[L], m->ws.labels,
                         want_grad ? m->ws.grad[0] : NULL, m->metrics};
    launch(m, "mlp_loss", loss_kernel, &a, sizeof a);
}

static void sim_layer_backward(void *model, int l, int batch, zs_dtype dtype, const void *W,
                               void *dW, void *db) {
    mlp_sim *m = model;
    const mlp_shape *sh = &m->shape;
    const int L = sh->num_layers;
    // The cpu device's ping-pong (mlp_cpu.c), on device addresses.
    const backward_args a = {batch,
                             sh->dims[l],
                             sh->dims[l + 1],
                             mlp_layer_activation(sh, l),
                             dtype,
                             m->ws.acts[l],
                             m->ws.acts[l + 1],
                             W,
                             m->ws.grad[(L - 1 - l) % 2],
                             dW,
                             db,
                             l > 0 ? m->ws.grad[(L - l) % 2] : NULL,
                             m->wide};
    launch(m, "mlp_backward", backward_kernel, &a, sizeof a);
}

static void sim_metrics_reset(void *model) {
    mlp_sim *m = model;
    launch(m, "mlp_metrics_reset", metrics_reset_kernel, &m->metrics, sizeof m->metrics);
}

static void sim_metrics_read(void *model, double *loss_sum, double *correct) {
    mlp_sim *m = model;
    double metrics[2];
    // Waits for the stream: the metrics are there on return.
    check(zs_sim_memcpy(m->zs, metrics, m->metrics, sizeof metrics), "zs_sim_memcpy");
    *loss_sum = metrics[0];
    *correct = metrics[1];
}

const mlp_device_ops mlp_sim_device = {
    .backend = "sim",
    .create = sim_create,
    .destroy = sim_destroy,
    .load_batch = sim_load_batch,
    .layer_forward = sim_layer_forward,
    .loss = sim_loss,
    .layer_backward = sim_layer_backward,
    .metrics_reset = sim_metrics_reset,
    .metrics_read = sim_metrics_read,
};
