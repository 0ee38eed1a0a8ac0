/*
 * nn_math — the element and row math the examples' models share, written
 * once and compiled both for the host (C11: the CPU backends) and for CUDA
 * devices (nvcc: the CUDA backends): e^x, reductions over lanes, the causal
 * attention softmax and the softmax cross-entropy. Each model's own math
 * (nn_layer_math.h: LayerNorm, GELU; nn_layer_math.h: RMSNorm, RoPE, SwiGLU) builds
 * on it. The CPU runs the row functions below; the GPU's kernels give a row
 * to a warp or a block, whose reductions run as trees over the lanes
 * instead of the lanes of NN_LANES, and then apply the same element
 * functions (nn_softmax_grad, nn_xent_dlogit, ...) to every element, so
 * both compute the same algorithm and differ only in the order of those
 * sums.
 *
 * Rules that keep the two compilations equal:
 *   - float arithmetic only (+, -, *, /, sqrtf: correctly rounded on both;
 *     the CUDA build passes --fmad=false where CPU equality is tested, and
 *     C11 does not contract a*b+c), so an element function gives the same
 *     bits on the CPU and the GPU;
 *   - no libm calls in element functions: exp comes from nn_expf below,
 *     which is plain arithmetic. That also lets GCC vectorize the CPU's
 *     loops over them (libm's expf is a scalar call). The one libm call,
 *     logf, is made once per cross-entropy row;
 *   - reductions over a row use NN_LANES interleaved partial sums combined
 *     in a fixed tree: element i goes to lane i % NN_LANES, and the order is
 *     part of the definition (deterministic, independent of threads); the
 *     independent lanes let the compiler use SIMD without -ffast-math. Tails
 *     index the lanes with constants so that a GPU thread keeps them in
 *     registers.
 */
#ifndef NN_MATH_H
#define NN_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define NN_HD __host__ __device__ __forceinline__
#else
#define NN_HD static inline
#endif

/* Partial sums per reduction; see above. 8 fills an AVX register or two SSE
 * ones, and is small enough for registers in a GPU thread. */
#define NN_LANES 8

/* ------------------------------------------------------------- scalars */

NN_HD int32_t nn_float_bits(float f) {
    int32_t i;
    memcpy(&i, &f, sizeof(i));
    return i;
}

NN_HD float nn_bits_float(int32_t i) {
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
NN_HD float nn_expf(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float shifter = 12582912.0f; /* 1.5 * 2^23, bits 0x4b400000 */
    const float t = x * 1.44269504088896341f + shifter;
    const float n = t - shifter;
    const int32_t ni = nn_float_bits(t) - 0x4b400000;
    const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723212e-6f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    return p * nn_bits_float((ni + 127) << 23);
}

/* ---------------------------------------------------------- reductions */

NN_HD float nn_lanes_total(const float *acc) {
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

/* max(x[0], ..., x[n-1]), n >= 1, over NN_LANES lanes (max is exact, so
 * the lanes change no result; they let the compiler use SIMD max). A NaN
 * entry may be skipped here, but then poisons the sums that follow. */
NN_HD float nn_max(const float *x, int n) {
    float acc[NN_LANES];
    for (int j = 0; j < NN_LANES; j++) {
        acc[j] = x[0];
    }
    int i = 0;
    for (; i + NN_LANES <= n; i += NN_LANES) {
        for (int j = 0; j < NN_LANES; j++) {
            acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
        }
    }
    for (int j = 0; j < NN_LANES; j++) {
        if (i + j < n) {
            acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
        }
    }
    float m = acc[0];
    for (int j = 1; j < NN_LANES; j++) {
        m = acc[j] > m ? acc[j] : m;
    }
    return m;
}

/* x[0] + ... + x[n-1] in the fixed lane order. */
NN_HD float nn_sum(const float *x, int n) {
    float acc[NN_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int i = 0;
    for (; i + NN_LANES <= n; i += NN_LANES) {
        for (int j = 0; j < NN_LANES; j++) {
            acc[j] += x[i + j];
        }
    }
    for (int j = 0; j < NN_LANES; j++) {
        if (i + j < n) {
            acc[j] += x[i + j];
        }
    }
    return nn_lanes_total(acc);
}

/* --------------------------------------------------- attention softmax */

/* One probability's unnormalized value: e^(scale * (score - max)). */
NN_HD float nn_softmax_exp(float score, float max_score, float scale) {
    return nn_expf(scale * (score - max_score));
}

/* One raw score's gradient: scale * p * (dp - sum_k p_k dp_k). */
NN_HD float nn_softmax_grad(float p, float dp, float dot, float scale) {
    return scale * p * (dp - dot);
}

/*
 * Query position t's row of one head: row[0..T) holds the raw scores q.k on
 * entry and the probabilities on return, softmax over j <= t of
 * scale * row[j], and exactly 0 for j > t (the causal mask; the GEMM that
 * follows multiplies the whole row). scale = 1/sqrt(head size) > 0, so the
 * largest scaled score is scale times the largest raw one.
 */
NN_HD void nn_causal_softmax_row(int t, int T, float scale, float *row) {
    const float m = nn_max(row, t + 1);
    float acc[NN_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    const int n = t + 1;
    int j = 0;
    for (; j + NN_LANES <= n; j += NN_LANES) {
        for (int k = 0; k < NN_LANES; k++) {
            const float e = nn_softmax_exp(row[j + k], m, scale);
            row[j + k] = e;
            acc[k] += e;
        }
    }
    for (int k = 0; k < NN_LANES; k++) {
        if (j + k < n) {
            const float e = nn_softmax_exp(row[j + k], m, scale);
            row[j + k] = e;
            acc[k] += e;
        }
    }
    const float inv = 1.0f / nn_lanes_total(acc);
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
NN_HD void nn_causal_softmax_backward_row(int t, int T, float scale, const float *p,
                                              float *d) {
    float acc[NN_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    const int n = t + 1;
    int j = 0;
    for (; j + NN_LANES <= n; j += NN_LANES) {
        for (int k = 0; k < NN_LANES; k++) {
            acc[k] += p[j + k] * d[j + k];
        }
    }
    for (int k = 0; k < NN_LANES; k++) {
        if (j + k < n) {
            acc[k] += p[j + k] * d[j + k];
        }
    }
    const float dot = nn_lanes_total(acc);
    for (int k = 0; k < n; k++) {
        d[k] = nn_softmax_grad(p[k], d[k], dot, scale);
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
NN_HD float nn_xent_loss(float zmax, float sum, float z_target) {
    return (zmax + logf(sum)) - z_target;
}

NN_HD float nn_xent_dlogit(float e, float inv_sum, int is_target, float dscale) {
    return (e * inv_sum - (is_target ? 1.0f : 0.0f)) * dscale;
}

/*
 * Softmax cross-entropy of one row of V logits against `target`; returns the
 * loss. With want_grad, overwrites z with dscale * dloss/dz (dscale is the
 * gradient of whatever the caller minimizes with respect to this row's loss,
 * e.g. loss_scale / rows for a scaled mean); otherwise z is left as it was.
 */
NN_HD float nn_xent_row(int V, float *z, int target, float dscale, int want_grad) {
    const float m = nn_max(z, V);
    const float z_target = z[target];
    float acc[NN_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int i = 0;
    if (want_grad) {
        // e^(z - m) is kept in z so that the gradient pass needs no second exp.
        for (; i + NN_LANES <= V; i += NN_LANES) {
            for (int j = 0; j < NN_LANES; j++) {
                const float e = nn_expf(z[i + j] - m);
                z[i + j] = e;
                acc[j] += e;
            }
        }
        for (int j = 0; j < NN_LANES; j++) {
            if (i + j < V) {
                const float e = nn_expf(z[i + j] - m);
                z[i + j] = e;
                acc[j] += e;
            }
        }
    } else {
        for (; i + NN_LANES <= V; i += NN_LANES) {
            for (int j = 0; j < NN_LANES; j++) {
                acc[j] += nn_expf(z[i + j] - m);
            }
        }
        for (int j = 0; j < NN_LANES; j++) {
            if (i + j < V) {
                acc[j] += nn_expf(z[i + j] - m);
            }
        }
    }
    const float sum = nn_lanes_total(acc);
    if (want_grad) {
        const float inv = 1.0f / sum;
        for (int k = 0; k < V; k++) {
            z[k] = nn_xent_dlogit(z[k], inv, k == target, dscale);
        }
    }
    return nn_xent_loss(m, sum, z_target);
}

#endif /* NN_MATH_H */
