/*
 * nn_layers — the layers the examples' models are made of, as one table
 * per device: the model backends (gpt2_cpu.c, llama_cpu.c) call
 * dev->layers->op(dev, ...) and never touch a tensor themselves, so the
 * same orchestration runs on every device whose nn_device carries a table.
 *
 *   - the CPU (nn_cpu_device_create): each op runs at once on host
 *     pointers (nn_cpu.h's layers and the element math of nn_math.h and
 *     nn_layer_math.h);
 *   - the simulated device (nn_sim_device_create, nn_sim.h): each op is
 *     enqueued as a kernel on zeroshard's sim stream, and the device's
 *     thread runs the CPU's op on the device addresses later, in order with
 *     the runtime's gathers and reductions. So every bit is the CPU's.
 *
 * The CUDA backends keep their own kernels (nn_cuda.h; dev->layers is NULL
 * on a CUDA device): tensor cores, bf16 and the fused epilogues have no
 * host counterpart to share.
 *
 * Conventions are nn_cpu.h's: fp32, row-major, a Linear weight [out][in],
 * "ld" a row stride in floats, parameter gradients ADDED to, input
 * gradients written unless said otherwise; every pointer is device memory
 * except where an op says host. An op returns 0 once its work is done (CPU)
 * or enqueued (sim), or an nn_status with dev->ops->last_error(dev) set; a
 * failure of enqueued work is reported by the device's next op that waits.
 */
#ifndef NN_LAYERS_H
#define NN_LAYERS_H

#include "nn_cpu.h"
#include "nn_device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nn_layer_ops {
    /* --- the model's input and output --- */

    /* NN_OK when every tokens[r] (r < n) lies in [0, V), else NN_ERR_ARG
     * with "<model> <op>: <what>[r] = <token> is outside [0, <vocab_name> =
     * V)" in err. On the CPU the check runs at once; on the simulated
     * device it is a kernel that fails, which the device's next wait
     * reports (tokens live in device memory there, as on a GPU). */
    int (*check_tokens)(nn_device *dev, const char *model, const char *op, const char *what,
                        const char *vocab_name, const int *tokens, long long n, int V, char *err,
                        size_t cap);
    /* x[r] = wte[tokens[r]] (+ wpe[r % T] when wpe is not NULL) for r < BT,
     * x: [BT][C]. Tokens checked by check_tokens first. */
    int (*embed_forward)(nn_device *dev, int BT, int T, int C, const float *wte, const float *wpe,
                         const int *tokens, float *x);
    /* g_wte[tokens[r]] += dx[r] (and g_wpe[r % T] += dx[r]), split by
     * columns, rows ascending: the same bits on every run. */
    int (*embed_backward)(nn_device *dev, int BT, int T, int C, float *g_wte, float *g_wpe,
                          const int *tokens, const float *dx);
    /* nn_cpu_classifier_chunk. */
    int (*classifier_chunk)(nn_device *dev, int n, int C, int V, const float *xn, const float *W,
                            const int *targets, float dloss_scale, float *losses, float *logits,
                            float *gW, float *dxn);
    /* nn_cpu_classifier_logits_row into device memory. */
    int (*classifier_logits_row)(nn_device *dev, int C, int V, const float *xn, const float *W,
                                 float *logits);

    /* --- linear layers and sums (nn_cpu.h) --- */
    int (*linear_forward)(nn_device *dev, int rows, int in, int out, const float *x, int ldx,
                          const float *W, const float *b, const float *res, int ldres, float *y,
                          int ldy);
    int (*linear_backward)(nn_device *dev, int rows, int in, int out, const float *x, int ldx,
                           const float *W, const float *dy, int lddy, float *dW, float *dx,
                           int lddx, float dx_beta);
    int (*colsum_add)(nn_device *dev, int rows, int N, const float *a, int lda, float *out);

    /* --- attention (nn_cpu.h) --- */
    int (*attention_forward)(nn_device *dev, const nn_attn_layout *s, const float *qkv,
                             float *att, float *atty);
    int (*attention_backward)(nn_device *dev, const nn_attn_layout *s, const float *qkv,
                              const float *att, const float *datty, float *dqkv, float *datt);
    /* Rotates every q and k head of BT rows of qkv (row stride ld floats;
     * `heads` heads of hd floats from column 0: the q heads, then the k
     * heads) by the angles of position r % T (cos, sin: [T][hd / 2]);
     * backward: by the transpose. */
    int (*rope)(nn_device *dev, int BT, int T, int heads, int hd, int ld, const float *cos_t,
                const float *sin_t, float *qkv, int backward);

    /* --- norms: x, out, dout, dx [rows][C]; mean, rstd [rows] --- */
    int (*layernorm_forward)(nn_device *dev, int rows, int C, const float *x, const float *w,
                             const float *b, float *out, float *mean, float *rstd);
    /* dx = dres + the input gradient (dres NULL or dx itself allowed);
     * dw, db += the parameter gradients. */
    int (*layernorm_backward)(nn_device *dev, int rows, int C, const float *dout, const float *x,
                              const float *mean, const float *rstd, const float *w,
                              const float *dres, float *dx, float *dw, float *db);
    int (*rmsnorm_forward)(nn_device *dev, int rows, int C, const float *x, const float *w,
                           float eps, float *out, float *rstd);
    int (*rmsnorm_backward)(nn_device *dev, int rows, int C, const float *dout, const float *x,
                            const float *rstd, const float *w, const float *dres, float *dx,
                            float *dw);

    /* --- activations --- */
    /* post[k] = gelu(pre[k]) for k < n. */
    int (*gelu_forward)(nn_device *dev, long long n, const float *pre, float *post);
    /* d[r][c] *= gelu'(pre[r][c]) over [rows][N], then db[c] += the column
     * sums of the new d (c_fc's bias gradient in the same pass). */
    int (*gelu_backward_colsum)(nn_device *dev, int rows, int N, float *d, const float *pre,
                                float *db);
    /* h[k] = silu(gate[k]) up[k]. */
    int (*swiglu_forward)(nn_device *dev, long long n, const float *gate, const float *up,
                          float *h);
    /* d holds dh on entry and d gate on return; dup is written. */
    int (*swiglu_backward)(nn_device *dev, long long n, const float *gate, const float *up,
                           float *d, float *dup);
} nn_layer_ops;

/* A layer that failed, for a model backend: "<model>: <the device's
 * last_error>" into err; returns status. */
int nn_layer_failed(nn_device *dev, const char *model, int status, char *err, size_t cap);

/* Returns a layer call's failure from a model backend's op (nn_layer_failed). */
#define NN_LAYER_TRY(dev, model, err, cap, call)                                              \
    do {                                                                                      \
        int nn_layer_status_ = (call);                                                        \
        if (nn_layer_status_ != NN_OK) {                                                      \
            return nn_layer_failed((dev), (model), nn_layer_status_, (err), (cap));           \
        }                                                                                     \
    } while (0)

/* The CPU's table: every op at once on host pointers. */
extern const nn_layer_ops nn_cpu_layer_ops;

#ifdef __cplusplus
}
#endif
#endif /* NN_LAYERS_H */
