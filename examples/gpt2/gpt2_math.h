/*
 * gpt2_math — GPT-2's own element and row math, written once and compiled
 * both for the host (C11, gpt2_cpu.c) and for CUDA devices (nvcc,
 * gpt2_cuda*.cu): LayerNorm and the tanh GELU. What GPT-2 shares with the
 * other models (e^x, reductions over lanes, the attention softmax, the
 * cross-entropy) is examples/nn/nn_math.h's, and so are the rules that keep
 * the two compilations equal: float arithmetic only (the CUDA build passes
 * --fmad=false where CPU equality is tested, and C11 does not contract
 * a*b+c), no libm calls in element functions (tanh comes from nn_expf
 * below), and reductions over NN_LANES lanes combined in a fixed tree, so
 * the CPU's row functions and the GPU's kernels compute the same algorithm
 * and differ only in the order of those sums.
 */
#ifndef GPT2_MATH_H
#define GPT2_MATH_H

#include "nn_math.h"

/* LayerNorm's epsilon, as GPT-2 (and PyTorch's default). */
#define GPT2_LN_EPS 1e-5f

/* ------------------------------------------------------------- tanh */

/* tanh(u) = sign(u) (1 - 2 / (e^{2|u|} + 1)). Near 0 this loses relative
 * accuracy (absolute error stays about 1e-7), which GELU does not mind: it
 * only ever adds tanh to 1. |u| is capped at 9, where tanh rounds to 1. */
NN_HD float gpt2_tanhf(float u) {
    const float a = u < 0.0f ? -u : u;
    const float e = nn_expf(2.0f * (a > 9.0f ? 9.0f : a));
    const float t = 1.0f - 2.0f / (e + 1.0f);
    return u < 0.0f ? -t : t;
}

/* ---------------------------------------------------------------- GELU */

#define GPT2_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GPT2_GELU_A 0.044715f

/* GELU, tanh approximation (Hendrycks and Gimpel 2016; GPT-2's choice):
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
NN_HD float gpt2_gelu(float x) {
    const float u = GPT2_GELU_K * (x + GPT2_GELU_A * x * x * x);
    return 0.5f * x * (1.0f + gpt2_tanhf(u));
}

/* d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
 * t = tanh(u) as above. */
NN_HD float gpt2_gelu_grad(float x) {
    const float u = GPT2_GELU_K * (x + GPT2_GELU_A * x * x * x);
    const float t = gpt2_tanhf(u);
    const float du = GPT2_GELU_K * (1.0f + 3.0f * GPT2_GELU_A * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

/* ----------------------------------------------------------- LayerNorm */

/* 1 / sqrt(var + eps), from the row's biased variance. */
NN_HD float gpt2_layernorm_rstd(float var) { return 1.0f / sqrtf(var + GPT2_LN_EPS); }

/* The normalized input x-hat of one element, as the forward computed it. */
NN_HD float gpt2_layernorm_xhat(float x, float mean, float rstd) {
    return (x - mean) * rstd;
}

/* One output element: x-hat * w + b. */
NN_HD float gpt2_layernorm_out(float x, float mean, float rstd, float w, float b) {
    return gpt2_layernorm_xhat(x, mean, rstd) * w + b;
}

/* One element of the input gradient, from the row's mean(g) and
 * mean(g * xhat) with g = dout * w (see gpt2_layernorm_backward_row). */
NN_HD float gpt2_layernorm_dx(float g, float xhat, float mean_g, float mean_gx, float rstd) {
    return rstd * (g - mean_g - xhat * mean_gx);
}

/*
 * One row: out = (x - mean) * rstd * w + b with mean and rstd = 1/sqrt(var +
 * eps) over the row's C entries (biased variance, as PyTorch). The variance
 * is the mean of (x - mean)^2 (two passes), which does not cancel the way
 * E[x^2] - mean^2 does when |mean| >> std, as in a residual stream.
 * x, w, b, out: [C]; out may alias x.
 */
NN_HD void gpt2_layernorm_forward_row(int C, const float *x, const float *w, const float *b,
                                        float *out, float *mean_out, float *rstd_out) {
    const float mean = nn_sum(x, C) / (float)C;
    float acc[NN_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int i = 0;
    for (; i + NN_LANES <= C; i += NN_LANES) {
        for (int j = 0; j < NN_LANES; j++) {
            const float dev = x[i + j] - mean;
            acc[j] += dev * dev;
        }
    }
    for (int j = 0; j < NN_LANES; j++) {
        if (i + j < C) {
            const float dev = x[i + j] - mean;
            acc[j] += dev * dev;
        }
    }
    const float var = nn_lanes_total(acc) / (float)C;
    const float rstd = gpt2_layernorm_rstd(var);
    for (int k = 0; k < C; k++) {
        out[k] = gpt2_layernorm_out(x[k], mean, rstd, w[k], b[k]);
    }
    *mean_out = mean;
    *rstd_out = rstd;
}

/*
 * One row's input gradient. With xhat = (x - mean) * rstd and g = dout * w:
 *     dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
 * the gradient of out = xhat * w + b through the row's mean and variance.
 * Writes dx = dres + that, where dres (the residual stream's gradient, which
 * joins here) may be NULL for 0 and may alias dx. The weight and bias
 * gradients (sums over rows of dout * xhat and dout) are column sums the
 * caller does. dout, x, w, dres, dx: [C].
 */
NN_HD void gpt2_layernorm_backward_row(int C, const float *dout, const float *x,
                                         const float *w, float mean, float rstd,
                                         const float *dres, float *dx) {
    float acc_g[NN_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    float acc_gx[NN_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int i = 0;
    for (; i + NN_LANES <= C; i += NN_LANES) {
        for (int j = 0; j < NN_LANES; j++) {
            const float g = dout[i + j] * w[i + j];
            acc_g[j] += g;
            acc_gx[j] += g * gpt2_layernorm_xhat(x[i + j], mean, rstd);
        }
    }
    for (int j = 0; j < NN_LANES; j++) {
        if (i + j < C) {
            const float g = dout[i + j] * w[i + j];
            acc_g[j] += g;
            acc_gx[j] += g * gpt2_layernorm_xhat(x[i + j], mean, rstd);
        }
    }
    const float mean_g = nn_lanes_total(acc_g) / (float)C;
    const float mean_gx = nn_lanes_total(acc_gx) / (float)C;
    for (int k = 0; k < C; k++) {
        const float g = dout[k] * w[k];
        const float d = gpt2_layernorm_dx(g, gpt2_layernorm_xhat(x[k], mean, rstd), mean_g,
                                          mean_gx, rstd);
        dx[k] = dres != NULL ? dres[k] + d : d;
    }
}

#endif /* GPT2_MATH_H */
