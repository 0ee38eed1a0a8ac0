/*
 * The simulated device's layers (nn_layers.h): each op copies its
 * arguments, values only, into a kernel launch on the device's sim stream
 * (zs_sim_launch), and the kernel, run later by the device's thread, calls
 * the CPU's op (nn_cpu_layer_ops) on the addresses zs_sim_ptr gives it. So
 * the orchestration above (gpt2_layers.c, llama_layers.c) is the CPU's, the
 * arithmetic is the CPU's, and only the timing is a device's.
 */
#include <stdio.h>

#include "nn_layers.h"
#include "nn_sim.h"
#include "zeroshard_sim.h"

#define P(ptr) zs_sim_ptr(k, (ptr))

/* What a kernel reads and writes, declared at its launch so that the
 * stream-order check sees the model's kernels against the runtime's copies,
 * gathers and reductions and against host code. */
typedef struct accesses {
    zs_sim_access a[16];
    int n;
} accesses;

/* [p, p + floats) read (write 0) or written; NULL or empty adds nothing. */
static void acc(accesses *l, const void *p, size_t floats, int write) {
    if (p == NULL || floats == 0 || l->n == 16) return;
    l->a[l->n++] = (zs_sim_access){p, floats * sizeof(float), write};
}

/* The floats a strided [rows][width] matrix spans (row stride ld). */
static size_t span(long long rows, long long ld, long long width) {
    return rows > 0 && width > 0 ? (size_t)((rows - 1) * ld + width) : 0;
}

/* Enqueues kernel `fn` with the struct `a` and the accesses `l`; NN_OK or
 * the launch's failure. */
#define LAUNCH(dev, name, fn, a, l)                                                           \
    (zs_sim_launch_access(nn_sim_device_context(dev), name, fn, &(a), sizeof(a), (l).a,       \
                          (l).n) == ZS_OK                                                     \
         ? NN_OK                                                                              \
         : nn_sim_device_failed(dev, name))

static const nn_layer_ops *cpu(void) { return &nn_cpu_layer_ops; }

/* ------------------------------------------------------ input, output */

typedef struct tokens_args {
    const char *model, *op, *what, *vocab_name; /* string literals */
    const int *tokens;
    long long n;
    int V;
} tokens_args;

/* A bad token fails the kernel, which the device's next wait reports; the
 * token's index and value are said here, as the CPU's check says them. */
static int tokens_kernel(const zs_sim_kernel *k, void *args) {
    const tokens_args *a = args;
    char err[256];
    if (cpu()->check_tokens(NULL, a->model, a->op, a->what, a->vocab_name, P(a->tokens), a->n,
                            a->V, err, sizeof err) == NN_OK)
        return 0;
    fprintf(stderr, "nn sim: %s\n", err);
    return 1;
}

static int sim_check_tokens(nn_device *dev, const char *model, const char *op, const char *what,
                            const char *vocab_name, const int *tokens, long long n, int V,
                            char *err, size_t cap) {
    (void)err;
    (void)cap;
    const tokens_args a = {model, op, what, vocab_name, tokens, n, V};
    accesses l = {0};
    acc(&l, tokens, (size_t)n, 0);
    return LAUNCH(dev, "nn_check_tokens", tokens_kernel, a, l);
}

typedef struct embed_args {
    int BT, T, C, V;
    const void *wte, *wpe;
    const int *tokens;
    void *x;
    const void *dx;
    void *g_wte, *g_wpe;
} embed_args;

static int embed_forward_kernel(const zs_sim_kernel *k, void *args) {
    const embed_args *a = args;
    return cpu()->embed_forward(NULL, a->BT, a->T, a->C, a->V, P(a->wte), P(a->wpe),
                                P(a->tokens), P(a->x));
}

static int sim_embed_forward(nn_device *dev, int BT, int T, int C, int V, const void *wte,
                             const void *wpe, const int *tokens, void *x) {
    const embed_args a = {.BT = BT, .T = T, .C = C, .V = V, .wte = wte, .wpe = wpe,
                          .tokens = tokens, .x = x};
    accesses l = {0};
    acc(&l, tokens, (size_t)BT, 0);
    acc(&l, wpe, span(BT < T ? BT : T, C, C), 0);
    acc(&l, x, (size_t)BT * C, 1);
    return LAUNCH(dev, "nn_embed_forward", embed_forward_kernel, a, l);
}

static int embed_backward_kernel(const zs_sim_kernel *k, void *args) {
    const embed_args *a = args;
    return cpu()->embed_backward(NULL, a->BT, a->T, a->C, a->V, P(a->g_wte), P(a->g_wpe),
                                 P(a->tokens), P(a->dx));
}

static int sim_embed_backward(nn_device *dev, int BT, int T, int C, int V, void *g_wte,
                              void *g_wpe, const int *tokens, const void *dx) {
    const embed_args a = {.BT = BT, .T = T, .C = C, .V = V, .tokens = tokens, .dx = dx,
                          .g_wte = g_wte, .g_wpe = g_wpe};
    accesses l = {0};
    acc(&l, tokens, (size_t)BT, 0);
    acc(&l, dx, (size_t)BT * C, 0);
    acc(&l, g_wpe, span(BT < T ? BT : T, C, C), 1);
    return LAUNCH(dev, "nn_embed_backward", embed_backward_kernel, a, l);
}

typedef struct classifier_args {
    int n, C, V;
    float dloss_scale;
    const void *xn, *W;
    const int *targets;
    float *losses;
    void *logits, *gW, *dxn; /* logits: the scratch */
} classifier_args;

static size_t sim_classifier_scratch_bytes(const nn_device *dev, int C, int V, int rows) {
    return cpu()->classifier_scratch_bytes(dev, C, V, rows);
}

static int classifier_kernel(const zs_sim_kernel *k, void *args) {
    const classifier_args *a = args;
    return cpu()->classifier_chunk(NULL, a->n, a->C, a->V, P(a->xn), P(a->W), P(a->targets),
                                   a->dloss_scale, P(a->losses), P(a->gW), P(a->dxn),
                                   P(a->logits));
}

static int sim_classifier_chunk(nn_device *dev, int n, int C, int V, const void *xn,
                                const void *W, const int *targets, float dloss_scale,
                                float *losses, void *gW, void *dxn, void *logits) {
    const classifier_args a = {n, C, V, dloss_scale, xn, W, targets, losses, logits, gW, dxn};
    accesses l = {0};
    acc(&l, xn, (size_t)n * C, 0);
    acc(&l, W, (size_t)V * C, 0);
    acc(&l, targets, (size_t)n, 0);
    acc(&l, losses, (size_t)n, 1);
    acc(&l, logits, (size_t)n * V, 1);
    acc(&l, gW, (size_t)V * C, 1);
    acc(&l, dxn, (size_t)n * C, 1);
    return LAUNCH(dev, "nn_classifier_chunk", classifier_kernel, a, l);
}

static int logits_row_kernel(const zs_sim_kernel *k, void *args) {
    const classifier_args *a = args;
    return cpu()->classifier_logits_row(NULL, a->C, a->V, P(a->xn), P(a->W), NULL,
                                        P(a->logits));
}

/* The logits into the scratch on the device, then to the host (a wait). */
static int sim_classifier_logits_row(nn_device *dev, int C, int V, const void *xn,
                                     const void *W, void *scratch, float *host_logits) {
    const classifier_args a = {.C = C, .V = V, .xn = xn, .W = W, .logits = scratch};
    accesses l = {0};
    acc(&l, xn, (size_t)C, 0);
    acc(&l, W, (size_t)V * C, 0);
    acc(&l, scratch, (size_t)V, 1);
    const int s = LAUNCH(dev, "nn_classifier_logits_row", logits_row_kernel, a, l);
    if (s != NN_OK) return s;
    return dev->ops->download(dev, host_logits, scratch, sizeof(float) * (size_t)V);
}

/* -------------------------------------------------- linear, attention */

typedef struct linear_args {
    int rows, in, out, ldx, ldres, ldy, lddy, lddx;
    float dx_beta;
    const void *x, *W, *b, *res, *dy;
    void *y, *dW, *dx;
} linear_args;

static int linear_forward_kernel(const zs_sim_kernel *k, void *args) {
    const linear_args *a = args;
    return cpu()->linear_forward(NULL, NULL, a->rows, a->in, a->out, P(a->x), a->ldx, P(a->W),
                                 P(a->b), P(a->res), a->ldres, P(a->y), a->ldy);
}

static int sim_linear_forward(nn_device *dev, const char *name, int rows, int in, int out,
                              const void *x, int ldx, const void *W, const void *b,
                              const void *res, int ldres, void *y, int ldy) {
    (void)name;
    const linear_args a = {.rows = rows, .in = in, .out = out, .ldx = ldx, .ldres = ldres,
                           .ldy = ldy, .x = x, .W = W, .b = b, .res = res, .y = y};
    accesses l = {0};
    acc(&l, x, span(rows, ldx, in), 0);
    acc(&l, W, (size_t)out * in, 0);
    acc(&l, b, (size_t)out, 0);
    acc(&l, res, span(rows, ldres, out), 0);
    acc(&l, y, span(rows, ldy, out), 1);
    return LAUNCH(dev, "nn_linear_forward", linear_forward_kernel, a, l);
}

static int linear_backward_kernel(const zs_sim_kernel *k, void *args) {
    const linear_args *a = args;
    return cpu()->linear_backward(NULL, NULL, a->rows, a->in, a->out, P(a->x), a->ldx, P(a->W),
                                  P(a->dy), a->lddy, P(a->dW), P(a->dx), a->lddx, a->dx_beta);
}

static int sim_linear_backward(nn_device *dev, const char *name, int rows, int in, int out,
                               const void *x, int ldx, const void *W, const void *dy, int lddy,
                               void *dW, void *dx, int lddx, float dx_beta) {
    (void)name;
    const linear_args a = {.rows = rows, .in = in, .out = out, .ldx = ldx, .lddy = lddy,
                           .lddx = lddx, .dx_beta = dx_beta, .x = x, .W = W, .dy = dy, .dW = dW,
                           .dx = dx};
    accesses l = {0};
    acc(&l, x, span(rows, ldx, in), 0);
    acc(&l, W, (size_t)out * in, 0);
    acc(&l, dy, span(rows, lddy, out), 0);
    acc(&l, dW, (size_t)out * in, 1);
    acc(&l, dx, span(rows, lddx, in), 1);
    return LAUNCH(dev, "nn_linear_backward", linear_backward_kernel, a, l);
}

static int colsum_kernel(const zs_sim_kernel *k, void *args) {
    const linear_args *a = args;
    return cpu()->colsum_add(NULL, a->rows, a->out, P(a->x), a->ldx, P(a->y));
}

static int sim_colsum_add(nn_device *dev, int rows, int N, const void *src, int lda, void *out) {
    const linear_args a = {.rows = rows, .out = N, .ldx = lda, .x = src, .y = out};
    accesses l = {0};
    acc(&l, src, span(rows, lda, N), 0);
    acc(&l, out, (size_t)N, 1);
    return LAUNCH(dev, "nn_colsum_add", colsum_kernel, a, l);
}

typedef struct attention_args {
    nn_attn_layout s;
    const void *qkv, *att, *datty;
    void *att_out, *atty, *dqkv, *datt;
} attention_args;

static size_t sim_attention_scratch_bytes(const nn_device *dev, const nn_attn_layout *s) {
    return cpu()->attention_scratch_bytes(dev, s);
}

static int attention_forward_kernel(const zs_sim_kernel *k, void *args) {
    const attention_args *a = args;
    return cpu()->attention_forward(NULL, &a->s, P(a->qkv), P(a->att_out), P(a->atty), NULL);
}

/* The CPU's forward takes no scratch. */
static int sim_attention_forward(nn_device *dev, const nn_attn_layout *s, const void *qkv,
                                 void *att, void *atty, void *scratch) {
    (void)scratch;
    const attention_args a = {.s = *s, .qkv = qkv, .att_out = att, .atty = atty};
    const long long BT = (long long)s->B * s->T, TT = (long long)s->T * s->T;
    accesses l = {0};
    acc(&l, qkv, span(BT, s->ld, s->ld), 0);
    acc(&l, att, (size_t)(s->B * s->n_head * TT), 1);
    acc(&l, atty, span(BT, s->ldy, (long long)s->n_head * s->head_dim), 1);
    return LAUNCH(dev, "nn_attention_forward", attention_forward_kernel, a, l);
}

static int attention_backward_kernel(const zs_sim_kernel *k, void *args) {
    const attention_args *a = args;
    return cpu()->attention_backward(NULL, &a->s, P(a->qkv), P(a->att), P(a->datty), P(a->dqkv),
                                     P(a->datt));
}

static int sim_attention_backward(nn_device *dev, const nn_attn_layout *s, const void *qkv,
                                  const void *att, const void *datty, void *dqkv,
                                  void *datt) {
    const attention_args a = {.s = *s, .qkv = qkv, .att = att, .datty = datty, .dqkv = dqkv,
                              .datt = datt};
    const long long BT = (long long)s->B * s->T, TT = (long long)s->T * s->T;
    accesses l = {0};
    acc(&l, qkv, span(BT, s->ld, s->ld), 0);
    acc(&l, att, (size_t)(s->B * s->n_head * TT), 0);
    acc(&l, datty, span(BT, s->ldy, (long long)s->n_head * s->head_dim), 0);
    acc(&l, dqkv, span(BT, s->ld, s->ld), 1);
    acc(&l, datt, (size_t)(s->n_head * TT), 1);
    return LAUNCH(dev, "nn_attention_backward", attention_backward_kernel, a, l);
}

typedef struct rope_args {
    int BT, T, heads, hd, ld, backward;
    const float *cos_t, *sin_t;
    void *qkv;
} rope_args;

static int rope_kernel(const zs_sim_kernel *k, void *args) {
    const rope_args *a = args;
    return cpu()->rope(NULL, a->BT, a->T, a->heads, a->hd, a->ld, P(a->cos_t), P(a->sin_t),
                       P(a->qkv), a->backward);
}

static int sim_rope(nn_device *dev, int BT, int T, int heads, int hd, int ld, const float *cos_t,
                    const float *sin_t, void *qkv, int backward) {
    const rope_args a = {BT, T, heads, hd, ld, backward, cos_t, sin_t, qkv};
    accesses l = {0};
    acc(&l, cos_t, (size_t)(BT < T ? BT : T) * (size_t)(hd / 2), 0);
    acc(&l, sin_t, (size_t)(BT < T ? BT : T) * (size_t)(hd / 2), 0);
    acc(&l, qkv, span(BT, ld, (long long)heads * hd), 1);
    return LAUNCH(dev, "nn_rope", rope_kernel, a, l);
}

/* -------------------------------------------------------------- norms */

typedef struct norm_args {
    int rows, C;
    float eps;
    const void *x, *w, *b, *dout, *dres;
    const float *mean_in, *rstd_in; /* the backward's: the forward's statistics */
    void *out;
    float *mean, *rstd; /* the forward's */
    void *dx, *dw, *db;
} norm_args;

static int layernorm_forward_kernel(const zs_sim_kernel *k, void *args) {
    const norm_args *a = args;
    return cpu()->layernorm_forward(NULL, a->rows, a->C, P(a->x), P(a->w), P(a->b), P(a->out),
                                    P(a->mean), P(a->rstd));
}

static int sim_layernorm_forward(nn_device *dev, int rows, int C, const void *x, const void *w,
                                 const void *b, void *out, float *mean, float *rstd) {
    const norm_args a = {.rows = rows, .C = C, .x = x, .w = w, .b = b, .out = out, .mean = mean,
                         .rstd = rstd};
    accesses l = {0};
    acc(&l, x, (size_t)rows * C, 0);
    acc(&l, w, (size_t)C, 0);
    acc(&l, b, (size_t)C, 0);
    acc(&l, out, (size_t)rows * C, 1);
    acc(&l, mean, (size_t)rows, 1);
    acc(&l, rstd, (size_t)rows, 1);
    return LAUNCH(dev, "nn_layernorm_forward", layernorm_forward_kernel, a, l);
}

static int layernorm_backward_kernel(const zs_sim_kernel *k, void *args) {
    const norm_args *a = args;
    return cpu()->layernorm_backward(NULL, a->rows, a->C, P(a->dout), P(a->x), P(a->mean_in),
                                     P(a->rstd_in), P(a->w), P(a->dres), P(a->dx), P(a->dw),
                                     P(a->db));
}

static int sim_layernorm_backward(nn_device *dev, int rows, int C, const void *dout,
                                  const void *x, const float *mean, const float *rstd,
                                  const void *w, const void *dres, void *dx, void *dw,
                                  void *db) {
    const norm_args a = {.rows = rows, .C = C, .dout = dout, .x = x, .mean_in = mean,
                         .rstd_in = rstd, .w = w, .dres = dres, .dx = dx, .dw = dw, .db = db};
    accesses l = {0};
    acc(&l, dout, (size_t)rows * C, 0);
    acc(&l, x, (size_t)rows * C, 0);
    acc(&l, mean, (size_t)rows, 0);
    acc(&l, rstd, (size_t)rows, 0);
    acc(&l, w, (size_t)C, 0);
    acc(&l, dres != dx ? dres : NULL, (size_t)rows * C, 0);
    acc(&l, dx, (size_t)rows * C, 1);
    acc(&l, dw, (size_t)C, 1);
    acc(&l, db, (size_t)C, 1);
    return LAUNCH(dev, "nn_layernorm_backward", layernorm_backward_kernel, a, l);
}

static int rmsnorm_forward_kernel(const zs_sim_kernel *k, void *args) {
    const norm_args *a = args;
    return cpu()->rmsnorm_forward(NULL, a->rows, a->C, P(a->x), P(a->w), a->eps, P(a->out),
                                  P(a->rstd));
}

static int sim_rmsnorm_forward(nn_device *dev, int rows, int C, const void *x, const void *w,
                               float eps, void *out, float *rstd) {
    const norm_args a = {.rows = rows, .C = C, .eps = eps, .x = x, .w = w, .out = out,
                         .rstd = rstd};
    accesses l = {0};
    acc(&l, x, (size_t)rows * C, 0);
    acc(&l, w, (size_t)C, 0);
    acc(&l, out, (size_t)rows * C, 1);
    acc(&l, rstd, (size_t)rows, 1);
    return LAUNCH(dev, "nn_rmsnorm_forward", rmsnorm_forward_kernel, a, l);
}

static int rmsnorm_backward_kernel(const zs_sim_kernel *k, void *args) {
    const norm_args *a = args;
    return cpu()->rmsnorm_backward(NULL, a->rows, a->C, P(a->dout), P(a->x), P(a->rstd_in),
                                   P(a->w), P(a->dres), P(a->dx), P(a->dw));
}

static int sim_rmsnorm_backward(nn_device *dev, int rows, int C, const void *dout,
                                const void *x, const float *rstd, const void *w,
                                const void *dres, void *dx, void *dw) {
    const norm_args a = {.rows = rows, .C = C, .dout = dout, .x = x, .rstd_in = rstd, .w = w,
                         .dres = dres, .dx = dx, .dw = dw};
    accesses l = {0};
    acc(&l, dout, (size_t)rows * C, 0);
    acc(&l, x, (size_t)rows * C, 0);
    acc(&l, rstd, (size_t)rows, 0);
    acc(&l, w, (size_t)C, 0);
    acc(&l, dres != dx ? dres : NULL, (size_t)rows * C, 0);
    acc(&l, dx, (size_t)rows * C, 1);
    acc(&l, dw, (size_t)C, 1);
    return LAUNCH(dev, "nn_rmsnorm_backward", rmsnorm_backward_kernel, a, l);
}

/* -------------------------------------------------------- activations */

typedef struct act_args {
    long long n;
    int rows, N;
    float s;
    const void *pre, *gate, *up;
    void *post, *d, *db, *h;
} act_args;

static int gelu_forward_kernel(const zs_sim_kernel *k, void *args) {
    const act_args *a = args;
    return cpu()->gelu_forward(NULL, a->n, P(a->pre), P(a->post));
}

static int sim_gelu_forward(nn_device *dev, long long n, const void *pre, void *post) {
    const act_args a = {.n = n, .pre = pre, .post = post};
    accesses l = {0};
    acc(&l, pre, (size_t)n, 0);
    acc(&l, post, (size_t)n, 1);
    return LAUNCH(dev, "nn_gelu_forward", gelu_forward_kernel, a, l);
}

static int gelu_backward_kernel(const zs_sim_kernel *k, void *args) {
    const act_args *a = args;
    return cpu()->gelu_backward_colsum(NULL, a->rows, a->N, P(a->d), P(a->pre), P(a->db));
}

static int sim_gelu_backward_colsum(nn_device *dev, int rows, int N, void *d, const void *pre,
                                    void *db) {
    const act_args a = {.rows = rows, .N = N, .d = d, .pre = pre, .db = db};
    accesses l = {0};
    acc(&l, pre, (size_t)rows * N, 0);
    acc(&l, d, (size_t)rows * N, 1);
    acc(&l, db, (size_t)N, 1);
    return LAUNCH(dev, "nn_gelu_backward_colsum", gelu_backward_kernel, a, l);
}

static int scale_kernel(const zs_sim_kernel *k, void *args) {
    const act_args *a = args;
    return cpu()->scale(NULL, a->n, a->s, P(a->d));
}

static int sim_scale(nn_device *dev, long long n, float s, void *x) {
    const act_args a = {.n = n, .s = s, .d = x};
    accesses l = {0};
    acc(&l, x, (size_t)n, 1);
    return LAUNCH(dev, "nn_scale", scale_kernel, a, l);
}

typedef struct dropout_args {
    int rows, cols, lds, ldd, add;
    float p;
    uint64_t seed;
    const void *src;
    void *dst;
} dropout_args;

static int dropout_kernel(const zs_sim_kernel *k, void *args) {
    const dropout_args *a = args;
    return cpu()->dropout(NULL, a->rows, a->cols, a->p, a->seed, P(a->src), a->lds, P(a->dst),
                          a->ldd, a->add);
}

static int sim_dropout(nn_device *dev, int rows, int cols, float p, uint64_t seed,
                       const void *src, int lds, void *dst, int ldd, int add) {
    const dropout_args a = {rows, cols, lds, ldd, add, p, seed, src, dst};
    accesses l = {0};
    acc(&l, src, span(rows, lds, cols), 0);
    acc(&l, dst, span(rows, ldd, cols), 1);
    return LAUNCH(dev, "nn_dropout", dropout_kernel, a, l);
}

static int swiglu_forward_kernel(const zs_sim_kernel *k, void *args) {
    const act_args *a = args;
    return cpu()->swiglu_forward(NULL, a->n, P(a->gate), P(a->up), P(a->h));
}

static int sim_swiglu_forward(nn_device *dev, long long n, const void *gate, const void *up,
                              void *h) {
    const act_args a = {.n = n, .gate = gate, .up = up, .h = h};
    accesses l = {0};
    acc(&l, gate, (size_t)n, 0);
    acc(&l, up, (size_t)n, 0);
    acc(&l, h, (size_t)n, 1);
    return LAUNCH(dev, "nn_swiglu_forward", swiglu_forward_kernel, a, l);
}

static int swiglu_backward_kernel(const zs_sim_kernel *k, void *args) {
    const act_args *a = args;
    return cpu()->swiglu_backward(NULL, a->rows, a->N, P(a->gate), P(a->up), P(a->d));
}

static int sim_swiglu_backward(nn_device *dev, int rows, int F, const void *gate, const void *up,
                               void *d) {
    const act_args a = {.rows = rows, .N = F, .gate = gate, .up = up, .d = d};
    accesses l = {0};
    acc(&l, gate, (size_t)rows * F, 0);
    acc(&l, up, (size_t)rows * F, 0);
    acc(&l, d, (size_t)rows * 2 * F, 1);
    return LAUNCH(dev, "nn_swiglu_backward", swiglu_backward_kernel, a, l);
}

const nn_layer_ops nn_sim_layer_ops = {
    .align = sizeof(float),
    .check_tokens = sim_check_tokens,
    .embed_forward = sim_embed_forward,
    .embed_backward = sim_embed_backward,
    .classifier_scratch_bytes = sim_classifier_scratch_bytes,
    .classifier_chunk = sim_classifier_chunk,
    .classifier_logits_row = sim_classifier_logits_row,
    .linear_forward = sim_linear_forward,
    .linear_backward = sim_linear_backward,
    .linears_forward = nn_linears_forward_composed,
    .linears_backward = nn_linears_backward_composed,
    .linear_gelu_forward = nn_linear_gelu_forward_composed,
    .linear_dgelu_backward = nn_linear_dgelu_backward_composed,
    .colsum_add = sim_colsum_add,
    .scale = sim_scale,
    .dropout = sim_dropout,
    .lora_forward = nn_lora_forward_composed,
    .lora_backward = nn_lora_backward_composed,
    .attention_scratch_bytes = sim_attention_scratch_bytes,
    .attention_forward = sim_attention_forward,
    .attention_backward = sim_attention_backward,
    .rope = sim_rope,
    .layernorm_forward = sim_layernorm_forward,
    .layernorm_backward = sim_layernorm_backward,
    .rmsnorm_forward = sim_rmsnorm_forward,
    .rmsnorm_backward = sim_rmsnorm_backward,
    .gelu_forward = sim_gelu_forward,
    .gelu_backward_colsum = sim_gelu_backward_colsum,
    .swiglu_forward = sim_swiglu_forward,
    .swiglu_backward = sim_swiglu_backward,
};
