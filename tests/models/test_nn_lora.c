/* The layer table's LoRA and frozen-parameter ops (nn_layers.h) on the CPU
 * device, against plain double-precision loops written here, on shapes that
 * divide nothing (37 rows, 29 inputs, 23 outputs, rank 3) with row strides
 * wider than the rows:
 *   - lora_forward adds scale (x A^T) B^T to y;
 *   - lora_backward adds dy^T t into dB, dt^T x into dA (dt = scale dy B)
 *     and dt A into dx, leaving what dx held;
 *   - linear_backward with dW NULL (a frozen weight) writes dx alone, the
 *     same bits as with a gradient; layernorm_backward and
 *     rmsnorm_backward with NULL parameter gradients give the same dx. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model_check.h"
#include "nn_layer_math.h"
#include "nn_layers.h"

enum { ROWS = 37, IN = 29, OUT = 23, R = 3, LDX = IN + 5, LDY = OUT + 2 };

static float *filled(size_t n, unsigned *seed) {
    float *p = malloc(n * sizeof(float));
    REQUIRE(p != NULL);
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        p[i] = (float)((double)(*seed >> 8) / (double)(1u << 24) - 0.5);
    }
    return p;
}

static float *copied(const float *src, size_t n) {
    float *p = malloc(n * sizeof(float));
    REQUIRE(p != NULL);
    memcpy(p, src, n * sizeof(float));
    return p;
}

/* max |got - want| / max |want| over n values (a stride apart in rows). */
static double rel_err(const float *got, const double *want, int rows, int cols, int ld_got) {
    double diff = 0.0, scale = 0.0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            const double w = want[(size_t)r * cols + c];
            const double d = fabs((double)got[(size_t)r * ld_got + c] - w);
            if (d > diff) diff = d;
            if (fabs(w) > scale) scale = fabs(w);
        }
    return scale > 0 ? diff / scale : diff;
}

/* The dropout mask's factor of element (i, c) of the [ROWS][IN] input:
 * 1 / (1 - p) where kept, 0 where dropped, 1 without dropout. */
static double mask(const nn_lora_dropout *drop, int i, int c) {
    if (drop == NULL) return 1.0;
    return nn_dropout_factor(drop->seed, (uint64_t)i * IN + c, nn_dropout_threshold(drop->p),
                             1.0f / (1.0f - drop->p));
}

/* drop: NULL, or the dropout on the adapter's input (its mask also taken
 * by the reference, so that forward, dA and dx are checked to use one
 * mask and dx to pass through it only). */
static void test_lora(nn_device *dev, const nn_lora_dropout *drop) {
    const nn_layer_ops *L = dev->layers;
    unsigned seed = 7;
    const float scale = 16.0f / R; /* alpha 16 */
    float *x = filled((size_t)ROWS * LDX, &seed), *A = filled((size_t)R * IN, &seed);
    float *B = filled((size_t)OUT * R, &seed), *y0 = filled((size_t)ROWS * LDY, &seed);
    float *dy = filled((size_t)ROWS * LDY, &seed), *dx0 = filled((size_t)ROWS * LDX, &seed);
    float *y = copied(y0, (size_t)ROWS * LDY), *dx = copied(dx0, (size_t)ROWS * LDX);
    float *dA = filled((size_t)R * IN, &seed), *dB = filled((size_t)OUT * R, &seed);
    float *dA0 = copied(dA, (size_t)R * IN), *dB0 = copied(dB, (size_t)OUT * R);
    float *t = calloc((size_t)ROWS * R, sizeof(float)), *dt = calloc((size_t)ROWS * R, sizeof(float));
    REQUIRE(t && dt);

    /* The reference: t = scale x A^T; y = y0 + t B^T; g = scale dy B;
     * dA = dA0 + g^T x; dB = dB0 + dy^T t; dx = dx0 + g A. */
    double *rt = calloc((size_t)ROWS * R, sizeof(double)), *rg = calloc((size_t)ROWS * R, sizeof(double));
    double *ry = calloc((size_t)ROWS * OUT, sizeof(double)), *rdx = calloc((size_t)ROWS * IN, sizeof(double));
    double *rdA = calloc((size_t)R * IN, sizeof(double)), *rdB = calloc((size_t)OUT * R, sizeof(double));
    REQUIRE(rt && rg && ry && rdx && rdA && rdB);
    for (int i = 0; i < ROWS; i++)
        for (int k = 0; k < R; k++) {
            double s = 0, g = 0;
            for (int c = 0; c < IN; c++)
                s += (double)x[(size_t)i * LDX + c] * mask(drop, i, c) * A[(size_t)k * IN + c];
            for (int o = 0; o < OUT; o++) g += (double)dy[(size_t)i * LDY + o] * B[(size_t)o * R + k];
            rt[(size_t)i * R + k] = scale * s;
            rg[(size_t)i * R + k] = scale * g;
        }
    for (int i = 0; i < ROWS; i++) {
        for (int o = 0; o < OUT; o++) {
            double s = y0[(size_t)i * LDY + o];
            for (int k = 0; k < R; k++) s += rt[(size_t)i * R + k] * B[(size_t)o * R + k];
            ry[(size_t)i * OUT + o] = s;
        }
        for (int c = 0; c < IN; c++) {
            double s = 0;
            for (int k = 0; k < R; k++) s += rg[(size_t)i * R + k] * A[(size_t)k * IN + c];
            rdx[(size_t)i * IN + c] = dx0[(size_t)i * LDX + c] + mask(drop, i, c) * s;
        }
    }
    for (int k = 0; k < R; k++) {
        for (int c = 0; c < IN; c++) {
            double s = dA0[(size_t)k * IN + c];
            for (int i = 0; i < ROWS; i++)
                s += rg[(size_t)i * R + k] * x[(size_t)i * LDX + c] * mask(drop, i, c);
            rdA[(size_t)k * IN + c] = s;
        }
        for (int o = 0; o < OUT; o++) {
            double s = dB0[(size_t)o * R + k];
            for (int i = 0; i < ROWS; i++) s += (double)dy[(size_t)i * LDY + o] * rt[(size_t)i * R + k];
            rdB[(size_t)o * R + k] = s;
        }
    }

    REQUIRE(L->lora_forward(dev, "q_proj", ROWS, IN, OUT, R, scale, x, LDX, A, B, t, drop, y,
                            LDY) == NN_OK);
    CHECK_MSG(rel_err(y, ry, ROWS, OUT, LDY) < 1e-5, "forward: %.3g",
              rel_err(y, ry, ROWS, OUT, LDY));
    /* The columns past the rows' width are untouched. */
    int kept = 1;
    for (int i = 0; i < ROWS; i++)
        for (int o = OUT; o < LDY; o++) kept = kept && y[(size_t)i * LDY + o] == y0[(size_t)i * LDY + o];
    CHECK_MSG(kept, "forward wrote past the rows' %d columns", OUT);
    memset(t, 0, (size_t)ROWS * R * sizeof(float));
    REQUIRE(L->lora_backward(dev, "q_proj", ROWS, IN, OUT, R, scale, x, LDX, A, B, dy, LDY, dA,
                             dB, dx, LDX, t, dt, drop) == NN_OK);
    CHECK_MSG(rel_err(dx, rdx, ROWS, IN, LDX) < 1e-5, "dx: %.3g", rel_err(dx, rdx, ROWS, IN, LDX));
    CHECK_MSG(rel_err(dA, rdA, R, IN, IN) < 1e-5, "dA: %.3g", rel_err(dA, rdA, R, IN, IN));
    CHECK_MSG(rel_err(dB, rdB, OUT, R, R) < 1e-5, "dB: %.3g", rel_err(dB, rdB, OUT, R, R));
    free(x), free(A), free(B), free(y0), free(dy), free(dx0), free(y), free(dx), free(dA);
    free(dB), free(dA0), free(dB0), free(t), free(dt), free(rt), free(rg), free(ry), free(rdx);
    free(rdA), free(rdB);
}

/* A frozen parameter's gradient is not computed; the input's is the same. */
static void test_frozen_grads(nn_device *dev) {
    const nn_layer_ops *L = dev->layers;
    unsigned seed = 11;
    float *x = filled((size_t)ROWS * IN, &seed), *W = filled((size_t)OUT * IN, &seed);
    float *dy = filled((size_t)ROWS * OUT, &seed), *dW = calloc((size_t)OUT * IN, sizeof(float));
    float *dx_a = calloc((size_t)ROWS * IN, sizeof(float)), *dx_b = calloc((size_t)ROWS * IN, sizeof(float));
    REQUIRE(dW && dx_a && dx_b);
    REQUIRE(L->linear_backward(dev, "w", ROWS, IN, OUT, x, IN, W, dy, OUT, dW, dx_a, IN, 0.0f) == NN_OK);
    REQUIRE(L->linear_backward(dev, "w", ROWS, IN, OUT, x, IN, W, dy, OUT, NULL, dx_b, IN, 0.0f) == NN_OK);
    CHECK_MSG(memcmp(dx_a, dx_b, (size_t)ROWS * IN * sizeof(float)) == 0,
              "linear_backward: dx with a frozen weight differs");

    /* Norms over rows of IN: the same dx with and without their weights'
     * gradients. */
    float *w = filled(IN, &seed), *b = filled(IN, &seed), *out = calloc((size_t)ROWS * IN, sizeof(float));
    float *mean = calloc(ROWS, sizeof(float)), *rstd = calloc(ROWS, sizeof(float));
    float *dout = filled((size_t)ROWS * IN, &seed), *dw = calloc(IN, sizeof(float)), *db = calloc(IN, sizeof(float));
    REQUIRE(out && mean && rstd && dw && db);
    REQUIRE(L->layernorm_forward(dev, ROWS, IN, x, w, b, out, mean, rstd) == NN_OK);
    REQUIRE(L->layernorm_backward(dev, ROWS, IN, dout, x, mean, rstd, w, NULL, dx_a, dw, db) == NN_OK);
    REQUIRE(L->layernorm_backward(dev, ROWS, IN, dout, x, mean, rstd, w, NULL, dx_b, NULL, NULL) == NN_OK);
    CHECK_MSG(memcmp(dx_a, dx_b, (size_t)ROWS * IN * sizeof(float)) == 0,
              "layernorm_backward: dx with a frozen norm differs");
    REQUIRE(L->rmsnorm_forward(dev, ROWS, IN, x, w, 1e-5f, out, rstd) == NN_OK);
    REQUIRE(L->rmsnorm_backward(dev, ROWS, IN, dout, x, rstd, w, NULL, dx_a, dw) == NN_OK);
    REQUIRE(L->rmsnorm_backward(dev, ROWS, IN, dout, x, rstd, w, NULL, dx_b, NULL) == NN_OK);
    CHECK_MSG(memcmp(dx_a, dx_b, (size_t)ROWS * IN * sizeof(float)) == 0,
              "rmsnorm_backward: dx with a frozen norm differs");
    free(x), free(W), free(dy), free(dW), free(dx_a), free(dx_b), free(w), free(b), free(out);
    free(mean), free(rstd), free(dout), free(dw), free(db);
}

int main(void) {
    nn_device *dev = nn_cpu_device_create();
    REQUIRE(dev != NULL && dev->layers != NULL);
    test_lora(dev, NULL);
    /* Dropout 0.3: about that fraction of the input dropped (a mask that
     * keeps or drops everything would pass the reference too). */
    float *xd = calloc((size_t)ROWS * IN, sizeof(float)), *dxd = calloc((size_t)ROWS * IN, sizeof(float));
    REQUIRE(xd && dxd);
    const nn_lora_dropout drop = {0.3f, 0x5eedull, xd, dxd};
    int dropped = 0;
    for (int i = 0; i < ROWS; i++)
        for (int c = 0; c < IN; c++) dropped += mask(&drop, i, c) == 0.0;
    const double share = (double)dropped / (ROWS * IN);
    CHECK_MSG(share > 0.25 && share < 0.35, "dropout 0.3 dropped %.3f of the input", share);
    test_lora(dev, &drop);
    free(xd), free(dxd);
    test_frozen_grads(dev);
    dev->ops->destroy(dev);
    return model_check_finish("test_nn_lora");
}
