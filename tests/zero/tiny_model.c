#include "tiny_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int wide_dims[] = {13, 29, 17, 5};
/* Widths that divide by nothing convenient, in no order. */
static const int deep_dims[] = {13, 11, 9, 12, 10, 7, 13, 11, 8, 12, 9, 10, 13, 7,
                                11, 12, 9, 10, 8, 13, 11, 9, 12, 10, 7, 11, 5};
#define TINY_MAX_DIM 29 /* the widest of both shapes */

const int *tiny_dims = wide_dims;
static int g_layers = (int)(sizeof wide_dims / sizeof wide_dims[0]) - 1;

void tiny_shape_select(tiny_shape shape) {
    tiny_dims = shape == TINY_SHAPE_DEEP ? deep_dims : wide_dims;
    g_layers = shape == TINY_SHAPE_DEEP ? (int)(sizeof deep_dims / sizeof deep_dims[0]) - 1
                                        : (int)(sizeof wide_dims / sizeof wide_dims[0]) - 1;
}

int tiny_layer_count(void) { return g_layers; }

int64_t tiny_weight_numel(int l) { return (int64_t)tiny_dims[l + 1] * tiny_dims[l]; }
int64_t tiny_bias_numel(int l) { return tiny_dims[l + 1]; }

/* A self-contained hash (not the runtime's) for the data. */
static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 33)) * 0xff51afd7ed558ccdULL;
    x = (x ^ (x >> 33)) * 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}
static float uniform_pm1(uint64_t h) { return (float)((double)(h >> 11) * 0x1.0p-53 * 2.0 - 1.0); }

void tiny_sample(int64_t step, int64_t index, float *x, float *y) {
    uint64_t base = mix((uint64_t)step * 1000003u + (uint64_t)index);
    for (int i = 0; i < tiny_dims[0]; i++) x[i] = uniform_pm1(mix(base + 17u * (uint64_t)i));
    /* A smooth target: y_k = sin(sum of a few inputs). */
    for (int k = 0; k < tiny_dims[g_layers]; k++)
        y[k] = sinf(x[k] + 0.5f * x[(k + 3) % tiny_dims[0]] - 0.25f * x[(k + 7) % tiny_dims[0]]);
}

void tiny_acts_init(tiny_acts *acts, int batch) {
    acts->batch = batch;
    for (int l = 0; l <= g_layers; l++)
        acts->a[l] = calloc((size_t)batch * (size_t)tiny_dims[l], sizeof(float));
    acts->y = calloc((size_t)batch * (size_t)tiny_dims[g_layers], sizeof(float));
    acts->delta = calloc((size_t)batch * TINY_MAX_DIM, sizeof(float));
    acts->delta_prev = calloc((size_t)batch * TINY_MAX_DIM, sizeof(float));
}

void tiny_acts_free(tiny_acts *acts) {
    for (int l = 0; l <= g_layers; l++) free(acts->a[l]);
    free(acts->y);
    free(acts->delta);
    free(acts->delta_prev);
}

void tiny_load_batch(tiny_acts *acts, int64_t step, int64_t first) {
    for (int s = 0; s < acts->batch; s++)
        tiny_sample(step, first + s, acts->a[0] + (size_t)s * tiny_dims[0],
                    acts->y + (size_t)s * tiny_dims[g_layers]);
}

void tiny_forward(int l, const float *w, const float *b, tiny_acts *acts) {
    int in = tiny_dims[l], out = tiny_dims[l + 1];
    for (int s = 0; s < acts->batch; s++) {
        const float *x = acts->a[l] + (size_t)s * in;
        float *z = acts->a[l + 1] + (size_t)s * out;
        for (int o = 0; o < out; o++) {
            float acc = b[o];
            for (int i = 0; i < in; i++) acc += w[(size_t)o * in + i] * x[i];
            z[o] = (l == g_layers - 1) ? acc : tanhf(acc);
        }
    }
}

double tiny_loss(const tiny_acts *acts) {
    int c = tiny_dims[g_layers];
    double total = 0.0;
    for (int s = 0; s < acts->batch; s++)
        for (int k = 0; k < c; k++) {
            double d = acts->a[g_layers][(size_t)s * c + k] - acts->y[(size_t)s * c + k];
            total += 0.5 * d * d;
        }
    return total / acts->batch;
}

void tiny_backward_begin(tiny_acts *acts, float loss_scale) {
    /* d(loss)/d(out) for the loss averaged over this rank's batch; the
     * runtime averages over ranks, so the result is the global-batch mean. */
    acts->loss_scale = loss_scale;
    int c = tiny_dims[g_layers];
    for (int s = 0; s < acts->batch; s++)
        for (int k = 0; k < c; k++)
            acts->delta[(size_t)s * c + k] =
                (acts->a[g_layers][(size_t)s * c + k] - acts->y[(size_t)s * c + k]) /
                (float)acts->batch * loss_scale;
}

/* A multiple of 2^-8 in [-8, 8], from a float that depends on the state. */
static float dyadic(float x) {
    float q = rintf(x * 256.0f) / 256.0f;
    return q > 8.0f ? 8.0f : (q < -8.0f ? -8.0f : q);
}

static void dyadic_grads(int l, const float *p, float *g, int64_t n, int64_t step,
                         int64_t first_sample, int batch, int world, int is_bias, float scale) {
    for (int64_t i = 0; i < n; i++) {
        float sum = 0.0f;
        for (int s = 0; s < batch; s++) {
            uint64_t h = mix(((uint64_t)step << 40) ^ ((uint64_t)(first_sample + s) << 24) ^
                             ((uint64_t)l << 20) ^ ((uint64_t)is_bias << 19) ^ (uint64_t)i);
            /* Depends on the parameter, so trajectories diverge if any update does. */
            sum += dyadic(p[i] * (1.0f + uniform_pm1(h)) + 0.25f * uniform_pm1(mix(h)));
        }
        /* Exact: |sum| <= 12 * 8 and world <= 4 keep every product within
         * fp32's 24 bits at a 2^-8 granularity; the factor 2^-4 is a power of two. */
        g[i] += sum * (float)world * 0.0625f * scale; /* scale: a power of two */
    }
}

void tiny_backward(int l, const float *w, const float *b, float *gw, float *gb, tiny_acts *acts,
                   tiny_grad_mode mode, int64_t step, int64_t first_sample, int world) {
    int in = tiny_dims[l], out = tiny_dims[l + 1];
    if (mode == TINY_GRAD_DYADIC) {
        dyadic_grads(l, w, gw, tiny_weight_numel(l), step, first_sample, acts->batch, world, 0,
                     acts->loss_scale);
        dyadic_grads(l, b, gb, tiny_bias_numel(l), step, first_sample, acts->batch, world, 1,
                     acts->loss_scale);
        return;
    }
    for (int s = 0; s < acts->batch; s++) {
        const float *x = acts->a[l] + (size_t)s * in;
        const float *z = acts->a[l + 1] + (size_t)s * out;
        float *d = acts->delta + (size_t)s * out;
        if (l != g_layers - 1)
            for (int o = 0; o < out; o++) d[o] *= 1.0f - z[o] * z[o]; /* tanh' */
        for (int o = 0; o < out; o++) {
            gb[o] += d[o];
            for (int i = 0; i < in; i++) gw[(size_t)o * in + i] += d[o] * x[i];
        }
        float *dp = acts->delta_prev + (size_t)s * in;
        for (int i = 0; i < in; i++) {
            float acc = 0.0f;
            for (int o = 0; o < out; o++) acc += w[(size_t)o * in + i] * d[o];
            dp[i] = acc;
        }
    }
    float *t = acts->delta;
    acts->delta = acts->delta_prev;
    acts->delta_prev = t;
}
