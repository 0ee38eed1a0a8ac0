/* mlp_cuda.h in a build without CUDA (CMake found no nvcc, or -DZS_CUDA=OFF).
 * mlp_train calls mlp_cuda_create only when the context's backend is "cuda",
 * which such a build's runtime normally refuses already; this says what to do
 * if it gets that far. The other calls cannot be reached without a context
 * from mlp_cuda_create, so they only guard against misuse. */
#include <stdio.h>
#include <stdlib.h>

#include <mpi.h>

#include "mlp_cuda.h"

mlp_cuda *mlp_cuda_create(zs_ctx *zs, const mlp_shape *shape, int max_batch) {
    (void)shape;
    (void)max_batch;
    // Every rank runs the same binary and fails here, so one message is enough.
    if (zs_rank(zs) == 0) {
        fprintf(stderr, "mlp_train: backend = \"cuda\", but this build has no CUDA; rebuild "
                        "with the CUDA toolkit (nvcc on PATH, cmake -DZS_CUDA=ON; see "
                        "docs/GPU.md) or set backend = \"cpu\"\n");
    }
    return NULL;
}

void mlp_cuda_destroy(mlp_cuda *mc) { (void)mc; }

/* Reached only by a program that ignored mlp_cuda_create's NULL. */
static void unreachable(const char *call) {
    fprintf(stderr, "mlp_train: %s called in a build without CUDA; this build has no CUDA; "
                    "rebuild with the CUDA toolkit\n", call);
    MPI_Abort(MPI_COMM_WORLD, 1);
    abort(); /* MPI_Abort does not return, but is not declared noreturn */
}

void mlp_cuda_stage(mlp_cuda *mc, float **x, int **labels) {
    (void)mc;
    (void)x;
    (void)labels;
    unreachable("mlp_cuda_stage");
}

void mlp_cuda_upload(mlp_cuda *mc, int batch) {
    (void)mc;
    (void)batch;
    unreachable("mlp_cuda_upload");
}

void mlp_cuda_layer_forward(mlp_cuda *mc, int layer, int batch, zs_dtype dtype, const void *W,
                            const void *b) {
    (void)mc;
    (void)layer;
    (void)batch;
    (void)dtype;
    (void)W;
    (void)b;
    unreachable("mlp_cuda_layer_forward");
}

void mlp_cuda_loss(mlp_cuda *mc, int batch, float grad_scale, int want_grad) {
    (void)mc;
    (void)batch;
    (void)grad_scale;
    (void)want_grad;
    unreachable("mlp_cuda_loss");
}

void mlp_cuda_layer_backward(mlp_cuda *mc, int layer, int batch, zs_dtype dtype, const void *W,
                             void *dW, void *db) {
    (void)mc;
    (void)layer;
    (void)batch;
    (void)dtype;
    (void)W;
    (void)dW;
    (void)db;
    unreachable("mlp_cuda_layer_backward");
}

void mlp_cuda_metrics_reset(mlp_cuda *mc) {
    (void)mc;
    unreachable("mlp_cuda_metrics_reset");
}

void mlp_cuda_metrics_read(mlp_cuda *mc, double *loss_sum, double *correct) {
    (void)mc;
    (void)loss_sum;
    (void)correct;
    unreachable("mlp_cuda_metrics_read");
}
