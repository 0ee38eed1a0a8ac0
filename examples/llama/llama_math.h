/*
 * llama_math — the Llama family's element and row math, written once and
 * compiled for the host (llama_cpu.c) and for CUDA devices (llama_cuda*.cu):
 * RMSNorm (fp32 statistics), rotary position embeddings in the rotate-half
 * convention of Hugging Face checkpoints, and SwiGLU. What the family shares
 * with GPT-2 (the lanes of a reduction, e^x, the attention softmax, the
 * cross-entropy) is nn_math.h's, and the rules that keep the two
 * compilations equal are written there: float arithmetic only, no libm in
 * element functions, reductions over NN_LANES lanes combined in a fixed
 * tree.
 */
#ifndef LLAMA_MATH_H
#define LLAMA_MATH_H

#include "nn_math.h"

/* -------------------------------------------------------------- RMSNorm */

/* 1 / sqrt(mean(x^2) + eps), from the row's mean square; eps is the
 * config's rms_norm_eps, added in fp32 as LlamaRMSNorm does. */
NN_HD float llama_rms_rstd(float mean_square, float eps) { return 1.0f / sqrtf(mean_square + eps); }

/* One output element: w * (x * rstd) (LlamaRMSNorm scales the normalized
 * value by the weight). */
NN_HD float llama_rms_out(float x, float rstd, float w) { return w * (x * rstd); }

/* One element of the input gradient, from g = dout * w, xhat = x * rstd
 * and the row's mean(g * xhat):  rstd * (g - xhat * mean(g * xhat)). */
NN_HD float llama_rms_dx(float g, float xhat, float mean_gx, float rstd) {
    return rstd * (g - xhat * mean_gx);
}

/*
 * One row: out = w * x / sqrt(mean(x^2) + eps) over the row's C entries;
 * the mean square in fp32 over NN_LANES lanes. x, w, out: [C]; out may
 * alias x.
 */
NN_HD void llama_rmsnorm_forward_row(int C, const float *x, const float *w, float eps,
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
    const float rstd = llama_rms_rstd(nn_lanes_total(acc) / (float)C, eps);
    for (int k = 0; k < C; k++) {
        out[k] = llama_rms_out(x[k], rstd, w[k]);
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
NN_HD void llama_rmsnorm_backward_row(int C, const float *dout, const float *x, const float *w,
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
        const float d = llama_rms_dx(dout[k] * w[k], x[k] * rstd, mean_gx, rstd);
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
NN_HD void llama_rope_forward(int hd, float *v, const float *cos_t, const float *sin_t) {
    const int half = hd / 2;
    for (int i = 0; i < half; i++) {
        const float a = v[i], b = v[i + half], c = cos_t[i], s = sin_t[i];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
    }
}

/* Its backward: the transpose of the rotation, applied to the gradient d:
 * [hd] in place (d becomes the gradient of the unrotated vector). */
NN_HD void llama_rope_backward(int hd, float *d, const float *cos_t, const float *sin_t) {
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
NN_HD float llama_sigmoid(float x) { return 1.0f / (1.0f + nn_expf(-x)); }

/* h = silu(gate) * up, silu(x) = x * sigmoid(x) (PyTorch's SiLU). */
NN_HD float llama_swiglu(float gate, float up) { return gate * llama_sigmoid(gate) * up; }

/* The backward of h = silu(gate) * up for one element, from dh:
 * d up = dh silu(gate), d gate = dh up sigmoid(gate) (1 + gate (1 -
 * sigmoid(gate))). */
NN_HD void llama_swiglu_backward(float gate, float up, float dh, float *dgate, float *dup) {
    const float s = llama_sigmoid(gate);
    *dup = dh * (gate * s);
    *dgate = dh * up * (s * (1.0f + gate * (1.0f - s)));
}

#endif /* LLAMA_MATH_H */
