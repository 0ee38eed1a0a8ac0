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
 *   - the accumulate convention and argument errors.
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
    const llama_block_acts *a = &m.acts[1];
    const size_t C = (size_t)d.n_embd, F = (size_t)d.n_ff;
    const struct {
        const char *name;
        const void *at;
        size_t n;
    } parts[] = {{"xn1", a->xn1, BT * C},
                 {"rstd1", a->rstd1, BT},
                 {"qkv", a->qkv, BT * (size_t)llama_qkv_width(&d)},
                 {"att", a->att, (size_t)B * d.n_head * T * T},
                 {"atty", a->atty, BT * (size_t)(d.n_head * d.head_dim)},
                 {"res1", a->res1, BT * C},
                 {"xn2", a->xn2, BT * C},
                 {"rstd2", a->rstd2, BT},
                 {"gate", a->gate, BT * F},
                 {"up", a->up, BT * F},
                 {"h", a->h, BT * F}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        const size_t off = (size_t)((const float *)parts[i].at - acts);
        const long long k = mt_first_diff(acts1 + off, acts + off, parts[i].n);
        CHECK_MSG(k < 0, "recomputed %s [%lld] differs", parts[i].name, k);
    }
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
    test_errors(dev);
    dev->ops->destroy(dev);
    return model_check_finish("test_llama_backend");
}
