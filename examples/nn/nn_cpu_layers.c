/*
 * The CPU's nn_layers table (nn_layers.h): the products are nn_cpu.h's,
 * the rest are loops over rows (or column tiles) calling nn_layer_math.h,
 * spread over OpenMP threads. The simulated device runs these very
 * functions on its thread (nn_sim_layers.c), so they are the one host
 * implementation of every layer.
 *
 * Determinism: a row's math runs in one thread; every sum over rows (bias,
 * norm weight and embedding gradients) is split by columns, each column
 * adding its rows in ascending order within one thread. No result depends
 * on the number of OpenMP threads or on the schedule.
 *
 * Speed: built with -O3 -fno-trapping-math (examples/nn/CMakeLists.txt):
 * the element loops are written for the vectorizer, exp/tanh are
 * nn_math.h's branch-free versions, and the GELU backward is fused with
 * c_fc's bias gradient.
 */
#include <string.h>

#include "nn_impl.h"
#include "nn_layer_math.h"
#include "nn_layers.h"

/* The width of column tile `tile` of N columns. */
static int tile_width(int N, int c0) {
    return N - c0 < NN_CPU_COL_TILE ? N - c0 : NN_CPU_COL_TILE;
}

int nn_layer_failed(nn_device *dev, const char *model, int status, char *err, size_t cap) {
    ex_error(err, cap, status, "%s: %s", model, dev->ops->last_error(dev));
    return status;
}

/* ------------------------------------------------------ input, output */

static int cpu_check_tokens(nn_device *dev, const char *model, const char *op, const char *what,
                            const char *vocab_name, const int *tokens, long long n, int V,
                            char *err, size_t cap) {
    (void)dev;
    for (long long r = 0; r < n; r++) {
        if (tokens[r] < 0 || tokens[r] >= V) {
            return ex_error(err, cap, NN_ERR_ARG, "%s %s: %s[%lld] = %d is outside [0, %s = %d)",
                            model, op, what, r, tokens[r], vocab_name, V);
        }
    }
    return NN_OK;
}

static int cpu_embed_forward(nn_device *dev, int BT, int T, int C, int V, const void *wte_,
                             const void *wpe_, const int *tokens, void *x_) {
    (void)dev;
    (void)V; /* checked by check_tokens */
    const float *wte = wte_, *wpe = wpe_;
    float *x = x_;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < BT; r++) {
        const float *te = wte + (size_t)tokens[r] * (size_t)C;
        float *xr = x + (size_t)r * (size_t)C;
        if (wpe == NULL) {
            memcpy(xr, te, sizeof(float) * (size_t)C);
            continue;
        }
        const float *pe = wpe + (size_t)(r % T) * (size_t)C;
        for (int c = 0; c < C; c++) {
            xr[c] = te[c] + pe[c];
        }
    }
    return NN_OK;
}

static int cpu_embed_backward(nn_device *dev, int BT, int T, int C, int V, void *g_wte_,
                              void *g_wpe_, const int *tokens, const void *dx_) {
    (void)dev;
    (void)V;
    float *g_wte = g_wte_, *g_wpe = g_wpe_;
    const float *dx = dx_;
    // Split by columns: a thread owns columns [c0, c0 + w) of every row of
    // wte (and wpe) and adds the rows of dx in ascending order, so a token
    // that repeats adds its rows in the same order on every run.
    const int tiles = (C + NN_CPU_COL_TILE - 1) / NN_CPU_COL_TILE;
#pragma omp parallel for schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        const int c0 = tile * NN_CPU_COL_TILE, w = tile_width(C, c0);
        for (int r = 0; r < BT; r++) {
            const float *dr = dx + (size_t)r * (size_t)C + (size_t)c0;
            float *te = g_wte + (size_t)tokens[r] * (size_t)C + (size_t)c0;
            for (int j = 0; j < w; j++) {
                te[j] += dr[j];
            }
            if (g_wpe != NULL) {
                float *pe = g_wpe + (size_t)(r % T) * (size_t)C + (size_t)c0;
                for (int j = 0; j < w; j++) {
                    pe[j] += dr[j];
                }
            }
        }
    }
    return NN_OK;
}

/* The logits of a chunk, [rows][V], then their gradient. */
static size_t cpu_classifier_scratch_bytes(const nn_device *dev, int C, int V, int rows) {
    (void)dev;
    (void)C;
    return sizeof(float) * (size_t)rows * (size_t)V;
}

static int cpu_classifier_chunk(nn_device *dev, int n, int C, int V, const void *xn,
                                const void *W, const int *targets, float dloss_scale,
                                float *losses, void *gW, void *dxn, void *scratch) {
    (void)dev;
    nn_cpu_classifier_chunk(n, C, V, xn, W, targets, dloss_scale, losses, scratch, gW, dxn);
    return NN_OK;
}

/* On the CPU the host's logits are the device's: written in place. */
static int cpu_classifier_logits_row(nn_device *dev, int C, int V, const void *xn,
                                     const void *W, void *scratch, float *host_logits) {
    (void)dev;
    (void)scratch;
    nn_cpu_classifier_logits_row(C, V, xn, W, host_logits);
    return NN_OK;
}

/* -------------------------------------------------- linear, attention */

static int cpu_linear_forward(nn_device *dev, const char *name, int rows, int in, int out,
                              const void *x, int ldx, const void *W, const void *b,
                              const void *res, int ldres, void *y, int ldy) {
    (void)dev;
    (void)name;
    nn_cpu_linear_forward(rows, in, out, x, ldx, W, b, res, ldres, y, ldy);
    return NN_OK;
}

static int cpu_linear_backward(nn_device *dev, const char *name, int rows, int in, int out,
                               const void *x, int ldx, const void *W, const void *dy, int lddy,
                               void *dW, void *dx, int lddx, float dx_beta) {
    (void)dev;
    (void)name;
    nn_cpu_linear_backward(rows, in, out, x, ldx, W, dy, lddy, dW, dx, lddx, dx_beta);
    return NN_OK;
}

static int cpu_colsum_add(nn_device *dev, int rows, int N, const void *a, int lda, void *out) {
    (void)dev;
    nn_cpu_colsum_add(rows, N, a, lda, out);
    return NN_OK;
}

/* One sequence's score gradients [NH][T][T] (the backward's; the forward
 * needs none). */
static size_t cpu_attention_scratch_bytes(const nn_device *dev, const nn_attn_layout *s) {
    (void)dev;
    return sizeof(float) * (size_t)s->n_head * (size_t)s->T * (size_t)s->T;
}

static int cpu_attention_forward(nn_device *dev, const nn_attn_layout *s, const void *qkv,
                                 void *att, void *atty, void *scratch) {
    (void)dev;
    (void)scratch;
    nn_cpu_attention_forward(s, qkv, att, atty);
    return NN_OK;
}

static int cpu_attention_backward(nn_device *dev, const nn_attn_layout *s, const void *qkv,
                                  const void *att, const void *datty, void *dqkv,
                                  void *scratch) {
    (void)dev;
    nn_cpu_attention_backward(s, qkv, att, datty, dqkv, scratch);
    return NN_OK;
}

static int cpu_rope(nn_device *dev, int BT, int T, int heads, int hd, int ld,
                    const float *cos_t, const float *sin_t, void *qkv_, int backward) {
    (void)dev;
    float *qkv = qkv_;
    const int half = hd / 2;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < BT; r++) {
        const size_t t = (size_t)(r % T) * (size_t)half;
        const float *c = cos_t + t, *sn = sin_t + t;
        float *row = qkv + (size_t)r * (size_t)ld;
        for (int h = 0; h < heads; h++) {
            if (backward) {
                nn_rope_backward(hd, row + (size_t)h * hd, c, sn);
            } else {
                nn_rope_forward(hd, row + (size_t)h * hd, c, sn);
            }
        }
    }
    return NN_OK;
}

/* -------------------------------------------------------------- norms */

static int cpu_layernorm_forward(nn_device *dev, int rows, int C, const void *x_, const void *w,
                                 const void *b, void *out_, float *mean, float *rstd) {
    (void)dev;
    const float *x = x_;
    float *out = out_;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const size_t off = (size_t)r * (size_t)C;
        nn_layernorm_forward_row(C, x + off, w, b, out + off, &mean[r], &rstd[r]);
    }
    return NN_OK;
}

static int cpu_layernorm_backward(nn_device *dev, int rows, int C, const void *dout_,
                                  const void *x_, const float *mean, const float *rstd,
                                  const void *w, const void *dres_, void *dx_, void *dw_,
                                  void *db_) {
    (void)dev;
    const float *dout = dout_, *x = x_, *dres = dres_;
    float *dx = dx_, *dw = dw_, *db = db_;
    // The parameter gradients by columns, xhat recomputed exactly as the
    // forward computed it (none for a frozen norm).
    const int tiles = dw != NULL ? (C + NN_CPU_COL_TILE - 1) / NN_CPU_COL_TILE : 0;
#pragma omp parallel for schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        const int c0 = tile * NN_CPU_COL_TILE, n = tile_width(C, c0);
        float acc_w[NN_CPU_COL_TILE] = {0.0f};
        float acc_b[NN_CPU_COL_TILE] = {0.0f};
        for (int r = 0; r < rows; r++) {
            const float *drow = dout + (size_t)r * (size_t)C + (size_t)c0;
            const float *xrow = x + (size_t)r * (size_t)C + (size_t)c0;
            const float m = mean[r], s = rstd[r];
            for (int j = 0; j < n; j++) {
                acc_w[j] += drow[j] * nn_layernorm_xhat(xrow[j], m, s);
                acc_b[j] += drow[j];
            }
        }
        for (int j = 0; j < n; j++) {
            dw[c0 + j] += acc_w[j];
            db[c0 + j] += acc_b[j];
        }
    }
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const size_t off = (size_t)r * (size_t)C;
        nn_layernorm_backward_row(C, dout + off, x + off, w, mean[r], rstd[r],
                                  dres != NULL ? dres + off : NULL, dx + off);
    }
    return NN_OK;
}

static int cpu_rmsnorm_forward(nn_device *dev, int rows, int C, const void *x_, const void *w,
                               float eps, void *out_, float *rstd) {
    (void)dev;
    const float *x = x_;
    float *out = out_;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const size_t off = (size_t)r * (size_t)C;
        nn_rmsnorm_forward_row(C, x + off, w, eps, out + off, &rstd[r]);
    }
    return NN_OK;
}

static int cpu_rmsnorm_backward(nn_device *dev, int rows, int C, const void *dout_,
                                const void *x_, const float *rstd, const void *w,
                                const void *dres_, void *dx_, void *dw_) {
    (void)dev;
    const float *dout = dout_, *x = x_, *dres = dres_;
    float *dx = dx_, *dw = dw_;
    // dw[c] += sum_r dout * x * rstd (the normalized input, recomputed as
    // the forward computed it), by columns (none for a frozen norm).
    const int tiles = dw != NULL ? (C + NN_CPU_COL_TILE - 1) / NN_CPU_COL_TILE : 0;
#pragma omp parallel for schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        const int c0 = tile * NN_CPU_COL_TILE, n = tile_width(C, c0);
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
        nn_rmsnorm_backward_row(C, dout + off, x + off, w, rstd[r],
                                dres != NULL ? dres + off : NULL, dx + off);
    }
    return NN_OK;
}

/* -------------------------------------------------------- activations */

static int cpu_dropout(nn_device *dev, int rows, int cols, float p, uint64_t seed,
                       const void *src_, int lds, void *dst_, int ldd, int add) {
    (void)dev;
    const float *src = src_;
    float *dst = dst_;
    const uint32_t threshold = nn_dropout_threshold(p);
    const float keep = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) {
            const float v = src[(size_t)r * lds + c] *
                            nn_dropout_factor(seed, (uint64_t)r * cols + c, threshold, keep);
            float *o = &dst[(size_t)r * ldd + c];
            *o = add ? *o + v : v;
        }
    }
    return NN_OK;
}

static int cpu_scale(nn_device *dev, long long n, float s, void *x_) {
    (void)dev;
    float *x = x_;
#pragma omp parallel for schedule(static)
    for (long long k = 0; k < n; k++) {
        x[k] *= s;
    }
    return NN_OK;
}

static int cpu_gelu_forward(nn_device *dev, long long n, const void *pre_, void *post_) {
    (void)dev;
    const float *pre = pre_;
    float *post = post_;
#pragma omp parallel for schedule(static)
    for (long long k = 0; k < n; k++) {
        post[k] = nn_gelu(pre[k]);
    }
    return NN_OK;
}

static int cpu_gelu_backward_colsum(nn_device *dev, int rows, int N, void *d_, const void *pre_,
                                    void *db_) {
    (void)dev;
    float *d = d_, *db = db_;
    const float *pre = pre_;
    const int tiles = (N + NN_CPU_COL_TILE - 1) / NN_CPU_COL_TILE;
#pragma omp parallel for schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        const int c0 = tile * NN_CPU_COL_TILE, w = tile_width(N, c0);
        float acc[NN_CPU_COL_TILE] = {0.0f};
        for (int r = 0; r < rows; r++) {
            float *drow = d + (size_t)r * (size_t)N + (size_t)c0;
            const float *prow = pre + (size_t)r * (size_t)N + (size_t)c0;
            for (int j = 0; j < w; j++) {
                const float v = drow[j] * nn_gelu_grad(prow[j]);
                drow[j] = v;
                acc[j] += v;
            }
        }
        for (int j = 0; j < w; j++) {
            db[c0 + j] += acc[j];
        }
    }
    return NN_OK;
}

static int cpu_swiglu_forward(nn_device *dev, long long n, const void *gate_, const void *up_,
                              void *h_) {
    (void)dev;
    const float *gate = gate_, *up = up_;
    float *h = h_;
#pragma omp parallel for schedule(static)
    for (long long k = 0; k < n; k++) {
        h[k] = nn_swiglu(gate[k], up[k]);
    }
    return NN_OK;
}

static int cpu_swiglu_backward(nn_device *dev, int rows, int F, const void *gate_,
                               const void *up_, void *d_) {
    (void)dev;
    const float *gate = gate_, *up = up_;
    float *d = d_;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *g = gate + (size_t)r * (size_t)F, *u = up + (size_t)r * (size_t)F;
        float *dg = d + (size_t)r * 2 * (size_t)F, *du = dg + F;
        for (int k = 0; k < F; k++) {
            nn_swiglu_backward(g[k], u[k], dg[k], &dg[k], &du[k]);
        }
    }
    return NN_OK;
}

const nn_layer_ops nn_cpu_layer_ops = {
    .align = sizeof(float),
    .check_tokens = cpu_check_tokens,
    .embed_forward = cpu_embed_forward,
    .embed_backward = cpu_embed_backward,
    .classifier_scratch_bytes = cpu_classifier_scratch_bytes,
    .classifier_chunk = cpu_classifier_chunk,
    .classifier_logits_row = cpu_classifier_logits_row,
    .linear_forward = cpu_linear_forward,
    .linear_backward = cpu_linear_backward,
    .linears_forward = nn_linears_forward_composed,
    .linears_backward = nn_linears_backward_composed,
    .linear_gelu_forward = nn_linear_gelu_forward_composed,
    .linear_dgelu_backward = nn_linear_dgelu_backward_composed,
    .colsum_add = cpu_colsum_add,
    .scale = cpu_scale,
    .dropout = cpu_dropout,
    .lora_forward = nn_lora_forward_composed,
    .lora_backward = nn_lora_backward_composed,
    .attention_scratch_bytes = cpu_attention_scratch_bytes,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .rope = cpu_rope,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward_colsum = cpu_gelu_backward_colsum,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
};
