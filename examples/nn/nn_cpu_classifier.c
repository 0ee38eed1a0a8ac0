/*
 * The fused classifier on the CPU (nn_cpu.h): per chunk of rows, logits,
 * softmax cross-entropy and its backward, so that the [rows][V] logits
 * never exist for more than one chunk.
 */
#include <stddef.h>

#include <cblas.h>

#include "cpu_blas.h"
#include "nn_cpu.h"
#include "nn_math.h"

void nn_cpu_classifier_chunk(int n, int C, int V, const float *xn, const float *W,
                             const int *targets, float dloss_scale, float *losses, float *logits,
                             float *gW, float *dxn) {
    // logits: [n][V] = xn . W^T
    ex_sgemm(0, 1, n, V, C, 1.0f, xn, C, W, C, 0.0f, logits, V);
    // The backward runs when either gradient is wanted (gW NULL: a frozen
    // classifier, whose input gradient still flows).
    const int want_grad = gW != NULL || dxn != NULL;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        losses[i] = nn_xent_row(V, logits + (size_t)i * V, targets[i], dloss_scale, want_grad);
    }
    if (!want_grad) {
        return;
    }
    // gW: [V][C] += dlogits^T . xn; dxn = dlogits . W.
    nn_cpu_linear_backward(n, C, V, xn, C, W, logits, V, gW, dxn, C, 0.0f);
}

void nn_cpu_classifier_logits_row(int C, int V, const float *xn, const float *W, float *logits) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, V, C, 1.0f, W, C, xn, 1, 0.0f, logits, 1);
}
