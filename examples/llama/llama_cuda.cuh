// What the Llama family's CUDA backend files share (llama_cuda.cu composes
// the backend's ops; llama_cuda_kernels.cu holds the family's own kernels:
// RMSNorm, RoPE, SwiGLU). Everything the family shares with GPT-2 (the
// device, matrix products, grouped-query attention, the classifier, the
// embedding, column sums, the profile) is examples/nn's
// (nn_cuda_ctx.cuh); storage, arithmetic and determinism are as described
// there: tensors in the device's dtype, fp32 arithmetic in every kernel
// through nn_layer_math.h's element functions, fixed orders, no atomics.
#ifndef LLAMA_CUDA_CUH
#define LLAMA_CUDA_CUH

#include "llama_backend.h"
#include "llama_backend_impl.h"
#include "nn_layer_math.h"
#include "nn_cuda_ctx.cuh"

namespace llamacuda {

using namespace nncuda;

// The family's own ops in the profile (LLAMA_CUDA_PROFILE), after the
// shared ones; their names are in llama_cuda.cu.
enum llama_prof_op {
    PROF_RMSNORM_FWD = kProfModelBase,
    PROF_RMSNORM_BWD_DW,
    PROF_RMSNORM_BWD_DX,
    PROF_MATMUL_QKV_FWD,
    PROF_ROPE_FWD,
    PROF_MATMUL_O_FWD,
    PROF_MATMUL_GATE_UP_FWD,
    PROF_SWIGLU_FWD,
    PROF_MATMUL_DOWN_FWD,
    PROF_MATMUL_DOWN_DW,
    PROF_MATMUL_DOWN_DX,
    PROF_SWIGLU_BWD,
    PROF_MATMUL_GATE_UP_DW,
    PROF_MATMUL_GATE_UP_DX,
    PROF_MATMUL_O_DW,
    PROF_MATMUL_O_DX,
    PROF_ROPE_BWD,
    PROF_MATMUL_QKV_DW,
    PROF_MATMUL_QKV_DX,
    LLAMA_PROF_END
};

// ------------------------------------------- llama_cuda_kernels.cu

// out = RMSNorm(x) with weight w (nn_rms_out), rstd: [rows] fp32 (the
// statistics in fp32: a warp per row, the mean square a warp sum).
int rmsnorm_forward(ctx *cx, int rows, int C, float eps, const void *x, const void *w,
                    void *out, float *rstd);
// dx = dres + RMSNorm's input gradient (nn_rms_dx; dres may be NULL or
// alias dx; dout may be dx when dres is NULL), and dw += sum over rows of
// dout * x * rstd by the shared deterministic column sums (first: they read
// dout).
int rmsnorm_backward(ctx *cx, int rows, int C, const void *dout, const void *x,
                     const float *rstd, const void *w, const void *dres, void *dx, void *dw);
// Rotates, in place, the first `heads` heads of hd elements of each of the
// BT rows of qkv (row stride ld; q's heads then k's from column 0) by the
// angles of position r % T (cos, sin: [>= T][hd / 2] fp32 on the device,
// llama_rope_table's), or by their transpose (backward: the gradient of
// the unrotated vector). Each thread rotates one pair (i, i + hd/2) through
// nn_rope_forward / nn_rope_backward.
int rope(ctx *cx, bool backward, long long BT, int T, int heads, int hd, int ld, void *qkv,
         const float *cos, const float *sin);
// h = silu(gate) * up, n elements (nn_swiglu).
int swiglu_forward(ctx *cx, long long n, const void *gate, const void *up, void *h);
// d: [rows][2F]: holds dh in columns [0, F) on entry; on return d gate
// there and d up in columns [F, 2F) (nn_swiglu_backward). gate, up:
// [rows][F].
int swiglu_backward(ctx *cx, int rows, int F, const void *gate, const void *up, void *d);

} // namespace llamacuda

#endif // LLAMA_CUDA_CUH
