/*
 * Causal attention with grouped-query heads on the CPU (nn_cpu.h).
 *
 * Each (sequence, head) pair's products are single-threaded BLAS calls
 * (cblas_sgemm directly: one head's [T][hd] products are too small to cut
 * into tiles) on the strided rows of qkv, with no copies; the threads work
 * on different heads, so no sum is ever split between threads. The scores
 * are computed over the full T x T and the softmax writes exactly 0 above
 * the diagonal, which masks the product that follows.
 */
#include <math.h>
#include <stddef.h>

#include <cblas.h>

#include "nn_cpu.h"
#include "nn_math.h"

void nn_cpu_attention_forward(const nn_attn_layout *s, const float *qkv, float *att,
                              float *atty) {
    const int T = s->T, NH = s->n_head, hd = s->head_dim, ld = s->ld, ldy = s->ldy;
    const int group = NH / s->n_kv_head;
    const float scale = 1.0f / sqrtf((float)hd);
    const int heads = s->B * NH;
    // One (sequence, head) per iteration: its products are single-threaded
    // BLAS calls, the threads work on different heads.
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < heads; bh++) {
        const int b = bh / NH, h = bh % NH;
        const float *rows = qkv + (size_t)b * T * ld;
        const float *q = rows + s->q_off + (size_t)h * hd;           // [T][hd], ld
        const float *k = rows + s->k_off + (size_t)(h / group) * hd; // [T][hd], ld
        float *sc = att + (size_t)bh * (size_t)T * T;                 // [T][T]
        // sc = q . k^T (raw scores; the scale goes into the softmax).
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, q, ld, k, ld, 0.0f,
                    sc, T);
    }
    const long long rows = (long long)heads * T;
#pragma omp parallel for schedule(static)
    for (long long r = 0; r < rows; r++) {
        nn_causal_softmax_row((int)(r % T), T, scale, att + (size_t)r * (size_t)T);
    }
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < heads; bh++) {
        const int b = bh / NH, h = bh % NH;
        const float *v = qkv + (size_t)b * T * ld + s->v_off + (size_t)(h / group) * hd;
        const float *p = att + (size_t)bh * (size_t)T * T;
        float *y = atty + (size_t)b * T * ldy + (size_t)h * hd; // [T][hd], ldy
        // y = p . v; p is 0 above the diagonal, which is the causal mask.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, p, T, v, ld, 0.0f,
                    y, ldy);
    }
}

void nn_cpu_attention_backward(const nn_attn_layout *s, const float *qkv, const float *att,
                               const float *datty, float *dqkv, float *datt) {
    const int T = s->T, NH = s->n_head, NKV = s->n_kv_head, hd = s->head_dim;
    const int ld = s->ld, ldy = s->ldy;
    const int group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int b = 0; b < s->B; b++) {
        const size_t rowb = (size_t)b * T * ld;
        // K/V heads in parallel (datt holds one sequence's heads); a K/V
        // head's thread adds its group's query heads in ascending order.
#pragma omp parallel for schedule(static)
        for (int g = 0; g < NKV; g++) {
            const float *v = qkv + rowb + s->v_off + (size_t)g * hd;
            float *dv = dqkv + rowb + s->v_off + (size_t)g * hd;
            for (int j = 0; j < group; j++) {
                const int h = g * group + j;
                const float *p = att + ((size_t)b * NH + h) * (size_t)T * T;
                const float *dy = datty + (size_t)b * T * ldy + (size_t)h * hd;
                float *dp = datt + (size_t)h * T * T;
                // dv (+)= p^T . dy; dp = dy . v^T.
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, p, T, dy,
                            ldy, j == 0 ? 0.0f : 1.0f, dv, ld);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, dy, ldy, v,
                            ld, 0.0f, dp, T);
            }
        }
        const float *pb = att + (size_t)b * NH * T * T;
        const int rows = NH * T;
#pragma omp parallel for schedule(static)
        for (int r = 0; r < rows; r++) {
            nn_causal_softmax_backward_row(r % T, T, scale, pb + (size_t)r * T,
                                           datt + (size_t)r * T);
        }
#pragma omp parallel for schedule(static)
        for (int g = 0; g < NKV; g++) {
            const float *k = qkv + rowb + s->k_off + (size_t)g * hd;
            float *dk = dqkv + rowb + s->k_off + (size_t)g * hd;
            for (int j = 0; j < group; j++) {
                const int h = g * group + j;
                const size_t qoff = rowb + s->q_off + (size_t)h * hd;
                const float *ds = datt + (size_t)h * T * T; // d(raw scores), scale included
                // dq = ds . k; dk (+)= ds^T . q.
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, ds, T, k,
                            ld, 0.0f, dqkv + qoff, ld);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, ds, T,
                            qkv + qoff, ld, j == 0 ? 0.0f : 1.0f, dk, ld);
            }
        }
    }
}
