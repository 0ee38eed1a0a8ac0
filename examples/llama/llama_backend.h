/*
 * llama_backend — the Llama family's math (llama_model.h) on one device
 * (nn_device.h), one orchestration (llama_layers.c) over the device's
 * layers (nn_layers.h): the CPU (BLAS and OpenMP loops over
 * nn_layer_math.h), the simulated device, or CUDA (cuBLASLt and kernels in
 * the compute dtype). The trainer calls every device through this table,
 * with no #ifdef; it allocates activations and moves bytes through the
 * device.
 *
 * Conventions are nn_device.h's and gpt2_backend.h's:
 *   - Tensor pointers are device memory in the device's dtype (dev->dtype;
 *     fp32 on the CPU), RMSNorm statistics and losses fp32; only
 *     head_logits returns host data. Shapes in llama_model.h; tokens and
 *     targets int32 in [0, V).
 *   - Fallible ops return 0 or an nn_status; last_error says why.
 *   - Backward ops ADD into parameter gradients (g += ...), never
 *     overwrite; input gradients (dx) are written. The tied embedding
 *     receives its two contributions in two calls.
 *   - Deterministic: the same inputs give the same bits on every run,
 *     whatever the thread count (no float atomics; fixed orders). With
 *     num_key_value_heads < num_attention_heads, a K/V head's gradient sums
 *     its query heads in ascending order.
 *   - Absent biases (llama_dims) are NULL in the weight structs and
 *     ignored; present ones must not be NULL.
 *   - One thread at a time per backend.
 */
#ifndef LLAMA_BACKEND_H
#define LLAMA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "llama_model.h"
#include "nn_device.h"
#include "nn_layers.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct llama_backend llama_backend;

/* QLoRA: where a block's matrices come from when the runtime stores them
 * quantized (zs_param_dequantize). get() puts matrix `slot` (a
 * llama_block_param) of the block being computed, in the device's dtype,
 * into memory of its own and points *out at it; that memory is reused by
 * the next get(), so the full-precision copy is one matrix at a time. 0,
 * or an nn_status with a message in err. */
typedef struct llama_weight_source {
    int (*get)(void *user, int slot, const void **out, char *err, size_t cap);
    void *user;
} llama_weight_source;

typedef struct llama_backend_ops {
    const char *name; /* "cpu" or "cuda" */

    /* Bytes of the scratch block_forward and block_backward take (one
     * serves every block in turn), and of the head ops' scratch for chunks
     * of chunk_rows rows (it also serves head_logits for any chunk_rows >=
     * 1); 0 for a bad shape. */
    size_t (*block_scratch_bytes)(const llama_backend *be, int B, int T);
    size_t (*head_scratch_bytes)(const llama_backend *be, int B, int T, int chunk_rows);

    /* x[r] = wte[tokens[r]]. tokens: [BT]; x: [BT][C], written. */
    int (*embed_forward)(llama_backend *be, int B, int T, const llama_embed_w *w,
                         const int *tokens, void *x);
    /* g->wte[tokens[r]] += dx[r]; each row of wte adds its rows of dx in
     * ascending r. */
    int (*embed_backward)(llama_backend *be, int B, int T, llama_embed_w *g, const int *tokens,
                          const void *dx);

    /* y = block(x), position t of each sequence rotated by angle row t
     * (positions 0 .. T-1). Writes every activation (carved with
     * llama_block_acts_carve for this B, T and dtype) and y: [BT][C]; a
     * pure function of (w, x), so calling it again (activation
     * recomputation) gives the same bits. y must not alias x. */
    int (*block_forward)(llama_backend *be, int B, int T, const llama_block_w *w, const void *x,
                         llama_block_acts *acts, void *y, void *scratch);
    /* The block's backward from the activations block_forward left for
     * this x: adds into every present tensor of g, writes dx: [BT][C] (dx
     * must not alias dy, x or acts). */
    int (*block_backward)(llama_backend *be, int B, int T, const llama_block_w *w,
                          llama_block_w *g, const void *x, const llama_block_acts *acts,
                          const void *dy, void *dx, void *scratch);

    /* The head for training, fused so that the logits never exist for more
     * than chunk_rows rows: model.norm, logits = norm(x) . wout^T,
     * losses[r] = cross-entropy(logits[r], targets[r]), and the backward of
     * sum_r dloss_scale * losses[r]: adds into g->norm and g->wout, writes
     * dx: [BT][C]. x: [BT][C]; losses: [BT] fp32, written. The weight
     * gradients' sums run chunk by chunk: keep chunk_rows fixed in a run. */
    int (*head_forward_backward)(llama_backend *be, int B, int T, const llama_head_w *w,
                                 llama_head_w *g, const void *x, const int *targets,
                                 float dloss_scale, void *dx, float *losses, int chunk_rows,
                                 void *scratch);
    /* The head for evaluation: losses[r] as above, bit-identical to
     * head_forward_backward's, no gradients. */
    int (*head_forward)(llama_backend *be, int B, int T, const llama_head_w *w, const void *x,
                        const int *targets, float *losses, int chunk_rows, void *scratch);
    /* The logits of one row (for sampling) into host_logits: [V] fp32 HOST
     * memory; returns when they are there. */
    int (*head_logits)(llama_backend *be, int B, int T, const llama_head_w *w, const void *x,
                       int row, float *host_logits, void *scratch);

    const char *(*last_error)(const llama_backend *be);
    /* Frees the backend (not the device, not memory from the device).
     * NULL is a no-op. */
    void (*destroy)(llama_backend *be);
} llama_backend_ops;

struct llama_backend {
    const llama_backend_ops *ops;
    nn_device *dev;  /* the device it computes on (the caller's) */
    llama_dims dims; /* fixed at creation */
    int max_T;       /* the longest sequence it was created for (the RoPE table's rows) */
    /* LoRA (llama_backend_set_lora; the caller sets lora.seed per block). */
    nn_lora lora;
    /* QLoRA: a block's matrices that are NULL in its weight struct come
     * from here, one at a time, each just before its products (forward
     * and backward); get NULL: every matrix is in the struct. */
    llama_weight_source weights;
    void *impl;
};

/* LoRA on the block's Linears from now on: rank r (0 turns it off), alpha
 * (scale alpha / r, PEFT's) and dropout on the adapters' input (nn_lora).
 * The blocks' weight structs carry each adapted Linear's A and B
 * (llama_block_w); the block scratch grows by two [B T][r] buffers, and with
 * dropout two [B T][the widest adapted input]. Call before sizing the
 * scratch. 0, or NN_ERR_ARG with a message in err. */
int llama_backend_set_lora(llama_backend *be, int r, double alpha, double dropout, char *err,
                          size_t cap);

/* The backend on any device with layers (nn_layers.h: the CPU, the
 * simulated device, CUDA), in its dtype, for sequences of up to max_T <=
 * dims->max_seq tokens (its RoPE table, llama_rope_table, is made on the
 * host and copied to the device). One orchestration (llama_layers.c) on
 * every device. 0, or an nn_status with a message in err. */
int llama_layers_backend_create(nn_device *dev, const llama_dims *dims, int max_T,
                                llama_backend **out, char *err, size_t cap);

/* The CPU backend on an nn_cpu_device (dtype fp32), for sequences of up to
 * max_T <= dims->max_seq tokens (its RoPE table, llama_rope_table, is made
 * here). 0, or an nn_status with a message in err. */
int llama_cpu_backend_create(nn_device *dev, const llama_dims *dims, int max_T,
                             llama_backend **out, char *err, size_t cap);

/* The CUDA backend on a device of nn_cuda_device_create, computing in its
 * dtype (fp32 exact; bf16/fp16 on tensor cores with fp32 accumulation and
 * fp32 statistics), for sequences of up to max_T tokens (the RoPE table is
 * made on the host by llama_rope_table, as the CPU's, and copied to the
 * device). 0, or an nn_status with a message in err (NN_ERR_UNAVAILABLE in
 * builds without CUDA). */
int llama_cuda_backend_create(nn_device *dev, const llama_dims *dims, int max_T,
                              llama_backend **out, char *err, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* LLAMA_BACKEND_H */
