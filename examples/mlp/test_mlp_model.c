/* Tests of the example MLP on its own (no runtime): the layer math against a
 * naive loop, backward against central finite differences, the accumulate
 * convention of the gradient buffers, and the dataset's determinism and
 * independence of how a global batch is split over ranks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mlp_model.h"
#include "test_util.h"

/* A small deterministic generator for test inputs (not the dataset's). */
static uint64_t test_rng_state = UINT64_C(0x1234567);

static double test_uniform(void) {
    uint64_t z = (test_rng_state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static void fill_uniform(float *p, int64_t n, double half_width) {
    for (int64_t k = 0; k < n; k++) {
        p[k] = (float)(half_width * (2.0 * test_uniform() - 1.0));
    }
}

/* Owns the parameters and gradients of a model over plain arrays. */
typedef struct test_model {
    mlp_shape shape;
    float *W[MLP_MAX_LAYERS];  /* W[l]: [dims[l + 1]][dims[l]] */
    float *b[MLP_MAX_LAYERS];  /* b[l]: [dims[l + 1]] */
    float *dW[MLP_MAX_LAYERS]; /* like W */
    float *db[MLP_MAX_LAYERS]; /* like b */
} test_model;

static void test_model_init(test_model *m, int num_layers, const int *dims) {
    memset(m, 0, sizeof(*m));
    ZT_REQUIRE(mlp_shape_init(&m->shape, num_layers, dims) == 0);
    for (int l = 0; l < num_layers; l++) {
        int64_t nw = mlp_layer_weight_numel(&m->shape, l);
        int64_t nb = mlp_layer_bias_numel(&m->shape, l);
        m->W[l] = malloc(sizeof(float) * (size_t)nw);
        m->b[l] = malloc(sizeof(float) * (size_t)nb);
        m->dW[l] = calloc((size_t)nw, sizeof(float));
        m->db[l] = calloc((size_t)nb, sizeof(float));
        ZT_REQUIRE(m->W[l] && m->b[l] && m->dW[l] && m->db[l]);
        // Uniform with the init's standard deviation (half-width sqrt(3) std);
        // biases nonzero so that their gradients and the ReLU masks vary.
        fill_uniform(m->W[l], nw, sqrt(3.0) * mlp_layer_init_std(&m->shape, l));
        fill_uniform(m->b[l], nb, 0.3);
    }
}

static void test_model_zero_grads(test_model *m) {
    for (int l = 0; l < m->shape.num_layers; l++) {
        memset(m->dW[l], 0, sizeof(float) * (size_t)mlp_layer_weight_numel(&m->shape, l));
        memset(m->db[l], 0, sizeof(float) * (size_t)mlp_layer_bias_numel(&m->shape, l));
    }
}

static void test_model_free(test_model *m) {
    for (int l = 0; l < m->shape.num_layers; l++) {
        free(m->W[l]);
        free(m->b[l]);
        free(m->dW[l]);
        free(m->db[l]);
    }
}

static double model_loss(test_model *m, int batch, mlp_workspace *ws) {
    return mlp_model_forward(&m->shape, batch, (const float *const *)m->W,
                             (const float *const *)m->b, 0.0f, ws, NULL);
}

/* ------------------------------------------------------------ layer math */

static void test_layer_forward_matches_naive(void) {
    // Sizes that are multiples of nothing, so that BLAS edge paths run.
    const int B = 7, in = 61, out = 127;
    float *x = malloc(sizeof(float) * B * in);   // x: [B][in]
    float *W = malloc(sizeof(float) * out * in); // W: [out][in]
    float *b = malloc(sizeof(float) * out);      // b: [out]
    float *y = malloc(sizeof(float) * B * out);  // y: [B][out]
    ZT_REQUIRE(x && W && b && y);
    fill_uniform(x, B * in, 1.0);
    fill_uniform(W, out * in, 0.2);
    fill_uniform(b, out, 0.5);
    for (int act = MLP_ACT_NONE; act <= MLP_ACT_RELU; act++) {
        mlp_layer_forward(B, in, out, (mlp_activation)act, x, W, b, y);
        double worst = 0.0;
        for (int i = 0; i < B; i++) {
            for (int o = 0; o < out; o++) {
                double z = b[o];
                for (int k = 0; k < in; k++) {
                    z += (double)x[i * in + k] * (double)W[o * in + k];
                }
                if (act == MLP_ACT_RELU && z < 0.0) {
                    z = 0.0;
                }
                double err = fabs(z - (double)y[i * out + o]);
                worst = err > worst ? err : worst;
            }
        }
        ZT_CHECK_MSG(worst < 1e-4, "activation %d: max |sgemm - naive| = %g", act, worst);
    }
    free(x);
    free(W);
    free(b);
    free(y);
}

static void test_softmax_xent(void) {
    // Uniform logits: loss ln(C), gradient (1/C - onehot) / B.
    const int B = 2, C = 4;
    float logits[8] = {0};
    int labels[2] = {1, 3};
    float dlogits[8];
    int correct = -1;
    double loss = mlp_softmax_xent(B, C, logits, labels, 1.0f, dlogits, &correct);
    ZT_CHECK_MSG(fabs(loss - log(4.0)) < 1e-12, "loss %.15f, expected ln 4", loss);
    ZT_CHECK_MSG(fabs(dlogits[1] - (0.25 - 1.0) / 2.0) < 1e-7, "dlogits[1] = %g", dlogits[1]);
    ZT_CHECK_MSG(fabs(dlogits[0] - 0.25 / 2.0) < 1e-7, "dlogits[0] = %g", dlogits[0]);
    // Ties go to the first class, so only label 0 would count as correct.
    ZT_EQ_INT(correct, 0);
    // Huge logits must not overflow (the shift by the maximum).
    float big[4] = {1000.0f, 0.0f, -1000.0f, 999.0f};
    int label0 = 0;
    loss = mlp_softmax_xent(1, 4, big, &label0, 1.0f, NULL, &correct);
    ZT_CHECK_MSG(isfinite(loss) && fabs(loss - log1p(exp(-1.0))) < 1e-6, "loss %g", loss);
    ZT_EQ_INT(correct, 1);
}

/* --------------------------------------------------------- gradient check */

/*
 * Central differences (L(p + h) - L(p - h)) / 2h with h = 1e-3 on a tiny net
 * whose forward runs in float. The loss is about 1, so float rounding adds
 * about 1e-7 / 1e-3 = 1e-4 of noise to each difference and the truncation
 * error is O(h^2); a coordinate passes when
 *     |numeric - analytic| <= FD_REL_TOL * max(|numeric|, |analytic|) + FD_ABS_TOL,
 * i.e. a relative error of at most 2% for gradients well above the noise
 * floor, which a wrong index or transpose exceeds by orders of magnitude.
 */
#define FD_STEP 1e-3f
#define FD_REL_TOL 2e-2
#define FD_ABS_TOL 5e-4
#define FD_COORDS_PER_TENSOR 30

static void fd_check_tensor(test_model *m, int batch, mlp_workspace *ws, float *p,
                            const float *grad, int64_t n, const char *what, int layer) {
    int coords = n < FD_COORDS_PER_TENSOR ? (int)n : FD_COORDS_PER_TENSOR;
    for (int t = 0; t < coords; t++) {
        // All of a small tensor, random coordinates of a larger one.
        int64_t k = n <= FD_COORDS_PER_TENSOR ? t : (int64_t)(test_uniform() * (double)n);
        const float saved = p[k];
        p[k] = saved + FD_STEP;
        double plus = model_loss(m, batch, ws);
        p[k] = saved - FD_STEP;
        double minus = model_loss(m, batch, ws);
        p[k] = saved;
        double numeric = (plus - minus) / (2.0 * (double)FD_STEP);
        double analytic = grad[k];
        double scale = fabs(numeric) > fabs(analytic) ? fabs(numeric) : fabs(analytic);
        double err = fabs(numeric - analytic);
        ZT_CHECK_MSG(err <= FD_REL_TOL * scale + FD_ABS_TOL,
                     "layer %d %s[%lld]: finite difference %.6g, backward %.6g", layer, what,
                     (long long)k, numeric, analytic);
    }
}

static void test_gradient_finite_differences(void) {
    const int dims[] = {6, 9, 7, 4}; // three layers, two ReLUs
    const int B = 5;
    test_model m;
    test_model_init(&m, 3, dims);
    mlp_workspace ws;
    ZT_REQUIRE(mlp_workspace_init(&ws, &m.shape, B) == 0);
    mlp_dataset ds;
    ZT_REQUIRE(mlp_dataset_init(&ds, dims[0], dims[3], 11) == 0);

    mlp_dataset_batch(&ds, 0, B, ws.acts[0], ws.labels);
    test_model_zero_grads(&m);
    double loss = mlp_model_forward(&m.shape, B, (const float *const *)m.W,
                                    (const float *const *)m.b, 1.0f, &ws, NULL);
    ZT_CHECK_MSG(isfinite(loss) && loss > 0.0, "loss %g", loss);
    mlp_model_backward(&m.shape, B, (const float *const *)m.W, m.dW, m.db, &ws);

    // The finite differences reuse ws for forward passes; the input batch and
    // labels in it are not touched by forward, so every pass sees the same data.
    for (int l = 0; l < m.shape.num_layers; l++) {
        fd_check_tensor(&m, B, &ws, m.W[l], m.dW[l], mlp_layer_weight_numel(&m.shape, l), "W",
                        l);
        fd_check_tensor(&m, B, &ws, m.b[l], m.db[l], mlp_layer_bias_numel(&m.shape, l), "b", l);
    }
    mlp_workspace_free(&ws);
    test_model_free(&m);
}

/* Backward adds into dW and db, and the loss scale multiplies the gradient. */
static void test_gradient_accumulates_and_scales(void) {
    const int dims[] = {61, 127, 93, 10}; // not multiples of 16 or of any world size
    const int B = 12;
    test_model m;
    test_model_init(&m, 3, dims);
    mlp_workspace ws;
    ZT_REQUIRE(mlp_workspace_init(&ws, &m.shape, B) == 0);
    mlp_dataset ds;
    ZT_REQUIRE(mlp_dataset_init(&ds, dims[0], dims[3], 5) == 0);
    mlp_dataset_batch(&ds, 100, B, ws.acts[0], ws.labels);

    // Reference: one backward with scale 1.
    test_model_zero_grads(&m);
    mlp_model_forward(&m.shape, B, (const float *const *)m.W, (const float *const *)m.b, 1.0f,
                      &ws, NULL);
    mlp_model_backward(&m.shape, B, (const float *const *)m.W, m.dW, m.db, &ws);
    float *ref[2 * MLP_MAX_LAYERS];
    for (int l = 0; l < 3; l++) {
        size_t nw = (size_t)mlp_layer_weight_numel(&m.shape, l);
        size_t nb = (size_t)mlp_layer_bias_numel(&m.shape, l);
        ref[2 * l] = malloc(sizeof(float) * nw);
        ref[2 * l + 1] = malloc(sizeof(float) * nb);
        ZT_REQUIRE(ref[2 * l] && ref[2 * l + 1]);
        memcpy(ref[2 * l], m.dW[l], sizeof(float) * nw);
        memcpy(ref[2 * l + 1], m.db[l], sizeof(float) * nb);
    }
    // Two more passes into the same buffers, with loss scales 1 and 2: the sum
    // must be 1 + 1 + 2 = 4 times the reference (up to float rounding).
    const float scales[2] = {1.0f, 2.0f};
    for (int pass = 0; pass < 2; pass++) {
        mlp_model_forward(&m.shape, B, (const float *const *)m.W, (const float *const *)m.b,
                          scales[pass], &ws, NULL);
        mlp_model_backward(&m.shape, B, (const float *const *)m.W, m.dW, m.db, &ws);
    }
    for (int l = 0; l < 3; l++) {
        for (int which = 0; which < 2; which++) {
            const float *got = which ? m.db[l] : m.dW[l];
            const float *want = ref[2 * l + which];
            int64_t n = which ? mlp_layer_bias_numel(&m.shape, l)
                              : mlp_layer_weight_numel(&m.shape, l);
            double worst = 0.0, largest = 0.0;
            for (int64_t k = 0; k < n; k++) {
                double err = fabs((double)got[k] - 4.0 * (double)want[k]);
                worst = err > worst ? err : worst;
                largest = fabs(want[k]) > largest ? fabs(want[k]) : largest;
            }
            ZT_CHECK_MSG(largest > 0.0 && worst <= 1e-5 * 4.0 * largest,
                         "layer %d %s: max |accumulated - 4 x single| = %g (largest %g)", l,
                         which ? "db" : "dW", worst, largest);
        }
        free(ref[2 * l]);
        free(ref[2 * l + 1]);
    }
    mlp_workspace_free(&ws);
    test_model_free(&m);
}

/* --------------------------------------------------------------- dataset */

static void test_dataset_deterministic(void) {
    const int D = 61, C = 10;
    mlp_dataset a, b, other;
    ZT_REQUIRE(mlp_dataset_init(&a, D, C, 2024) == 0);
    ZT_REQUIRE(mlp_dataset_init(&b, D, C, 2024) == 0);
    ZT_REQUIRE(mlp_dataset_init(&other, D, C, 2025) == 0);
    float xa[61], xb[61], xo[61];
    int la = -1, lb = -2, lo = -3;
    const uint64_t indices[] = {0, 1, 17, 123456789, UINT64_C(1) << 40};
    for (size_t t = 0; t < sizeof(indices) / sizeof(indices[0]); t++) {
        mlp_dataset_sample(&a, indices[t], xa, &la);
        mlp_dataset_sample(&b, indices[t], xb, &lb);
        mlp_dataset_sample(&other, indices[t], xo, &lo);
        ZT_CHECK_MSG(memcmp(xa, xb, sizeof(xa)) == 0, "sample %llu differs between calls",
                     (unsigned long long)indices[t]);
        ZT_EQ_INT(la, lb);
        ZT_CHECK_MSG(memcmp(xa, xo, sizeof(xa)) != 0,
                     "sample %llu is the same under data seeds 2024 and 2025",
                     (unsigned long long)indices[t]);
    }
    // Invalid descriptions are rejected.
    ZT_CHECK(mlp_dataset_init(&a, 0, C, 1) != 0);
    ZT_CHECK(mlp_dataset_init(&a, D, 1, 1) != 0);
}

static void test_dataset_statistics(void) {
    // Features have mean 0 and variance 1; every class appears, none dominates.
    const int D = 61, C = 10, N = 4000;
    mlp_dataset ds;
    ZT_REQUIRE(mlp_dataset_init(&ds, D, C, 7) == 0);
    float x[61];
    int counts[10] = {0};
    double sum = 0.0, sum2 = 0.0;
    for (int i = 0; i < N; i++) {
        int label = -1;
        mlp_dataset_sample(&ds, (uint64_t)i, x, &label);
        ZT_REQUIRE(label >= 0 && label < C);
        counts[label]++;
        for (int j = 0; j < D; j++) {
            sum += x[j];
            sum2 += (double)x[j] * x[j];
        }
    }
    double n = (double)N * D;
    double mean = sum / n, var = sum2 / n - mean * mean;
    ZT_CHECK_MSG(fabs(mean) < 0.02, "feature mean %g", mean);
    ZT_CHECK_MSG(fabs(var - 1.0) < 0.03, "feature variance %g", var);
    for (int c = 0; c < C; c++) {
        ZT_CHECK_MSG(counts[c] > N / (2 * C) && counts[c] < 2 * N / C,
                     "class %d has %d of %d samples", c, counts[c], N);
    }
}

/* A global batch generated in one piece equals the union of every rank's
 * share, for every world size that divides it, and steps do not overlap. */
static void test_batch_split_by_global_index(void) {
    const int D = 13, C = 5;
    const int64_t G = 60; // divisible by 1, 2, 3, 4, 5, 6
    mlp_dataset ds;
    ZT_REQUIRE(mlp_dataset_init(&ds, D, C, 99) == 0);
    float *whole = malloc(sizeof(float) * (size_t)(G * D)); // [G][D]
    float *parts = malloc(sizeof(float) * (size_t)(G * D)); // [G][D], assembled from ranks
    int whole_labels[60], part_labels[60];
    ZT_REQUIRE(whole && parts);
    for (int64_t step = 0; step < 3; step++) {
        mlp_dataset_batch(&ds, mlp_batch_first_index(step, G, 0, 1), (int)G, whole, whole_labels);
        for (int world = 1; world <= 6; world++) {
            const int64_t local = G / world;
            memset(parts, 0, sizeof(float) * (size_t)(G * D));
            for (int rank = 0; rank < world; rank++) {
                uint64_t first = mlp_batch_first_index(step, G, rank, world);
                ZT_EQ_U64(first, (uint64_t)(step * G + rank * local));
                mlp_dataset_batch(&ds, first, (int)local, parts + (size_t)(rank * local * D),
                                  part_labels + rank * local);
            }
            ZT_CHECK_MSG(memcmp(whole, parts, sizeof(float) * (size_t)(G * D)) == 0,
                         "step %lld: world size %d gives a different global batch",
                         (long long)step, world);
            ZT_CHECK_MSG(memcmp(whole_labels, part_labels, sizeof(whole_labels)) == 0,
                         "step %lld: world size %d gives different labels", (long long)step,
                         world);
        }
    }
    // Consecutive steps use disjoint samples.
    mlp_dataset_batch(&ds, mlp_batch_first_index(1, G, 0, 1), (int)G, parts, part_labels);
    mlp_dataset_batch(&ds, mlp_batch_first_index(0, G, 0, 1), (int)G, whole, whole_labels);
    ZT_CHECK(memcmp(whole, parts, sizeof(float) * (size_t)(G * D)) != 0);
    free(whole);
    free(parts);
}

static void test_shape(void) {
    mlp_shape s;
    const int dims[] = {61, 127, 93, 10};
    ZT_REQUIRE(mlp_shape_init(&s, 3, dims) == 0);
    ZT_EQ_INT(mlp_param_count(&s), 61 * 127 + 127 + 127 * 93 + 93 + 93 * 10 + 10);
    ZT_EQ_INT(mlp_max_dim(&s), 127);
    ZT_EQ_INT(mlp_layer_activation(&s, 0), MLP_ACT_RELU);
    ZT_EQ_INT(mlp_layer_activation(&s, 1), MLP_ACT_RELU);
    ZT_EQ_INT(mlp_layer_activation(&s, 2), MLP_ACT_NONE);
    ZT_CHECK(fabs(mlp_layer_init_std(&s, 0) - sqrt(2.0 / 61.0)) < 1e-15);
    ZT_CHECK(fabs(mlp_layer_init_std(&s, 2) - sqrt(1.0 / 93.0)) < 1e-15);
    const int bad_hidden[] = {61, 0, 10};
    const int one_class[] = {61, 1};
    ZT_CHECK(mlp_shape_init(&s, 2, bad_hidden) != 0);
    ZT_CHECK(mlp_shape_init(&s, 1, one_class) != 0);
    ZT_CHECK(mlp_shape_init(&s, 0, dims) != 0);
    ZT_CHECK(mlp_shape_init(&s, MLP_MAX_LAYERS + 1, dims) != 0);
}

int main(void) {
    test_layer_forward_matches_naive();
    test_softmax_xent();
    test_gradient_finite_differences();
    test_gradient_accumulates_and_scales();
    test_dataset_deterministic();
    test_dataset_statistics();
    test_batch_split_by_global_index();
    test_shape();
    return zt_finish("test_mlp_model");
}
