/*
 * nn_layers — the layers the examples' models are made of, as one table
 * per device: the model backends (gpt2_layers.c, llama_layers.c) call
 * dev->layers->op(dev, ...) and never touch a tensor themselves, so one
 * orchestration per family runs on every device:
 *
 *   - the CPU (nn_cpu_device_create, nn_cpu_layers.c): each op runs at once
 *     on host pointers (nn_cpu.h's layers and the element math of
 *     nn_math.h and nn_layer_math.h);
 *   - the simulated device (nn_sim_device_create, nn_sim_layers.c): each op
 *     is enqueued as a kernel on zeroshard's sim stream, and the device's
 *     thread runs the CPU's op on the device addresses later, in order with
 *     the runtime's gathers and reductions. So every bit is the CPU's;
 *   - CUDA (nn_cuda_device_create, nn_cuda_layers.cu): each op is launched
 *     on the device's stream in the device's dtype (fp32 exact; bf16/fp16
 *     on tensor cores with fp32 accumulation), the fused epilogues chosen
 *     there (bias and residual in the GEMM, GELU and its gradient in
 *     cuBLASLt's epilogues, q/k/v as one GEMM when the weights lie one
 *     after the other).
 *
 * What differs between devices stays behind the table: the dtype (tensors
 * are `void *` of dev->dtype; nn_at steps through them), how much scratch
 * an op needs (attention_scratch_bytes, classifier_scratch_bytes) and how
 * pieces of it are aligned (align), and which products are fused: the
 * composite ops (linears_*, linear_gelu_forward, linear_dgelu_backward)
 * are the primitive ops in sequence on the CPU and sim (nn_layers_composed.c)
 * and fused launches on CUDA.
 *
 * Conventions are nn_cpu.h's: row-major, a Linear weight [out][in], "ld" a
 * row stride in elements, parameter gradients ADDED to, input gradients
 * written unless said otherwise; every pointer is device memory except
 * where an op says host; norm statistics (mean, rstd) and losses are fp32
 * on every device. A parameter gradient pointer may be NULL where the op
 * says so: a frozen parameter (ZS_PARAM_FROZEN), whose gradient is not
 * computed at all. `name` names a Linear for the CUDA profile
 * ("matmul_<name>_fwd", "_dw", "_dx"); the other devices ignore it. An op
 * returns 0 once its work is done (CPU) or enqueued (sim, CUDA), or an
 * nn_status with dev->ops->last_error(dev) set; a failure of enqueued work
 * is reported by the device's next op that waits.
 */
#ifndef NN_LAYERS_H
#define NN_LAYERS_H

#include <stdint.h>

#include "nn_cpu.h"
#include "nn_device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A model backend's LoRA settings (llama_backend_set_lora,
 * gpt2_backend_set_lora): the adapters' rank (0: none), scale alpha / r,
 * the dropout probability on their input, and the current block's dropout
 * seed, which the caller sets before each block's forward and backward
 * (the same for both: the same mask; 0: none, as in evaluation). */
typedef struct nn_lora {
    int r;
    float scale;
    float dropout;
    uint64_t seed;
} nn_lora;

/* LoRA's dropout on the adapter's input (lora_forward): probability p, the
 * call's seed (a new one per micro-step, block and Linear; backward and
 * recomputation pass the forward's), and two [rows][in] scratch buffers
 * (the dropped input, then its gradient before the mask). */
typedef struct nn_lora_dropout {
    float p;
    uint64_t seed;
    void *xd, *dxd;
} nn_lora_dropout;

typedef struct nn_layer_ops {
    /* Scratch pieces a model carves start at multiples of this many bytes
     * (nn_scratch_take): 4 on the CPU and sim (the pieces are floats side
     * by side), NN_ALIGN on CUDA (vector loads, cuBLASLt's alignment). */
    size_t align;

    /* --- the model's input and output --- */

    /* NN_OK when every tokens[r] (r < n) lies in [0, V), else NN_ERR_ARG
     * with "<model> <op>: <what>[r] = <token> is outside [0, <vocab_name> =
     * V)" in err. On the CPU the check runs at once; on the simulated
     * device it is a kernel that fails, which the device's next wait
     * reports (tokens live in device memory there, as on a GPU). CUDA does
     * not check (it would cost a wait for the device every micro-step): its
     * embedding makes a bad token's row NaN, which the loss shows. */
    int (*check_tokens)(nn_device *dev, const char *model, const char *op, const char *what,
                        const char *vocab_name, const int *tokens, long long n, int V, char *err,
                        size_t cap);
    /* x[r] = wte[tokens[r]] (+ wpe[r % T] when wpe is not NULL) for r < BT,
     * x: [BT][C], wte: [V][C]. Tokens checked by check_tokens first. On
     * CUDA a training micro-step's profile window opens here. */
    int (*embed_forward)(nn_device *dev, int BT, int T, int C, int V, const void *wte,
                         const void *wpe, const int *tokens, void *x);
    /* g_wte[tokens[r]] += dx[r] (and g_wpe[r % T] += dx[r]): the same bits
     * on every run (no atomics). On CUDA a training micro-step ends here. */
    int (*embed_backward)(nn_device *dev, int BT, int T, int C, int V, void *g_wte, void *g_wpe,
                          const int *tokens, const void *dx);
    /* Bytes of classifier_chunk's scratch for chunks of `rows` rows (it
     * also serves classifier_logits_row). */
    size_t (*classifier_scratch_bytes)(const nn_device *dev, int C, int V, int rows);
    /* The fused classifier over n rows of xn [n][C] (the final norm's
     * output) against W [V][C]: losses[i] (fp32) = softmax cross-entropy
     * against targets[i]; with gW not NULL also gW += dlogits^T xn, with
     * dxn not NULL dxn [n][C] = dlogits W (both NULL: evaluation; gW alone
     * NULL: a frozen classifier), dlogits scaled by dloss_scale
     * (nn_cpu_classifier_chunk's math). */
    int (*classifier_chunk)(nn_device *dev, int n, int C, int V, const void *xn, const void *W,
                            const int *targets, float dloss_scale, float *losses, void *gW,
                            void *dxn, void *scratch);
    /* One row's logits W xn ([V] fp32) into HOST memory, waiting for them. */
    int (*classifier_logits_row)(nn_device *dev, int C, int V, const void *xn, const void *W,
                                 void *scratch, float *host_logits);

    /* --- linear layers and sums (nn_cpu.h) --- */
    /* y = x W^T (+ b) (+ res); on CUDA res, when given, has ldres == ldy
     * (it may be y itself). */
    int (*linear_forward)(nn_device *dev, const char *name, int rows, int in, int out,
                          const void *x, int ldx, const void *W, const void *b, const void *res,
                          int ldres, void *y, int ldy);
    /* dW += dy^T x (dW NULL: frozen, skipped); dx = dy W (+ dx when dx_beta
     * is 1; 0 or 1 only; dx NULL: not wanted). */
    int (*linear_backward)(nn_device *dev, const char *name, int rows, int in, int out,
                           const void *x, int ldx, const void *W, const void *dy, int lddy,
                           void *dW, void *dx, int lddx, float dx_beta);
    /* n Linears reading the same x and writing side by side into one y row
     * (q, k and v): Linear i has outs[i] outputs, weight W[i] and bias b[i]
     * (b NULL or any b[i] NULL: none), its columns after those of 0..i-1.
     * CUDA runs one GEMM when no bias is given and each W[i] starts where
     * W[i-1] ends. */
    int (*linears_forward)(nn_device *dev, const char *name, int n, const int *outs, int rows,
                           int in, const void *x, int ldx, const void *const *W,
                           const void *const *b, void *y, int ldy);
    /* Their backward from dy (the same side-by-side columns, stride lddy):
     * gW[i] += dy_i^T x, and dx = sum over i of dy_i W[i] (written),
     * added in ascending i; CUDA runs one GEMM each when the W (gW) lie
     * one after the other. gW NULL, or any gW[i] NULL: frozen, skipped. */
    int (*linears_backward)(nn_device *dev, const char *name, int n, const int *outs, int rows,
                            int in, const void *x, int ldx, const void *const *W,
                            const void *dy, int lddy, void *const *gW, void *dx, int lddx);
    /* pre = x W^T + b, post = gelu(pre), both [rows][out]: GPT-2's c_fc
     * (CUDA: one GEMM with the GELU epilogue when the device's gelu_fusion
     * asks for it and cuBLASLt takes the shape). */
    int (*linear_gelu_forward)(nn_device *dev, const char *name, int rows, int in, int out,
                               const void *x, int ldx, const void *W, const void *b, void *pre,
                               void *post);
    /* The backward of y = gelu(pre) W^T from dy, where x = gelu(pre) was
     * this Linear's input: dW += dy^T x, dx [rows][in] = (dy W) *
     * gelu'(pre) and db += dx's column sums (the bias of the Linear that
     * made pre): GPT-2's c_proj back into c_fc. */
    int (*linear_dgelu_backward)(nn_device *dev, const char *name, int rows, int in, int out,
                                 const void *x, int ldx, const void *W, const void *dy, int lddy,
                                 void *dW, const void *pre, void *dx, void *db);
    int (*colsum_add)(nn_device *dev, int rows, int N, const void *a, int lda, void *out);
    /* x[k] *= s for k < n. */
    int (*scale)(nn_device *dev, long long n, float s, void *x);
    /* Dropout of a [rows][cols] block: dst = src * m (add 0) or dst += src
     * * m (add 1), m = nn_dropout_factor(seed, r * cols + c, ...) with
     * p's threshold and 1 / (1 - p): the same mask for the same seed and
     * shape on every device. 0 <= p < 1. */
    int (*dropout)(nn_device *dev, int rows, int cols, float p, uint64_t seed, const void *src,
                   int lds, void *dst, int ldd, int add);
    /* LoRA (PEFT's) on a Linear of `in` inputs and `out` outputs: y +=
     * scale (dropout(x) A^T) B^T with A [r][in], B [out][r], scale = alpha
     * / r. t: [rows][r] scratch, which holds scale (x A^T) on return.
     * drop: the dropout on the adapter's input (NULL or p = 0: none; its
     * xd and dxd are [rows][in] scratch). CPU, sim and CUDA run the
     * composite of linear_forward, dropout and scale (nn_layers_composed.c). */
    int (*lora_forward)(nn_device *dev, const char *name, int rows, int in, int out, int r,
                        float scale, const void *x, int ldx, const void *A, const void *B,
                        void *t, const nn_lora_dropout *drop, void *y, int ldy);
    /* Its backward from dy (the Linear's output gradient): dB += dy^T t,
     * d t = scale dy B, dA += dt^T x, dx += dt A (added: the base Linear's
     * backward wrote dx first). t is recomputed from x (the forward saves
     * nothing); t and dt: [rows][r] scratch. */
    int (*lora_backward)(nn_device *dev, const char *name, int rows, int in, int out, int r,
                         float scale, const void *x, int ldx, const void *A, const void *B,
                         const void *dy, int lddy, void *dA, void *dB, void *dx, int lddx,
                         void *t, void *dt, const nn_lora_dropout *drop);

    /* --- attention (nn_cpu.h) --- */
    /* Bytes of scratch the two ops below take for this layout. */
    size_t (*attention_scratch_bytes)(const nn_device *dev, const nn_attn_layout *s);
    /* atty = attention(qkv), att [B][NH][T][T] (the probabilities) kept. */
    int (*attention_forward)(nn_device *dev, const nn_attn_layout *s, const void *qkv,
                             void *att, void *atty, void *scratch);
    /* dqkv's q, k and v columns from datty (others untouched). */
    int (*attention_backward)(nn_device *dev, const nn_attn_layout *s, const void *qkv,
                              const void *att, const void *datty, void *dqkv, void *scratch);
    /* Rotates every q and k head of BT rows of qkv (row stride ld elements;
     * `heads` heads of hd from column 0: the q heads, then the k heads) by
     * the angles of position r % T (cos, sin: fp32 [T][hd / 2]); backward:
     * by the transpose. */
    int (*rope)(nn_device *dev, int BT, int T, int heads, int hd, int ld, const float *cos_t,
                const float *sin_t, void *qkv, int backward);

    /* --- norms: x, out, dout, dx [rows][C]; mean, rstd [rows] fp32 --- */
    int (*layernorm_forward)(nn_device *dev, int rows, int C, const void *x, const void *w,
                             const void *b, void *out, float *mean, float *rstd);
    /* dx = dres + the input gradient (dres NULL or dx itself allowed);
     * dw, db += the parameter gradients (both NULL: frozen). */
    int (*layernorm_backward)(nn_device *dev, int rows, int C, const void *dout, const void *x,
                              const float *mean, const float *rstd, const void *w,
                              const void *dres, void *dx, void *dw, void *db);
    int (*rmsnorm_forward)(nn_device *dev, int rows, int C, const void *x, const void *w,
                           float eps, void *out, float *rstd);
    /* dw NULL: frozen. */
    int (*rmsnorm_backward)(nn_device *dev, int rows, int C, const void *dout, const void *x,
                            const float *rstd, const void *w, const void *dres, void *dx,
                            void *dw);

    /* --- activations --- */
    /* post[k] = gelu(pre[k]) for k < n. */
    int (*gelu_forward)(nn_device *dev, long long n, const void *pre, void *post);
    /* d[r][c] *= gelu'(pre[r][c]) over [rows][N], then db[c] += the column
     * sums of the new d (c_fc's bias gradient in the same pass). */
    int (*gelu_backward_colsum)(nn_device *dev, int rows, int N, void *d, const void *pre,
                                void *db);
    /* h[k] = silu(gate[k]) up[k]. */
    int (*swiglu_forward)(nn_device *dev, long long n, const void *gate, const void *up,
                          void *h);
    /* d: [rows][2F], dh in columns [0, F) on entry; on return d gate there
     * and d up in columns [F, 2F), side by side so that the input gradient
     * of gate_proj and up_proj is one product (linears_backward). gate, up:
     * [rows][F]. */
    int (*swiglu_backward)(nn_device *dev, int rows, int F, const void *gate, const void *up,
                           void *d);
} nn_layer_ops;

/* Element n of a tensor of the device's dtype. */
static inline void *nn_at(const nn_device *dev, void *p, size_t n) {
    return (unsigned char *)p + n * nn_dtype_size(dev->dtype);
}
static inline const void *nn_at_const(const nn_device *dev, const void *p, size_t n) {
    return (const unsigned char *)p + n * nn_dtype_size(dev->dtype);
}
/* bytes rounded up to the device's scratch alignment. */
static inline size_t nn_scratch_round(const nn_device *dev, size_t bytes) {
    const size_t a = dev->layers->align;
    return (bytes + a - 1) / a * a;
}
/* Takes `bytes` from the scratch at *cursor (advancing it by the rounded
 * size): the model backends carve their scratch with this and size it
 * with nn_scratch_round, so both agree on every device. */
static inline void *nn_scratch_take(const nn_device *dev, unsigned char **cursor, size_t bytes) {
    void *p = *cursor;
    *cursor += nn_scratch_round(dev, bytes);
    return p;
}

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

/* The composite ops as their primitive ops in sequence, on any device (the
 * CPU's and the simulated device's tables point here): the same bits as
 * the model backends' calls before the composites existed. */
int nn_linears_forward_composed(nn_device *dev, const char *name, int n, const int *outs,
                                int rows, int in, const void *x, int ldx, const void *const *W,
                                const void *const *b, void *y, int ldy);
int nn_linears_backward_composed(nn_device *dev, const char *name, int n, const int *outs,
                                 int rows, int in, const void *x, int ldx,
                                 const void *const *W, const void *dy, int lddy,
                                 void *const *gW, void *dx, int lddx);
int nn_linear_gelu_forward_composed(nn_device *dev, const char *name, int rows, int in, int out,
                                    const void *x, int ldx, const void *W, const void *b,
                                    void *pre, void *post);
int nn_linear_dgelu_backward_composed(nn_device *dev, const char *name, int rows, int in,
                                      int out, const void *x, int ldx, const void *W,
                                      const void *dy, int lddy, void *dW, const void *pre,
                                      void *dx, void *db);
/* Rank r >= 0, alpha > 0 (when r > 0) and dropout in [0, 1) into *lora
 * (its seed left as it is); else NN_ERR_ARG naming `who` in err. */
int nn_lora_set(nn_lora *lora, const char *who, int r, double alpha, double dropout, char *err,
                size_t cap);
/* Target t's dropout in the current block into *out (scratch xd and dxd),
 * or NULL when there is none (dropout 0, or seed 0: evaluation). */
const nn_lora_dropout *nn_lora_dropout_of(nn_lora_dropout *out, const nn_lora *lora, int target,
                                          void *xd, void *dxd);
int nn_lora_forward_composed(nn_device *dev, const char *name, int rows, int in, int out, int r,
                             float scale, const void *x, int ldx, const void *A, const void *B,
                             void *t, const nn_lora_dropout *drop, void *y, int ldy);
int nn_lora_backward_composed(nn_device *dev, const char *name, int rows, int in, int out, int r,
                              float scale, const void *x, int ldx, const void *A, const void *B,
                              const void *dy, int lddy, void *dA, void *dB, void *dx, int lddx,
                              void *t, void *dt, const nn_lora_dropout *drop);

#ifdef __cplusplus
}
#endif
#endif /* NN_LAYERS_H */
