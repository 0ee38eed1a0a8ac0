/*
 * nn_layer_math — the element and row math of the layers that are not
 * products, written once and compiled both for the host (C11: the CPU
 * layers, nn_cpu_layers.c, which the simulated device runs too) and for
 * CUDA devices (nvcc: the models' kernels): LayerNorm and the tanh GELU
 * (GPT-2), RMSNorm with fp32 statistics, rotary position embeddings in the
 * rotate-half convention of Hugging Face checkpoints and SwiGLU (the Llama
 * family). What every layer shares (e^x, reductions over lanes, the
 * attention softmax, the cross-entropy) is nn_math.h's, and so are the
 * rules that keep the two compilations equal: float arithmetic only (the
 * CUDA build passes --fmad=false where CPU equality is tested, and C11 does
 * not contract a*b+c), no libm calls in element functions (tanh comes from
 * nn_expf below), and reductions over NN_LANES lanes combined in a fixed
 * tree, so the CPU's row functions and the GPU's kernels compute the same
 * algorithm and differ only in the order of those sums.
 */
#ifndef NN_LAYER_MATH_H
#define NN_LAYER_MATH_H

#include "nn_math.h"

/* ============================================== LayerNorm and GELU (GPT-2) */

/* LayerNorm's epsilon, as GPT-2 (and PyTorch's default). */
#define NN_LN_EPS 1e-5f

/* ------------------------------------------------------------- tanh */

/* tanh(u) = sign(u) (1 - 2 / (e^{2|u|} + 1)). Near 0 this loses relative
 * accuracy (absolute error stays about 1e-7), which GELU does not mind: it
 * only ever adds tanh to 1. |u| is capped at 9, where tanh rounds to 1. */
NN_HD float nn_tanhf(float u) {
    const float a = u < 0.0f ? -u : u;
    const float e = nn_expf(2.0f * (a > 9.0f ? 9.0f : a));
    const float t = 1.0f - 2.0f / (e + 1.0f);
    return u < 0.0f ? -t : t;
}

/* ---------------------------------------------------------------- GELU */

#define NN_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define NN_GELU_A 0.044715f

/* GELU, tanh approximation (Hendrycks and Gimpel 2016; GPT-2's choice):
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
NN_HD float nn_gelu(float x) {
    const float u = NN_GELU_K * (x + NN_GELU_A * x * x * x);
    return 0.5f * x * (1.0f + nn_tanhf(u));
}

/* d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
 * t = tanh(u) as above. */
NN_HD float nn_gelu_grad(float x) {
    const float u = NN_GELU_K * (x + NN_GELU_A * x * x * x);
    const float t = nn_tanhf(u);
    const float du = NN_GELU_K * (1.0f + 3.0f * NN_GELU_A * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

/* ----------------------------------------------------------- LayerNorm */

/* 1 / sqrt(var + eps), from the row's biased variance. */
NN_HD float nn_layernorm_rstd(float var) { return 1.0f / sqrtf(var + NN_LN_EPS); }

/* The normalized input x-hat of one element, as the forward computed it. */
NN_HD float nn_layernorm_xhat(float x, float mean, float rstd) {
    return (x - mean) * rstd;
}

/* One output element: x-hat * w + b. */
NN_HD float nn_layernorm_out(float x, float mean, float rstd, float w, float b) {
    return nn_layernorm_xhat(x, mean, rstd) * w + b;
}

/* One element of the input gradient, from the row's mean(g) and
 * mean(g * xhat) with g = dout * w (see nn_layernorm_backward_row). */
NN_HD float nn_layernorm_dx(float g, float xhat, float mean_g, float mean_gx, float rstd) {
    return rstd * (g - mean_g - xhat * mean_gx);
}

/*
 * One row: out = (x - mean) * rstd * w + b with mean and rstd = 1/sqrt(var +
 * eps) over the row's C entries (biased variance, as PyTorch). The variance
 * is the mean of (x - mean)^2 (two passes), which does not cancel the way
 * E[x^2] - mean^2 does when |mean| >> std, as in a residual stream.
 * x, w, b, out: [C]; out may alias x.
 */
NN_HD void nn_layernorm_forward_row(int C, const float *x, const float *w, const float *b,
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
    const float rstd = nn_layernorm_rstd(var);
    for (int k = 0; k < C; k++) {
        out[k] = nn_layernorm_out(x[k], mean, rstd, w[k], b[k]);
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
NN_HD void nn_layernorm_backward_row(int C, const float *dout, const float *x,
                                         const float *w, float mean, float rstd,
                                         const float *dres, float *dx) {
    float acc_g[NN_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    float acc_gx[NN_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int i = 0;
    for (; i + NN_LANES <= C; i += NN_LANES) {
        for (int j = 0; j < NN_LANES; j++) {
            const float g = dout[i + j] * w[i + j];
            acc_g[j] += g;
            acc_gx[j] += g * nn_layernorm_xhat(x[i + j], mean, rstd);
        }
    }
    for (int j = 0; j < NN_LANES; j++) {
        if (i + j < C) {
            const float g = dout[i + j] * w[i + j];
            acc_g[j] += g;
            acc_gx[j] += g * nn_layernorm_xhat(x[i + j], mean, rstd);
        }
    }
    const float mean_g = nn_lanes_total(acc_g) / (float)C;
    const float mean_gx = nn_lanes_total(acc_gx) / (float)C;
    for (int k = 0; k < C; k++) {
        const float g = dout[k] * w[k];
        const float d = nn_layernorm_dx(g, nn_layernorm_xhat(x[k], mean, rstd), mean_g,
                                          mean_gx, rstd);
        dx[k] = dres != NULL ? dres[k] + d : d;
    }
}

/* ========================== RMSNorm, RoPE and SwiGLU (the Llama family) */

/* -------------------------------------------------------------- RMSNorm */

/* 1 / sqrt(mean(x^2) + eps), from the row's mean square; eps is the
 * config's rms_norm_eps, added in fp32 as LlamaRMSNorm does. */
NN_HD float nn_rms_rstd(float mean_square, float eps) { return 1.0f / sqrtf(mean_square + eps); }

/* One output element: w * (x * rstd) (LlamaRMSNorm scales the normalized
 * value by the weight). */
NN_HD float nn_rms_out(float x, float rstd, float w) { return w * (x * rstd); }

/* One element of the input gradient, from g = dout * w, xhat = x * rstd
 * and the row's mean(g * xhat):  rstd * (g - xhat * mean(g * xhat)). */
NN_HD float nn_rms_dx(float g, float xhat, float mean_gx, float rstd) {
    return rstd * (g - xhat * mean_gx);
}

/*
 * One row: out = w * x / sqrt(mean(x^2) + eps) over the row's C entries;
 * the mean square in fp32 over NN_LANES lanes. x, w, out: [C]; out may
 * alias x.
 */
NN_HD void nn_rmsnorm_forward_row(int C, const float *x, const float *w, float eps,
                                     float *out, float *rstd_out) {
    float acc[NN_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int i = 0;
    for (; i + NN_LANES <= C; i += NN_LANES) {
        for (int j = 0; j < NN_LANES; j++) {
            acc[j] += x[i + j] * x[i + j];
        }
    }
    for (int j = 0; j < NN_LANES; j++) {
        if (i + j < C) {
            acc[j] += x[i + j] * x[i + j];
        }
    }
    const float rstd = nn_rms_rstd(nn_lanes_total(acc) / (float)C, eps);
    for (int k = 0; k < C; k++) {
        out[k] = nn_rms_out(x[k], rstd, w[k]);
    }
    *rstd_out = rstd;
}

/*
 * One row's input gradient (the weight's gradient, a sum over rows of
 * dout * x * rstd, is a column sum the caller does): dx = dres + rstd (g -
 * xhat mean(g xhat)) with g = dout * w, xhat = x * rstd. dres (the residual
 * stream's gradient joining here) may be NULL for 0 and may alias dx.
 * dout, x, w, dres, dx: [C].
 */
NN_HD void nn_rmsnorm_backward_row(int C, const float *dout, const float *x, const float *w,
                                      float rstd, const float *dres, float *dx) {
    float acc[NN_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int i = 0;
    for (; i + NN_LANES <= C; i += NN_LANES) {
        for (int j = 0; j < NN_LANES; j++) {
            acc[j] += dout[i + j] * w[i + j] * (x[i + j] * rstd);
        }
    }
    for (int j = 0; j < NN_LANES; j++) {
        if (i + j < C) {
            acc[j] += dout[i + j] * w[i + j] * (x[i + j] * rstd);
        }
    }
    const float mean_gx = nn_lanes_total(acc) / (float)C;
    for (int k = 0; k < C; k++) {
        const float d = nn_rms_dx(dout[k] * w[k], x[k] * rstd, mean_gx, rstd);
        dx[k] = dres != NULL ? dres[k] + d : d;
    }
}

/* ----------------------------------------------------------------- RoPE */

/*
 * One head's vector v: [hd] rotated in place by position t's angles:
 * channel i pairs with channel i + hd/2 (Hugging Face's rotate_half), and
 *     v[i]        = v[i] cos - v[i + hd/2] sin
 *     v[i + hd/2] = v[i + hd/2] cos + v[i] sin
 * with cos, sin: [hd/2] that position's row of llama_rope_table. These are
 * the products and sums q * cos + rotate_half(q) * sin computes, in the
 * same order, so fp32 gives its bits.
 */
NN_HD void nn_rope_forward(int hd, float *v, const float *cos_t, const float *sin_t) {
    const int half = hd / 2;
    for (int i = 0; i < half; i++) {
        const float a = v[i], b = v[i + half], c = cos_t[i], s = sin_t[i];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
    }
}

/* Its backward: the transpose of the rotation, applied to the gradient d:
 * [hd] in place (d becomes the gradient of the unrotated vector). */
NN_HD void nn_rope_backward(int hd, float *d, const float *cos_t, const float *sin_t) {
    const int half = hd / 2;
    for (int i = 0; i < half; i++) {
        const float a = d[i], b = d[i + half], c = cos_t[i], s = sin_t[i];
        d[i] = a * c + b * s;
        d[i + half] = b * c - a * s;
    }
}

/* --------------------------------------------------------------- SwiGLU */

/* sigmoid(x) = 1 / (1 + e^-x), with nn_expf's clamped e^x (so a very
 * negative x gives 0, not a NaN from inf / inf). */
NN_HD float nn_sigmoid(float x) { return 1.0f / (1.0f + nn_expf(-x)); }

/* h = silu(gate) * up, silu(x) = x * sigmoid(x) (PyTorch's SiLU). */
NN_HD float nn_swiglu(float gate, float up) { return gate * nn_sigmoid(gate) * up; }

/* The backward of h = silu(gate) * up for one element, from dh:
 * d up = dh silu(gate), d gate = dh up sigmoid(gate) (1 + gate (1 -
 * sigmoid(gate))). */
NN_HD void nn_swiglu_backward(float gate, float up, float dh, float *dgate, float *dup) {
    const float s = nn_sigmoid(gate);
    *dup = dh * (gate * s);
    *dgate = dh * up * (s * (1.0f + gate * (1.0f - s)));
}

/* ============================================== dropout (LoRA's input) */

/* Element k of a dropout call with seed s is kept when a 32-bit hash of
 * (s, k) is at least p 2^32 (nn_dropout_threshold): a counter-based mask,
 * so backward and recomputation regenerate the forward's without storing
 * it, and every device draws the same (integer arithmetic only). The hash
 * is SplitMix64's finalizer over s + (k + 1) times its odd constant. */
NN_HD uint32_t nn_dropout_bits(uint64_t seed, uint64_t k) {
    uint64_t z = seed + (k + 1u) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}

NN_HD uint32_t nn_dropout_threshold(float p) {
    const double t = (double)p * 4294967296.0;
    return t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

/* The kept element's factor, 1 / (1 - p), or 0 for a dropped one. */
NN_HD float nn_dropout_factor(uint64_t seed, uint64_t k, uint32_t threshold, float keep_scale) {
    return nn_dropout_bits(seed, k) >= threshold ? keep_scale : 0.0f;
}

#endif /* NN_LAYER_MATH_H */
