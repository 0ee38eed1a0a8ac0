/*
 * The composite layer ops (nn_layers.h) as their primitive ops in sequence:
 * what the CPU's and the simulated device's tables run, and what CUDA fuses
 * (nn_cuda_layers.cu). Written once over dev->layers, so the CPU and sim
 * run the very calls the model backends made before the composites existed,
 * and keep their bits.
 */
#include "nn_layers.h"

#include "ex_error.h"

int nn_linears_forward_composed(nn_device *dev, const char *name, int n, const int *outs,
                                int rows, int in, const void *x, int ldx, const void *const *W,
                                const void *const *b, void *y, int ldy) {
    const nn_layer_ops *L = dev->layers;
    size_t col = 0;
    for (int i = 0; i < n; i++) {
        const int s = L->linear_forward(dev, name, rows, in, outs[i], x, ldx, W[i],
                                        b != NULL ? b[i] : NULL, NULL, 0, nn_at(dev, y, col), ldy);
        if (s != NN_OK) return s;
        col += (size_t)outs[i];
    }
    return NN_OK;
}

int nn_linears_backward_composed(nn_device *dev, const char *name, int n, const int *outs,
                                 int rows, int in, const void *x, int ldx,
                                 const void *const *W, const void *dy, int lddy,
                                 void *const *gW, void *dx, int lddx) {
    const nn_layer_ops *L = dev->layers;
    size_t col = 0;
    for (int i = 0; i < n; i++) {
        // The first writes dx, the others add to it, in ascending i.
        const int s = L->linear_backward(dev, name, rows, in, outs[i], x, ldx, W[i],
                                         nn_at_const(dev, dy, col), lddy,
                                         gW != NULL ? gW[i] : NULL, dx, lddx,
                                         i == 0 ? 0.0f : 1.0f);
        if (s != NN_OK) return s;
        col += (size_t)outs[i];
    }
    return NN_OK;
}

int nn_linear_gelu_forward_composed(nn_device *dev, const char *name, int rows, int in, int out,
                                    const void *x, int ldx, const void *W, const void *b,
                                    void *pre, void *post) {
    const nn_layer_ops *L = dev->layers;
    const int s = L->linear_forward(dev, name, rows, in, out, x, ldx, W, b, NULL, 0, pre, out);
    if (s != NN_OK) return s;
    return L->gelu_forward(dev, (long long)rows * out, pre, post);
}

int nn_linear_dgelu_backward_composed(nn_device *dev, const char *name, int rows, int in,
                                      int out, const void *x, int ldx, const void *W,
                                      const void *dy, int lddy, void *dW, const void *pre,
                                      void *dx, void *db) {
    const nn_layer_ops *L = dev->layers;
    const int s = L->linear_backward(dev, name, rows, in, out, x, ldx, W, dy, lddy, dW, dx, in,
                                     0.0f);
    if (s != NN_OK) return s;
    return L->gelu_backward_colsum(dev, rows, in, dx, pre, db);
}

int nn_lora_set(nn_lora *lora, const char *who, int r, double alpha, double dropout, char *err,
                size_t cap) {
    if (lora == NULL || r < 0 || (r > 0 && !(alpha > 0)) || !(dropout >= 0.0 && dropout < 1.0))
        return ex_error(err, cap, NN_ERR_ARG,
                        "%s: LoRA rank %d, alpha %g and dropout %g; need r >= 0, alpha > 0 and "
                        "0 <= dropout < 1",
                        who, r, alpha, dropout);
    lora->r = r;
    lora->scale = r > 0 ? (float)(alpha / r) : 0.0f;
    lora->dropout = (float)dropout;
    return NN_OK;
}

const nn_lora_dropout *nn_lora_dropout_of(nn_lora_dropout *out, const nn_lora *lora, int target,
                                          void *xd, void *dxd) {
    if (lora->dropout == 0.0f || lora->seed == 0) return NULL;
    /* Each Linear of the block its own stream (the kernels hash again). */
    *out = (nn_lora_dropout){lora->dropout,
                             lora->seed ^ ((uint64_t)(target + 1) * 0xd1b54a32d192ed03ull), xd,
                             dxd};
    return out;
}

/* The adapter's input: x itself, or with dropout its dropped copy in
 * drop->xd ([rows][in]). */
static int adapter_input(nn_device *dev, int rows, int in, const void *x, int ldx,
                         const nn_lora_dropout *drop, const void **xa, int *lda) {
    *xa = x;
    *lda = ldx;
    if (drop == NULL || drop->p == 0.0f) return NN_OK;
    *xa = drop->xd;
    *lda = in;
    return dev->layers->dropout(dev, rows, in, drop->p, drop->seed, x, ldx, drop->xd, in, 0);
}

int nn_lora_forward_composed(nn_device *dev, const char *name, int rows, int in, int out, int r,
                             float scale, const void *x, int ldx, const void *A, const void *B,
                             void *t, const nn_lora_dropout *drop, void *y, int ldy) {
    (void)name;
    const nn_layer_ops *L = dev->layers;
    const void *xa;
    int lda;
    // t = scale (x A^T), then y += t B^T (y is the product's residual).
    int s = adapter_input(dev, rows, in, x, ldx, drop, &xa, &lda);
    if (s == NN_OK) s = L->linear_forward(dev, "lora_A", rows, in, r, xa, lda, A, NULL, NULL, 0, t, r);
    if (s == NN_OK) s = L->scale(dev, (long long)rows * r, scale, t);
    if (s == NN_OK) s = L->linear_forward(dev, "lora_B", rows, r, out, t, r, B, NULL, y, ldy, y, ldy);
    return s;
}

int nn_lora_backward_composed(nn_device *dev, const char *name, int rows, int in, int out, int r,
                              float scale, const void *x, int ldx, const void *A, const void *B,
                              const void *dy, int lddy, void *dA, void *dB, void *dx, int lddx,
                              void *t, void *dt, const nn_lora_dropout *drop) {
    (void)name;
    const nn_layer_ops *L = dev->layers;
    const void *xa;
    int lda;
    const int dropped = drop != NULL && drop->p != 0.0f;
    // t again as the forward made it (the same mask); dB += dy^T t and dt =
    // dy B; then the scale, dA += dt^T x and dx += dt A — through the mask
    // with dropout, whose gradient passes where the input was kept.
    int s = adapter_input(dev, rows, in, x, ldx, drop, &xa, &lda);
    if (s == NN_OK) s = L->linear_forward(dev, "lora_A", rows, in, r, xa, lda, A, NULL, NULL, 0, t, r);
    if (s == NN_OK) s = L->scale(dev, (long long)rows * r, scale, t);
    if (s == NN_OK)
        s = L->linear_backward(dev, "lora_B", rows, r, out, t, r, B, dy, lddy, dB, dt, r, 0.0f);
    if (s == NN_OK) s = L->scale(dev, (long long)rows * r, scale, dt);
    if (s == NN_OK && !dropped)
        s = L->linear_backward(dev, "lora_A", rows, in, r, x, ldx, A, dt, r, dA, dx, lddx, 1.0f);
    if (s == NN_OK && dropped)
        s = L->linear_backward(dev, "lora_A", rows, in, r, xa, lda, A, dt, r, dA, drop->dxd, in,
                               0.0f);
    if (s == NN_OK && dropped)
        s = L->dropout(dev, rows, in, drop->p, drop->seed, drop->dxd, in, dx, lddx, 1);
    return s;
}
