/*
 * gpt2_math — GPT-2's element and row math, written once and compiled both
 * for the host (C11, gpt2_cpu.c) and for CUDA devices (nvcc, gpt2_cuda.cu).
 * Both backends call these functions, so there is one definition of what a
 * LayerNorm, a GELU, an attention softmax or a cross-entropy computes; the
 * backends only choose how rows are spread over threads. The CPU runs the
 * row functions below; the GPU's kernels give a row to a warp or a block,
 * whose reductions (means, maxima, sums of exponentials) run as trees over
 * the lanes instead of the lanes of GPT2_LANES, and then apply the same
 * element functions (gpt2_layernorm_out, gpt2_layernorm_dx,
 * gpt2_softmax_grad, gpt2_xent_dlogit, ...) to every element, so the two
 * compute the same algorithm and differ only in the order of those sums.
 *
 * Rules that keep the two compilations equal:
 *   - float arithmetic only (+, -, *, /, sqrtf: correctly rounded on both;
 *     the CUDA build passes --fmad=false and C11 does not contract a*b+c), so
 *     an element function gives the same bits on the CPU and the GPU;
 *   - no libm calls in element functions: exp and tanh come from gpt2_expf
 *     below, which is plain arithmetic. That also lets GCC vectorize the
 *     CPU's loops over them (libm's expf/tanhf are scalar calls, and GELU over
 *     B*T*4C elements was most of a block's non-GEMM time with them). The one
 *     libm call, logf, is made once per cross-entropy row;
 *   - reductions over a row use GPT2_LANES interleaved partial sums combined
 *     in a fixed tree: element i goes to lane i % GPT2_LANES, and the order is
 *     part of the definition (deterministic, independent of threads); the
 *     independent lanes let the compiler use SIMD without -ffast-math. Tails
 *     index the lanes with constants so that a GPU thread keeps them in
 *     registers.
 */
#ifndef GPT2_MATH_H
#define GPT2_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define GPT2_HD __host__ __device__ __forceinline__
#else
#define GPT2_HD static inline
#endif

/* LayerNorm's epsilon, as GPT-2 (and PyTorch's default). */
#define GPT2_LN_EPS 1e-5f
/* Partial sums per reduction; see above. 8 fills an AVX register or two SSE
 * ones, and is small enough for registers in a GPU thread. */
#define GPT2_LANES 8

/* ------------------------------------------------------------- scalars */

GPT2_HD int32_t gpt2_float_bits(float f) {
    int32_t i;
    memcpy(&i, &f, sizeof(i));
    return i;
}

GPT2_HD float gpt2_bits_float(int32_t i) {
    float f;
    memcpy(&f, &i, sizeof(f));
    return f;
}

/*
 * e^x for float x, within about 2 ulp of the exact value for
 * x in [-87, 88]; arguments are clamped to that range (e^-87 ~ 1.6e-38 is
 * still normal, e^88 ~ 1.7e38 still finite), and NaN stays NaN.
 * Method: x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2, ln2 split
 * in two parts (Cody and Waite) so that r is nearly exact; e^r by its Taylor
 * series to degree 7 (the first omitted term, r^8 / 8!, is below 5.3e-9 for
 * |r| <= 0.347, a tenth of an ulp); e^x = 2^n e^r with 2^n built from its
 * exponent bits. round() is the add-and-subtract of 1.5 * 2^23, which rounds
 * to nearest in the default mode and needs no SSE4.1 instruction.
 */
GPT2_HD float gpt2_expf(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float shifter = 12582912.0f; /* 1.5 * 2^23, bits 0x4b400000 */
    const float t = x * 1.44269504088896341f + shifter;
    const float n = t - shifter;
    const int32_t ni = gpt2_float_bits(t) - 0x4b400000;
    const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723212e-6f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    return p * gpt2_bits_float((ni + 127) << 23);
}

/* tanh(u) = sign(u) (1 - 2 / (e^{2|u|} + 1)). Near 0 this loses relative
 * accuracy (absolute error stays about 1e-7), which GELU does not mind: it
 * only ever adds tanh to 1. |u| is capped at 9, where tanh rounds to 1. */
GPT2_HD float gpt2_tanhf(float u) {
    const float a = u < 0.0f ? -u : u;
    const float e = gpt2_expf(2.0f * (a > 9.0f ? 9.0f : a));
    const float t = 1.0f - 2.0f / (e + 1.0f);
    return u < 0.0f ? -t : t;
}

/* ---------------------------------------------------------------- GELU */

#define GPT2_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GPT2_GELU_A 0.044715f

/* GELU, tanh approximation (Hendrycks and Gimpel 2016; GPT-2's choice):
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
GPT2_HD float gpt2_gelu(float x) {
    const float u = GPT2_GELU_K * (x + GPT2_GELU_A * x * x * x);
    return 0.5f * x * (1.0f + gpt2_tanhf(u));
}

/* d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
 * t = tanh(u) as above. */
GPT2_HD float gpt2_gelu_grad(float x) {
    const float u = GPT2_GELU_K * (x + GPT2_GELU_A * x * x * x);
    const float t = gpt2_tanhf(u);
    const float du = GPT2_GELU_K * (1.0f + 3.0f * GPT2_GELU_A * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

/* ---------------------------------------------------------- reductions */

GPT2_HD float gpt2_lanes_total(const float *acc) {
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

/* max(x[0], ..., x[n-1]), n >= 1, over GPT2_LANES lanes (max is exact, so
 * the lanes change no result; they let the compiler use SIMD max). A NaN
 * entry may be skipped here, but then poisons the sums that follow. */
GPT2_HD float gpt2_max(const float *x, int n) {
    float acc[GPT2_LANES];
    for (int j = 0; j < GPT2_LANES; j++) {
        acc[j] = x[0];
    }
    int i = 0;
    for (; i + GPT2_LANES <= n; i += GPT2_LANES) {
        for (int j = 0; j < GPT2_LANES; j++) {
            acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
        }
    }
    for (int j = 0; j < GPT2_LANES; j++) {
        if (i + j < n) {
            acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
        }
    }
    float m = acc[0];
    for (int j = 1; j < GPT2_LANES; j++) {
        m = acc[j] > m ? acc[j] : m;
    }
    return m;
}

/* x[0] + ... + x[n-1] in the fixed lane order. */
GPT2_HD float gpt2_sum(const float *x, int n) {
    float acc[GPT2_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int i = 0;
    for (; i + GPT2_LANES <= n; i += GPT2_LANES) {
        for (int j = 0; j < GPT2_LANES; j++) {
            acc[j] += x[i + j];
        }
    }
    for (int j = 0; j < GPT2_LANES; j++) {
        if (i + j < n) {
            acc[j] += x[i + j];
        }
    }
    return gpt2_lanes_total(acc);
}

/* ----------------------------------------------------------- LayerNorm */

/* 1 / sqrt(var + eps), from the row's biased variance. */
GPT2_HD float gpt2_layernorm_rstd(float var) { return 1.0f / sqrtf(var + GPT2_LN_EPS); }

/* The normalized input x-hat of one element, as the forward computed it. */
GPT2_HD float gpt2_layernorm_xhat(float x, float mean, float rstd) {
    return (x - mean) * rstd;
}

/* One output element: x-hat * w + b. */
GPT2_HD float gpt2_layernorm_out(float x, float mean, float rstd, float w, float b) {
    return gpt2_layernorm_xhat(x, mean, rstd) * w + b;
}

/* One element of the input gradient, from the row's mean(g) and
 * mean(g * xhat) with g = dout * w (see gpt2_layernorm_backward_row). */
GPT2_HD float gpt2_layernorm_dx(float g, float xhat, float mean_g, float mean_gx, float rstd) {
    return rstd * (g - mean_g - xhat * mean_gx);
}

/*
 * One row: out = (x - mean) * rstd * w + b with mean and rstd = 1/sqrt(var +
 * eps) over the row's C entries (biased variance, as PyTorch). The variance
 * is the mean of (x - mean)^2 (two passes), which does not cancel the way
 * E[x^2] - mean^2 does when |mean| >> std, as in a residual stream.
 * x, w, b, out: [C]; out may alias x.
 */
GPT2_HD void gpt2_layernorm_forward_row(int C, const float *x, const float *w, const float *b,
                                        float *out, float *mean_out, float *rstd_out) {
    const float mean = gpt2_sum(x, C) / (float)C;
    float acc[GPT2_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int i = 0;
    for (; i + GPT2_LANES <= C; i += GPT2_LANES) {
        for (int j = 0; j < GPT2_LANES; j++) {
            const float dev = x[i + j] - mean;
            acc[j] += dev * dev;
        }
    }
    for (int j = 0; j < GPT2_LANES; j++) {
        if (i + j < C) {
            const float dev = x[i + j] - mean;
            acc[j] += dev * dev;
        }
    }
    const float var = gpt2_lanes_total(acc) / (float)C;
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
GPT2_HD void gpt2_layernorm_backward_row(int C, const float *dout, const float *x,
                                         const float *w, float mean, float rstd,
                                         const float *dres, float *dx) {
    float acc_g[GPT2_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    float acc_gx[GPT2_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int i = 0;
    for (; i + GPT2_LANES <= C; i += GPT2_LANES) {
        for (int j = 0; j < GPT2_LANES; j++) {
            const float g = dout[i + j] * w[i + j];
            acc_g[j] += g;
            acc_gx[j] += g * gpt2_layernorm_xhat(x[i + j], mean, rstd);
        }
    }
    for (int j = 0; j < GPT2_LANES; j++) {
        if (i + j < C) {
            const float g = dout[i + j] * w[i + j];
            acc_g[j] += g;
            acc_gx[j] += g * gpt2_layernorm_xhat(x[i + j], mean, rstd);
        }
    }
    const float mean_g = gpt2_lanes_total(acc_g) / (float)C;
    const float mean_gx = gpt2_lanes_total(acc_gx) / (float)C;
    for (int k = 0; k < C; k++) {
        const float g = dout[k] * w[k];
        const float d = gpt2_layernorm_dx(g, gpt2_layernorm_xhat(x[k], mean, rstd), mean_g,
                                          mean_gx, rstd);
        dx[k] = dres != NULL ? dres[k] + d : d;
    }
}

/* --------------------------------------------------- attention softmax */

/* One probability's unnormalized value: e^(scale * (score - max)). */
GPT2_HD float gpt2_softmax_exp(float score, float max_score, float scale) {
    return gpt2_expf(scale * (score - max_score));
}

/* One raw score's gradient: scale * p * (dp - sum_k p_k dp_k). */
GPT2_HD float gpt2_softmax_grad(float p, float dp, float dot, float scale) {
    return scale * p * (dp - dot);
}

/*
 * Query position t's row of one head: row[0..T) holds the raw scores q.k on
 * entry and the probabilities on return, softmax over j <= t of
 * scale * row[j], and exactly 0 for j > t (the causal mask; the GEMM that
 * follows multiplies the whole row). scale = 1/sqrt(head size) > 0, so the
 * largest scaled score is scale times the largest raw one.
 */
GPT2_HD void gpt2_causal_softmax_row(int t, int T, float scale, float *row) {
    const float m = gpt2_max(row, t + 1);
    float acc[GPT2_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    const int n = t + 1;
    int j = 0;
    for (; j + GPT2_LANES <= n; j += GPT2_LANES) {
        for (int k = 0; k < GPT2_LANES; k++) {
            const float e = gpt2_softmax_exp(row[j + k], m, scale);
            row[j + k] = e;
            acc[k] += e;
        }
    }
    for (int k = 0; k < GPT2_LANES; k++) {
        if (j + k < n) {
            const float e = gpt2_softmax_exp(row[j + k], m, scale);
            row[j + k] = e;
            acc[k] += e;
        }
    }
    const float inv = 1.0f / gpt2_lanes_total(acc);
    for (int k = 0; k < n; k++) {
        row[k] *= inv;
    }
    for (int k = n; k < T; k++) {
        row[k] = 0.0f;
    }
}

/*
 * Its backward: p is the row of probabilities, d holds dLoss/dp on entry and
 * dLoss/d(raw score) on return: scale * p_j * (d_j - sum_k p_k d_k) for
 * j <= t, 0 above the diagonal. p, d: [T].
 */
GPT2_HD void gpt2_causal_softmax_backward_row(int t, int T, float scale, const float *p,
                                              float *d) {
    float acc[GPT2_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    const int n = t + 1;
    int j = 0;
    for (; j + GPT2_LANES <= n; j += GPT2_LANES) {
        for (int k = 0; k < GPT2_LANES; k++) {
            acc[k] += p[j + k] * d[j + k];
        }
    }
    for (int k = 0; k < GPT2_LANES; k++) {
        if (j + k < n) {
            acc[k] += p[j + k] * d[j + k];
        }
    }
    const float dot = gpt2_lanes_total(acc);
    for (int k = 0; k < n; k++) {
        d[k] = gpt2_softmax_grad(p[k], d[k], dot, scale);
    }
    for (int k = n; k < T; k++) {
        d[k] = 0.0f;
    }
}

/* ------------------------------------------------------- cross-entropy */

/* The pieces of one logits row's softmax cross-entropy, shared by the row
 * function below and the GPU's block-per-row kernel (a 50257-entry row is too
 * long for one GPU thread). With zmax the row's largest logit and
 * sum = sum_i e^(z_i - zmax):
 *   loss = zmax + log(sum) - z_target,
 *   dloss/dz_i = (e^(z_i - zmax) / sum - [i == target]) * dscale. */
GPT2_HD float gpt2_xent_loss(float zmax, float sum, float z_target) {
    return (zmax + logf(sum)) - z_target;
}

GPT2_HD float gpt2_xent_dlogit(float e, float inv_sum, int is_target, float dscale) {
    return (e * inv_sum - (is_target ? 1.0f : 0.0f)) * dscale;
}

/*
 * Softmax cross-entropy of one row of V logits against `target`; returns the
 * loss. With want_grad, overwrites z with dscale * dloss/dz (dscale is the
 * gradient of whatever the caller minimizes with respect to this row's loss,
 * e.g. loss_scale / rows for a scaled mean); otherwise z is left as it was.
 */
GPT2_HD float gpt2_xent_row(int V, float *z, int target, float dscale, int want_grad) {
    const float m = gpt2_max(z, V);
    const float z_target = z[target];
    float acc[GPT2_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int i = 0;
    if (want_grad) {
        // e^(z - m) is kept in z so that the gradient pass needs no second exp.
        for (; i + GPT2_LANES <= V; i += GPT2_LANES) {
            for (int j = 0; j < GPT2_LANES; j++) {
                const float e = gpt2_expf(z[i + j] - m);
                z[i + j] = e;
                acc[j] += e;
            }
        }
        for (int j = 0; j < GPT2_LANES; j++) {
            if (i + j < V) {
                const float e = gpt2_expf(z[i + j] - m);
                z[i + j] = e;
                acc[j] += e;
            }
        }
    } else {
        for (; i + GPT2_LANES <= V; i += GPT2_LANES) {
            for (int j = 0; j < GPT2_LANES; j++) {
                acc[j] += gpt2_expf(z[i + j] - m);
            }
        }
        for (int j = 0; j < GPT2_LANES; j++) {
            if (i + j < V) {
                acc[j] += gpt2_expf(z[i + j] - m);
            }
        }
    }
    const float sum = gpt2_lanes_total(acc);
    if (want_grad) {
        const float inv = 1.0f / sum;
        for (int k = 0; k < V; k++) {
            z[k] = gpt2_xent_dlogit(z[k], inv, k == target, dscale);
        }
    }
    return gpt2_xent_loss(m, sum, z_target);
}

#endif /* GPT2_MATH_H */
