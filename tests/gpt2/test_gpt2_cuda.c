/*
 * The CUDA backend against the CPU backend: whole training steps of small
 * models with the same parameters and tokens on both, comparing the
 * per-position losses, the residual stream after every block, every
 * parameter gradient and one row of logits. Also on the GPU: the same step
 * twice gives the same bits (no atomics), and head_forward's losses are
 * head_forward_backward's. Exits 77 (skipped) without a usable CUDA device.
 *
 * Tolerances. Both backends run the same element math bit for bit
 * (gpt2_math.h, --fmad=false); they differ in the order of sums: cuBLAS's
 * GEMM reductions and the GPU's tree/column-block sums against OpenBLAS's
 * and the CPU's lanes. Each such sum differs by a few ulp (~1e-7 relative);
 * through two blocks and the head the differences stay below ~1e-5 of a
 * tensor's scale. So a tensor passes when
 *     max |cuda - cpu| <= TOL_REL * max |cpu|   (TOL_REL = 1e-3),
 * a hundredfold margin over rounding, while a wrong index, a missing term or
 * a 10% error anywhere is off by >= 1e-1 of the scale. Losses: 1e-5
 * relative, per position.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpt2_backend.h"
#include "gpt2_check.h"
#include "gpt2_test_model.h"

#define TOL_REL 1e-3
#define TOL_LOSS 1e-5

/* max |a - b| over n, against max |b|; prints the worst element on failure. */
static void compare(const char *what, const float *cuda, const float *cpu, size_t n,
                    double tol) {
    double scale = 0.0, worst = 0.0;
    size_t worst_i = 0;
    for (size_t i = 0; i < n; i++) {
        scale = fabs(cpu[i]) > scale ? fabs(cpu[i]) : scale;
        const double e = fabs((double)cuda[i] - (double)cpu[i]);
        if (e > worst || e != e) {
            worst = e;
            worst_i = i;
        }
    }
    CHECK_MSG(worst <= tol * scale,
              "%s: max |cuda - cpu| = %.3g at [%zu] (cuda %.9g, cpu %.9g), scale %.3g, bound "
              "%.3g",
              what, worst, worst_i, n ? cuda[worst_i] : 0.0f, n ? cpu[worst_i] : 0.0f, scale,
              tol * scale);
}

typedef struct host_step {
    float *grads, *resid, *losses, *logits;
} host_step;

static void run(gpt2_backend *be, const gpt2_dims *d, int B, int T, int chunk,
                const float *params, const int *tokens, const int *targets, host_step *out) {
    gpt2_tm m;
    REQUIRE(gpt2_tm_init(&m, be, d, B, T, chunk) == 0);
    const size_t BT = (size_t)B * T;
    REQUIRE(gpt2_tm_set_params(&m, params) == 0);
    REQUIRE(gpt2_tm_set_data(&m, tokens, targets) == 0);
    double loss;
    REQUIRE(gpt2_tm_step(&m, 1.0f / (float)BT, 1, &loss) == 0);
    const size_t nr = (size_t)(d->n_layer + 1) * BT * d->n_embd;
    out->grads = malloc(sizeof(float) * (size_t)m.n_params);
    out->resid = malloc(sizeof(float) * nr);
    out->losses = malloc(sizeof(float) * BT);
    out->logits = malloc(sizeof(float) * (size_t)d->vocab);
    REQUIRE(out->grads && out->resid && out->losses && out->logits);
    REQUIRE(be->ops->download(be, out->grads, m.grads, sizeof(float) * (size_t)m.n_params) ==
            0);
    REQUIRE(be->ops->download(be, out->resid, m.resid, sizeof(float) * nr) == 0);
    REQUIRE(be->ops->download(be, out->losses, m.losses, sizeof(float) * BT) == 0);
    REQUIRE(be->ops->head_logits(be, d, B, T, &m.w0, m.resid + (size_t)d->n_layer * BT *
                                                                d->n_embd,
                                 (int)BT - 1, out->logits, m.hscratch) == 0);
    gpt2_tm_free(&m);
}

static void free_step(host_step *s) {
    free(s->grads);
    free(s->resid);
    free(s->losses);
    free(s->logits);
}

static void test_against_cpu(gpt2_backend *cpu, gpt2_backend *gpu, const gpt2_dims *d, int B,
                             int T, int chunk, double gain) {
    const int BT = B * T;
    const int64_t np = gpt2_num_params(d);
    float *params = malloc(sizeof(float) * (size_t)np);
    int *tokens = malloc(sizeof(int) * BT), *targets = malloc(sizeof(int) * BT);
    REQUIRE(params && tokens && targets);
    gpt2_tm_init_params(d, params, 31, gain, 0.2);
    gpt2_tm_random_tokens(BT, d->vocab, tokens, 32);
    gpt2_tm_random_tokens(BT, d->vocab, targets, 33);
    tokens[1] = tokens[BT - 1] = tokens[BT / 2]; // a repeated token
    printf("model: %d layers, %d heads, %d channels, vocab %d; B %d, T %d, chunk %d\n",
           d->n_layer, d->n_head, d->n_embd, d->vocab, B, T, chunk);

    host_step c, g, g2;
    run(cpu, d, B, T, chunk, params, tokens, targets, &c);
    run(gpu, d, B, T, chunk, params, tokens, targets, &g);
    run(gpu, d, B, T, chunk, params, tokens, targets, &g2);

    for (int r = 0; r < BT; r++) {
        CHECK_MSG(fabs((double)g.losses[r] - c.losses[r]) <= TOL_LOSS * fabs(c.losses[r]),
                  "position %d: loss cuda %.9g, cpu %.9g", r, g.losses[r], c.losses[r]);
    }
    const size_t slice = (size_t)BT * d->n_embd;
    for (int l = 0; l <= d->n_layer; l++) {
        char what[64];
        snprintf(what, sizeof(what), "residual stream into %s %d", l < d->n_layer ? "block" : "head",
                 l);
        compare(what, g.resid + (size_t)l * slice, c.resid + (size_t)l * slice, slice, TOL_REL);
    }
    for (int u = 0; u < gpt2_num_units(d); u++) {
        const int64_t base = gpt2_tm_unit_offset(d, u);
        for (int i = 0; i < gpt2_unit_num_params(d, u); i++) {
            gpt2_param_spec s;
            REQUIRE(gpt2_param_spec_get(d, u, i, &s) == 0);
            char what[96];
            snprintf(what, sizeof(what), "gradient of %s", s.name);
            compare(what, g.grads + base + s.offset, c.grads + base + s.offset, (size_t)s.numel,
                    TOL_REL);
        }
    }
    compare("logits of the last row", g.logits, c.logits, (size_t)d->vocab, TOL_REL);
    CHECK_MSG(memcmp(g.grads, g2.grads, sizeof(float) * (size_t)np) == 0 &&
                  memcmp(g.losses, g2.losses, sizeof(float) * (size_t)BT) == 0,
              "two identical steps on the GPU differ in some bit");

    free_step(&c);
    free_step(&g);
    free_step(&g2);
    free(params);
    free(tokens);
    free(targets);
}

/* head_forward and head_forward_backward give the same losses on the GPU. */
static void test_head_consistency(gpt2_backend *gpu) {
    const gpt2_dims d = {.n_layer = 1, .n_head = 2, .n_embd = 32, .vocab = 300,
                         .block_size = 16};
    const int B = 2, T = 16, BT = B * T;
    gpt2_tm m;
    REQUIRE(gpt2_tm_init(&m, gpu, &d, B, T, 9) == 0);
    float *params = malloc(sizeof(float) * (size_t)m.n_params);
    int tokens[32];
    float a[32], b[32];
    REQUIRE(params != NULL);
    gpt2_tm_init_params(&d, params, 41, 5.0, 0.1);
    gpt2_tm_random_tokens(BT, d.vocab, tokens, 42);
    REQUIRE(gpt2_tm_set_params(&m, params) == 0);
    REQUIRE(gpt2_tm_set_data(&m, tokens, tokens) == 0);
    double loss;
    REQUIRE(gpt2_tm_loss(&m, &loss) == 0);
    REQUIRE(gpu->ops->download(gpu, a, m.losses, sizeof(a)) == 0);
    REQUIRE(gpt2_tm_step(&m, 1.0f / BT, 1, &loss) == 0);
    REQUIRE(gpu->ops->download(gpu, b, m.losses, sizeof(b)) == 0);
    CHECK_MSG(memcmp(a, b, sizeof(a)) == 0, "head_forward and head_forward_backward losses "
                                            "differ on the GPU (first: %.9g vs %.9g)",
              a[0], b[0]);
    free(params);
    gpt2_tm_free(&m);
}

int main(void) {
    int devices = 0;
    cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) {
        printf("SKIP: no usable CUDA device: %s\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices");
        return 77;
    }
    gpt2_backend *cpu = gpt2_cpu_backend_create();
    gpt2_backend *gpu = NULL;
    char err[512];
    REQUIRE(cpu != NULL);
    if (gpt2_cuda_backend_create(NULL, &gpu, err, sizeof(err)) != GPT2_OK) {
        fprintf(stderr, "test_gpt2_cuda: %s\n", err);
        return 1;
    }
    CHECK(strcmp(gpu->ops->name, "cuda") == 0);
    // The gradient check's model (every size a power of two) ...
    const gpt2_dims tiny = {.n_layer = 2, .n_head = 4, .n_embd = 32, .vocab = 64,
                            .block_size = 16};
    test_against_cpu(cpu, gpu, &tiny, 2, 16, 12, 10.0);
    // ... and one where nothing divides anything: odd head size, a vocab
    // that is no multiple of the reduction width, T < block_size, partial
    // head chunks, more than kColRows (32) rows.
    const gpt2_dims odd = {.n_layer = 2, .n_head = 3, .n_embd = 45, .vocab = 301,
                           .block_size = 24};
    test_against_cpu(cpu, gpu, &odd, 3, 13, 5, 5.0);
    test_head_consistency(gpu);
    gpu->ops->destroy(gpu);
    cpu->ops->destroy(cpu);
    return gpt2_check_finish("test_gpt2_cuda");
}
