/*
 * The CPU backend of gpt2_backend.h: the layers GPT-2 shares with the
 * other models (linear layers, column sums, causal attention, the fused
 * classifier) are nn_cpu.h's; GPT-2's own (LayerNorm, GELU, the
 * embedding) are loops over rows (or column tiles) calling gpt2_math.h,
 * spread over OpenMP threads.
 *
 * Determinism: a row's math runs in one thread; every sum over rows (bias,
 * LayerNorm and embedding gradients) is split by columns, each column adding
 * its rows in ascending order within one thread. So no result depends on the
 * number of OpenMP threads or on the schedule. OpenBLAS splits GEMMs over M
 * and N, not over the summed dimension, so its thread count changes no bits
 * either.
 *
 * Speed: the GEMMs are ~all of the FLOPs, so the rest must be few, cheap,
 * vectorizable passes over memory: bias initialization rides in the GEMMs'
 * beta = 1, the GELU backward is fused with c_fc's bias gradient, the
 * attention's four products per head run directly on the strided qkv layout
 * (lda = 3C) with no copies (nn_cpu.h), and exp/tanh are gpt2_math.h's and
 * nn_math.h's branch-free versions that GCC vectorizes (this file and
 * nn_cpu's are built with -O3 for that).
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_blas.h"
#include "gpt2_backend.h"
#include "gpt2_backend_impl.h"
#include "gpt2_math.h"
#include "nn_cpu.h"

typedef struct cpu_impl {
    char err[NN_ERR_CAP];
} cpu_impl;

static char *cpu__err(gpt2_backend *be) {
    return ((cpu_impl *)be->impl)->err;
}

#define CPU_ERR(be) cpu__err(be), NN_ERR_CAP
/* Return a check's failure (its message is already in the buffer). */
#define CPU_TRY(call)                                                                         \
    do {                                                                                      \
        int cpu_try_status_ = (call);                                                         \
        if (cpu_try_status_ != NN_OK) {                                                     \
            return cpu_try_status_;                                                           \
        }                                                                                     \
    } while (0)

/* block_backward's scratch: [BT][4C] (c_fc's gradient, then qkv's),
 * [BT][C], and one sequence's attention-score gradients [NH][T][T];
 * block_forward needs none. */
static size_t cpu_block_scratch_bytes(const gpt2_backend *be, const gpt2_dims *d, int B, int T) {
    (void)be;
    if (B < 1 || T < 1) {
        return 0;
    }
    const size_t BT = (size_t)B * (size_t)T;
    return sizeof(float) * (BT * 5 * (size_t)d->n_embd + (size_t)d->n_head * T * T);
}

/* The head's: per chunk ln_f's output [R][C], mean and rstd [R] each, the
 * logits [R][V] and their input gradient [R][C]. */
static size_t cpu_head_scratch_bytes(const gpt2_backend *be, const gpt2_dims *d,
                                     int chunk_rows) {
    (void)be;
    if (chunk_rows < 1) {
        return 0;
    }
    return sizeof(float) * (size_t)chunk_rows * ((size_t)d->vocab + 2 * (size_t)d->n_embd + 2);
}

static const char *cpu_last_error(const gpt2_backend *be) {
    return ((const cpu_impl *)be->impl)->err;
}

/* ------------------------------------------------------ loop helpers */

/* Through the GELU and into c_fc's bias in one pass over [rows][N]:
 * d[r][c] *= gelu'(pre[r][c]), then db[c] += sum over r of the new d[r][c]. */
static void cpu_gelu_backward_colsum(int rows, int N, float *d, const float *pre, float *db) {
    const int tiles = (N + NN_CPU_COL_TILE - 1) / NN_CPU_COL_TILE;
#pragma omp parallel for schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        const int c0 = tile * NN_CPU_COL_TILE;
        const int w = N - c0 < NN_CPU_COL_TILE ? N - c0 : NN_CPU_COL_TILE;
        float acc[NN_CPU_COL_TILE] = {0.0f};
        for (int r = 0; r < rows; r++) {
            float *drow = d + (size_t)r * (size_t)N + (size_t)c0;
            const float *prow = pre + (size_t)r * (size_t)N + (size_t)c0;
            for (int j = 0; j < w; j++) {
                const float v = drow[j] * gpt2_gelu_grad(prow[j]);
                drow[j] = v;
                acc[j] += v;
            }
        }
        for (int j = 0; j < w; j++) {
            db[c0 + j] += acc[j];
        }
    }
}

/* A LayerNorm's parameter gradients over rows: dw[c] += sum_r dout * xhat,
 * db[c] += sum_r dout, with xhat recomputed from x, mean and rstd exactly as
 * the forward did. dout, x: [rows][C]; mean, rstd: [rows]. */
static void cpu_layernorm_param_grads(int rows, int C, const float *dout, const float *x,
                                      const float *mean, const float *rstd, float *dw,
                                      float *db) {
    const int tiles = (C + NN_CPU_COL_TILE - 1) / NN_CPU_COL_TILE;
#pragma omp parallel for schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        const int c0 = tile * NN_CPU_COL_TILE;
        const int w = C - c0 < NN_CPU_COL_TILE ? C - c0 : NN_CPU_COL_TILE;
        float acc_w[NN_CPU_COL_TILE] = {0.0f};
        float acc_b[NN_CPU_COL_TILE] = {0.0f};
        for (int r = 0; r < rows; r++) {
            const float *drow = dout + (size_t)r * (size_t)C + (size_t)c0;
            const float *xrow = x + (size_t)r * (size_t)C + (size_t)c0;
            const float m = mean[r], s = rstd[r];
            for (int j = 0; j < w; j++) {
                acc_w[j] += drow[j] * gpt2_layernorm_xhat(xrow[j], m, s);
                acc_b[j] += drow[j];
            }
        }
        for (int j = 0; j < w; j++) {
            dw[c0 + j] += acc_w[j];
            db[c0 + j] += acc_b[j];
        }
    }
}

static void cpu_layernorm_forward(int rows, int C, const float *x, const float *w,
                                  const float *b, float *out, float *mean, float *rstd) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const size_t off = (size_t)r * (size_t)C;
        gpt2_layernorm_forward_row(C, x + off, w, b, out + off, &mean[r], &rstd[r]);
    }
}

/* dx = dres + LayerNorm's input gradient, row by row (dres may be NULL or
 * alias dx), plus the parameter gradients into dw, db. */
static void cpu_layernorm_backward(int rows, int C, const float *dout, const float *x,
                                   const float *mean, const float *rstd, const float *w,
                                   const float *dres, float *dx, float *dw, float *db) {
    cpu_layernorm_param_grads(rows, C, dout, x, mean, rstd, dw, db);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const size_t off = (size_t)r * (size_t)C;
        gpt2_layernorm_backward_row(C, dout + off, x + off, w, mean[r], rstd[r],
                                    dres != NULL ? dres + off : NULL, dx + off);
    }
}

/* Where GPT-2's attention finds q, k and v: qkv rows of 3C, heads of C/NH
 * side by side, as many K/V heads as query heads. */
static nn_attn_layout cpu_attn_layout(const gpt2_dims *d, int B, int T) {
    const int C = d->n_embd;
    const nn_attn_layout s = {.B = B, .T = T, .n_head = d->n_head, .n_kv_head = d->n_head,
                              .head_dim = C / d->n_head, .ld = 3 * C, .q_off = 0, .k_off = C,
                              .v_off = 2 * C, .ldy = C};
    return s;
}

/* ---------------------------------------------------------- the model */

static int cpu_check_tokens(gpt2_backend *be, const char *op, const char *what,
                            const int *tokens, long long n, int V) {
    for (long long r = 0; r < n; r++) {
        if (tokens[r] < 0 || tokens[r] >= V) {
            return ex_error(CPU_ERR(be), NN_ERR_ARG,
                               "gpt2 %s: %s[%lld] = %d is outside [0, vocab = %d)", op, what, r,
                               tokens[r], V);
        }
    }
    return NN_OK;
}

static int cpu_embed_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                             const gpt2_embed_w *w, const int *tokens, void *x_out) {
    float *x = x_out;
    const float *wte = w->wte, *wpe = w->wpe;
    CPU_TRY(gpt2__check_shape("embed_forward", d, B, T, CPU_ERR(be)));
    CPU_TRY(gpt2__check_embed_w("embed_forward", "w", w, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr("embed_forward", "tokens", tokens, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr("embed_forward", "x", x, CPU_ERR(be)));
    const int BT = B * T, C = d->n_embd;
    CPU_TRY(cpu_check_tokens(be, "embed_forward", "tokens", tokens, BT, d->vocab));
#pragma omp parallel for schedule(static)
    for (int r = 0; r < BT; r++) {
        const float *te = wte + (size_t)tokens[r] * (size_t)C;
        const float *pe = wpe + (size_t)(r % T) * (size_t)C;
        float *xr = x + (size_t)r * (size_t)C;
        for (int c = 0; c < C; c++) {
            xr[c] = te[c] + pe[c];
        }
    }
    return NN_OK;
}

static int cpu_embed_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                              gpt2_embed_w *g, const int *tokens, const void *dx_in) {
    const float *dx = dx_in;
    float *g_wte = g->wte, *g_wpe = g->wpe;
    CPU_TRY(gpt2__check_shape("embed_backward", d, B, T, CPU_ERR(be)));
    CPU_TRY(gpt2__check_embed_w("embed_backward", "g", g, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr("embed_backward", "tokens", tokens, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr("embed_backward", "dx", dx, CPU_ERR(be)));
    const int BT = B * T, C = d->n_embd;
    CPU_TRY(cpu_check_tokens(be, "embed_backward", "tokens", tokens, BT, d->vocab));
    // Split by columns: a thread owns columns [c0, c0 + w) of every row of
    // wte and wpe, and adds the rows of dx in ascending order, so a token
    // that repeats adds its rows in the same order on every run.
    const int tiles = (C + NN_CPU_COL_TILE - 1) / NN_CPU_COL_TILE;
#pragma omp parallel for schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        const int c0 = tile * NN_CPU_COL_TILE;
        const int w = C - c0 < NN_CPU_COL_TILE ? C - c0 : NN_CPU_COL_TILE;
        for (int r = 0; r < BT; r++) {
            const float *dr = dx + (size_t)r * (size_t)C + (size_t)c0;
            float *te = g_wte + (size_t)tokens[r] * (size_t)C + (size_t)c0;
            float *pe = g_wpe + (size_t)(r % T) * (size_t)C + (size_t)c0;
            for (int j = 0; j < w; j++) {
                te[j] += dr[j];
                pe[j] += dr[j];
            }
        }
    }
    return NN_OK;
}

static int cpu_block_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                             const gpt2_block_w *w, const void *x, gpt2_block_acts *a, void *y,
                             void *scratch) {
    (void)scratch; /* the CPU's forward keeps everything in acts */
    CPU_TRY(gpt2__check_shape("block_forward", d, B, T, CPU_ERR(be)));
    CPU_TRY(gpt2__check_block_w("block_forward", "w", w, CPU_ERR(be)));
    CPU_TRY(gpt2__check_acts("block_forward", a, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr("block_forward", "x", x, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr("block_forward", "y", y, CPU_ERR(be)));
    const int BT = B * T, C = d->n_embd;
    // Attention half: res1 = x + c_proj(attn(ln_1(x))).
    cpu_layernorm_forward(BT, C, x, w->ln1w, w->ln1b, a->ln1, a->ln1_mean, a->ln1_rstd);
    nn_cpu_linear_forward(BT, C, 3 * C, a->ln1, C, w->qkvw, w->qkvb, NULL, 0, a->qkv, 3 * C);
    const nn_attn_layout attn = cpu_attn_layout(d, B, T);
    nn_cpu_attention_forward(&attn, a->qkv, a->att, a->atty);
    nn_cpu_linear_forward(BT, C, C, a->atty, C, w->attprojw, w->attprojb, x, C, a->res1, C);
    // MLP half: y = res1 + c_proj(gelu(c_fc(ln_2(res1)))).
    cpu_layernorm_forward(BT, C, a->res1, w->ln2w, w->ln2b, a->ln2, a->ln2_mean, a->ln2_rstd);
    nn_cpu_linear_forward(BT, C, 4 * C, a->ln2, C, w->fcw, w->fcb, NULL, 0, a->fch, 4 * C);
    const long long n = (long long)BT * 4 * C;
    const float *pre = a->fch;
    float *post = a->fch_gelu;
#pragma omp parallel for schedule(static)
    for (long long k = 0; k < n; k++) {
        post[k] = gpt2_gelu(pre[k]);
    }
    nn_cpu_linear_forward(BT, 4 * C, C, a->fch_gelu, 4 * C, w->fcprojw, w->fcprojb, a->res1, C,
                          y, C);
    return NN_OK;
}

static int cpu_block_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                              const gpt2_block_w *w, gpt2_block_w *g, const void *x,
                              const gpt2_block_acts *a, const void *dy, void *dx, void *scratch) {
    CPU_TRY(gpt2__check_shape("block_backward", d, B, T, CPU_ERR(be)));
    CPU_TRY(gpt2__check_block_w("block_backward", "w", w, CPU_ERR(be)));
    CPU_TRY(gpt2__check_block_w("block_backward", "g", g, CPU_ERR(be)));
    CPU_TRY(gpt2__check_acts("block_backward", a, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr("block_backward", "x", x, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr("block_backward", "dy", dy, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr("block_backward", "dx", dx, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr("block_backward", "scratch", scratch, CPU_ERR(be)));
    const int BT = B * T, C = d->n_embd;
    float *dbig = scratch;                       // [BT][4C]: d fch, later d qkv ([BT][3C])
    float *dmid = dbig + (size_t)BT * 4 * C;     // [BT][C]: d ln2, d atty, d ln1 in turn
    float *datt = dmid + (size_t)BT * C;         // [NH][T][T]

    // MLP half. dy reaches res1 directly (residual) and through the MLP.
    nn_cpu_colsum_add(BT, C, dy, C, g->fcprojb);
    nn_cpu_linear_backward(BT, 4 * C, C, a->fch_gelu, 4 * C, w->fcprojw, dy, C, g->fcprojw, dbig,
                           4 * C, 0.0f);
    cpu_gelu_backward_colsum(BT, 4 * C, dbig, a->fch, g->fcb);
    nn_cpu_linear_backward(BT, C, 4 * C, a->ln2, C, w->fcw, dbig, 4 * C, g->fcw, dmid, C, 0.0f);
    // dx holds d res1 = dy + ln_2's input gradient from here on.
    cpu_layernorm_backward(BT, C, dmid, a->res1, a->ln2_mean, a->ln2_rstd, w->ln2w, dy, dx,
                           g->ln2w, g->ln2b);

    // Attention half, the same way with d res1.
    nn_cpu_colsum_add(BT, C, dx, C, g->attprojb);
    nn_cpu_linear_backward(BT, C, C, a->atty, C, w->attprojw, dx, C, g->attprojw, dmid, C, 0.0f);
    const nn_attn_layout attn = cpu_attn_layout(d, B, T);
    nn_cpu_attention_backward(&attn, a->qkv, a->att, dmid, dbig, datt);
    nn_cpu_colsum_add(BT, 3 * C, dbig, 3 * C, g->qkvb);
    nn_cpu_linear_backward(BT, C, 3 * C, a->ln1, C, w->qkvw, dbig, 3 * C, g->qkvw, dmid, C, 0.0f);
    cpu_layernorm_backward(BT, C, dmid, x, a->ln1_mean, a->ln1_rstd, w->ln1w, dx, dx, g->ln1w,
                           g->ln1b);
    return NN_OK;
}

/* --------------------------------------------------------------- head */

static int cpu_check_head(gpt2_backend *be, const char *op, const gpt2_dims *d, int B, int T,
                          const gpt2_embed_w *w, const void *x, int chunk_rows,
                          const void *scratch) {
    CPU_TRY(gpt2__check_shape(op, d, B, T, CPU_ERR(be)));
    CPU_TRY(gpt2__check_embed_w(op, "w", w, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr(op, "x", x, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr(op, "scratch", scratch, CPU_ERR(be)));
    if (chunk_rows < 1) {
        return ex_error(CPU_ERR(be), NN_ERR_ARG,
                           "gpt2 %s: chunk_rows = %d; need >= 1 (default "
                           "GPT2_HEAD_CHUNK_ROWS_DEFAULT)",
                           op, chunk_rows);
    }
    return NN_OK;
}

/* The head over chunks of rows; gradients only when g is not NULL. */
static void cpu_head_run(const gpt2_dims *d, int BT, const gpt2_embed_w *w, gpt2_embed_w *g,
                         const float *x, const int *targets, float dloss_scale, float *dx,
                         float *losses, int chunk_rows, float *scratch) {
    const float *wte = w->wte;
    const int C = d->n_embd, V = d->vocab;
    const int R = chunk_rows < BT ? chunk_rows : BT;
    float *xn = scratch;                      // [R][C]  ln_f output
    float *mean = xn + (size_t)R * C;         // [R]
    float *rstd = mean + R;                   // [R]
    float *logits = rstd + R;                 // [R][V]  then d logits
    float *dxn = logits + (size_t)R * V;      // [R][C]
    const int want_grad = g != NULL;
    for (int r0 = 0; r0 < BT; r0 += R) {
        const int n = BT - r0 < R ? BT - r0 : R;
        const float *xc = x + (size_t)r0 * C;
        cpu_layernorm_forward(n, C, xc, w->lnfw, w->lnfb, xn, mean, rstd);
        // logits, losses and (training) g->wte += dlogits^T . xn, dxn =
        // dlogits . wte, through the tied embedding.
        nn_cpu_classifier_chunk(n, C, V, xn, wte, targets + r0, dloss_scale, losses + r0, logits,
                                want_grad ? g->wte : NULL, dxn);
        if (!want_grad) {
            continue;
        }
        cpu_layernorm_backward(n, C, dxn, xc, mean, rstd, w->lnfw, NULL, dx + (size_t)r0 * C,
                               g->lnfw, g->lnfb);
    }
}

static int cpu_head_forward_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                                     const gpt2_embed_w *w, gpt2_embed_w *g, const void *x,
                                     const int *targets, float dloss_scale, void *dx,
                                     float *losses, int chunk_rows, void *scratch) {
    const char *op = "head_forward_backward";
    CPU_TRY(cpu_check_head(be, op, d, B, T, w, x, chunk_rows, scratch));
    CPU_TRY(gpt2__check_embed_w(op, "g", g, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr(op, "targets", targets, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr(op, "dx", dx, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr(op, "losses", losses, CPU_ERR(be)));
    CPU_TRY(cpu_check_tokens(be, op, "targets", targets, (long long)B * T, d->vocab));
    cpu_head_run(d, B * T, w, g, x, targets, dloss_scale, dx, losses, chunk_rows, scratch);
    return NN_OK;
}

static int cpu_head_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                            const gpt2_embed_w *w, const void *x, const int *targets,
                            float *losses, int chunk_rows, void *scratch) {
    const char *op = "head_forward";
    CPU_TRY(cpu_check_head(be, op, d, B, T, w, x, chunk_rows, scratch));
    CPU_TRY(gpt2__check_ptr(op, "targets", targets, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr(op, "losses", losses, CPU_ERR(be)));
    CPU_TRY(cpu_check_tokens(be, op, "targets", targets, (long long)B * T, d->vocab));
    cpu_head_run(d, B * T, w, NULL, x, targets, 0.0f, NULL, losses, chunk_rows, scratch);
    return NN_OK;
}

static int cpu_head_logits(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                           const gpt2_embed_w *w, const void *x_in, int row, float *host_logits,
                           void *scratch) {
    const float *x = x_in;
    const char *op = "head_logits";
    CPU_TRY(cpu_check_head(be, op, d, B, T, w, x, 1, scratch));
    CPU_TRY(gpt2__check_ptr(op, "host_logits", host_logits, CPU_ERR(be)));
    if (row < 0 || (long long)row >= (long long)B * T) {
        return ex_error(CPU_ERR(be), NN_ERR_ARG,
                           "gpt2 %s: row %d is outside [0, B * T = %lld)", op, row,
                           (long long)B * T);
    }
    const int C = d->n_embd;
    float *xn = scratch; // [C], then mean and rstd
    gpt2_layernorm_forward_row(C, x + (size_t)row * C, w->lnfw, w->lnfb, xn, &xn[C], &xn[C + 1]);
    // host_logits: [V] = wte . xn
    nn_cpu_classifier_logits_row(C, d->vocab, xn, w->wte, host_logits);
    return NN_OK;
}

static void cpu_destroy(gpt2_backend *be) {
    if (be == NULL) {
        return;
    }
    if (be->dev) {
        be->dev->ops->destroy(be->dev);
    }
    free(be->impl);
    free(be);
}

static const gpt2_backend_ops cpu_ops = {
    .name = "cpu",
    .last_error = cpu_last_error,
    .block_scratch_bytes = cpu_block_scratch_bytes,
    .head_scratch_bytes = cpu_head_scratch_bytes,
    .embed_forward = cpu_embed_forward,
    .embed_backward = cpu_embed_backward,
    .block_forward = cpu_block_forward,
    .block_backward = cpu_block_backward,
    .head_forward_backward = cpu_head_forward_backward,
    .head_forward = cpu_head_forward,
    .head_logits = cpu_head_logits,
    .destroy = cpu_destroy,
};

gpt2_backend *gpt2_cpu_backend_create(void) {
    gpt2_backend *be = calloc(1, sizeof(*be));
    cpu_impl *impl = calloc(1, sizeof(*impl));
    nn_device *dev = nn_cpu_device_create();
    if (be == NULL || impl == NULL || dev == NULL) {
        free(be);
        free(impl);
        if (dev) {
            dev->ops->destroy(dev);
        }
        return NULL;
    }
    ex_blas_init();
    be->ops = &cpu_ops;
    be->dtype = NN_F32;
    be->dev = dev;
    be->impl = impl;
    return be;
}
