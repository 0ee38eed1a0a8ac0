/*
 * nn_cpu — the CPU layers the examples' models share, on fp32 host
 * pointers: linear layers (one GEMM each through ex_sgemm, bias and residual
 * riding on beta = 1), column sums, causal attention with grouped-query
 * heads, and the fused classifier (logits, cross-entropy and their backward
 * for a chunk of rows). The CPU's layer table (nn_cpu_layers.c) calls them,
 * beside its own loops (LayerNorm and GELU; RMSNorm, RoPE and SwiGLU).
 *
 * Conventions:
 *   - Row-major; a Linear weight W is [out][in] (y = x W^T + b); "ld" is a
 *     matrix's row stride in floats, so a layer may read or write columns
 *     of a wider row (q, k and v into one row of the attention's input).
 *   - Nothing allocates, nothing fails: shapes are the caller's to check.
 *   - Deterministic and thread-count independent: every product is cut by
 *     ex_sgemm into tiles fixed by its shape, a row's math runs in one
 *     thread, and every sum over rows is split by columns, each column
 *     adding its rows in ascending order. Parameter gradients are ADDED to
 *     (g += ...); input gradients are written unless a function says so.
 *   - Built with -O3 -fno-trapping-math (see examples/nn/CMakeLists.txt):
 *     the loops between the products are written for the vectorizer.
 */
#ifndef NN_CPU_H
#define NN_CPU_H

#ifdef __cplusplus
extern "C" {
#endif

/* Columns per tile of the column-sum loops: wide enough for SIMD and whole
 * cache lines, narrow enough that [BT][4C] splits into many tiles for the
 * threads. A layout constant, not a tuning knob: results do not depend on it
 * (each column's order is ascending rows whatever the tile). */
#define NN_CPU_COL_TILE 64

/* ------------------------------------------------------------- linear */

/*
 * y[r][0..out) = res[r] + b + x[r] . W^T for r < rows, x: [rows][in] (row
 * stride ldx), W: [out][in], b: [out] or NULL, res: [rows][out] (stride
 * ldres) or NULL, y: [rows][out] (stride ldy). The rows start as res + b
 * and the GEMM adds onto them (beta = 1), so the bias and the residual cost
 * no pass of their own; with neither, the GEMM writes y (beta = 0). y must
 * not alias x; it may be res itself (same pointer and stride), in place.
 */
void nn_cpu_linear_forward(int rows, int in, int out, const float *x, int ldx, const float *W,
                           const float *b, const float *res, int ldres, float *y, int ldy);

/*
 * The backward of y = x W^T (+ b): dW: [out][in] += dy^T . x, and, when dx
 * is not NULL, dx: [rows][in] = dx_beta * dx + dy . W (dx_beta 0: written;
 * 1: added, for an input that feeds several layers, e.g. q, k and v). dy:
 * [rows][out] (stride lddy), x stride ldx, dx stride lddx. Bias gradients
 * are column sums the caller does (nn_cpu_colsum_add), possibly fused with
 * another pass.
 */
void nn_cpu_linear_backward(int rows, int in, int out, const float *x, int ldx, const float *W,
                            const float *dy, int lddy, float *dW, float *dx, int lddx,
                            float dx_beta);

/* out[c] += sum over r of a[r][c] for c < N, rows in ascending order; a:
 * [rows][N] with row stride lda. */
void nn_cpu_colsum_add(int rows, int N, const float *a, int lda, float *out);

/* ---------------------------------------------------------- attention */

/*
 * Where causal grouped-query attention finds its inputs: B sequences of T
 * rows; row r of qkv (stride ld floats) holds NH query heads of hd floats
 * side by side from column q_off, NKV key heads from k_off and NKV value
 * heads from v_off. Query head h reads K/V head h / (NH / NKV): each K/V
 * head serves a group of NH / NKV consecutive query heads (NKV == NH is
 * plain multi-head attention; GPT-2: ld = 3C, offsets 0, C, 2C). The
 * output atty (and its gradient) has NH heads side by side from column 0,
 * row stride ldy.
 */
typedef struct nn_attn_layout {
    int B, T;
    int n_head, n_kv_head, head_dim;
    int ld, q_off, k_off, v_off;
    int ldy;
} nn_attn_layout;

/*
 * atty = softmax(scale q k^T, causal) v per (sequence, query head), scale =
 * 1/sqrt(hd); att: [B][NH][T][T] keeps the probabilities (0 above the
 * diagonal). Per (b, h) the products are [T][hd] x [hd][T] and [T][T] x
 * [T][hd] read in place from qkv's rows and written in place into atty's.
 */
void nn_cpu_attention_forward(const nn_attn_layout *s, const float *qkv, float *att,
                              float *atty);

/*
 * The backward: datty (stride ldy) -> dqkv (the same layout as qkv; its
 * q, k and v columns written, others untouched). datt: [NH][T][T] scratch
 * for one sequence's score gradients. A K/V head's gradient is the sum over
 * the query heads of its group, added in ascending head order by one
 * thread (deterministic).
 */
void nn_cpu_attention_backward(const nn_attn_layout *s, const float *qkv, const float *att,
                               const float *datty, float *dqkv, float *datt);

/* --------------------------------------------------------- classifier */

/*
 * One chunk of n rows of the fused classifier, after the model's final
 * norm: logits: [n][V] = xn: [n][C] . W^T with W: [V][C] (the output
 * projection: lm_head, or the tied embedding), losses[i] = softmax
 * cross-entropy of row i against targets[i] (nn_xent_row). With gW or dxn
 * not NULL (training), logits becomes dloss_scale * dloss/dlogits, gW (when
 * not NULL; NULL: a frozen classifier) += dlogits^T . xn and dxn (when not
 * NULL): [n][C] = dlogits . W; with both NULL (evaluation) only losses are
 * written. The caller runs the chunks of its rows
 * in order and keeps n fixed, so the sums into gW run in a fixed order.
 */
void nn_cpu_classifier_chunk(int n, int C, int V, const float *xn, const float *W,
                             const int *targets, float dloss_scale, float *losses, float *logits,
                             float *gW, float *dxn);

/* One row's logits for sampling: logits: [V] = W: [V][C] . xn: [C]. */
void nn_cpu_classifier_logits_row(int C, int V, const float *xn, const float *W, float *logits);

/* ------------------------------------------------------------- losses */

/* sum of losses[0..n) in double, in index order: the devices' losses_sum
 * (the CPU's at once, the simulated device's as a kernel). */
double nn_cpu_losses_total(const float *losses, int n);

#ifdef __cplusplus
}
#endif
#endif /* NN_CPU_H */
