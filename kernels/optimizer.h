/* Optimizer updates of one element, written once for every backend.
 *
 * Everything that is the same for all elements of a step (bias corrections,
 * the step size, the gradient divisor) is computed once on the host by
 * zs_k_optim_scalars_for_step() and passed in, so the per-element work is a
 * handful of multiply-adds, one sqrt and one division: no pow per element.
 *
 * Semantics follow PyTorch's torch.optim (SGD, Adam, AdamW) for the same
 * hyperparameters:
 *   g   = (grad / grad_div) * clip             (average over ranks, micro-steps and the
 *                                                loss scale; then global-norm clipping)
 *   SGD:   g += wd * p; buf = mu * buf + g; g = nesterov ? g + mu * buf : buf; p -= lr * g
 *   Adam:  g += wd * p                          (L2 penalty through the gradient)
 *   AdamW: p -= lr * wd * p                     (decoupled decay, before the update)
 *   Adam/AdamW: m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *               p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),  bcK = 1 - bK^t
 */
#ifndef ZS_KERNELS_OPTIMIZER_H
#define ZS_KERNELS_OPTIMIZER_H

#include <math.h>
#include <stdint.h>

#include "kernels/hostdevice.h"

typedef enum zs_k_optim_kind {
    ZS_K_OPTIM_SGD = 0,
    ZS_K_OPTIM_ADAM = 1,
    ZS_K_OPTIM_ADAMW = 2
} zs_k_optim_kind;

/* Per-step scalars, shared by every element of a step. */
typedef struct zs_k_optim_scalars {
    float grad_div;       /* the summed gradient is divided by this: world size x
                             accumulation steps x loss scale. A division, not a
                             multiplication by the inverse: it is exact whenever
                             the sum is an exact multiple, which keeps results
                             bit-identical across world sizes on such data. */
    float clip;           /* global-norm clipping factor, 1 when not clipping */
    float lr;
    float weight_decay;   /* 0 for parameters flagged ZS_PARAM_NO_DECAY */
    float beta1, beta2, eps;
    float one_minus_beta1, one_minus_beta2;
    float step_size;      /* Adam/AdamW: lr / (1 - beta1^t) */
    float inv_sqrt_bc2;   /* Adam/AdamW: 1 / sqrt(1 - beta2^t) */
    float decay_factor;   /* AdamW: 1 - lr * weight_decay */
    float momentum;       /* SGD */
    int nesterov;         /* SGD */
} zs_k_optim_scalars;

/* Host-side: the scalars of optimizer step t (t >= 1). Done in double so the
 * per-step values are as exact as float allows. */
static inline zs_k_optim_scalars zs_k_optim_scalars_for_step(
    zs_k_optim_kind kind, double lr, double beta1, double beta2, double eps,
    double weight_decay, double momentum, int nesterov, int64_t t, double grad_div, double clip) {
    zs_k_optim_scalars s;
    s.grad_div = (float)grad_div;
    s.clip = (float)clip;
    s.lr = (float)lr;
    s.weight_decay = (float)weight_decay;
    s.beta1 = (float)beta1;
    s.beta2 = (float)beta2;
    s.eps = (float)eps;
    s.one_minus_beta1 = (float)(1.0 - beta1);
    s.one_minus_beta2 = (float)(1.0 - beta2);
    double bc1 = 1.0 - pow(beta1, (double)t);
    double bc2 = 1.0 - pow(beta2, (double)t);
    s.step_size = (kind == ZS_K_OPTIM_SGD) ? (float)lr : (float)(lr / bc1);
    s.inv_sqrt_bc2 = (kind == ZS_K_OPTIM_SGD) ? 1.0f : (float)(1.0 / sqrt(bc2));
    s.decay_factor = (float)(1.0 - lr * weight_decay);
    s.momentum = (float)momentum;
    s.nesterov = nesterov;
    return s;
}

/* One Adam (decoupled = 0) or AdamW (decoupled = 1) element. p is the fp32
 * master value; g the summed (not yet averaged) gradient. */
ZS_HD void zs_k_adam_element(float *p, float *m, float *v, float g_sum,
                             const zs_k_optim_scalars *s, int decoupled) {
    float g = (g_sum / s->grad_div) * s->clip;
    float x = *p;
    if (decoupled)
        x = x * s->decay_factor;
    else
        g = g + s->weight_decay * x;
    float mn = s->beta1 * *m + s->one_minus_beta1 * g;
    float vn = s->beta2 * *v + s->one_minus_beta2 * (g * g);
    float denom = sqrtf(vn) * s->inv_sqrt_bc2 + s->eps;
    *m = mn;
    *v = vn;
    *p = x - s->step_size * (mn / denom);
}

/* One SGD element; buf is NULL when momentum is 0 (no state is kept). */
ZS_HD void zs_k_sgd_element(float *p, float *buf, float g_sum, const zs_k_optim_scalars *s) {
    float g = (g_sum / s->grad_div) * s->clip;
    float x = *p;
    g = g + s->weight_decay * x;
    if (buf) {
        float b = s->momentum * *buf + g;
        *buf = b;
        g = s->nesterov ? g + s->momentum * b : b;
    }
    *p = x - s->lr * g;
}

#endif
