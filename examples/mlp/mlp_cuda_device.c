/* The MLP on the cuda backend (mlp_device.h): the table over mlp_cuda.h,
 * whose implementation the build chooses (mlp_cuda.cu, or mlp_cuda_absent.c
 * without CUDA), so this file is the same in every build. */
#include "mlp_cuda.h"
#include "mlp_device.h"

/* The dtype is given with each op, so creation needs none; NULL after
 * printing why in a build without CUDA. */
static void *cuda_create(zs_ctx *zs, const mlp_shape *shape, int max_batch, zs_dtype dtype) {
    (void)dtype;
    return mlp_cuda_create(zs, shape, max_batch);
}

static void cuda_destroy(void *model) { mlp_cuda_destroy(model); }

/* Generated on the host into pinned staging, then uploaded asynchronously. */
static void cuda_load_batch(void *model, const mlp_dataset *ds, uint64_t first, int count) {
    float *x = NULL;
    int *labels = NULL;
    mlp_cuda_stage(model, &x, &labels);
    mlp_dataset_batch(ds, first, count, x, labels);
    mlp_cuda_upload(model, count);
}

static void cuda_layer_forward(void *model, int l, int batch, zs_dtype dtype, const void *W,
                               const void *b) {
    mlp_cuda_layer_forward(model, l, batch, dtype, W, b);
}

static void cuda_loss(void *model, int batch, float grad_scale, int want_grad) {
    mlp_cuda_loss(model, batch, grad_scale, want_grad);
}

static void cuda_layer_backward(void *model, int l, int batch, zs_dtype dtype, const void *W,
                                void *dW, void *db) {
    mlp_cuda_layer_backward(model, l, batch, dtype, W, dW, db);
}

static void cuda_metrics_reset(void *model) { mlp_cuda_metrics_reset(model); }

static void cuda_metrics_read(void *model, double *loss_sum, double *correct) {
    mlp_cuda_metrics_read(model, loss_sum, correct);
}

const mlp_device_ops mlp_cuda_device = {
    .backend = "cuda",
    .create = cuda_create,
    .destroy = cuda_destroy,
    .load_batch = cuda_load_batch,
    .layer_forward = cuda_layer_forward,
    .loss = cuda_loss,
    .layer_backward = cuda_layer_backward,
    .metrics_reset = cuda_metrics_reset,
    .metrics_read = cuda_metrics_read,
};
