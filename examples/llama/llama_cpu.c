/*
 * The CPU backend of llama_backend.h. The layers the Llama family shares
 * with GPT-2 are nn_cpu.h's: every Linear is one ex_sgemm (q, k and v
 * written side by side into one qkv row, biases and residuals riding on
 * beta = 1), grouped-query causal attention on the strided qkv rows, the
 * fused classifier. The family's own layers are loops over rows (or column
 * tiles) calling llama_math.h, spread over OpenMP threads: RMSNorm, RoPE,
 * SwiGLU, the embedding.
 *
 * Determinism: a row's math runs in one thread; every sum over rows
 * (RMSNorm weights, biases, the embedding) is split by columns, each column
 * adding its rows in ascending order within one thread; a K/V head adds its
 * query heads in ascending order (nn_cpu_attention_backward). No result
 * depends on the number of OpenMP threads.
 *
 * Built with -O3 -fno-trapping-math like gpt2_cpu.c (examples/llama/
 * CMakeLists.txt): SiLU's e^x is nn_expf, which GCC vectorizes then.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_blas.h"
#include "llama_backend.h"
#include "llama_backend_impl.h"
#include "llama_math.h"
#include "nn_cpu.h"

typedef struct cpu_impl {
    char err[NN_ERR_CAP];
    /* The rotary angles of positions 0 .. max_T - 1 (llama_rope_table):
     * [max_T][hd / 2] each. */
    float *rope_cos, *rope_sin;
} cpu_impl;

static char *cpu__err(llama_backend *be) { return ((cpu_impl *)be->impl)->err; }

#define CPU_ERR(be) cpu__err(be), NN_ERR_CAP
/* Return a check's failure (its message is already in the buffer). */
#define CPU_TRY(call)                                                                         \
    do {                                                                                      \
        int cpu_try_status_ = (call);                                                         \
        if (cpu_try_status_ != NN_OK) {                                                       \
            return cpu_try_status_;                                                           \
        }                                                                                     \
    } while (0)

/* Sizes a block's loops need, from the dims. */
static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* block_backward's scratch: [BT][max(2F, W)] (gate's and up's gradients,
 * then qkv's), [BT][max(C, NH hd)] (d xn2, d atty, d xn1 in turn) and one
 * sequence's attention-score gradients [NH][T][T]; block_forward needs
 * none. */
static size_t cpu_block_scratch_bytes(const llama_backend *be, int B, int T) {
    if (B < 1 || T < 1 || T > be->max_T) {
        return 0;
    }
    const llama__sizes s = llama__sizes_of(&be->dims);
    const size_t BT = (size_t)B * (size_t)T;
    return sizeof(float) * (BT * max_size(2 * (size_t)s.F, (size_t)s.W) +
                            BT * max_size((size_t)s.C, (size_t)s.Q) + (size_t)s.NH * T * T);
}

/* The head's: per chunk of R = min(chunk_rows, B T) rows model.norm's
 * output [R][C], its rstd [R], the logits [R][V] and the norm's input
 * gradient [R][C]. */
static size_t cpu_head_scratch_bytes(const llama_backend *be, int B, int T, int chunk_rows) {
    if (B < 1 || T < 1 || chunk_rows < 1) {
        return 0;
    }
    const long long BT = (long long)B * T;
    const size_t R = (size_t)(chunk_rows < BT ? chunk_rows : BT);
    const size_t C = (size_t)be->dims.n_embd, V = (size_t)be->dims.vocab;
    return sizeof(float) * R * (V + 2 * C + 1);
}

static const char *cpu_last_error(const llama_backend *be) {
    return ((const cpu_impl *)be->impl)->err;
}

/* ------------------------------------------------------------- RMSNorm */

static void cpu_rmsnorm_forward(int rows, int C, const float *x, const float *w, float eps,
                                float *out, float *rstd) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const size_t off = (size_t)r * (size_t)C;
        llama_rmsnorm_forward_row(C, x + off, w, eps, out + off, &rstd[r]);
    }
}

/* dx = dres + RMSNorm's input gradient, row by row (dres may be NULL or
 * alias dx), and the weight's gradient dw[c] += sum_r dout * x * rstd (the
 * normalized input, recomputed as the forward computed it) by columns. */
static void cpu_rmsnorm_backward(int rows, int C, const float *dout, const float *x,
                                 const float *rstd, const float *w, const float *dres, float *dx,
                                 float *dw) {
    const int tiles = (C + NN_CPU_COL_TILE - 1) / NN_CPU_COL_TILE;
#pragma omp parallel for schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        const int c0 = tile * NN_CPU_COL_TILE;
        const int n = C - c0 < NN_CPU_COL_TILE ? C - c0 : NN_CPU_COL_TILE;
        float acc[NN_CPU_COL_TILE] = {0.0f};
        for (int r = 0; r < rows; r++) {
            const float *drow = dout + (size_t)r * (size_t)C + (size_t)c0;
            const float *xrow = x + (size_t)r * (size_t)C + (size_t)c0;
            const float s = rstd[r];
            for (int j = 0; j < n; j++) {
                acc[j] += drow[j] * (xrow[j] * s);
            }
        }
        for (int j = 0; j < n; j++) {
            dw[c0 + j] += acc[j];
        }
    }
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const size_t off = (size_t)r * (size_t)C;
        llama_rmsnorm_backward_row(C, dout + off, x + off, w, rstd[r],
                                   dres != NULL ? dres + off : NULL, dx + off);
    }
}

/* ---------------------------------------------------------------- RoPE */

/* Rotates (backward: by the transpose) every q and k head of the B T rows
 * of a qkv buffer (row width W: q heads, then k heads), row r at position
 * r % T. */
static void cpu_rope(const cpu_impl *impl, const llama__sizes *s, int BT, int T, float *qkv,
                     int backward) {
    const int half = s->hd / 2, heads = s->NH + s->NKV;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < BT; r++) {
        const size_t t = (size_t)(r % T) * (size_t)half;
        const float *c = impl->rope_cos + t, *sn = impl->rope_sin + t;
        float *row = qkv + (size_t)r * (size_t)s->W;
        // The k heads follow the q heads directly (k_off = NH hd).
        for (int h = 0; h < heads; h++) {
            if (backward) {
                llama_rope_backward(s->hd, row + (size_t)h * s->hd, c, sn);
            } else {
                llama_rope_forward(s->hd, row + (size_t)h * s->hd, c, sn);
            }
        }
    }
}

/* ---------------------------------------------------------------- MLP */

static void cpu_swiglu_forward(long long n, const float *gate, const float *up, float *h) {
#pragma omp parallel for schedule(static)
    for (long long k = 0; k < n; k++) {
        h[k] = llama_swiglu(gate[k], up[k]);
    }
}

/* d holds dh on entry and d gate on return; dup is written. */
static void cpu_swiglu_backward(long long n, const float *gate, const float *up, float *d,
                                float *dup) {
#pragma omp parallel for schedule(static)
    for (long long k = 0; k < n; k++) {
        float dg, du;
        llama_swiglu_backward(gate[k], up[k], d[k], &dg, &du);
        d[k] = dg;
        dup[k] = du;
    }
}

/* ------------------------------------------------------------ attention */

/* Where the attention finds q, k and v in a qkv row: NH q heads, then NKV k
 * heads, then NKV v heads; atty holds the NH heads' outputs side by side. */
static nn_attn_layout cpu_attn_layout(const llama__sizes *s, int B, int T) {
    const nn_attn_layout a = {.B = B, .T = T, .n_head = s->NH, .n_kv_head = s->NKV,
                              .head_dim = s->hd, .ld = s->W, .q_off = 0, .k_off = s->Q,
                              .v_off = s->Q + s->KV, .ldy = s->Q};
    return a;
}

/* ------------------------------------------------------------ embedding */

static int cpu_check_tokens(llama_backend *be, const char *op, const char *what,
                            const int *tokens, long long n) {
    const int V = be->dims.vocab;
    for (long long r = 0; r < n; r++) {
        if (tokens[r] < 0 || tokens[r] >= V) {
            return ex_error(CPU_ERR(be), NN_ERR_ARG,
                             "llama %s: %s[%lld] = %d is outside [0, vocab_size = %d)", op, what,
                             r, tokens[r], V);
        }
    }
    return NN_OK;
}

static int cpu_embed_forward(llama_backend *be, int B, int T, const llama_embed_w *w,
                             const int *tokens, void *x_out) {
    const char *op = "embed_forward";
    CPU_TRY(llama__check_shape(op, be, B, T, CPU_ERR(be)));
    CPU_TRY(llama__check_embed_w(op, "w", w, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "tokens", tokens, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "x", x_out, CPU_ERR(be)));
    const int BT = B * T, C = be->dims.n_embd;
    CPU_TRY(cpu_check_tokens(be, op, "tokens", tokens, BT));
    const float *wte = w->wte;
    float *x = x_out;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < BT; r++) {
        memcpy(x + (size_t)r * C, wte + (size_t)tokens[r] * C, sizeof(float) * (size_t)C);
    }
    return NN_OK;
}

static int cpu_embed_backward(llama_backend *be, int B, int T, llama_embed_w *g,
                              const int *tokens, const void *dx_in) {
    const char *op = "embed_backward";
    CPU_TRY(llama__check_shape(op, be, B, T, CPU_ERR(be)));
    CPU_TRY(llama__check_embed_w(op, "g", g, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "tokens", tokens, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "dx", dx_in, CPU_ERR(be)));
    const int BT = B * T, C = be->dims.n_embd;
    CPU_TRY(cpu_check_tokens(be, op, "tokens", tokens, BT));
    const float *dx = dx_in;
    float *g_wte = g->wte;
    // Split by columns: a thread owns columns [c0, c0 + n) of every row of
    // wte and adds the rows of dx in ascending order, so a token that
    // repeats adds its rows in the same order on every run.
    const int tiles = (C + NN_CPU_COL_TILE - 1) / NN_CPU_COL_TILE;
#pragma omp parallel for schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        const int c0 = tile * NN_CPU_COL_TILE;
        const int n = C - c0 < NN_CPU_COL_TILE ? C - c0 : NN_CPU_COL_TILE;
        for (int r = 0; r < BT; r++) {
            const float *dr = dx + (size_t)r * (size_t)C + (size_t)c0;
            float *te = g_wte + (size_t)tokens[r] * (size_t)C + (size_t)c0;
            for (int j = 0; j < n; j++) {
                te[j] += dr[j];
            }
        }
    }
    return NN_OK;
}

/* -------------------------------------------------------------- blocks */

static int cpu_block_forward(llama_backend *be, int B, int T, const llama_block_w *w,
                             const void *x_in, llama_block_acts *a, void *y_out, void *scratch) {
    (void)scratch; /* the CPU's forward keeps everything in acts */
    const char *op = "block_forward";
    const llama_dims *d = &be->dims;
    CPU_TRY(llama__check_shape(op, be, B, T, CPU_ERR(be)));
    CPU_TRY(llama__check_block_w(op, "w", d, w, CPU_ERR(be)));
    CPU_TRY(llama__check_acts(op, a, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "x", x_in, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "y", y_out, CPU_ERR(be)));
    const llama__sizes s = llama__sizes_of(d);
    const int BT = B * T, C = s.C, F = s.F;
    const float eps = (float)d->rms_eps;
    const float *x = x_in;
    float *y = y_out, *qkv = a->qkv;
    const float *bq = d->qkv_bias ? w->bq : NULL, *bk = d->qkv_bias ? w->bk : NULL,
                *bv = d->qkv_bias ? w->bv : NULL, *bo = d->o_bias ? w->bo : NULL;
    const float *bgate = d->mlp_bias ? w->bgate : NULL, *bup = d->mlp_bias ? w->bup : NULL,
                *bdown = d->mlp_bias ? w->bdown : NULL;

    // Attention half: res1 = x + o_proj(attn(rope(q), rope(k), v)) of
    // input_layernorm(x).
    cpu_rmsnorm_forward(BT, C, x, w->attn_norm, eps, a->xn1, a->rstd1);
    nn_cpu_linear_forward(BT, C, s.Q, a->xn1, C, w->wq, bq, NULL, 0, qkv, s.W);
    nn_cpu_linear_forward(BT, C, s.KV, a->xn1, C, w->wk, bk, NULL, 0, qkv + s.Q, s.W);
    nn_cpu_linear_forward(BT, C, s.KV, a->xn1, C, w->wv, bv, NULL, 0, qkv + s.Q + s.KV, s.W);
    cpu_rope(be->impl, &s, BT, T, qkv, 0);
    const nn_attn_layout attn = cpu_attn_layout(&s, B, T);
    nn_cpu_attention_forward(&attn, qkv, a->att, a->atty);
    nn_cpu_linear_forward(BT, s.Q, C, a->atty, s.Q, w->wo, bo, x, C, a->res1, C);

    // MLP half: y = res1 + down_proj(silu(gate_proj(m)) * up_proj(m)), m =
    // post_attention_layernorm(res1).
    cpu_rmsnorm_forward(BT, C, a->res1, w->mlp_norm, eps, a->xn2, a->rstd2);
    nn_cpu_linear_forward(BT, C, F, a->xn2, C, w->wgate, bgate, NULL, 0, a->gate, F);
    nn_cpu_linear_forward(BT, C, F, a->xn2, C, w->wup, bup, NULL, 0, a->up, F);
    cpu_swiglu_forward((long long)BT * F, a->gate, a->up, a->h);
    nn_cpu_linear_forward(BT, F, C, a->h, F, w->wdown, bdown, a->res1, C, y, C);
    return NN_OK;
}

static int cpu_block_backward(llama_backend *be, int B, int T, const llama_block_w *w,
                              llama_block_w *g, const void *x, const llama_block_acts *a,
                              const void *dy_in, void *dx_out, void *scratch) {
    const char *op = "block_backward";
    const llama_dims *d = &be->dims;
    CPU_TRY(llama__check_shape(op, be, B, T, CPU_ERR(be)));
    CPU_TRY(llama__check_block_w(op, "w", d, w, CPU_ERR(be)));
    CPU_TRY(llama__check_block_w(op, "g", d, g, CPU_ERR(be)));
    CPU_TRY(llama__check_acts(op, a, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "x", x, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "dy", dy_in, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "dx", dx_out, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "scratch", scratch, CPU_ERR(be)));
    const llama__sizes s = llama__sizes_of(d);
    const int BT = B * T, C = s.C, F = s.F;
    const float *dy = dy_in;
    float *dx = dx_out;
    float *big = scratch;                                              // d gate | d up, then d qkv
    float *mid = big + (size_t)BT * max_size(2 * (size_t)F, (size_t)s.W); // d xn2, d atty, d xn1
    float *datt = mid + (size_t)BT * max_size((size_t)C, (size_t)s.Q);    // [NH][T][T]
    float *dgate = big, *dup = big + (size_t)BT * F;

    // MLP half. dy reaches res1 directly (residual) and through the MLP.
    if (d->mlp_bias) {
        nn_cpu_colsum_add(BT, C, dy, C, g->bdown);
    }
    nn_cpu_linear_backward(BT, F, C, a->h, F, w->wdown, dy, C, g->wdown, dgate, F, 0.0f);
    cpu_swiglu_backward((long long)BT * F, a->gate, a->up, dgate, dup);
    if (d->mlp_bias) {
        nn_cpu_colsum_add(BT, F, dgate, F, g->bgate);
        nn_cpu_colsum_add(BT, F, dup, F, g->bup);
    }
    // d xn2 = d gate . Wgate + d up . Wup.
    nn_cpu_linear_backward(BT, C, F, a->xn2, C, w->wgate, dgate, F, g->wgate, mid, C, 0.0f);
    nn_cpu_linear_backward(BT, C, F, a->xn2, C, w->wup, dup, F, g->wup, mid, C, 1.0f);
    // dx holds d res1 = dy + post_attention_layernorm's input gradient from
    // here on.
    cpu_rmsnorm_backward(BT, C, mid, a->res1, a->rstd2, w->mlp_norm, dy, dx, g->mlp_norm);

    // Attention half, the same way with d res1.
    if (d->o_bias) {
        nn_cpu_colsum_add(BT, C, dx, C, g->bo);
    }
    nn_cpu_linear_backward(BT, s.Q, C, a->atty, s.Q, w->wo, dx, C, g->wo, mid, s.Q, 0.0f);
    const nn_attn_layout attn = cpu_attn_layout(&s, B, T);
    float *dqkv = big;
    nn_cpu_attention_backward(&attn, a->qkv, a->att, mid, dqkv, datt);
    // Back through the rotation: the gradients of q and k as projected.
    cpu_rope(be->impl, &s, BT, T, dqkv, 1);
    if (d->qkv_bias) {
        nn_cpu_colsum_add(BT, s.Q, dqkv, s.W, g->bq);
        nn_cpu_colsum_add(BT, s.KV, dqkv + s.Q, s.W, g->bk);
        nn_cpu_colsum_add(BT, s.KV, dqkv + s.Q + s.KV, s.W, g->bv);
    }
    // d xn1 = dq . Wq + dk . Wk + dv . Wv.
    nn_cpu_linear_backward(BT, C, s.Q, a->xn1, C, w->wq, dqkv, s.W, g->wq, mid, C, 0.0f);
    nn_cpu_linear_backward(BT, C, s.KV, a->xn1, C, w->wk, dqkv + s.Q, s.W, g->wk, mid, C, 1.0f);
    nn_cpu_linear_backward(BT, C, s.KV, a->xn1, C, w->wv, dqkv + s.Q + s.KV, s.W, g->wv, mid, C,
                           1.0f);
    cpu_rmsnorm_backward(BT, C, mid, x, a->rstd1, w->attn_norm, dx, dx, g->attn_norm);
    return NN_OK;
}

/* --------------------------------------------------------------- head */

static int cpu_check_head(llama_backend *be, const char *op, int B, int T, const llama_head_w *w,
                          const void *x, const int *targets, float *losses, int chunk_rows,
                          const void *scratch) {
    CPU_TRY(llama__check_shape(op, be, B, T, CPU_ERR(be)));
    CPU_TRY(llama__check_head_w(op, "w", w, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "x", x, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "scratch", scratch, CPU_ERR(be)));
    CPU_TRY(llama__check_chunk(op, chunk_rows, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "targets", targets, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "losses", losses, CPU_ERR(be)));
    return cpu_check_tokens(be, op, "targets", targets, (long long)B * T);
}

/* The head over chunks of rows: model.norm, the shared classifier, and
 * (when g is not NULL) model.norm's backward. */
static void cpu_head_run(llama_backend *be, int BT, const llama_head_w *w, llama_head_w *g,
                         const float *x, const int *targets, float dloss_scale, float *dx,
                         float *losses, int chunk_rows, float *scratch) {
    const int C = be->dims.n_embd, V = be->dims.vocab;
    const float eps = (float)be->dims.rms_eps;
    const int R = chunk_rows < BT ? chunk_rows : BT;
    float *xn = scratch;                 // [R][C]  model.norm's output
    float *rstd = xn + (size_t)R * C;    // [R]
    float *logits = rstd + R;            // [R][V]  then d logits
    float *dxn = logits + (size_t)R * V; // [R][C]
    for (int r0 = 0; r0 < BT; r0 += R) {
        const int n = BT - r0 < R ? BT - r0 : R;
        const float *xc = x + (size_t)r0 * C;
        cpu_rmsnorm_forward(n, C, xc, w->norm, eps, xn, rstd);
        nn_cpu_classifier_chunk(n, C, V, xn, w->wout, targets + r0, dloss_scale, losses + r0,
                                logits, g != NULL ? g->wout : NULL, dxn);
        if (g != NULL) {
            cpu_rmsnorm_backward(n, C, dxn, xc, rstd, w->norm, NULL, dx + (size_t)r0 * C,
                                 g->norm);
        }
    }
}

static int cpu_head_forward_backward(llama_backend *be, int B, int T, const llama_head_w *w,
                                     llama_head_w *g, const void *x, const int *targets,
                                     float dloss_scale, void *dx, float *losses, int chunk_rows,
                                     void *scratch) {
    const char *op = "head_forward_backward";
    CPU_TRY(cpu_check_head(be, op, B, T, w, x, targets, losses, chunk_rows, scratch));
    CPU_TRY(llama__check_head_w(op, "g", g, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "dx", dx, CPU_ERR(be)));
    cpu_head_run(be, B * T, w, g, x, targets, dloss_scale, dx, losses, chunk_rows, scratch);
    return NN_OK;
}

static int cpu_head_forward(llama_backend *be, int B, int T, const llama_head_w *w,
                            const void *x, const int *targets, float *losses, int chunk_rows,
                            void *scratch) {
    CPU_TRY(cpu_check_head(be, "head_forward", B, T, w, x, targets, losses, chunk_rows, scratch));
    cpu_head_run(be, B * T, w, NULL, x, targets, 0.0f, NULL, losses, chunk_rows, scratch);
    return NN_OK;
}

static int cpu_head_logits(llama_backend *be, int B, int T, const llama_head_w *w,
                           const void *x_in, int row, float *host_logits, void *scratch) {
    const char *op = "head_logits";
    CPU_TRY(llama__check_shape(op, be, B, T, CPU_ERR(be)));
    CPU_TRY(llama__check_head_w(op, "w", w, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "x", x_in, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "scratch", scratch, CPU_ERR(be)));
    CPU_TRY(llama__check_ptr(op, "host_logits", host_logits, CPU_ERR(be)));
    if (row < 0 || (long long)row >= (long long)B * T) {
        return ex_error(CPU_ERR(be), NN_ERR_ARG, "llama %s: row %d is outside [0, B * T = %lld)",
                         op, row, (long long)B * T);
    }
    const int C = be->dims.n_embd;
    const float *x = x_in;
    float *xn = scratch; // [C], then rstd
    llama_rmsnorm_forward_row(C, x + (size_t)row * C, w->norm, (float)be->dims.rms_eps, xn,
                              &xn[C]);
    nn_cpu_classifier_logits_row(C, be->dims.vocab, xn, w->wout, host_logits);
    return NN_OK;
}

static void cpu_destroy(llama_backend *be) {
    if (be == NULL) {
        return;
    }
    cpu_impl *impl = be->impl;
    if (impl != NULL) {
        free(impl->rope_cos);
        free(impl->rope_sin);
    }
    free(impl);
    free(be);
}

static const llama_backend_ops cpu_ops = {
    .name = "cpu",
    .block_scratch_bytes = cpu_block_scratch_bytes,
    .head_scratch_bytes = cpu_head_scratch_bytes,
    .embed_forward = cpu_embed_forward,
    .embed_backward = cpu_embed_backward,
    .block_forward = cpu_block_forward,
    .block_backward = cpu_block_backward,
    .head_forward_backward = cpu_head_forward_backward,
    .head_forward = cpu_head_forward,
    .head_logits = cpu_head_logits,
    .last_error = cpu_last_error,
    .destroy = cpu_destroy,
};

int llama_cpu_backend_create(nn_device *dev, const llama_dims *dims, int max_T,
                             llama_backend **out, char *err, size_t cap) {
    if (out == NULL) {
        return ex_error(err, cap, NN_ERR_ARG, "llama cpu backend: out is NULL");
    }
    *out = NULL;
    if (!nn_device_is_cpu(dev) || dev->dtype != NN_F32) {
        return ex_error(err, cap, NN_ERR_ARG,
                         "llama cpu backend: the device must come from nn_cpu_device_create "
                         "(fp32 host memory)");
    }
    char why[512];
    if (dims == NULL || llama_dims_check(dims, why, sizeof why) != 0) {
        return ex_error(err, cap, NN_ERR_ARG, "llama cpu backend: %s",
                         dims == NULL ? "dims is NULL" : why);
    }
    if (max_T < 1 || max_T > dims->max_seq) {
        return ex_error(err, cap, NN_ERR_ARG,
                         "llama cpu backend: max_T = %d; need 1 <= max_T <= "
                         "max_position_embeddings (%d)",
                         max_T, dims->max_seq);
    }
    llama_backend *be = calloc(1, sizeof(*be));
    cpu_impl *impl = calloc(1, sizeof(*impl));
    const size_t table = (size_t)max_T * (size_t)(dims->head_dim / 2);
    if (impl != NULL) {
        impl->rope_cos = malloc(sizeof(float) * table);
        impl->rope_sin = malloc(sizeof(float) * table);
    }
    if (be == NULL || impl == NULL || impl->rope_cos == NULL || impl->rope_sin == NULL) {
        if (impl != NULL) {
            free(impl->rope_cos);
            free(impl->rope_sin);
        }
        free(impl);
        free(be);
        return ex_error(err, cap, NN_ERR_NOMEM,
                         "llama cpu backend: out of host memory (RoPE table of %d positions)",
                         max_T);
    }
    llama_rope_table(dims, max_T, impl->rope_cos, impl->rope_sin);
    ex_blas_init();
    be->ops = &cpu_ops;
    be->dev = dev;
    be->dims = *dims;
    be->max_T = max_T;
    be->impl = impl;
    *out = be;
    return NN_OK;
}
