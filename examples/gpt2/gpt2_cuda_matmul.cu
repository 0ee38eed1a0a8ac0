// The MLP half of GPT-2's block on CUDA, where GPT-2 uses the shared
// matmul's GELU epilogues (nn_cuda_matmul.cu): c_fc as one GEMM with
// cuBLASLt's GELU_AUX_BIAS epilogue (fch kept as the epilogue's aux output)
// and its input gradient with DGELU when the mode fuses them, else a bias
// GEMM and the GELU kernel, a plain GEMM and the fused GELU-gradient column
// sum; c_proj with the residual as the GEMM's C input. Fused and fallback
// launches are counted in the device's stats (gpt2_cuda_backend_stats).
#include "gpt2_cuda_common.cuh"

namespace gpt2cuda {

namespace {

// Whether cuBLASLt's GELU epilogues can take this shape at all: the aux
// (fch) has a leading dimension of 4C, which they need divisible by 8, and
// buffers of the 16-byte class (align_class: the decision must not depend
// on alignment beyond the class, or stages could differ). Anything else
// they refuse is found by matmul (NN_ERR_UNAVAILABLE, remembered per shape
// and class) and falls back the same way.
bool gelu_fusable(int C, const void *aux, const void *out) {
    return (4 * C) % 8 == 0 && align_class(aux) == kMaxAlignClass &&
           align_class(out) == kMaxAlignClass;
}

// fch = ln2 . W^T + b and fch_gelu = gelu(fch). Counted in the stats:
// fused, or fallback when the mode asked for the fusion.
int mlp_up(ctx *cx, int BT, int C, const gpt2_block_w *w, gpt2_block_acts *a) {
    if (cx->gelu_fusion >= 1) {
        if (gelu_fusable(C, a->fch, a->fch_gelu)) {
            const int s = timed(cx, PROF_MATMUL_FC_FWD, [&] {
                return matmul(cx, false, true, BT, 4 * C, C, a->ln2, C, w->fcw, C, nullptr,
                              a->fch_gelu, 4 * C, EPI_GELU_AUX, w->fcb, a->fch);
            });
            if (s == NN_OK) cx->stats.gelu_fused++;
            if (s != NN_ERR_UNAVAILABLE) return s;
        }
        cx->stats.gelu_fallback++;
    }
    TRY(timed(cx, PROF_MATMUL_FC_FWD, [&] {
        return matmul(cx, false, true, BT, 4 * C, C, a->ln2, C, w->fcw, C, nullptr, a->fch,
                      4 * C, EPI_BIAS, w->fcb, nullptr);
    }));
    return gelu_forward(cx, (long long)BT * 4 * C, a->fch, a->fch_gelu);
}

// dfch = (dy . W) * gelu'(fch), and fcb's gradient: the DGELU epilogue and
// a column sum when fused, else a GEMM and the fused GELU-gradient column
// sum. Counted in the stats like mlp_up.
int mlp_down_backward(ctx *cx, int BT, int C, const gpt2_block_w *w, gpt2_block_w *g,
                      const gpt2_block_acts *a, const void *dy, void *dfch) {
    if (cx->gelu_fusion >= 2) {
        if (gelu_fusable(C, a->fch, dfch)) {
            const int s = timed(cx, PROF_MATMUL_FCPROJ_DX, [&] {
                return matmul(cx, false, false, BT, 4 * C, C, dy, C, w->fcprojw, 4 * C, nullptr,
                              dfch, 4 * C, EPI_DGELU, nullptr, a->fch);
            });
            if (s == NN_OK) {
                cx->stats.dgelu_fused++;
                return colsum_add(cx, BT, 4 * C, dfch, 4 * C, g->fcb);
            }
            if (s != NN_ERR_UNAVAILABLE) return s;
        }
        cx->stats.dgelu_fallback++;
    }
    TRY(timed(cx, PROF_MATMUL_FCPROJ_DX, [&] {
        return matmul(cx, false, false, BT, 4 * C, C, dy, C, w->fcprojw, 4 * C, nullptr, dfch,
                      4 * C, EPI_NONE, nullptr, nullptr);
    }));
    return gelu_backward_colsum(cx, BT, 4 * C, dfch, a->fch, g->fcb);
}

} // namespace

int mlp_half_forward(ctx *cx, int BT, int C, const gpt2_block_w *w, gpt2_block_acts *a, void *y) {
    TRY(mlp_up(cx, BT, C, w, a));
    return timed(cx, PROF_MATMUL_FCPROJ_FWD, [&] {
        return matmul(cx, false, true, BT, C, 4 * C, a->fch_gelu, 4 * C, w->fcprojw, 4 * C,
                      a->res1, y, C, EPI_BIAS, w->fcprojb, nullptr);
    });
}

int mlp_half_backward(ctx *cx, int BT, int C, const gpt2_block_w *w, gpt2_block_w *g,
                      const gpt2_block_acts *a, const void *dy, void *dfch, void *dln2) {
    // dy reaches res1 directly (residual, the caller's) and through the MLP.
    TRY(colsum_add(cx, BT, C, dy, C, g->fcprojb));
    TRY(timed(cx, PROF_MATMUL_FCPROJ_DW, [&] {
        return matmul(cx, true, false, C, 4 * C, BT, dy, C, a->fch_gelu, 4 * C, g->fcprojw,
                      g->fcprojw, 4 * C, EPI_NONE, nullptr, nullptr);
    }));
    TRY(mlp_down_backward(cx, BT, C, w, g, a, dy, dfch));
    TRY(timed(cx, PROF_MATMUL_FC_DW, [&] {
        return matmul(cx, true, false, 4 * C, C, BT, dfch, 4 * C, a->ln2, C, g->fcw, g->fcw, C,
                      EPI_NONE, nullptr, nullptr);
    }));
    return timed(cx, PROF_MATMUL_FC_DX, [&] {
        return matmul(cx, false, false, BT, C, 4 * C, dfch, 4 * C, w->fcw, C, nullptr, dln2, C,
                      EPI_NONE, nullptr, nullptr);
    });
}

} // namespace gpt2cuda
