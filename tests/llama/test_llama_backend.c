/*
 * The Llama family's CPU backend (llama_backend.h), without zeroshard:
 *   - each new operation's backward against finite differences of its
 *     forward, element by element: RMSNorm, RoPE, SwiGLU (nn_layer_math.h,
 *     the functions both backends run);
 *   - every parameter tensor's gradient through the whole model (embed ->
 *     blocks -> head) against finite differences of the loss, for grouped-
 *     query attention (NKV < NH) with dimensions that divide nothing
 *     evenly: untied without biases, and tied with every bias (q/k/v,
 *     o_proj, the MLP's);
 *   - determinism: 1 and 2 OpenMP threads give the same bits;
 *     block_forward run twice (activation recomputation) gives the same
 *     activations; head_forward's losses are head_forward_backward's;
 *   - the accumulate convention and argument errors;
 *   - QLoRA's weight source: a block whose matrices come one at a time
 *     from be->weights (one scratch, poisoned with NaN before each copy)
 *     gives the bits of the block with its matrices in the struct, frozen
 *     with adapters, partly sourced, and with the base's gradients; each
 *     matrix asked once in the forward and once in the backward; a failing
 *     get() fails the op with its message.
 * Set LLAMA_TEST_VERBOSE=1 to print every finite-difference comparison.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model_check.h"
#include "llama_backend.h"
#include "nn_layer_math.h"
#include "llama_test_model.h"

static int verbose = 0;

/* ------------------------------------------------- element finite differences */

/*
 * The derivative of f at x[k] by the five-point stencil with step h, in
 * double, from float evaluations: truncation O(h^4), float's rounding of f
 * divided by 12h.
 */
#define OP_STEP 1e-2

typedef double (*scalar_fn)(void *ctx, const float *x);

static double op_fd(scalar_fn f, void *ctx, float *x, int k) {
    const float saved = x[k];
    double h[4], l[4];
    const double steps[4] = {OP_STEP, -OP_STEP, 2 * OP_STEP, -2 * OP_STEP};
    for (int i = 0; i < 4; i++) {
        x[k] = (float)((double)saved + steps[i]);
        h[i] = (double)x[k] - (double)saved;
        l[i] = f(ctx, x);
    }
    x[k] = saved;
    const double hh = (h[0] - h[1] + (h[2] - h[3]) / 2.0) / 4.0;
    return (8.0 * (l[0] - l[1]) - (l[2] - l[3])) / (12.0 * hh);
}

/* A fixed random projection of a row of outputs: the scalar whose gradient
 * the backward computes with dout = proj. */
static double project(const float *out, const float *proj, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)out[i] * proj[i];
    return s;
}

enum { OP_C = 37 }; /* RMSNorm's row: not a multiple of the 8 lanes */

typedef struct rms_ctx {
    float w[OP_C], proj[OP_C], eps;
    int wrt_w; /* differentiate with respect to w instead of x */
    float x[OP_C];
} rms_ctx;

static double rms_f(void *p, const float *v) {
    rms_ctx *c = p;
    float out[OP_C], rstd;
    nn_rmsnorm_forward_row(OP_C, c->wrt_w ? c->x : v, c->wrt_w ? v : c->w, c->eps, out, &rstd);
    return project(out, c->proj, OP_C);
}

typedef struct rope_ctx {
    int hd;
    float cos_t[8], sin_t[8], proj[16];
} rope_ctx;

static double rope_f(void *p, const float *v) {
    rope_ctx *c = p;
    float y[16];
    memcpy(y, v, sizeof(float) * (size_t)c->hd);
    nn_rope_forward(c->hd, y, c->cos_t, c->sin_t);
    return project(y, c->proj, c->hd);
}

typedef struct swiglu_ctx {
    float proj;
} swiglu_ctx;

static double swiglu_f(void *p, const float *v) {
    const swiglu_ctx *c = p;
    return (double)nn_swiglu(v[0], v[1]) * c->proj;
}

static void check_close(const char *what, int k, double an, double fd, double scale) {
    const double bound = 2e-3 * fabs(fd) + 1e-4 * scale + 1e-6;
    CHECK_MSG(fabs(an - fd) <= bound, "%s[%d]: backward %.7g, finite difference %.7g", what, k,
              an, fd);
    if (verbose) printf("  %s[%d] backward %+.6e fd %+.6e\n", what, k, an, fd);
}

static void test_ops(void) {
    uint64_t rng = 5;
    // RMSNorm: input and weight gradients of proj . rmsnorm(x).
    rms_ctx rc;
    rc.eps = 1e-5f;
    for (int i = 0; i < OP_C; i++) {
        rc.x[i] = (float)(2.0 * mt_normal(&rng) + 0.5);
        rc.w[i] = (float)(1.0 + 0.3 * mt_normal(&rng));
        rc.proj[i] = (float)mt_normal(&rng);
    }
    float out[OP_C], rstd, dx[OP_C];
    nn_rmsnorm_forward_row(OP_C, rc.x, rc.w, rc.eps, out, &rstd);
    nn_rmsnorm_backward_row(OP_C, rc.proj, rc.x, rc.w, rstd, NULL, dx);
    double scale = 0.0;
    for (int k = 0; k < OP_C; k++) scale = fmax(scale, fabs(dx[k]));
    float x[OP_C];
    memcpy(x, rc.x, sizeof x);
    rc.wrt_w = 0;
    for (int k = 0; k < OP_C; k++) check_close("rmsnorm dx", k, dx[k], op_fd(rms_f, &rc, x, k), scale);
    // The weight's gradient is dout * x * rstd (the backend's column sum).
    float w[OP_C];
    memcpy(w, rc.w, sizeof w);
    rc.wrt_w = 1;
    for (int k = 0; k < OP_C; k++)
        check_close("rmsnorm dw", k, rc.proj[k] * (rc.x[k] * rstd), op_fd(rms_f, &rc, w, k), 1.0);
    // dres joins: dx = dres + the gradient.
    float dres[OP_C], dx2[OP_C];
    for (int k = 0; k < OP_C; k++) dres[k] = (float)k;
    nn_rmsnorm_backward_row(OP_C, rc.proj, rc.x, rc.w, rstd, dres, dx2);
    for (int k = 0; k < OP_C; k++) CHECK(dx2[k] == dres[k] + dx[k]);

    // RoPE at a position far along (angles of many turns), hd 16.
    rope_ctx pc = {.hd = 16};
    llama_dims d = {.n_layer = 1, .n_head = 1, .n_kv_head = 1, .head_dim = 16, .n_embd = 16,
                    .n_ff = 1, .vocab = 1, .max_seq = 4096, .rms_eps = 1e-5,
                    .rope_theta = 10000.0, .init_std = 0.02};
    float *ct = malloc(sizeof(float) * 8 * 4096), *st = malloc(sizeof(float) * 8 * 4096);
    REQUIRE(ct && st);
    llama_rope_table(&d, 4096, ct, st);
    memcpy(pc.cos_t, ct + 8 * 3001, sizeof pc.cos_t);
    memcpy(pc.sin_t, st + 8 * 3001, sizeof pc.sin_t);
    free(ct);
    free(st);
    float v[16], g[16];
    for (int i = 0; i < 16; i++) {
        v[i] = (float)mt_normal(&rng);
        pc.proj[i] = (float)mt_normal(&rng);
    }
    memcpy(g, pc.proj, sizeof g);
    nn_rope_backward(16, g, pc.cos_t, pc.sin_t);
    for (int k = 0; k < 16; k++) check_close("rope", k, g[k], op_fd(rope_f, &pc, v, k), 1.0);
    // A rotation keeps the norm; backward after forward is the identity.
    float r[16];
    memcpy(r, v, sizeof r);
    nn_rope_forward(16, r, pc.cos_t, pc.sin_t);
    double n0 = 0.0, n1 = 0.0;
    for (int i = 0; i < 16; i++) {
        n0 += (double)v[i] * v[i];
        n1 += (double)r[i] * r[i];
    }
    CHECK_MSG(fabs(n0 - n1) < 1e-5 * n0, "rope changed the norm: %.9g vs %.9g", n0, n1);
    nn_rope_backward(16, r, pc.cos_t, pc.sin_t);
    for (int i = 0; i < 16; i++) CHECK(fabs(r[i] - v[i]) < 1e-5);

    // SwiGLU over gates from saturated negative to saturated positive.
    swiglu_ctx sc = {.proj = 1.0f};
    for (int i = 0; i < 21; i++) {
        float gu[2] = {(float)(-10.0 + i), (float)(0.7 - 0.1 * i)};
        float dg, du;
        nn_swiglu_backward(gu[0], gu[1], sc.proj, &dg, &du);
        check_close("swiglu dgate", i, dg, op_fd(swiglu_f, &sc, gu, 0), 1.0);
        check_close("swiglu dup", i, du, op_fd(swiglu_f, &sc, gu, 1), 1.0);
    }
    // Saturated: e^x clamps instead of overflowing, so no NaN from inf / inf.
    CHECK(fabs(nn_swiglu(-200.0f, 1.0f)) < 1e-30 && nn_swiglu(200.0f, 1.0f) == 200.0f);
}

/* ------------------------------------------------- whole-model finite differences */

/* The whole model against finite differences of its loss (model_tm.h's
 * check, which GPT-2's test uses too). */
static int fd_set_params(void *m, const float *params) { return llama_tm_set_params(m, params); }
static int fd_loss(void *m, double *loss) { return llama_tm_loss(m, loss); }

/* The gradient check's shape: grouped-query (2 query heads per K/V head),
 * head size 10, nothing a multiple of the 8 lanes or of another size. */
static llama_dims fd_dims(int tied, int bias) {
    llama_dims d = {.n_layer = 2, .n_head = 4, .n_kv_head = 2, .head_dim = 10, .n_embd = 40,
                    .n_ff = 72, .vocab = 53, .max_seq = 16, .rms_eps = 1e-5,
                    .rope_theta = 10000.0, .init_std = 0.02, .model_type = "llama"};
    d.tied = tied;
    d.qkv_bias = d.o_bias = d.mlp_bias = bias;
    return d;
}

static void test_gradient_check(nn_device *dev, int tied, int bias) {
    const llama_dims d = fd_dims(tied, bias);
    llama_backend *be = NULL;
    char err[512];
    REQUIRE(llama_cpu_backend_create(dev, &d, d.max_seq, &be, err, sizeof err) == 0);
    const int B = 2, T = 13, BT = B * T;
    llama_tm m;
    REQUIRE(llama_tm_init(&m, be, B, T, 11) == 0);
    float *params = malloc(sizeof(float) * (size_t)m.n_params);
    float *grads = malloc(sizeof(float) * (size_t)m.n_params);
    int *tokens = malloc(sizeof(int) * BT), *targets = malloc(sizeof(int) * BT);
    REQUIRE(params && grads && tokens && targets);
    // Weights 10x the init, norms and biases off theirs, so that attention
    // is far from uniform and every term of every gradient is sizeable.
    mt_init_params(&llama_param_table, &d, params, 1, 10.0, 0.2);
    mt_random_tokens(BT, d.vocab, tokens, 2);
    mt_random_tokens(BT, d.vocab, targets, 3);
    tokens[5] = tokens[9] = tokens[20] = 7; // a wte row collecting several rows
    REQUIRE(llama_tm_set_params(&m, params) == 0);
    REQUIRE(llama_tm_set_data(&m, tokens, targets) == 0);
    double loss = 0.0;
    REQUIRE(llama_tm_step(&m, 1.0f / BT, 1, &loss) == 0);
    REQUIRE(dev->ops->download(dev, grads, m.grads, sizeof(float) * (size_t)m.n_params) == 0);
    CHECK_MSG(isfinite(loss) && loss > 1.0 && loss < 20.0, "loss %g", loss);

    const mt_fd_model fm = {&m, fd_set_params, fd_loss};
    char label[64];
    snprintf(label, sizeof label, "%s%s", tied ? "tied" : "untied", bias ? "+biases" : "");
    double worst_ratio = 0.0;
    const int failures =
        mt_gradient_check(&fm, &llama_param_table, &d, params, grads, label, verbose, &worst_ratio);
    CHECK_MSG(failures == 0, "%s: %d elements or tensors failed the gradient check", label,
              failures);
    printf("gradient check (%s%s, %d tensors): loss %.6f, worst |diff| / bound %.3f\n",
           tied ? "tied" : "untied", bias ? ", every bias" : "",
           llama_unit_num_params(&d, 0) + d.n_layer * llama_unit_num_params(&d, 1) +
               (tied ? 0 : 2),
           loss, worst_ratio);
    free(params);
    free(grads);
    free(tokens);
    free(targets);
    llama_tm_free(&m);
    be->ops->destroy(be);
}

/* ---------------------------------------------------------- determinism */

static void run_step(nn_device *dev, const llama_dims *d, int B, int T, int chunk, int threads,
                     mt_step_result *out) {
    omp_set_num_threads(threads);
    llama_backend *be = NULL;
    char err[512];
    REQUIRE(llama_cpu_backend_create(dev, d, T, &be, err, sizeof err) == 0);
    llama_tm m;
    REQUIRE(llama_tm_init(&m, be, B, T, chunk) == 0);
    const int BT = B * T;
    float *params = malloc(sizeof(float) * (size_t)m.n_params);
    int *tokens = malloc(sizeof(int) * BT), *targets = malloc(sizeof(int) * BT);
    REQUIRE(params && tokens && targets);
    REQUIRE(mt_step_result_alloc(out, (size_t)m.n_params, (size_t)(d->n_layer + 1) * BT * d->n_embd,
                                 (size_t)d->n_layer * m.acts_bytes / sizeof(float),
                                 (size_t)BT) == 0);
    mt_init_params(&llama_param_table, d, params, 5, 3.0, 0.1);
    mt_random_tokens(BT, d->vocab, tokens, 6);
    mt_random_tokens(BT, d->vocab, targets, 7);
    REQUIRE(llama_tm_set_params(&m, params) == 0);
    REQUIRE(llama_tm_set_data(&m, tokens, targets) == 0);
    REQUIRE(llama_tm_step(&m, 1.0f / BT, 1, &out->loss) == 0);
    memcpy(out->grads, m.grads, sizeof(float) * out->n_grads);
    memcpy(out->resid, m.resid, sizeof(float) * out->n_resid);
    memcpy(out->acts, m.acts_mem, sizeof(float) * out->n_acts);
    memcpy(out->losses, m.losses, sizeof(float) * out->n_losses);
    free(params);
    free(tokens);
    free(targets);
    llama_tm_free(&m);
    be->ops->destroy(be);
}

static void test_threads(nn_device *dev) {
    // Big enough that every OpenMP loop splits: C = 128 is two column
    // tiles, F = 352 six; 3 x 40 rows; the head's 48-row chunks end
    // mid-sequence; 4 query heads on 2 K/V heads; every bias.
    llama_dims d = {.n_layer = 2, .n_head = 4, .n_kv_head = 2, .head_dim = 32, .n_embd = 128,
                    .n_ff = 352, .vocab = 203, .max_seq = 64, .rms_eps = 1e-6,
                    .rope_theta = 10000.0, .qkv_bias = 1, .o_bias = 1, .mlp_bias = 1,
                    .init_std = 0.02, .model_type = "llama"};
    mt_step_result one, two;
    run_step(dev, &d, 3, 40, 48, 1, &one);
    run_step(dev, &d, 3, 40, 48, 2, &two);
    omp_set_num_threads(1);
    char diff[256];
    CHECK_MSG(mt_step_result_compare(&one, &two, diff, sizeof diff) == 0,
              "1 thread vs 2 threads: %s", diff);
    mt_step_result_free(&one);
    mt_step_result_free(&two);
}

/* The first difference between two copies (ref, got) of one block's
 * activations, tensor by tensor: the copies hold what `a` points into at
 * base (llama_block_acts_carve's layout), at the same offsets. */
static void compare_acts(const char *label, const llama_dims *d, int B, int T,
                         const llama_block_acts *a, const float *base, const float *ref,
                         const float *got) {
    const size_t BT = (size_t)B * T, C = (size_t)d->n_embd, F = (size_t)d->n_ff;
    const struct {
        const char *name;
        const void *at;
        size_t n;
    } parts[] = {{"xn1", a->xn1, BT * C},
                 {"rstd1", a->rstd1, BT},
                 {"qkv", a->qkv, BT * (size_t)llama_qkv_width(d)},
                 {"att", a->att, (size_t)B * d->n_head * T * T},
                 {"atty", a->atty, BT * (size_t)(d->n_head * d->head_dim)},
                 {"res1", a->res1, BT * C},
                 {"xn2", a->xn2, BT * C},
                 {"rstd2", a->rstd2, BT},
                 {"gate", a->gate, BT * F},
                 {"up", a->up, BT * F},
                 {"h", a->h, BT * F}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        const size_t off = (size_t)((const float *)parts[i].at - base);
        const long long k = mt_first_diff(ref + off, got + off, parts[i].n);
        CHECK_MSG(k < 0, "%s: %s [%lld] differs (%.9g, then %.9g)", label, parts[i].name, k,
                  k < 0 ? 0.0 : (double)ref[off + (size_t)k],
                  k < 0 ? 0.0 : (double)got[off + (size_t)k]);
    }
}

/* block_forward again on the same input (activation recomputation) rewrites
 * the same activations and output, bit for bit, even over garbage. */
static void test_recompute(nn_device *dev) {
    const llama_dims d = fd_dims(0, 1);
    llama_backend *be = NULL;
    char err[512];
    REQUIRE(llama_cpu_backend_create(dev, &d, d.max_seq, &be, err, sizeof err) == 0);
    llama_tm m;
    const int B = 2, T = 16, BT = B * T;
    REQUIRE(llama_tm_init(&m, be, B, T, 7) == 0);
    float *params = malloc(sizeof(float) * (size_t)m.n_params);
    int *tokens = malloc(sizeof(int) * BT);
    REQUIRE(params && tokens);
    mt_init_params(&llama_param_table, &d, params, 11, 3.0, 0.1);
    mt_random_tokens(BT, d.vocab, tokens, 12);
    REQUIRE(llama_tm_set_params(&m, params) == 0);
    REQUIRE(llama_tm_set_data(&m, tokens, tokens) == 0);
    double loss;
    REQUIRE(llama_tm_loss(&m, &loss) == 0);
    const size_t na = m.acts_bytes / sizeof(float), ny = (size_t)BT * d.n_embd;
    float *acts1 = malloc(m.acts_bytes), *y1 = malloc(sizeof(float) * ny);
    REQUIRE(acts1 && y1);
    float *acts = (float *)(m.acts_mem + m.acts_bytes), *y = llama_tm_resid(&m, 2);
    memcpy(acts1, acts, m.acts_bytes);
    memcpy(y1, y, sizeof(float) * ny);
    for (size_t i = 0; i < na; i++) acts[i] = (float)i * 0.37f - 5.0f;
    for (size_t i = 0; i < ny; i++) y[i] = -(float)i;
    REQUIRE(be->ops->block_forward(be, B, T, &m.w[1], llama_tm_resid(&m, 1), &m.acts[1], y,
                                   m.bscratch) == 0);
    compare_acts("recomputed", &d, B, T, &m.acts[1], acts, acts1, acts);
    const long long k = mt_first_diff(y1, y, ny);
    CHECK_MSG(k < 0, "recomputed output [%lld] differs", k);
    free(acts1);
    free(y1);
    free(params);
    free(tokens);
    llama_tm_free(&m);
    be->ops->destroy(be);
}

/* head_forward and head_forward_backward give the same losses; another
 * chunking the same mean up to rounding; head_logits agrees with the loss;
 * a second step adds into the gradients. */
static void test_head_and_accumulate(nn_device *dev) {
    const llama_dims d = fd_dims(1, 0);
    llama_backend *be = NULL;
    char err[512];
    REQUIRE(llama_cpu_backend_create(dev, &d, d.max_seq, &be, err, sizeof err) == 0);
    llama_tm m, m2;
    const int B = 2, T = 16, BT = B * T;
    REQUIRE(llama_tm_init(&m, be, B, T, 5) == 0);
    REQUIRE(llama_tm_init(&m2, be, B, T, 32) == 0);
    const size_t n = (size_t)m.n_params;
    float *params = malloc(sizeof(float) * n), *g1 = malloc(sizeof(float) * n);
    float lf[32], lfb[32], logits[53];
    int tokens[32], targets[32];
    REQUIRE(params && g1);
    mt_init_params(&llama_param_table, &d, params, 21, 3.0, 0.1);
    mt_random_tokens(BT, d.vocab, tokens, 22);
    mt_random_tokens(BT, d.vocab, targets, 23);
    REQUIRE(llama_tm_set_params(&m, params) == 0 && llama_tm_set_data(&m, tokens, targets) == 0);
    double loss_eval, loss_train, loss_again, loss32;
    REQUIRE(llama_tm_loss(&m, &loss_eval) == 0);
    memcpy(lf, m.losses, sizeof lf);
    REQUIRE(llama_tm_step(&m, 1.0f / BT, 1, &loss_train) == 0);
    memcpy(lfb, m.losses, sizeof lfb);
    memcpy(g1, m.grads, sizeof(float) * n);
    const long long k = mt_first_diff(lf, lfb, BT);
    CHECK_MSG(k < 0, "position %lld: head_forward and head_forward_backward differ", k);

    const int row = BT - 1;
    REQUIRE(llama_tm_logits(&m, row, logits) == 0);
    double zmax = logits[0], sum = 0.0;
    for (int v = 1; v < d.vocab; v++) zmax = logits[v] > zmax ? logits[v] : zmax;
    for (int v = 0; v < d.vocab; v++) sum += exp(logits[v] - zmax);
    const double lrow = zmax + log(sum) - logits[targets[row]];
    CHECK_MSG(fabs(lrow - lf[row]) < 1e-5 * (1.0 + fabs(lrow)),
              "head_logits row %d gives loss %.9g, head_forward %.9g", row, lrow, lf[row]);

    REQUIRE(llama_tm_step(&m, 1.0f / BT, 0, &loss_again) == 0);
    double worst = 0.0, gmax = 0.0;
    for (size_t i = 0; i < n; i++) gmax = fmax(gmax, fabs(g1[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)m.grads[i] - 2.0 * g1[i]));
    CHECK_MSG(worst <= 1e-5 * gmax, "a second step does not add: worst %.3g of max %.3g", worst,
              gmax);

    REQUIRE(llama_tm_set_params(&m2, params) == 0 && llama_tm_set_data(&m2, tokens, targets) == 0);
    REQUIRE(llama_tm_loss(&m2, &loss32) == 0);
    CHECK_MSG(fabs(loss32 - loss_eval) < 1e-6 * loss_eval, "5-row chunks %.9g, 32-row %.9g",
              loss_eval, loss32);
    free(params);
    free(g1);
    llama_tm_free(&m);
    llama_tm_free(&m2);
    be->ops->destroy(be);
}

/* ----------------------------------------- matrices from a weight source */

/*
 * QLoRA's path (llama_backend.h's weight source): a block whose matrices
 * are NULL in its struct takes each from be->weights.get just before its
 * products, q, k, v and gate, up one matrix at a time. On the CPU the
 * batched linears are those same linear ops in the same order, so the
 * block must compute what it computes with every matrix in the struct, bit
 * for bit: activations, y, dx and every gradient. The source below keeps
 * the contract's one matrix of memory: get() fills one scratch of the
 * largest matrix's size with NaN, then copies the asked matrix into it, so
 * that a layer using a pointer after the next get() reads another matrix
 * or NaN.
 */
static const int block_matrices[] = {LLAMA_P_WQ,    LLAMA_P_WK,  LLAMA_P_WV,   LLAMA_P_WO,
                                      LLAMA_P_WGATE, LLAMA_P_WUP, LLAMA_P_WDOWN};
#define N_MATRICES ((int)(sizeof block_matrices / sizeof block_matrices[0]))
#define MATRIX_BIT(slot) (1u << (slot))
#define ALL_MATRICES                                                                          \
    (MATRIX_BIT(LLAMA_P_WQ) | MATRIX_BIT(LLAMA_P_WK) | MATRIX_BIT(LLAMA_P_WV) |                \
     MATRIX_BIT(LLAMA_P_WO) | MATRIX_BIT(LLAMA_P_WGATE) | MATRIX_BIT(LLAMA_P_WUP) |            \
     MATRIX_BIT(LLAMA_P_WDOWN))

static void **block_matrix(llama_block_w *w, int slot) {
    switch (slot) {
    case LLAMA_P_WQ: return &w->wq;
    case LLAMA_P_WK: return &w->wk;
    case LLAMA_P_WV: return &w->wv;
    case LLAMA_P_WO: return &w->wo;
    case LLAMA_P_WGATE: return &w->wgate;
    case LLAMA_P_WUP: return &w->wup;
    case LLAMA_P_WDOWN: return &w->wdown;
    default: return NULL;
    }
}

typedef struct copy_source {
    nn_device *dev;
    const void *mat[LLAMA_BLOCK_SLOTS]; /* the block's matrices, by slot */
    size_t bytes[LLAMA_BLOCK_SLOTS];
    void *scratch, *nans; /* [the largest matrix] each; nans all NaN */
    size_t max_bytes;
    int calls[LLAMA_BLOCK_SLOTS]; /* get()s of each slot */
    int fail_slot;                /* get() of this slot fails (-1: none) */
} copy_source;

static int source_get(void *user, int slot, const void **out, char *err, size_t cap) {
    copy_source *s = user;
    if (slot < 0 || slot >= LLAMA_BLOCK_SLOTS || s->mat[slot] == NULL) {
        snprintf(err, cap, "test source: no matrix in slot %d", slot);
        return NN_ERR_ARG;
    }
    s->calls[slot]++;
    if (slot == s->fail_slot) {
        snprintf(err, cap, "test source: slot %d cannot be read", slot);
        return NN_ERR_DEVICE;
    }
    nn_device *dev = s->dev;
    if (dev->ops->copy(dev, s->scratch, s->nans, s->max_bytes) != NN_OK ||
        dev->ops->copy(dev, s->scratch, s->mat[slot], s->bytes[slot]) != NN_OK) {
        snprintf(err, cap, "test source: %s", dev->ops->last_error(dev));
        return NN_ERR_DEVICE;
    }
    *out = s->scratch;
    return NN_OK;
}

/* The source of block w's matrices (fp32, on be's device), installed in
 * be; *stripped = w without the matrices of `mask` (MATRIX_BIT(slot)s). */
static void source_init(copy_source *s, llama_backend *be, const llama_block_w *w,
                        unsigned mask, llama_block_w *stripped) {
    memset(s, 0, sizeof *s);
    s->dev = be->dev;
    s->fail_slot = -1;
    *stripped = *w;
    for (int i = 0; i < N_MATRICES; i++) {
        const int slot = block_matrices[i];
        llama_param_spec spec;
        REQUIRE(llama_param_spec_get(&be->dims, 1, llama_block_index(&be->dims, slot), &spec) ==
                0);
        s->mat[slot] = *block_matrix((llama_block_w *)w, slot);
        s->bytes[slot] = sizeof(float) * (size_t)spec.numel;
        s->max_bytes = s->bytes[slot] > s->max_bytes ? s->bytes[slot] : s->max_bytes;
        if (mask & MATRIX_BIT(slot)) *block_matrix(stripped, slot) = NULL;
    }
    const size_t n = s->max_bytes / sizeof(float);
    float *nans = malloc(s->max_bytes);
    REQUIRE(nans != NULL);
    for (size_t i = 0; i < n; i++) nans[i] = NAN;
    REQUIRE(s->dev->ops->alloc(s->dev, s->max_bytes, &s->scratch) == NN_OK &&
            s->dev->ops->alloc(s->dev, s->max_bytes, &s->nans) == NN_OK &&
            s->dev->ops->upload(s->dev, s->nans, nans, s->max_bytes) == NN_OK);
    free(nans);
    be->weights = (llama_weight_source){source_get, s};
}

static void source_free(copy_source *s, llama_backend *be) {
    s->dev->ops->free(s->dev, s->scratch);
    s->dev->ops->free(s->dev, s->nans);
    be->weights = (llama_weight_source){NULL, NULL};
}

/* Every slot asked `times` times if in mask, never otherwise. */
static void check_calls(const char *label, const char *when, const copy_source *s, unsigned mask,
                        int times) {
    for (int slot = 0; slot < LLAMA_BLOCK_SLOTS; slot++) {
        const int want = (mask & MATRIX_BIT(slot)) ? times : 0;
        CHECK_MSG(s->calls[slot] == want, "%s: after %s, slot %d asked %d times, not %d", label,
                  when, slot, s->calls[slot], want);
    }
}

/* A model whose block 0 the weight-source tests run: every bias or none;
 * with `adapters` (bits of llama_lora_target) LoRA on a frozen base (g's
 * base tensors NULL, as QLoRA's), rank 4 with dropout, random adapters. */
typedef struct src_model {
    llama_dims d;
    llama_backend *be;
    llama_tm m;
    float *ref[4], *got[4]; /* acts, y, dx, gradients: (a), then (b) */
    size_t n[4];
} src_model;

static void src_model_init(src_model *f, nn_device *dev, int bias, unsigned adapters) {
    memset(f, 0, sizeof *f);
    f->d = fd_dims(0, bias);
    char err[512];
    REQUIRE(llama_cpu_backend_create(dev, &f->d, f->d.max_seq, &f->be, err, sizeof err) == 0);
    if (adapters != 0) {
        REQUIRE(llama_backend_set_lora(f->be, 4, 8.0, 0.1, err, sizeof err) == 0);
        f->be->lora.seed = 77;
    }
    const int B = 2, T = 13;
    llama_tm *m = &f->m;
    REQUIRE(llama_tm_init(m, f->be, B, T, 7) == 0);
    float *params = malloc(sizeof(float) * (size_t)m->n_params);
    REQUIRE(params != NULL);
    mt_init_params(&llama_param_table, &f->d, params, 41, 3.0, 0.1);
    REQUIRE(llama_tm_set_params(m, params) == 0);
    free(params);
    if (adapters != 0) {
        const unsigned targets[2] = {adapters, 0};
        REQUIRE(llama_tm_set_lora(m, targets) == 0);
        uint64_t rng = 43;
        for (int64_t i = 0; i < m->n_lora; i++) m->lora_params[i] = (float)(0.3 * mt_normal(&rng));
    }
    // x into the residual stream, dy into dres[0].
    const size_t BT = (size_t)B * T, C = (size_t)f->d.n_embd;
    uint64_t rng = 45;
    for (size_t i = 0; i < BT * C; i++) llama_tm_resid(m, 0)[i] = (float)mt_normal(&rng);
    for (size_t i = 0; i < BT * C; i++) m->dres[0][i] = (float)(0.1 * mt_normal(&rng));
    f->n[0] = m->acts_bytes / sizeof(float);
    f->n[1] = f->n[2] = BT * C;
    f->n[3] = adapters != 0 ? (size_t)m->n_lora : (size_t)m->n_params;
    for (int i = 0; i < 4; i++) {
        f->ref[i] = malloc(sizeof(float) * f->n[i]);
        f->got[i] = malloc(sizeof(float) * f->n[i]);
        REQUIRE(f->ref[i] && f->got[i]);
    }
}

static void src_model_free(src_model *f) {
    for (int i = 0; i < 4; i++) {
        free(f->ref[i]);
        free(f->got[i]);
    }
    llama_tm_free(&f->m);
    f->be->ops->destroy(f->be);
}

/* The model's block 0 forward then backward with weights w, over garbage
 * activations, y and dx and from zeroed gradients, into out[4]; with a
 * source, it is asked each matrix of `mask` once in each. */
static void src_block_pass(src_model *f, const llama_block_w *w, copy_source *s, unsigned mask,
                           const char *label, float **out) {
    llama_tm *m = &f->m;
    llama_backend *be = f->be;
    float *acts = (float *)m->acts_mem, *y = llama_tm_resid(m, 1), *dx = m->dres[1];
    float *grads = m->lora_at != NULL ? m->lora_grads : m->grads;
    float *const where[4] = {acts, y, dx, grads};
    for (size_t i = 0; i < f->n[0]; i++) acts[i] = (float)i * 0.37f - 5.0f;
    for (size_t i = 0; i < f->n[1]; i++) y[i] = dx[i] = -(float)i;
    memset(grads, 0, sizeof(float) * f->n[3]);
    const int B = m->B, T = m->T;
    int st = be->ops->block_forward(be, B, T, w, llama_tm_resid(m, 0), &m->acts[0], y,
                                    m->bscratch);
    CHECK_MSG(st == 0, "%s: block_forward: %s", label, be->ops->last_error(be));
    REQUIRE(st == 0);
    if (s != NULL) check_calls(label, "block_forward", s, mask, 1);
    st = be->ops->block_backward(be, B, T, w, &m->g[0], llama_tm_resid(m, 0), &m->acts[0],
                                 m->dres[0], dx, m->bscratch);
    CHECK_MSG(st == 0, "%s: block_backward: %s", label, be->ops->last_error(be));
    REQUIRE(st == 0);
    if (s != NULL) check_calls(label, "block_backward", s, mask, 2);
    for (int i = 0; i < 4; i++) memcpy(out[i], where[i], sizeof(float) * f->n[i]);
}

/* The block with the matrices of `mask` from a source against the block
 * with all of them in its struct: the same bits everywhere. */
static void test_weight_source(nn_device *dev, const char *label, int bias, unsigned adapters,
                               unsigned mask) {
    src_model f;
    src_model_init(&f, dev, bias, adapters);
    llama_tm *m = &f.m;
    src_block_pass(&f, &m->w[0], NULL, 0, label, f.ref);
    copy_source s;
    llama_block_w w;
    source_init(&s, f.be, &m->w[0], mask, &w);
    src_block_pass(&f, &w, &s, mask, label, f.got);
    compare_acts(label, &f.d, m->B, m->T, &m->acts[0], (const float *)m->acts_mem, f.ref[0],
                 f.got[0]);
    const char *names[4] = {"acts", "y", "dx", adapters ? "adapter gradient" : "gradient"};
    double gmax = 0.0;
    for (size_t i = 0; i < f.n[3]; i++) gmax = fmax(gmax, fabs(f.ref[3][i]));
    CHECK_MSG(gmax > 0.0 && isfinite(gmax), "%s: the gradients are %g at most", label, gmax);
    for (int i = 1; i < 4; i++) {
        const long long k = mt_first_diff(f.ref[i], f.got[i], f.n[i]);
        CHECK_MSG(k < 0, "%s: %s [%lld] differs (%.9g, then %.9g)", label, names[i], k,
                  k < 0 ? 0.0 : (double)f.ref[i][k], k < 0 ? 0.0 : (double)f.got[i][k]);
    }
    printf("weight source (%s): same bits as the matrices in the struct\n", label);
    source_free(&s, f.be);
    src_model_free(&f);
}

/* A get() that fails fails the op with the source's message; a NULL matrix
 * without a source is named. */
static void test_weight_source_errors(nn_device *dev) {
    src_model f;
    src_model_init(&f, dev, 1, 1u << LLAMA_LORA_Q);
    llama_tm *m = &f.m;
    llama_backend *be = f.be;
    const int B = m->B, T = m->T;
    float *x = llama_tm_resid(m, 0), *y = llama_tm_resid(m, 1);
    copy_source s;
    llama_block_w w;
    source_init(&s, be, &m->w[0], ALL_MATRICES, &w);
    char want[64];
    s.fail_slot = LLAMA_P_WUP;
    snprintf(want, sizeof want, "slot %d cannot be read", LLAMA_P_WUP);
    int st = be->ops->block_forward(be, B, T, &w, x, &m->acts[0], y, m->bscratch);
    CHECK_MSG(st == NN_ERR_DEVICE && strstr(be->ops->last_error(be), want), "%d \"%s\"", st,
              be->ops->last_error(be));
    s.fail_slot = -1;
    REQUIRE(be->ops->block_forward(be, B, T, &w, x, &m->acts[0], y, m->bscratch) == 0);
    s.fail_slot = LLAMA_P_WK;
    snprintf(want, sizeof want, "slot %d cannot be read", LLAMA_P_WK);
    st = be->ops->block_backward(be, B, T, &w, &m->g[0], x, &m->acts[0], m->dres[0], m->dres[1],
                                 m->bscratch);
    CHECK_MSG(st == NN_ERR_DEVICE && strstr(be->ops->last_error(be), want), "%d \"%s\"", st,
              be->ops->last_error(be));
    source_free(&s, be);
    st = be->ops->block_forward(be, B, T, &w, x, &m->acts[0], y, m->bscratch);
    CHECK_MSG(st == NN_ERR_ARG && strstr(be->ops->last_error(be), "q_proj.weight is NULL"),
              "%d \"%s\"", st, be->ops->last_error(be));
    w = m->w[0];
    w.wdown = NULL;
    st = be->ops->block_backward(be, B, T, &w, &m->g[0], x, &m->acts[0], m->dres[0], m->dres[1],
                                 m->bscratch);
    CHECK_MSG(st == NN_ERR_ARG && strstr(be->ops->last_error(be), "down_proj.weight is NULL"),
              "%d \"%s\"", st, be->ops->last_error(be));
    src_model_free(&f);
}

/* ------------------------------------------------------------- errors */

static void test_errors(nn_device *dev) {
    const llama_dims d = fd_dims(0, 1);
    llama_backend *be = NULL;
    char err[512] = "";
    // Creation: the device, max_T, the dims.
    CHECK(llama_cpu_backend_create(NULL, &d, 8, &be, err, sizeof err) == NN_ERR_ARG &&
          be == NULL && strstr(err, "nn_cpu_device_create"));
    CHECK_MSG(llama_cpu_backend_create(dev, &d, 17, &be, err, sizeof err) == NN_ERR_ARG &&
                  strstr(err, "max_position_embeddings (16)"),
              "%s", err);
    llama_dims bad = d;
    bad.n_kv_head = 3;
    CHECK_MSG(llama_cpu_backend_create(dev, &bad, 8, &be, err, sizeof err) == NN_ERR_ARG &&
                  strstr(err, "num_key_value_heads"),
              "%s", err);
    REQUIRE(llama_cpu_backend_create(dev, &d, 8, &be, err, sizeof err) == 0);
    CHECK(be->dev == dev && be->max_T == 8 && strcmp(be->ops->name, "cpu") == 0);
    CHECK(be->ops->block_scratch_bytes(be, 1, 9) == 0 && be->ops->head_scratch_bytes(be, 1, 8, 0) == 0);
    llama_tm m;
    const int B = 1, T = 8;
    REQUIRE(llama_tm_init(&m, be, B, T, 4) == 0);
    int tokens[8] = {0};
    tokens[3] = d.vocab;
    REQUIRE(llama_tm_set_data(&m, tokens, tokens) == 0);
    int s = be->ops->embed_forward(be, B, T, &m.w0, m.tokens, m.resid);
    CHECK_MSG(s == NN_ERR_ARG && strstr(be->ops->last_error(be), "tokens[3] = 53"), "%d \"%s\"", s,
              be->ops->last_error(be));
    s = be->ops->head_forward(be, B, T, &m.wh, m.resid, m.targets, m.losses, 4, m.hscratch);
    CHECK_MSG(s == NN_ERR_ARG && strstr(be->ops->last_error(be), "targets[3]"), "%d \"%s\"", s,
              be->ops->last_error(be));
    s = be->ops->block_forward(be, B, 9, &m.w[0], m.resid, &m.acts[0], m.dres[0], m.bscratch);
    CHECK_MSG(s == NN_ERR_ARG && strstr(be->ops->last_error(be), "1 <= T <= 8"), "%d \"%s\"", s,
              be->ops->last_error(be));
    llama_block_w w = m.w[0];
    w.bk = NULL; // present in these dims
    s = be->ops->block_forward(be, B, T, &w, m.resid, &m.acts[0], m.dres[0], m.bscratch);
    CHECK_MSG(s == NN_ERR_ARG && strstr(be->ops->last_error(be), "k_proj.bias is NULL"),
              "%d \"%s\"", s, be->ops->last_error(be));
    llama_block_acts a = m.acts[0];
    a.gate = NULL;
    s = be->ops->block_forward(be, B, T, &m.w[0], m.resid, &a, m.dres[0], m.bscratch);
    CHECK_MSG(s == NN_ERR_ARG && strstr(be->ops->last_error(be), "acts"), "%d \"%s\"", s,
              be->ops->last_error(be));
    s = be->ops->head_forward(be, B, T, &m.wh, m.resid, m.targets, m.losses, 0, m.hscratch);
    CHECK_MSG(s == NN_ERR_ARG && strstr(be->ops->last_error(be), "chunk_rows"), "%d \"%s\"", s,
              be->ops->last_error(be));
    float logits[53];
    s = be->ops->head_logits(be, B, T, &m.wh, m.resid, 8, logits, m.hscratch);
    CHECK_MSG(s == NN_ERR_ARG && strstr(be->ops->last_error(be), "row 8"), "%d \"%s\"", s,
              be->ops->last_error(be));
    CHECK(strcmp(nn_status_name(NN_ERR_ARG), "bad argument") == 0);
    llama_tm_free(&m);
    be->ops->destroy(be);
}

int main(void) {
    const char *v = getenv("LLAMA_TEST_VERBOSE");
    verbose = v != NULL && v[0] == '1';
    nn_device *dev = nn_cpu_device_create();
    REQUIRE(dev != NULL);
    test_ops();
    test_gradient_check(dev, 0, 0);
    test_gradient_check(dev, 1, 1);
    test_threads(dev);
    test_recompute(dev);
    test_head_and_accumulate(dev);
    test_weight_source(dev, "QLoRA: frozen base, adapters on every Linear, every matrix sourced",
                       1, (1u << LLAMA_LORA_TARGETS) - 1, ALL_MATRICES);
    test_weight_source(dev, "frozen base, adapters on q, v, down; no biases; k, o, up sourced", 0,
                       (1u << LLAMA_LORA_Q) | (1u << LLAMA_LORA_V) | (1u << LLAMA_LORA_DOWN),
                       MATRIX_BIT(LLAMA_P_WK) | MATRIX_BIT(LLAMA_P_WO) | MATRIX_BIT(LLAMA_P_WUP));
    test_weight_source(dev, "base gradients, every matrix sourced", 1, 0, ALL_MATRICES);
    test_weight_source_errors(dev);
    test_errors(dev);
    dev->ops->destroy(dev);
    return model_check_finish("test_llama_backend");
}
