/*
 * Linear layers and column sums on the CPU (nn_cpu.h): every product is one
 * ex_sgemm, cut into tiles fixed by its shape (examples/common/cpu_blas.h),
 * so no bit depends on the number of threads.
 */
#include <stddef.h>
#include <string.h>

#include "cpu_blas.h"
#include "nn_cpu.h"

void nn_cpu_linear_forward(int rows, int in, int out, const float *x, int ldx, const float *W,
                           const float *b, const float *res, int ldres, float *y, int ldy) {
    float beta = 0.0f;
    if (b != NULL || (res != NULL && res != y)) {
#pragma omp parallel for schedule(static)
        for (int r = 0; r < rows; r++) {
            float *yr = y + (size_t)r * (size_t)ldy;
            if (res != NULL) {
                const float *rr = res + (size_t)r * (size_t)ldres;
                if (b != NULL) {
                    for (int o = 0; o < out; o++) {
                        yr[o] = rr[o] + b[o];
                    }
                } else {
                    memcpy(yr, rr, sizeof(float) * (size_t)out);
                }
            } else {
                memcpy(yr, b, sizeof(float) * (size_t)out);
            }
        }
        beta = 1.0f;
    } else if (res != NULL) {
        beta = 1.0f; /* in place: y already holds the residual */
    }
    ex_sgemm(0, 1, rows, out, in, 1.0f, x, ldx, W, in, beta, y, ldy);
}

void nn_cpu_linear_backward(int rows, int in, int out, const float *x, int ldx, const float *W,
                            const float *dy, int lddy, float *dW, float *dx, int lddx,
                            float dx_beta) {
    if (dW != NULL) { /* NULL: a frozen weight, no gradient */
        ex_sgemm(1, 0, out, in, rows, 1.0f, dy, lddy, x, ldx, 1.0f, dW, in);
    }
    if (dx != NULL) {
        ex_sgemm(0, 0, rows, in, out, 1.0f, dy, lddy, W, in, dx_beta, dx, lddx);
    }
}

void nn_cpu_colsum_add(int rows, int N, const float *a, int lda, float *out) {
    const int tiles = (N + NN_CPU_COL_TILE - 1) / NN_CPU_COL_TILE;
#pragma omp parallel for schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        const int c0 = tile * NN_CPU_COL_TILE;
        const int w = N - c0 < NN_CPU_COL_TILE ? N - c0 : NN_CPU_COL_TILE;
        float acc[NN_CPU_COL_TILE] = {0.0f};
        for (int r = 0; r < rows; r++) {
            const float *row = a + (size_t)r * (size_t)lda + (size_t)c0;
            for (int j = 0; j < w; j++) {
                acc[j] += row[j];
            }
        }
        for (int j = 0; j < w; j++) {
            out[c0 + j] += acc[j];
        }
    }
}
