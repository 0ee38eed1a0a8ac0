/*
 * gpt2_backend — GPT-2's math (gpt2_model.h) on one device (nn_device.h),
 * one orchestration (gpt2_layers.c) over the device's layers (nn_layers.h):
 * the CPU, the simulated device that runs the CPU's layers on zeroshard's
 * sim stream, or a CUDA device (gpt2_cuda.cu: cuBLASLt and kernels on a
 * caller's stream, with GPT-2's options). The trainer calls every device
 * through this one table of function pointers, with no #ifdef; memory and
 * transfers are the backend's device's (be->dev):
 *
 *     gpt2_backend *be = gpt2_cpu_backend_create();
 *     if (be->ops->block_forward(be, &dims, B, T, &w, x, &acts, y) != 0)
 *         fprintf(stderr, "%s\n", be->ops->last_error(be));
 *
 * Conventions:
 *   - Every tensor pointer passed to an op is device memory (host memory for
 *     "cpu", device memory for "cuda"), allocated with be->dev->ops->alloc
 *     or handed over by someone who knows it is; only head_logits takes a
 *     host pointer, and its parameters say so.
 *     Shapes are in gpt2_model.h; B*T rows, row-major; tokens and targets are
 *     int32. Tensors are in the backend's dtype (be->dtype: fp32 on the CPU;
 *     fp32, bf16 or fp16 on CUDA), LayerNorm statistics and losses in fp32.
 *   - Every fallible op returns 0 on success and nonzero on failure (a
 *     nn_status value); then ops->last_error(be) tells what failed and what
 *     to do, until the next failing op. Nothing exits or prints (one
 *     exception, asked for by the user: with GPT2_CUDA_PROFILE set, the
 *     CUDA backend's destroy prints its profile to stderr).
 *   - Backward ops ADD into parameter gradients (g += ...), never overwrite:
 *     the caller zeroes them once per step, micro-batches accumulate, and the
 *     tied wte receives both its contributions (embedding and output layer).
 *     In bf16/fp16 each contribution is added in fp32 and rounded once.
 *     Input gradients (dx) are written.
 *   - Results are deterministic: the same inputs give the same bits on every
 *     run, whatever OMP_NUM_THREADS (no float atomics; every sum has a fixed
 *     order). CPU and CUDA agree to rounding, not bit for bit (their GEMMs
 *     and reductions add in different orders).
 *   - CUDA: every op is enqueued on the stream given at creation and returns
 *     without waiting, except head_logits (which returns host data) and
 *     destroy; the device's transfers follow nn_device.h's rules, so a
 *     training step never blocks the host. Launch failures are reported by
 *     the op that launched; a failure during asynchronous execution is
 *     reported by the next op that waits (the device's synchronize,
 *     download, host_wait) or by later launches.
 *   - CUDA: call the ops with the device that was current at creation
 *     current (the stream and the cuBLAS handles belong to it).
 *   - Tokens and targets must lie in [0, V). The CPU backend checks and
 *     returns NN_ERR_ARG; the CUDA backend cannot without waiting for the
 *     device, so there a bad token makes its row of x NaN and a bad target
 *     its loss NaN (no memory outside the tensors is touched either way).
 *   - A backend is not thread-safe: one thread at a time per backend.
 */
#ifndef GPT2_BACKEND_H
#define GPT2_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "gpt2_model.h"
#include "nn_device.h"
#include "nn_layers.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpt2_backend gpt2_backend;

typedef struct gpt2_backend_ops {
    const char *name; /* "cpu", "sim" or "cuda" */

    /* The message of the last failure ("" if none); valid until the next op. */
    const char *(*last_error)(const gpt2_backend *be);

    /* --- the model (B sequences of T tokens, 1 <= T <= block_size) --- */

    /* Bytes of the scratch block_forward and block_backward take, and of
     * the head ops' scratch for chunks of chunk_rows rows (it also serves
     * head_logits for any chunk_rows >= 1); 0 for a bad shape. One scratch
     * serves every block in turn. */
    size_t (*block_scratch_bytes)(const gpt2_backend *be, const gpt2_dims *d, int B, int T);
    size_t (*head_scratch_bytes)(const gpt2_backend *be, const gpt2_dims *d, int chunk_rows);

    /* x[b*T + t] = wte[tokens[b*T + t]] + wpe[t].
     * tokens: [BT] in [0, V); x: [BT][C], written. */
    int (*embed_forward)(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                         const gpt2_embed_w *w, const int *tokens, void *x);
    /* g->wte[tokens[r]] += dx[r] and g->wpe[t] += dx[b*T + t]; lnfw and lnfb
     * are not touched. Deterministic: each row of wte adds its rows of dx in
     * an order fixed by the tokens alone (the CPU in ascending r; CUDA in
     * ascending r within fixed groups of rows, the groups' sums then in a
     * fixed tree), rounded once. dx: [BT][C]. */
    int (*embed_backward)(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                          gpt2_embed_w *g, const int *tokens, const void *dx);

    /* y = block(x). Writes every activation in acts (carved with
     * gpt2_block_acts_carve for this B, T and the backend's dtype) and y:
     * [BT][C]; a pure function of (w, x), so calling it again (activation
     * recomputation) gives the same bits. y must not alias x. scratch:
     * block_scratch_bytes, contents on entry and return unspecified. */
    int (*block_forward)(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                         const gpt2_block_w *w, const void *x, gpt2_block_acts *acts, void *y,
                         void *scratch);
    /* The block's backward from the activations block_forward left for this
     * x: adds into every tensor of g (with a frozen base, LoRA, g's twelve
     * base tensors are NULL and only its adapters' gradients are computed),
     * writes dx: [BT][C] (dx must not alias dy, x or acts). scratch: block_scratch_bytes, contents on entry and
     * return unspecified. */
    int (*block_backward)(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                          const gpt2_block_w *w, gpt2_block_w *g, const void *x,
                          const gpt2_block_acts *acts, const void *dy, void *dx, void *scratch);

    /* The head for training, fused so that the logits never exist for more
     * than chunk_rows rows: per chunk, ln_f, logits = ln_f(x) . wte^T,
     * losses[r] = cross-entropy(logits[r], targets[r]), and the backward of
     * sum_r dloss_scale * losses[r]: adds into g->wte, g->lnfw, g->lnfb (not
     * wpe; all four NULL: a frozen head, LoRA) and writes dx: [BT][C]. For the gradient of the mean loss times a
     * loss scale, pass dloss_scale = loss_scale / (B*T).
     * x: [BT][C]; targets: [BT] in [0, V); losses: [BT] fp32, written.
     * scratch: head_scratch_bytes(chunk_rows). The weight gradients' sums
     * run chunk by chunk, so their last bits depend on chunk_rows (not on
     * threads): keep it fixed within a run. */
    int (*head_forward_backward)(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                                 const gpt2_embed_w *w, gpt2_embed_w *g, const void *x,
                                 const int *targets, float dloss_scale, void *dx, float *losses,
                                 int chunk_rows, void *scratch);
    /* The head for evaluation: losses[r] as above, bit-identical to
     * head_forward_backward's, and no gradients. */
    int (*head_forward)(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                        const gpt2_embed_w *w, const void *x, const int *targets, float *losses,
                        int chunk_rows, void *scratch);
    /* The logits of one row (row = b*T + t; for sampling, the last position
     * of a sequence) into host_logits: [V] fp32, HOST memory; returns when
     * they are there. scratch as for the other head ops (any chunk_rows >=
     * 1). */
    int (*head_logits)(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                       const gpt2_embed_w *w, const void *x, int row, float *host_logits,
                       void *scratch);

    /* Frees the backend and its device (not memory from the device's alloc:
     * free that first). NULL is a no-op. CUDA: waits for the stream; the
     * stream stays the caller's. */
    void (*destroy)(gpt2_backend *be);
} gpt2_backend_ops;

struct gpt2_backend {
    const gpt2_backend_ops *ops;
    nn_dtype dtype; /* what its tensors are stored in, fixed at creation (dev->dtype) */
    nn_device *dev; /* the device it computes on: its memory and transfers (nn_device.h);
                       the backend's own, created and destroyed with it */
    /* LoRA (gpt2_backend_set_lora; the caller sets lora.seed per block). */
    nn_lora lora;
    void *impl;     /* the backend's own state */
};

/* LoRA on the block's Linears from now on: rank r (0 turns it off), alpha
 * (scale alpha / r, PEFT's) and dropout on the adapters' input (nn_lora).
 * The blocks' weight structs carry each adapted Linear's A and B
 * (gpt2_block_w's lora_A, lora_B); the block scratch grows by two [B T][r]
 * buffers, with dropout two [B T][4C], and, for a frozen base, a [4C] sink
 * for c_fc's bias gradient. Call before sizing the scratch. 0, or
 * NN_ERR_ARG with a message in err. */
int gpt2_backend_set_lora(gpt2_backend *be, int r, double alpha, double dropout, char *err,
                          size_t cap);

/* The CPU backend on a CPU device of its own (nn_cpu_device_create: host
 * memory), OpenBLAS sgemm and OpenMP loops over rows, in fp32. NULL only
 * when host memory runs out. */
gpt2_backend *gpt2_cpu_backend_create(void);

/* The same backend on any device with layers (dev->layers: the CPU's, the
 * simulated device's, nn_sim.h, or CUDA's), which it takes over (destroyed
 * with it, or here on failure). ops->name is the device's ("cpu", "sim",
 * "cuda"); the bits are the CPU's on the first two. 0 and *out, or an
 * nn_status with a message in err. */
int gpt2_layers_backend_create(nn_device *dev, gpt2_backend **out, char *err, size_t cap);

/* Options of the CUDA backend. */
typedef struct gpt2_cuda_options {
    nn_dtype dtype; /* fp32 (exact: no TF32), bf16 or fp16 (tensor cores) */
    /* GELU fused into the c_fc GEMM's epilogue: 0 none, 1 the forward, 2 the
     * forward and the backward (cuBLASLt's GELU_AUX_BIAS and DGELU), -1
     * the default: 2 in bf16 and fp16 from compute capability 9.0, 0
     * before, and 0 in fp32, the exact mode, which keeps nn_layer_math.h's
     * GELU. This is the default llm.c's usage text names, but llm.c's code
     * still resolves -1 to 0 ("in the future, we might want to set gelu
     * fusion to 2 for SM90+"): nobody has measured it yet. Both settings
     * can be chosen at run time (the trainer's app.gelu_fusion,
     * bench_gpt2_model --gelu-fusion, bench_gpt2_cuda.sh GELU_FUSION="0
     * 2") so that a GPU measures both, and this default should follow that
     * measurement. Shapes cuBLASLt's epilogues refuse (4 * n_embd not a
     * multiple of 8, ...) run unfused whatever this says, and
     * gpt2_cuda_backend_stats counts them. Other values: NN_ERR_ARG. */
    int gelu_fusion;
    /* Nonzero: never use cuBLASLt's BIAS epilogue; every bias is added by a
     * plain GEMM and a separate bias kernel, the path taken anyway for the
     * shapes and alignments whose epilogue cuBLASLt refuses. For the tests
     * (the fallback must give the same results) and measurements; 0, the
     * default, fuses. */
    int unfused_bias;
} gpt2_cuda_options;

/* The CUDA backend on the current device, enqueuing everything on
 * cuda_stream (a cudaStream_t; NULL means the legacy default stream). The
 * trainer passes zeroshard's compute stream so that the runtime's fetches and
 * reductions are ordered against the model's work without extra
 * synchronization. Returns NN_OK and *out, or a status and a message in err
 * (cap bytes): NN_ERR_UNAVAILABLE in builds without CUDA
 * (gpt2_cuda_absent.c) or without a usable device.
 *
 * The environment, read here:
 *   GPT2_CUDA_PROFILE=STEPS[,WARMUP]  time every op of STEPS training
 *       micro-steps (a micro-step ends with embed_backward) after WARMUP
 *       ones (default 2) with CUDA events on the stream; no host wait is
 *       added (finished events are read when the next micro-step starts,
 *       the rest at destroy), and destroy prints the table and the fusion
 *       line to stderr (nn_cuda_profile.cu says the format).
 *       STEPS and WARMUP are integers, 1..100000 and 0..100000; anything
 *       else is NN_ERR_ARG.
 *   GPT2_CUDA_FAULT=softmax_no_mask|qkv_transposed  (tests only) a
 *       deliberately wrong kernel. */
int gpt2_cuda_backend_create(void *cuda_stream, const gpt2_cuda_options *options,
                             gpt2_backend **out, char *err, size_t cap);

/* What a CUDA backend has launched since its creation: for each fused
 * epilogue, the products that ran it (fused) and those that ran the
 * unfused path (fallback: a plain GEMM and a separate kernel) although the
 * options asked for the fusion, because cuBLASLt found no algorithm or
 * refused the launch, the shape cannot take it, or unfused_bias forced it.
 * With gelu_fusion 0 (or 1 for dgelu) neither count moves. Counts of
 * launches, cumulative. */
typedef struct gpt2_cuda_stats {
    int sm;           /* the device's compute capability, major * 10 + minor (90: Hopper) */
    int gelu_fusion;  /* the mode in effect: -1 resolved to 0, 1 or 2 */
    int unfused_bias; /* the option as given */
    long long bias_fused, bias_fallback;   /* the BIAS epilogue (with or without a residual) */
    long long gelu_fused, gelu_fallback;   /* GELU_AUX_BIAS: c_fc forward */
    long long dgelu_fused, dgelu_fallback; /* DGELU: c_fc's input gradient through the GELU */
    long long gemm_lt;      /* model GEMMs through cuBLASLt, any epilogue */
    long long gemm_classic; /* model GEMMs cuBLASLt had no algorithm for: classic cuBLAS */
} gpt2_cuda_stats;

/* Fills *out with be's counts and, when line is not NULL, writes them as
 * one line (cap bytes, no newline), the format the benchmarks print and
 * scripts parse:
 *   fusion: bias fused N fallback M; gelu fused N fallback M; dgelu fused N fallback M;
 *   gemm lt N classic M (gelu_fusion G, unfused_bias U, sm_XY)
 * (on one line). Synchronous, no device access. NN_ERR_ARG when be is not
 * a CUDA backend; NN_ERR_UNAVAILABLE in builds without CUDA. */
int gpt2_cuda_backend_stats(const gpt2_backend *be, gpt2_cuda_stats *out, char *line,
                            size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* GPT2_BACKEND_H */
