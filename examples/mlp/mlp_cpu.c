/* The MLP on the cpu backend (mlp_device.h): host memory, the layer math of
 * mlp_model.h, and that math in the parameters' dtype, which the sim
 * device's kernels run as well (mlp_sim.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "mlp_device.h"

_Noreturn void mlp_abort_job(const char *what) {
    fprintf(stderr, "mlp_train: %s; aborting the job\n", what);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    abort(); /* MPI_Abort does not return, but is not declared noreturn */
}

/* ------------------------------------------------- the CPU's layer math */

/* The largest weight and bias of the model: what one layer's scratch holds. */
static void largest(const mlp_shape *shape, size_t *weight, size_t *bias) {
    *weight = *bias = 0;
    for (int l = 0; l < shape->num_layers; l++) {
        const size_t w = (size_t)mlp_layer_weight_numel(shape, l);
        const size_t b = (size_t)mlp_layer_bias_numel(shape, l);
        *weight = w > *weight ? w : *weight;
        *bias = b > *bias ? b : *bias;
    }
}

size_t mlp_fp32_scratch_floats(const mlp_shape *shape) {
    size_t weight, bias;
    largest(shape, &weight, &bias);
    return 3 * weight + 2 * bias;
}

void mlp_fp32_scratch_carve(mlp_fp32_scratch *s, const mlp_shape *shape, float *memory) {
    size_t weight, bias;
    largest(shape, &weight, &bias);
    s->weight = memory;
    s->dweight = s->weight + weight;
    s->sum = s->dweight + weight;
    s->bias = s->sum + weight;
    s->dbias = s->bias + bias;
}

/* The parameter as fp32: itself, or widened into `copy`. NULL when the
 * conversion failed. */
static const float *as_fp32(zs_dtype dtype, const void *p, size_t n, float *copy) {
    if (dtype == ZS_DTYPE_FP32) return p;
    return zs_convert(copy, ZS_DTYPE_FP32, p, dtype, (int64_t)n) == ZS_OK ? copy : NULL;
}

/* grad: [n] in `dtype` += contribution: [n], added in fp32 (in `sum`) and
 * rounded once. */
static int add_contribution(zs_dtype dtype, void *grad, const float *contribution, size_t n,
                            float *sum) {
    if (zs_convert(sum, ZS_DTYPE_FP32, grad, dtype, (int64_t)n) != ZS_OK) return -1;
    for (size_t i = 0; i < n; i++) sum[i] += contribution[i];
    return zs_convert(grad, dtype, sum, ZS_DTYPE_FP32, (int64_t)n) == ZS_OK ? 0 : -1;
}

int mlp_host_layer_forward(int batch, int in, int out, mlp_activation act, zs_dtype dtype,
                           const float *x, const void *W, const void *b, float *y,
                           const mlp_fp32_scratch *s) {
    const float *W32 = as_fp32(dtype, W, (size_t)out * (size_t)in, s ? s->weight : NULL);
    const float *b32 = as_fp32(dtype, b, (size_t)out, s ? s->bias : NULL);
    if (W32 == NULL || b32 == NULL) return -1;
    mlp_layer_forward(batch, in, out, act, x, W32, b32, y);
    return 0;
}

int mlp_host_layer_backward(int batch, int in, int out, mlp_activation act, zs_dtype dtype,
                            const float *x, const float *y, const void *W, float *dy, void *dW,
                            void *db, float *dx, const mlp_fp32_scratch *s) {
    const size_t nw = (size_t)out * (size_t)in, nb = (size_t)out;
    const float *W32 = as_fp32(dtype, W, nw, s ? s->weight : NULL);
    if (W32 == NULL) return -1;
    if (dtype == ZS_DTYPE_FP32) {
        mlp_layer_backward(batch, in, out, act, x, y, W32, dy, dW, db, dx);
        return 0;
    }
    // Backward adds, so the contributions start at zero.
    memset(s->dweight, 0, sizeof(float) * nw);
    memset(s->dbias, 0, sizeof(float) * nb);
    mlp_layer_backward(batch, in, out, act, x, y, W32, dy, s->dweight, s->dbias, dx);
    if (add_contribution(dtype, dW, s->dweight, nw, s->sum) != 0) return -1;
    return add_contribution(dtype, db, s->dbias, nb, s->sum);
}

void mlp_host_loss(int batch, int classes, const float *logits, const int *labels,
                   float grad_scale, float *dlogits, double *metrics) {
    int correct = 0;
    const double mean =
        mlp_softmax_xent(batch, classes, logits, labels, grad_scale, dlogits, &correct);
    metrics[0] += mean * (double)batch;
    metrics[1] += (double)correct;
}

/* ------------------------------------------------------ the cpu device */

typedef struct mlp_cpu {
    mlp_shape shape;
    mlp_workspace ws;
    mlp_fp32_scratch wide; /* fp16/bf16 parameters only */
    float *wide_memory;
    double metrics[2];
} mlp_cpu;

static void cpu_destroy(void *model) {
    mlp_cpu *m = model;
    if (m == NULL) return;
    mlp_workspace_free(&m->ws);
    free(m->wide_memory);
    free(m);
}

static void *cpu_create(zs_ctx *zs, const mlp_shape *shape, int max_batch, zs_dtype dtype) {
    (void)zs;
    mlp_cpu *m = calloc(1, sizeof *m);
    if (m == NULL) mlp_abort_job("out of host memory for the model");
    m->shape = *shape;
    if (mlp_workspace_init(&m->ws, shape, max_batch) != 0)
        mlp_abort_job("out of host memory for the activations");
    if (dtype != ZS_DTYPE_FP32) {
        m->wide_memory = malloc(sizeof(float) * mlp_fp32_scratch_floats(shape));
        if (m->wide_memory == NULL)
            mlp_abort_job("out of host memory for the fp32 views of the parameters");
        mlp_fp32_scratch_carve(&m->wide, shape, m->wide_memory);
    }
    return m;
}

static void cpu_load_batch(void *model, const mlp_dataset *ds, uint64_t first, int count) {
    mlp_cpu *m = model;
    mlp_dataset_batch(ds, first, count, m->ws.acts[0], m->ws.labels);
}

/* A conversion that failed: the parameters' dtype is one zs_convert knows,
 * so this is not expected; it says what zeroshard said. */
static void conversion_failed(const char *where) {
    fprintf(stderr, "mlp_train: %s: %s\n", where, zs_last_error());
    mlp_abort_job("a dtype conversion failed");
}

static void cpu_layer_forward(void *model, int l, int batch, zs_dtype dtype, const void *W,
                              const void *b) {
    mlp_cpu *m = model;
    const mlp_shape *sh = &m->shape;
    if (mlp_host_layer_forward(batch, sh->dims[l], sh->dims[l + 1], mlp_layer_activation(sh, l),
                               dtype, m->ws.acts[l], W, b, m->ws.acts[l + 1], &m->wide) != 0)
        conversion_failed("layer forward");
}

static void cpu_loss(void *model, int batch, float grad_scale, int want_grad) {
    mlp_cpu *m = model;
    const int L = m->shape.num_layers;
    mlp_host_loss(batch, m->shape.dims[L], m->ws.acts[L], m->ws.labels, grad_scale,
                  want_grad ? m->ws.grad[0] : NULL, m->metrics);
}

static void cpu_layer_backward(void *model, int l, int batch, zs_dtype dtype, const void *W,
                               void *dW, void *db) {
    mlp_cpu *m = model;
    const mlp_shape *sh = &m->shape;
    const int L = sh->num_layers;
    // Ping-pong: layer l's output gradient is in one buffer and its input
    // gradient goes to the other, which layer l - 1 reads next.
    float *dy = m->ws.grad[(L - 1 - l) % 2];             // [batch][dims[l + 1]]
    float *dx = l > 0 ? m->ws.grad[(L - l) % 2] : NULL;  // [batch][dims[l]]
    if (mlp_host_layer_backward(batch, sh->dims[l], sh->dims[l + 1],
                                mlp_layer_activation(sh, l), dtype, m->ws.acts[l],
                                m->ws.acts[l + 1], W, dy, dW, db, dx, &m->wide) != 0)
        conversion_failed("layer backward");
}

static void cpu_metrics_reset(void *model) {
    mlp_cpu *m = model;
    m->metrics[0] = m->metrics[1] = 0.0;
}

static void cpu_metrics_read(void *model, double *loss_sum, double *correct) {
    const mlp_cpu *m = model;
    *loss_sum = m->metrics[0];
    *correct = m->metrics[1];
}

const mlp_device_ops mlp_cpu_device = {
    .backend = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .load_batch = cpu_load_batch,
    .layer_forward = cpu_layer_forward,
    .loss = cpu_loss,
    .layer_backward = cpu_layer_backward,
    .metrics_reset = cpu_metrics_reset,
    .metrics_read = cpu_metrics_read,
};
