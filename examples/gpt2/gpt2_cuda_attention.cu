// The attention half of GPT-2's block on CUDA: c_attn (q, k and v of every
// head in one [BT][3C] row, bias in the GEMM's epilogue), the shared causal
// attention (nn_cuda_attention.cu, with NKV = NH: one head per batch, the
// products llm.c runs), and c_proj with the residual as the GEMM's C input.
// The backward runs the same in reverse: weight gradients accumulated by
// GEMMs with beta = 1, bias gradients by the shared column sums.
#include "gpt2_cuda_common.cuh"

namespace gpt2cuda {

nn_attn_layout attn_layout(const gpt2_dims *d, int B, int T) {
    const int C = d->n_embd;
    nn_attn_layout s;
    s.B = B;
    s.T = T;
    s.n_head = d->n_head;
    s.n_kv_head = d->n_head;
    s.head_dim = C / d->n_head;
    s.ld = 3 * C;
    s.q_off = 0;
    s.k_off = C;
    s.v_off = 2 * C;
    s.ldy = C;
    return s;
}

int attention_half_forward(ctx *cx, const gpt2_dims *d, int B, int T, const gpt2_block_w *w,
                           const void *x, gpt2_block_acts *a, void *scratch) {
    const int BT = B * T, C = d->n_embd;
    TRY(timed(cx, PROF_MATMUL_QKV_FWD, [&] {
        if (cx->fault == FAULT_QKV_TRANSPOSED) // the test hook's wrong operand: W read as [in][out]
            return matmul(cx, false, false, BT, 3 * C, C, a->ln1, C, w->qkvw, 3 * C, nullptr,
                          a->qkv, 3 * C, EPI_BIAS, w->qkvb, nullptr);
        return matmul(cx, false, true, BT, 3 * C, C, a->ln1, C, w->qkvw, C, nullptr, a->qkv,
                      3 * C, EPI_BIAS, w->qkvb, nullptr);
    }));
    const nn_attn_layout s = attn_layout(d, B, T);
    TRY(attention_forward(cx, &s, a->qkv, a->att, a->atty, scratch));
    return timed(cx, PROF_MATMUL_ATTPROJ_FWD, [&] {
        return matmul(cx, false, true, BT, C, C, a->atty, C, w->attprojw, C, x, a->res1, C,
                      EPI_BIAS, w->attprojb, nullptr);
    });
}

int attention_half_backward(ctx *cx, const gpt2_dims *d, int B, int T, const gpt2_block_w *w,
                            gpt2_block_w *g, const gpt2_block_acts *a, const void *dres1,
                            void *dqkv, void *datt, void *dln1, void *scratch) {
    const int BT = B * T, C = d->n_embd;
    // dln1 holds d atty until the attention's backward has read it.
    void *datty = dln1;
    TRY(colsum_add(cx, BT, C, dres1, C, g->attprojb));
    TRY(timed(cx, PROF_MATMUL_ATTPROJ_DW, [&] {
        return matmul(cx, true, false, C, C, BT, dres1, C, a->atty, C, g->attprojw, g->attprojw,
                      C, EPI_NONE, nullptr, nullptr);
    }));
    TRY(timed(cx, PROF_MATMUL_ATTPROJ_DX, [&] {
        return matmul(cx, false, false, BT, C, C, dres1, C, w->attprojw, C, nullptr, datty, C,
                      EPI_NONE, nullptr, nullptr);
    }));
    const nn_attn_layout s = attn_layout(d, B, T);
    TRY(attention_backward(cx, &s, a->qkv, a->att, datty, dqkv, datt, scratch));
    TRY(colsum_add(cx, BT, 3 * C, dqkv, 3 * C, g->qkvb));
    TRY(timed(cx, PROF_MATMUL_QKV_DW, [&] {
        return matmul(cx, true, false, 3 * C, C, BT, dqkv, 3 * C, a->ln1, C, g->qkvw, g->qkvw, C,
                      EPI_NONE, nullptr, nullptr);
    }));
    return timed(cx, PROF_MATMUL_QKV_DX, [&] {
        return matmul(cx, false, false, BT, C, 3 * C, dqkv, 3 * C, w->qkvw, C, nullptr, dln1, C,
                      EPI_NONE, nullptr, nullptr);
    });
}

} // namespace gpt2cuda
