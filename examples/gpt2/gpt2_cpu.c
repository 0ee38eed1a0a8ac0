/*
 * The CPU backend of gpt2_backend.h: every matrix product is one
 * cblas_sgemm (OpenBLAS), and everything between the products is a loop
 * over rows (or column tiles) calling gpt2_math.h, spread over OpenMP
 * threads.
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
 * (lda = 3C) with no copies, and exp/tanh are gpt2_math.h's branch-free
 * versions that GCC vectorizes (this file is built with -O3 for that).
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "gpt2_backend.h"
#include "gpt2_backend_impl.h"
#include "gpt2_math.h"
#include "cpu_blas.h"

typedef struct cpu_impl {
    char err[GPT2_ERR_CAP];
} cpu_impl;

static char *cpu__err(gpt2_backend *be) {
    return ((cpu_impl *)be->impl)->err;
}

#define CPU_ERR(be) cpu__err(be), GPT2_ERR_CAP
/* Return a check's failure (its message is already in the buffer). */
#define CPU_TRY(call)                                                                         \
    do {                                                                                      \
        int cpu_try_status_ = (call);                                                         \
        if (cpu_try_status_ != GPT2_OK) {                                                     \
            return cpu_try_status_;                                                           \
        }                                                                                     \
    } while (0)

/* Columns per tile of the column-sum loops: wide enough for SIMD and whole
 * cache lines, narrow enough that [BT][4C] splits into many tiles for the
 * threads. A layout constant, not a tuning knob: results do not depend on it
 * (each column's order is ascending rows whatever the tile). */
#define CPU_COL_TILE 64

/* ------------------------------------------------------------- memory */

static int cpu_alloc(gpt2_backend *be, size_t bytes, void **out) {
    if (out == NULL) {
        return gpt2__error(CPU_ERR(be), GPT2_ERR_ARG, "gpt2 cpu alloc: out is NULL");
    }
    // aligned_alloc wants a multiple of the alignment; 64 bytes is a cache
    // line and an AVX-512 register.
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded < bytes) {
        return gpt2__error(CPU_ERR(be), GPT2_ERR_NOMEM, "gpt2 cpu alloc: %zu bytes overflow",
                           bytes);
    }
    void *p = aligned_alloc(64, rounded > 0 ? rounded : 64);
    if (p == NULL) {
        *out = NULL;
        return gpt2__error(CPU_ERR(be), GPT2_ERR_NOMEM,
                           "gpt2 cpu alloc: out of host memory for %zu bytes", bytes);
    }
    memset(p, 0, rounded);
    *out = p;
    return GPT2_OK;
}

static void cpu_free(gpt2_backend *be, void *ptr) {
    (void)be;
    free(ptr);
}

static int cpu_zero(gpt2_backend *be, void *ptr, size_t bytes) {
    if (bytes > 0) {
        CPU_TRY(gpt2__check_ptr("zero", "ptr", ptr, CPU_ERR(be)));
        memset(ptr, 0, bytes);
    }
    return GPT2_OK;
}

static int cpu_copy(gpt2_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes > 0) {
        CPU_TRY(gpt2__check_ptr("copy", "dst", dst, CPU_ERR(be)));
        CPU_TRY(gpt2__check_ptr("copy", "src", src, CPU_ERR(be)));
        memcpy(dst, src, bytes);
    }
    return GPT2_OK;
}

static int cpu_synchronize(gpt2_backend *be) {
    (void)be;
    return GPT2_OK;
}

/* Host memory is this backend's memory: transfers are copies that are done
 * when they return, so there is never anything to wait for. */
static int cpu_host_alloc(gpt2_backend *be, size_t bytes, void **out) {
    return cpu_alloc(be, bytes, out);
}

static int cpu_upload_async(gpt2_backend *be, void *dst, const void *host_src, size_t bytes) {
    return cpu_copy(be, dst, host_src, bytes);
}

static int cpu_host_wait(gpt2_backend *be, const void *host) {
    (void)be;
    (void)host;
    return GPT2_OK;
}

static int cpu_losses_sum(gpt2_backend *be, const float *losses, int n, double *host_out) {
    CPU_TRY(gpt2__check_ptr("losses_sum", "losses", losses, CPU_ERR(be)));
    CPU_TRY(gpt2__check_ptr("losses_sum", "host_out", host_out, CPU_ERR(be)));
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        sum += losses[i];
    }
    *host_out = sum;
    return GPT2_OK;
}

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

/* out[c] += sum over r of a[r][c] for c < N; a: [rows][N]. */
static void cpu_colsum_add(int rows, int N, const float *a, float *out) {
    const int tiles = (N + CPU_COL_TILE - 1) / CPU_COL_TILE;
#pragma omp parallel for schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        const int c0 = tile * CPU_COL_TILE;
        const int w = N - c0 < CPU_COL_TILE ? N - c0 : CPU_COL_TILE;
        float acc[CPU_COL_TILE] = {0.0f};
        for (int r = 0; r < rows; r++) {
            const float *row = a + (size_t)r * (size_t)N + (size_t)c0;
            for (int j = 0; j < w; j++) {
                acc[j] += row[j];
            }
        }
        for (int j = 0; j < w; j++) {
            out[c0 + j] += acc[j];
        }
    }
}

/* Through the GELU and into c_fc's bias in one pass over [rows][N]:
 * d[r][c] *= gelu'(pre[r][c]), then db[c] += sum over r of the new d[r][c]. */
static void cpu_gelu_backward_colsum(int rows, int N, float *d, const float *pre, float *db) {
    const int tiles = (N + CPU_COL_TILE - 1) / CPU_COL_TILE;
#pragma omp parallel for schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        const int c0 = tile * CPU_COL_TILE;
        const int w = N - c0 < CPU_COL_TILE ? N - c0 : CPU_COL_TILE;
        float acc[CPU_COL_TILE] = {0.0f};
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
    const int tiles = (C + CPU_COL_TILE - 1) / CPU_COL_TILE;
#pragma omp parallel for schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        const int c0 = tile * CPU_COL_TILE;
        const int w = C - c0 < CPU_COL_TILE ? C - c0 : CPU_COL_TILE;
        float acc_w[CPU_COL_TILE] = {0.0f};
        float acc_b[CPU_COL_TILE] = {0.0f};
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

/* y: [rows][out] = (res ? res : 0) + x: [rows][in] . W^T + b, W: [out][in].
 * The rows start as res + b and the GEMM adds onto them (beta = 1), so the
 * bias and the residual cost no pass of their own. y must not alias x; it
 * may alias res. */
static void cpu_linear_forward(int rows, int in, int out, const float *x, const float *W,
                               const float *b, const float *res, float *y) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        float *yr = y + (size_t)r * (size_t)out;
        if (res != NULL) {
            const float *rr = res + (size_t)r * (size_t)out;
            for (int o = 0; o < out; o++) {
                yr[o] = rr[o] + b[o];
            }
        } else {
            memcpy(yr, b, sizeof(float) * (size_t)out);
        }
    }
    ex_sgemm(0, 1, rows, out, in, 1.0f, x, in, W, in, 1.0f, y, out);
}

/* The backward of y = x W^T (+ b): dW: [out][in] += dy^T . x, and, when dx is
 * not NULL, dx: [rows][in] = dy . W. (Bias gradients are column sums the
 * caller does, possibly fused with another pass.) */
static void cpu_linear_backward(int rows, int in, int out, const float *x, const float *W,
                                const float *dy, float *dW, float *dx) {
    ex_sgemm(1, 0, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dW, in);
    if (dx != NULL) {
        ex_sgemm(0, 0, rows, in, out, 1.0f, dy, out, W, in, 0.0f, dx, in);
    }
}

/* ------------------------------------------------------------ attention */

/* atty: [BT][C] = causal multi-head attention of qkv: [BT][3C]; att:
 * [B][NH][T][T] keeps the probabilities. Per (b, h) the products are
 * [T][hs] x [hs][T] and [T][T] x [T][hs] read in place from qkv's rows
 * (stride 3C) and written in place into atty's (stride C). */
static void cpu_attention_forward(const gpt2_dims *d, int B, int T, const float *qkv, float *att,
                                  float *atty) {
    const int C = d->n_embd, NH = d->n_head, hs = C / NH;
    const int C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const int heads = B * NH;
    // One (sequence, head) per iteration: its products are single-threaded
    // BLAS calls (cpu_blas.h), the threads work on different heads.
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < heads; bh++) {
        const int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs; // [T][hs], ld 3C
        const float *k = q + C;
        float *s = att + (size_t)bh * (size_t)T * T; // [T][T]
        // s = q . k^T (raw scores; the scale goes into the softmax).
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, q, C3, k, C3, 0.0f,
                    s, T);
    }
    const long long rows = (long long)B * NH * T;
#pragma omp parallel for schedule(static)
    for (long long r = 0; r < rows; r++) {
        gpt2_causal_softmax_row((int)(r % T), T, scale, att + (size_t)r * (size_t)T);
    }
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < heads; bh++) {
        const int b = bh / NH, h = bh % NH;
        const float *v = qkv + (size_t)b * T * C3 + 2 * (size_t)C + (size_t)h * hs;
        const float *p = att + (size_t)bh * (size_t)T * T;
        float *y = atty + (size_t)b * T * C + (size_t)h * hs; // [T][hs], ld C
        // y = p . v; p is 0 above the diagonal, which is the causal mask.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, p, T, v, C3, 0.0f,
                    y, C);
    }
}

/* The backward: datty: [BT][C] -> dqkv: [BT][3C] (written). datt: [NH][T][T]
 * scratch for one sequence's score gradients. */
static void cpu_attention_backward(const gpt2_dims *d, int B, int T, const float *qkv,
                                   const float *att, const float *datty, float *dqkv,
                                   float *datt) {
    const int C = d->n_embd, NH = d->n_head, hs = C / NH;
    const int C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        // Heads in parallel (datt holds one sequence's heads).
#pragma omp parallel for schedule(static)
        for (int h = 0; h < NH; h++) {
            const size_t qoff = (size_t)b * T * C3 + (size_t)h * hs;
            const float *v = qkv + qoff + 2 * (size_t)C;
            const float *p = att + ((size_t)b * NH + h) * (size_t)T * T;
            const float *dy = datty + (size_t)b * T * C + (size_t)h * hs;
            float *dv = dqkv + qoff + 2 * (size_t)C;
            float *dp = datt + (size_t)h * T * T;
            // dv = p^T . dy; dp = dy . v^T.
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, p, T, dy, C,
                        0.0f, dv, C3);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C, v, C3,
                        0.0f, dp, T);
        }
        const float *pb = att + (size_t)b * NH * T * T;
        const int rows = NH * T;
#pragma omp parallel for schedule(static)
        for (int r = 0; r < rows; r++) {
            gpt2_causal_softmax_backward_row(r % T, T, scale, pb + (size_t)r * T,
                                             datt + (size_t)r * T);
        }
#pragma omp parallel for schedule(static)
        for (int h = 0; h < NH; h++) {
            const size_t qoff = (size_t)b * T * C3 + (size_t)h * hs;
            const float *q = qkv + qoff;
            const float *k = q + C;
            const float *ds = datt + (size_t)h * T * T; // d(raw scores), scale included
            // dq = ds . k; dk = ds^T . q.
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, ds, T, k, C3,
                        0.0f, dqkv + qoff, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, ds, T, q, C3,
                        0.0f, dqkv + qoff + C, C3);
        }
    }
}

/* ---------------------------------------------------------- the model */

static int cpu_check_tokens(gpt2_backend *be, const char *op, const char *what,
                            const int *tokens, long long n, int V) {
    for (long long r = 0; r < n; r++) {
        if (tokens[r] < 0 || tokens[r] >= V) {
            return gpt2__error(CPU_ERR(be), GPT2_ERR_ARG,
                               "gpt2 %s: %s[%lld] = %d is outside [0, vocab = %d)", op, what, r,
                               tokens[r], V);
        }
    }
    return GPT2_OK;
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
    return GPT2_OK;
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
    const int tiles = (C + CPU_COL_TILE - 1) / CPU_COL_TILE;
#pragma omp parallel for schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        const int c0 = tile * CPU_COL_TILE;
        const int w = C - c0 < CPU_COL_TILE ? C - c0 : CPU_COL_TILE;
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
    return GPT2_OK;
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
    cpu_linear_forward(BT, C, 3 * C, a->ln1, w->qkvw, w->qkvb, NULL, a->qkv);
    cpu_attention_forward(d, B, T, a->qkv, a->att, a->atty);
    cpu_linear_forward(BT, C, C, a->atty, w->attprojw, w->attprojb, x, a->res1);
    // MLP half: y = res1 + c_proj(gelu(c_fc(ln_2(res1)))).
    cpu_layernorm_forward(BT, C, a->res1, w->ln2w, w->ln2b, a->ln2, a->ln2_mean, a->ln2_rstd);
    cpu_linear_forward(BT, C, 4 * C, a->ln2, w->fcw, w->fcb, NULL, a->fch);
    const long long n = (long long)BT * 4 * C;
    const float *pre = a->fch;
    float *post = a->fch_gelu;
#pragma omp parallel for schedule(static)
    for (long long k = 0; k < n; k++) {
        post[k] = gpt2_gelu(pre[k]);
    }
    cpu_linear_forward(BT, 4 * C, C, a->fch_gelu, w->fcprojw, w->fcprojb, a->res1, y);
    return GPT2_OK;
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
    cpu_colsum_add(BT, C, dy, g->fcprojb);
    cpu_linear_backward(BT, 4 * C, C, a->fch_gelu, w->fcprojw, dy, g->fcprojw, dbig);
    cpu_gelu_backward_colsum(BT, 4 * C, dbig, a->fch, g->fcb);
    cpu_linear_backward(BT, C, 4 * C, a->ln2, w->fcw, dbig, g->fcw, dmid);
    // dx holds d res1 = dy + ln_2's input gradient from here on.
    cpu_layernorm_backward(BT, C, dmid, a->res1, a->ln2_mean, a->ln2_rstd, w->ln2w, dy, dx,
                           g->ln2w, g->ln2b);

    // Attention half, the same way with d res1.
    cpu_colsum_add(BT, C, dx, g->attprojb);
    cpu_linear_backward(BT, C, C, a->atty, w->attprojw, dx, g->attprojw, dmid);
    cpu_attention_backward(d, B, T, a->qkv, a->att, dmid, dbig, datt);
    cpu_colsum_add(BT, 3 * C, dbig, g->qkvb);
    cpu_linear_backward(BT, C, 3 * C, a->ln1, w->qkvw, dbig, g->qkvw, dmid);
    cpu_layernorm_backward(BT, C, dmid, x, a->ln1_mean, a->ln1_rstd, w->ln1w, dx, dx, g->ln1w,
                           g->ln1b);
    return GPT2_OK;
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
        return gpt2__error(CPU_ERR(be), GPT2_ERR_ARG,
                           "gpt2 %s: chunk_rows = %d; need >= 1 (default "
                           "GPT2_HEAD_CHUNK_ROWS_DEFAULT)",
                           op, chunk_rows);
    }
    return GPT2_OK;
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
        // logits: [n][V] = xn . wte^T
        ex_sgemm(0, 1, n, V, C, 1.0f, xn, C, wte, C, 0.0f, logits, V);
#pragma omp parallel for schedule(static)
        for (int i = 0; i < n; i++) {
            losses[r0 + i] = gpt2_xent_row(V, logits + (size_t)i * V, targets[r0 + i],
                                           dloss_scale, want_grad);
        }
        if (!want_grad) {
            continue;
        }
        // g->wte: [V][C] += dlogits^T . xn; dxn = dlogits . wte.
        cpu_linear_backward(n, C, V, xn, wte, logits, g->wte, dxn);
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
    return GPT2_OK;
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
    return GPT2_OK;
}

static int cpu_head_logits(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                           const gpt2_embed_w *w, const void *x_in, int row, float *host_logits,
                           void *scratch) {
    const float *x = x_in;
    const char *op = "head_logits";
    CPU_TRY(cpu_check_head(be, op, d, B, T, w, x, 1, scratch));
    CPU_TRY(gpt2__check_ptr(op, "host_logits", host_logits, CPU_ERR(be)));
    if (row < 0 || (long long)row >= (long long)B * T) {
        return gpt2__error(CPU_ERR(be), GPT2_ERR_ARG,
                           "gpt2 %s: row %d is outside [0, B * T = %lld)", op, row,
                           (long long)B * T);
    }
    const int C = d->n_embd;
    float *xn = scratch; // [C], then mean and rstd
    gpt2_layernorm_forward_row(C, x + (size_t)row * C, w->lnfw, w->lnfb, xn, &xn[C], &xn[C + 1]);
    // host_logits: [V] = wte . xn
    cblas_sgemv(CblasRowMajor, CblasNoTrans, d->vocab, C, 1.0f, w->wte, C, xn, 1, 0.0f,
                host_logits, 1);
    return GPT2_OK;
}

static void cpu_destroy(gpt2_backend *be) {
    if (be == NULL) {
        return;
    }
    free(be->impl);
    free(be);
}

static const gpt2_backend_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    // On the CPU, backend memory is host memory: upload and download copy.
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .synchronize = cpu_synchronize,
    .last_error = cpu_last_error,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_free,
    .upload_async = cpu_upload_async,
    .host_wait = cpu_host_wait,
    .losses_sum = cpu_losses_sum,
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
    if (be == NULL || impl == NULL) {
        free(be);
        free(impl);
        return NULL;
    }
    ex_blas_init();
    be->ops = &cpu_ops;
    be->dtype = GPT2_F32;
    be->impl = impl;
    return be;
}
