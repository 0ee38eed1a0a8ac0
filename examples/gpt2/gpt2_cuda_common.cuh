// What GPT-2's CUDA backend files share (gpt2_cuda*.cu). The backend is a
// user of examples/nn's CUDA device and layers (nn_cuda_ctx.cuh: the
// device's state, the storage types, packs, reductions, the matrix
// products, the attention, the classifier, the embedding, column sums, the
// profile), which it shares with the Llama family; this header adds
// GPT-2's own pieces, each file providing some to gpt2_cuda.cu, which
// composes them into gpt2_backend.h's ops:
//   gpt2_cuda_attention.cu   the block's attention half through the shared attention
//   gpt2_cuda_matmul.cu      the block's MLP half: c_fc with GELU in the epilogue or not
//   gpt2_cuda_layernorm.cu   LayerNorm forward and backward, a warp per row
//   gpt2_cuda_encoder.cu     token (shared) + position embeddings
//   gpt2_cuda_classifier.cu  the head: ln_f per chunk around the shared classifier
//   gpt2_cuda_elementwise.cu GELU and its gradient fused with c_fc's bias sum
//   gpt2_cuda_profile.cu     GPT-2's op names for the profile (GPT2_CUDA_PROFILE)
//
// The backend's state is the nn_device it created on the caller's stream
// (gpt2_backend::impl); its context (nncuda::ctx) holds GPT-2's options
// (gelu_fusion, unfused_bias, the fault hook) beside what every model
// shares. Storage, arithmetic and determinism are nn_cuda_ctx.cuh's.
#ifndef GPT2_CUDA_COMMON_CUH
#define GPT2_CUDA_COMMON_CUH

#include "gpt2_backend.h"
#include "gpt2_backend_impl.h"
#include "nn_layer_math.h"
#include "nn_cuda_ctx.cuh"

namespace gpt2cuda {

using namespace nncuda;

// The backend's device and its context.
inline nn_device *dev_of(gpt2_backend *be) { return be->dev; }
inline ctx *cx_of(gpt2_backend *be) { return ctx_of(dev_of(be)); }
inline const ctx *cx_of(const gpt2_backend *be) { return ctx_of(be->dev); }

// Where a backend op's argument checks write their message.
#define ERR_ARGS(cx) (cx)->err, NN_ERR_CAP

// ---------------------------------------------- gpt2_cuda_profile.cu

// GPT-2's own ops in the profile, after the shared ones (nn_cuda_ctx.cuh's
// prof_op); their names are in gpt2_cuda_profile.cu.
enum gpt2_prof_op {
    PROF_ENCODER_BWD_WPE = kProfModelBase,
    PROF_LAYERNORM_FWD,
    PROF_LAYERNORM_BWD_DWDB,
    PROF_LAYERNORM_BWD_DX,
    PROF_MATMUL_QKV_FWD,
    PROF_MATMUL_ATTPROJ_FWD,
    PROF_MATMUL_FC_FWD,
    PROF_GELU_FWD,
    PROF_MATMUL_FCPROJ_FWD,
    PROF_MATMUL_FCPROJ_DW,
    PROF_MATMUL_FCPROJ_DX,
    PROF_GELU_BWD_FCB_SUM,
    PROF_MATMUL_FC_DW,
    PROF_MATMUL_FC_DX,
    PROF_MATMUL_ATTPROJ_DW,
    PROF_MATMUL_ATTPROJ_DX,
    PROF_MATMUL_QKV_DW,
    PROF_MATMUL_QKV_DX,
    GPT2_PROF_END
};

// GPT2_CUDA_PROFILE's value (NULL or empty: no profile) checked before
// anything is created: NN_ERR_ARG with a message in err when malformed.
int profile_check(const char *spec, int *steps, int *warmup, char *err, size_t cap);
// Starts the device's profile with GPT-2's names.
int profile_start(ctx *cx, int steps, int warmup, char *err, size_t cap);

// --------------------------------------------- gpt2_cuda_layernorm.cu

// out = LayerNorm(x) with w, b; mean, rstd: [rows] fp32. A warp per row.
int layernorm_forward(ctx *cx, int rows, int C, const void *x, const void *w, const void *b,
                      void *out, float *mean, float *rstd);
// dx = dres + LayerNorm's input gradient (dres may be NULL or alias dx;
// dout may be dx too); dw, db += its parameter gradients.
int layernorm_backward(ctx *cx, int rows, int C, const void *dout, const void *x,
                       const float *mean, const float *rstd, const void *w, const void *dres,
                       void *dx, void *dw, void *db);

// ------------------------------------------- gpt2_cuda_elementwise.cu

// post = gelu(pre), n elements.
int gelu_forward(ctx *cx, long long n, const void *pre, void *post);
// d *= gelu'(pre) in place (d, pre: [rows][N]), and out[c] += the column
// sums of the new d.
int gelu_backward_colsum(ctx *cx, int rows, int N, void *d, const void *pre, void *out);

// --------------------------------------------- gpt2_cuda_attention.cu

// GPT-2's qkv rows for the shared attention: ld = 3C, q, k and v at 0, C
// and 2C, NH heads of C / NH (no grouping), atty rows of C.
nn_attn_layout attn_layout(const gpt2_dims *d, int B, int T);
// res1 = x + c_proj(attention(c_attn(ln1))): writes a->qkv, att, atty,
// res1. scratch: attention_scratch_bytes for this layout.
int attention_half_forward(ctx *cx, const gpt2_dims *d, int B, int T, const gpt2_block_w *w,
                           const void *x, gpt2_block_acts *a, void *scratch);
// From dres1 (d res1, [BT][C]): adds into attprojw/b and qkvw/b, writes
// dln1 = d ln1 [BT][C]; dqkv [BT][3C] and datt [B][NH][T][T] are scratch.
int attention_half_backward(ctx *cx, const gpt2_dims *d, int B, int T, const gpt2_block_w *w,
                            gpt2_block_w *g, const gpt2_block_acts *a, const void *dres1,
                            void *dqkv, void *datt, void *dln1, void *scratch);

// ------------------------------------------------ gpt2_cuda_matmul.cu

// fch = ln2 . W^T + b and fch_gelu = gelu(fch) (c_fc: one GEMM with
// cuBLASLt's GELU epilogue when the mode fuses, else a bias GEMM and the
// GELU kernel), then y = res1 + fch_gelu . W^T + b (c_proj).
int mlp_half_forward(ctx *cx, int BT, int C, const gpt2_block_w *w, gpt2_block_acts *a, void *y);
// From dy: adds into fcprojw/b and fcw/b, writes dln2 = d ln2 [BT][C];
// dfch [BT][4C] is scratch.
int mlp_half_backward(ctx *cx, int BT, int C, const gpt2_block_w *w, gpt2_block_w *g,
                      const gpt2_block_acts *a, const void *dy, void *dfch, void *dln2);

// ----------------------------------------------- gpt2_cuda_encoder.cu

int encoder_forward(ctx *cx, const gpt2_dims *d, int B, int T, const gpt2_embed_w *w,
                    const int *tokens, void *x);
int encoder_backward(ctx *cx, const gpt2_dims *d, int B, int T, gpt2_embed_w *g,
                     const int *tokens, const void *dx);

// -------------------------------------------- gpt2_cuda_classifier.cu

// The head (gpt2_backend.h's head ops) over chunks of rows; gradients only
// when g is not NULL.
int head_run(ctx *cx, const gpt2_dims *d, int BT, const gpt2_embed_w *w, gpt2_embed_w *g,
             const void *x, const int *targets, float dloss_scale, void *dx, float *losses,
             int chunk_rows, void *scratch);
size_t head_scratch_bytes(nn_dtype t, const gpt2_dims *d, int chunk_rows);
// The logits of one row into host_logits (fp32), waiting for them.
int head_logits_row(ctx *cx, const gpt2_dims *d, const gpt2_embed_w *w, const void *x, int row,
                    float *host_logits, void *scratch);

} // namespace gpt2cuda

#endif // GPT2_CUDA_COMMON_CUH
