// The CUDA backend of gpt2_backend.h: the CPU backend's algorithm (see
// gpt2_cpu.c), in the storage dtype the backend was created with, on the
// stream given at creation. This file holds the backend's state, its memory
// and transfer ops, and composes the blocks and the head from the kernels of
// the files beside it, one per op as in llm.c's llmc/:
//   gpt2_cuda_matmul.cu      cuBLASLt GEMMs with fused epilogues, batched GEMMs
//   gpt2_cuda_attention.cu   permutes, the causal softmax, attention fwd/bwd
//   gpt2_cuda_layernorm.cu   LayerNorm fwd/bwd, a warp per row
//   gpt2_cuda_encoder.cu     token + position embeddings fwd/bwd
//   gpt2_cuda_classifier.cu  the fused head: ln_f, logits, cross-entropy
//   gpt2_cuda_elementwise.cu GELU, bias-gradient column sums, loss sums
//   gpt2_cuda_profile.cu     GPT2_CUDA_PROFILE's per-op times
// (gpt2_cuda_common.cuh says what they share: storage types, determinism).
//
// A block, forward: ln_1; qkv = ln_1 . W^T + b (bias in the GEMM's epilogue);
// attention; res1 = x + atty . W^T + b (the residual is the GEMM's C input);
// ln_2; fch = ln_2 . W^T + b and fch_gelu = gelu(fch) (one GEMM with the
// GELU_AUX_BIAS epilogue when fused); y = res1 + fch_gelu . W^T + b.
// Backward: the same in reverse, weight gradients accumulated by GEMMs with
// beta = 1 into the gradients, bias gradients by deterministic column sums,
// the GELU's gradient in the DGELU epilogue when fused.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gpt2_cuda_common.cuh"

namespace gpt2cuda {

int fail(gpt2_backend *be, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gpt2__verror(impl_of(be)->err, GPT2_ERR_CAP, status, fmt, ap);
    va_end(ap);
    return status;
}

int ensure_work(gpt2_backend *be, size_t bytes) {
    cuda_impl *ci = impl_of(be);
    if (bytes <= ci->work_bytes) return GPT2_OK;
    // cudaFree waits for the device, so the old area is no longer in use.
    if (ci->work != nullptr) CU_TRY(cudaFree(ci->work));
    ci->work = nullptr;
    ci->work_bytes = 0;
    CU_TRY(cudaMalloc(&ci->work, bytes));
    ci->work_bytes = bytes;
    return GPT2_OK;
}

namespace {

// Bytes of cuBLASLt's workspace: what NVIDIA recommends for Hopper (and
// more than enough before it); allocated once at creation.
constexpr size_t kLtWorkspace = (size_t)32 << 20;

// ------------------------------------------------------- pinned buffers

pinned_buffer *pinned_find(cuda_impl *ci, const void *p) {
    const unsigned char *q = (const unsigned char *)p;
    for (int i = 0; i < kPinnedSlots; i++) {
        pinned_buffer *b = &ci->pinned[i];
        if (b->ptr != nullptr && q >= b->ptr && q < b->ptr + b->bytes) return b;
    }
    return nullptr;
}

int cuda_host_alloc(gpt2_backend *be, size_t bytes, void **out) {
    cuda_impl *ci = impl_of(be);
    *out = nullptr;
    pinned_buffer *slot = nullptr;
    for (int i = 0; i < kPinnedSlots && slot == nullptr; i++)
        if (ci->pinned[i].ptr == nullptr) slot = &ci->pinned[i];
    if (slot == nullptr)
        return fail(be, GPT2_ERR_NOMEM, "gpt2 cuda: host_alloc: all %d page-locked buffer slots "
                    "are in use; free one first", kPinnedSlots);
    void *p = nullptr;
    CU_TRY(cudaHostAlloc(&p, bytes > 0 ? bytes : 1, cudaHostAllocDefault));
    cudaEvent_t ev = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        cudaFreeHost(p);
        CU_TRY(e);
    }
    std::memset(p, 0, bytes);
    *slot = pinned_buffer{(unsigned char *)p, bytes > 0 ? bytes : 1, ev, false};
    *out = p;
    return GPT2_OK;
}

void cuda_host_free(gpt2_backend *be, void *host) {
    if (host == nullptr) return;
    pinned_buffer *b = pinned_find(impl_of(be), host);
    if (b == nullptr) return;
    // The buffer's last transfer completes before the memory goes.
    if (b->used) (void)cudaEventSynchronize(b->last_use);
    cudaFreeHost(b->ptr);
    cudaEventDestroy(b->last_use);
    *b = pinned_buffer{nullptr, 0, nullptr, false};
}

int pinned_or_fail(gpt2_backend *be, const void *host, const char *op, pinned_buffer **out) {
    *out = pinned_find(impl_of(be), host);
    if (*out == nullptr)
        return fail(be, GPT2_ERR_ARG, "gpt2 cuda %s: the host buffer does not come from "
                    "host_alloc (page-locked memory is needed for a transfer that does not wait)",
                    op);
    return GPT2_OK;
}

int cuda_upload_async(gpt2_backend *be, void *dst, const void *host_src, size_t bytes) {
    cuda_impl *ci = impl_of(be);
    if (bytes == 0) return GPT2_OK;
    TRY(gpt2__check_ptr("upload_async", "dst", dst, ERR_ARGS(be)));
    pinned_buffer *b = nullptr;
    TRY(pinned_or_fail(be, host_src, "upload_async", &b));
    CU_TRY(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, ci->stream));
    CU_TRY(cudaEventRecord(b->last_use, ci->stream));
    b->used = true;
    return GPT2_OK;
}

int cuda_host_wait(gpt2_backend *be, const void *host) {
    pinned_buffer *b = nullptr;
    TRY(pinned_or_fail(be, host, "host_wait", &b));
    if (b->used) CU_TRY(cudaEventSynchronize(b->last_use));
    return GPT2_OK;
}

// --------------------------------------------------------- memory ops

int cuda_alloc(gpt2_backend *be, size_t bytes, void **out) {
    if (out == nullptr) return fail(be, GPT2_ERR_ARG, "gpt2 cuda alloc: out is NULL");
    *out = nullptr;
    void *p = nullptr;
    // cudaMalloc aligns to at least 256 bytes; 0 bytes would give NULL.
    CU_TRY(cudaMalloc(&p, bytes > 0 ? bytes : 1));
    // Zeroed before alloc returns, not just in stream order: the memory may
    // be written next through another stream or a synchronous copy.
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, impl_of(be)->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(impl_of(be)->stream);
    if (e != cudaSuccess) {
        cudaFree(p);
        CU_TRY(e);
    }
    *out = p;
    return GPT2_OK;
}

void cuda_free(gpt2_backend *be, void *ptr) {
    (void)be;
    if (ptr != nullptr) cudaFree(ptr); // nothing to report to: free cannot fail usefully
}

int cuda_zero(gpt2_backend *be, void *ptr, size_t bytes) {
    if (bytes == 0) return GPT2_OK;
    TRY(gpt2__check_ptr("zero", "ptr", ptr, ERR_ARGS(be)));
    CU_TRY(cudaMemsetAsync(ptr, 0, bytes, impl_of(be)->stream));
    return GPT2_OK;
}

int cuda_upload(gpt2_backend *be, void *dst, const void *host_src, size_t bytes) {
    if (bytes == 0) return GPT2_OK;
    TRY(gpt2__check_ptr("upload", "dst", dst, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("upload", "host_src", host_src, ERR_ARGS(be)));
    // Waits, so that host_src may be reused at return even if it is pinned
    // (then the copy is truly asynchronous).
    CU_TRY(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, impl_of(be)->stream));
    CU_TRY(cudaStreamSynchronize(impl_of(be)->stream));
    return GPT2_OK;
}

int cuda_download(gpt2_backend *be, void *host_dst, const void *src, size_t bytes) {
    if (bytes == 0) return GPT2_OK;
    TRY(gpt2__check_ptr("download", "host_dst", host_dst, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("download", "src", src, ERR_ARGS(be)));
    CU_TRY(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, impl_of(be)->stream));
    CU_TRY(cudaStreamSynchronize(impl_of(be)->stream));
    return GPT2_OK;
}

int cuda_copy(gpt2_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return GPT2_OK;
    TRY(gpt2__check_ptr("copy", "dst", dst, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("copy", "src", src, ERR_ARGS(be)));
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, impl_of(be)->stream));
    return GPT2_OK;
}

int cuda_synchronize(gpt2_backend *be) {
    CU_TRY(cudaStreamSynchronize(impl_of(be)->stream));
    return GPT2_OK;
}

const char *cuda_last_error(const gpt2_backend *be) { return impl_of(be)->err; }

int cuda_losses_sum(gpt2_backend *be, const float *losses, int n, double *host_out) {
    cuda_impl *ci = impl_of(be);
    TRY(gpt2__check_ptr("losses_sum", "losses", losses, ERR_ARGS(be)));
    pinned_buffer *b = nullptr;
    TRY(pinned_or_fail(be, host_out, "losses_sum", &b));
    TRY(losses_sum_device(be, losses, n, ci->loss_dev));
    CU_TRY(cudaMemcpyAsync(host_out, ci->loss_dev, sizeof(double), cudaMemcpyDeviceToHost,
                           ci->stream));
    CU_TRY(cudaEventRecord(b->last_use, ci->stream));
    b->used = true;
    return GPT2_OK;
}

// ------------------------------------------------------------ scratch

// block_backward's scratch (block_forward uses a part of it): d fch [BT][4C]
// (later d qkv), d mid [BT][C], the score gradients [B][NH][T][T], and the
// attention's head-layout buffers.
struct block_parts {
    void *dbig, *dmid, *datt, *attn;
};

block_parts carve_block(const gpt2_backend *be, const gpt2_dims *d, int B, int T, void *s) {
    const size_t e = gpt2_dtype_size(be->dtype), BT = (size_t)B * T, C = (size_t)d->n_embd;
    unsigned char *p = (unsigned char *)s;
    block_parts b;
    b.dbig = p;
    p += round_up(BT * 4 * C * e);
    b.dmid = p;
    p += round_up(BT * C * e);
    b.datt = p;
    p += round_up((size_t)B * d->n_head * T * T * e);
    b.attn = p;
    return b;
}

size_t cuda_block_scratch_bytes(const gpt2_backend *be, const gpt2_dims *d, int B, int T) {
    if (B < 1 || T < 1) return 0;
    const size_t e = gpt2_dtype_size(be->dtype), BT = (size_t)B * T, C = (size_t)d->n_embd;
    return round_up(BT * 4 * C * e) + round_up(BT * C * e) +
           round_up((size_t)B * d->n_head * T * T * e) + attention_scratch_bytes(be, d, B, T);
}

size_t cuda_head_scratch_bytes(const gpt2_backend *be, const gpt2_dims *d, int chunk_rows) {
    return head_scratch_bytes(be, d, chunk_rows);
}

// ---------------------------------------------------------- the model

int cuda_embed_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T, const gpt2_embed_w *w,
                       const int *tokens, void *x) {
    TRY(gpt2__check_shape("embed_forward", d, B, T, ERR_ARGS(be)));
    TRY(gpt2__check_embed_w("embed_forward", "w", w, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("embed_forward", "tokens", tokens, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("embed_forward", "x", x, ERR_ARGS(be)));
    prof_step_begin(impl_of(be));
    return encoder_forward(be, d, B, T, w, tokens, x);
}

int cuda_embed_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T, gpt2_embed_w *g,
                        const int *tokens, const void *dx) {
    TRY(gpt2__check_shape("embed_backward", d, B, T, ERR_ARGS(be)));
    TRY(gpt2__check_embed_w("embed_backward", "g", g, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("embed_backward", "tokens", tokens, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("embed_backward", "dx", dx, ERR_ARGS(be)));
    TRY(encoder_backward(be, d, B, T, g, tokens, dx));
    prof_step_end(impl_of(be)); // a training micro-step ends here
    return GPT2_OK;
}

// Whether cuBLASLt's GELU epilogues can take this shape at all: the aux
// (fch) has a leading dimension of 4C, which they need divisible by 8, and
// buffers of the 16-byte class (align_class: the decision must not depend
// on alignment beyond the class, or stages could differ). Anything else
// they refuse is found by matmul (GPT2_ERR_UNAVAILABLE, remembered per
// shape and class) and falls back the same way.
bool gelu_fusable(int C, const void *aux, const void *out) {
    return (4 * C) % 8 == 0 && align_class(aux) == kMaxAlignClass &&
           align_class(out) == kMaxAlignClass;
}

// fch = ln2 . W^T + b and fch_gelu = gelu(fch): one GEMM with cuBLASLt's
// GELU epilogue when fused (it keeps fch as the epilogue's aux output), else
// a GEMM with the bias epilogue and the GELU kernel. Counted in the stats:
// fused, or fallback when the mode asked for the fusion.
int mlp_up(gpt2_backend *be, int BT, int C, const gpt2_block_w *w, gpt2_block_acts *a) {
    cuda_impl *ci = impl_of(be);
    if (ci->gelu_fusion >= 1) {
        if (gelu_fusable(C, a->fch, a->fch_gelu)) {
            const int s = timed(be, PROF_MATMUL_FC_FWD, [&] {
                return matmul(be, false, true, BT, 4 * C, C, a->ln2, C, w->fcw, C, nullptr,
                              a->fch_gelu, 4 * C, EPI_GELU_AUX, w->fcb, a->fch);
            });
            if (s == GPT2_OK) ci->stats.gelu_fused++;
            if (s != GPT2_ERR_UNAVAILABLE) return s;
        }
        ci->stats.gelu_fallback++;
    }
    TRY(timed(be, PROF_MATMUL_FC_FWD, [&] {
        return matmul(be, false, true, BT, 4 * C, C, a->ln2, C, w->fcw, C, nullptr, a->fch,
                      4 * C, EPI_BIAS, w->fcb, nullptr);
    }));
    return gelu_forward(be, (long long)BT * 4 * C, a->fch, a->fch_gelu);
}

int cuda_block_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T, const gpt2_block_w *w,
                       const void *x, gpt2_block_acts *a, void *y, void *scratch) {
    cuda_impl *ci = impl_of(be);
    TRY(gpt2__check_shape("block_forward", d, B, T, ERR_ARGS(be)));
    TRY(gpt2__check_block_w("block_forward", "w", w, ERR_ARGS(be)));
    TRY(gpt2__check_acts("block_forward", a, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("block_forward", "x", x, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("block_forward", "y", y, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("block_forward", "scratch", scratch, ERR_ARGS(be)));
    const int BT = B * T, C = d->n_embd;
    const block_parts s = carve_block(be, d, B, T, scratch);
    // Attention half: res1 = x + c_proj(attn(ln_1(x))).
    TRY(layernorm_forward(be, BT, C, x, w->ln1w, w->ln1b, a->ln1, a->ln1_mean, a->ln1_rstd));
    TRY(timed(be, PROF_MATMUL_QKV_FWD, [&] {
        if (ci->fault == FAULT_QKV_TRANSPOSED) // the test hook's wrong operand: W read as [in][out]
            return matmul(be, false, false, BT, 3 * C, C, a->ln1, C, w->qkvw, 3 * C, nullptr,
                          a->qkv, 3 * C, EPI_BIAS, w->qkvb, nullptr);
        return matmul(be, false, true, BT, 3 * C, C, a->ln1, C, w->qkvw, C, nullptr, a->qkv,
                      3 * C, EPI_BIAS, w->qkvb, nullptr);
    }));
    TRY(attention_forward(be, d, B, T, a->qkv, a->att, a->atty, s.attn));
    TRY(timed(be, PROF_MATMUL_ATTPROJ_FWD, [&] {
        return matmul(be, false, true, BT, C, C, a->atty, C, w->attprojw, C, x, a->res1, C,
                      EPI_BIAS, w->attprojb, nullptr);
    }));
    // MLP half: y = res1 + c_proj(gelu(c_fc(ln_2(res1)))).
    TRY(layernorm_forward(be, BT, C, a->res1, w->ln2w, w->ln2b, a->ln2, a->ln2_mean,
                          a->ln2_rstd));
    TRY(mlp_up(be, BT, C, w, a));
    TRY(timed(be, PROF_MATMUL_FCPROJ_FWD, [&] {
        return matmul(be, false, true, BT, C, 4 * C, a->fch_gelu, 4 * C, w->fcprojw, 4 * C,
                      a->res1, y, C, EPI_BIAS, w->fcprojb, nullptr);
    }));
    return GPT2_OK;
}

// d fch = (dy . W) * gelu'(fch), and fcb's gradient: the DGELU epilogue and
// a column sum when fused, else a GEMM and the fused GELU-gradient column
// sum. Counted in the stats like mlp_up.
int mlp_down_backward(gpt2_backend *be, int BT, int C, const gpt2_block_w *w, gpt2_block_w *g,
                      const gpt2_block_acts *a, const void *dy, void *dbig) {
    cuda_impl *ci = impl_of(be);
    if (ci->gelu_fusion >= 2) {
        if (gelu_fusable(C, a->fch, dbig)) {
            const int s = timed(be, PROF_MATMUL_FCPROJ_DX, [&] {
                return matmul(be, false, false, BT, 4 * C, C, dy, C, w->fcprojw, 4 * C, nullptr,
                              dbig, 4 * C, EPI_DGELU, nullptr, a->fch);
            });
            if (s == GPT2_OK) {
                ci->stats.dgelu_fused++;
                return colsum_add(be, BT, 4 * C, dbig, g->fcb);
            }
            if (s != GPT2_ERR_UNAVAILABLE) return s;
        }
        ci->stats.dgelu_fallback++;
    }
    TRY(timed(be, PROF_MATMUL_FCPROJ_DX, [&] {
        return matmul(be, false, false, BT, 4 * C, C, dy, C, w->fcprojw, 4 * C, nullptr, dbig,
                      4 * C, EPI_NONE, nullptr, nullptr);
    }));
    return gelu_backward_colsum(be, BT, 4 * C, dbig, a->fch, g->fcb);
}

int cuda_block_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                        const gpt2_block_w *w, gpt2_block_w *g, const void *x,
                        const gpt2_block_acts *a, const void *dy, void *dx, void *scratch) {
    TRY(gpt2__check_shape("block_backward", d, B, T, ERR_ARGS(be)));
    TRY(gpt2__check_block_w("block_backward", "w", w, ERR_ARGS(be)));
    TRY(gpt2__check_block_w("block_backward", "g", g, ERR_ARGS(be)));
    TRY(gpt2__check_acts("block_backward", a, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("block_backward", "x", x, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("block_backward", "dy", dy, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("block_backward", "dx", dx, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("block_backward", "scratch", scratch, ERR_ARGS(be)));
    const int BT = B * T, C = d->n_embd;
    const block_parts s = carve_block(be, d, B, T, scratch);

    // MLP half. dy reaches res1 directly (residual) and through the MLP.
    TRY(colsum_add(be, BT, C, dy, g->fcprojb));
    TRY(timed(be, PROF_MATMUL_FCPROJ_DW, [&] {
        return matmul(be, true, false, C, 4 * C, BT, dy, C, a->fch_gelu, 4 * C, g->fcprojw,
                      g->fcprojw, 4 * C, EPI_NONE, nullptr, nullptr);
    }));
    TRY(mlp_down_backward(be, BT, C, w, g, a, dy, s.dbig));
    TRY(timed(be, PROF_MATMUL_FC_DW, [&] {
        return matmul(be, true, false, 4 * C, C, BT, s.dbig, 4 * C, a->ln2, C, g->fcw, g->fcw, C,
                      EPI_NONE, nullptr, nullptr);
    }));
    TRY(timed(be, PROF_MATMUL_FC_DX, [&] {
        return matmul(be, false, false, BT, C, 4 * C, s.dbig, 4 * C, w->fcw, C, nullptr, s.dmid,
                      C, EPI_NONE, nullptr, nullptr);
    }));
    // dx holds d res1 = dy + ln_2's input gradient from here on.
    TRY(layernorm_backward(be, BT, C, s.dmid, a->res1, a->ln2_mean, a->ln2_rstd, w->ln2w, dy, dx,
                           g->ln2w, g->ln2b));

    // Attention half, the same way with d res1.
    TRY(colsum_add(be, BT, C, dx, g->attprojb));
    TRY(timed(be, PROF_MATMUL_ATTPROJ_DW, [&] {
        return matmul(be, true, false, C, C, BT, dx, C, a->atty, C, g->attprojw, g->attprojw, C,
                      EPI_NONE, nullptr, nullptr);
    }));
    TRY(timed(be, PROF_MATMUL_ATTPROJ_DX, [&] {
        return matmul(be, false, false, BT, C, C, dx, C, w->attprojw, C, nullptr, s.dmid, C,
                      EPI_NONE, nullptr, nullptr);
    }));
    TRY(attention_backward(be, d, B, T, a->qkv, a->att, s.dmid, s.dbig, s.datt, s.attn));
    TRY(colsum_add(be, BT, 3 * C, s.dbig, g->qkvb));
    TRY(timed(be, PROF_MATMUL_QKV_DW, [&] {
        return matmul(be, true, false, 3 * C, C, BT, s.dbig, 3 * C, a->ln1, C, g->qkvw, g->qkvw,
                      C, EPI_NONE, nullptr, nullptr);
    }));
    TRY(timed(be, PROF_MATMUL_QKV_DX, [&] {
        return matmul(be, false, false, BT, C, 3 * C, s.dbig, 3 * C, w->qkvw, C, nullptr, s.dmid,
                      C, EPI_NONE, nullptr, nullptr);
    }));
    TRY(layernorm_backward(be, BT, C, s.dmid, x, a->ln1_mean, a->ln1_rstd, w->ln1w, dx, dx,
                           g->ln1w, g->ln1b));
    return GPT2_OK;
}

int check_head(gpt2_backend *be, const char *op, const gpt2_dims *d, int B, int T,
               const gpt2_embed_w *w, const void *x, int chunk_rows, const void *scratch) {
    TRY(gpt2__check_shape(op, d, B, T, ERR_ARGS(be)));
    TRY(gpt2__check_embed_w(op, "w", w, ERR_ARGS(be)));
    TRY(gpt2__check_ptr(op, "x", x, ERR_ARGS(be)));
    TRY(gpt2__check_ptr(op, "scratch", scratch, ERR_ARGS(be)));
    if (chunk_rows < 1) {
        return fail(be, GPT2_ERR_ARG,
                    "gpt2 %s: chunk_rows = %d; need >= 1 (default "
                    "GPT2_HEAD_CHUNK_ROWS_DEFAULT_GPU)",
                    op, chunk_rows);
    }
    return GPT2_OK;
}

int cuda_head_forward_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                               const gpt2_embed_w *w, gpt2_embed_w *g, const void *x,
                               const int *targets, float dloss_scale, void *dx, float *losses,
                               int chunk_rows, void *scratch) {
    const char *op = "head_forward_backward";
    TRY(check_head(be, op, d, B, T, w, x, chunk_rows, scratch));
    TRY(gpt2__check_embed_w(op, "g", g, ERR_ARGS(be)));
    TRY(gpt2__check_ptr(op, "targets", targets, ERR_ARGS(be)));
    TRY(gpt2__check_ptr(op, "dx", dx, ERR_ARGS(be)));
    TRY(gpt2__check_ptr(op, "losses", losses, ERR_ARGS(be)));
    return head_run(be, d, B * T, w, g, x, targets, dloss_scale, dx, losses, chunk_rows,
                    scratch);
}

int cuda_head_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T, const gpt2_embed_w *w,
                      const void *x, const int *targets, float *losses, int chunk_rows,
                      void *scratch) {
    const char *op = "head_forward";
    TRY(check_head(be, op, d, B, T, w, x, chunk_rows, scratch));
    TRY(gpt2__check_ptr(op, "targets", targets, ERR_ARGS(be)));
    TRY(gpt2__check_ptr(op, "losses", losses, ERR_ARGS(be)));
    return head_run(be, d, B * T, w, nullptr, x, targets, 0.0f, nullptr, losses, chunk_rows,
                    scratch);
}

int cuda_head_logits(gpt2_backend *be, const gpt2_dims *d, int B, int T, const gpt2_embed_w *w,
                     const void *x, int row, float *host_logits, void *scratch) {
    const char *op = "head_logits";
    TRY(check_head(be, op, d, B, T, w, x, 1, scratch));
    TRY(gpt2__check_ptr(op, "host_logits", host_logits, ERR_ARGS(be)));
    if (row < 0 || (long long)row >= (long long)B * T) {
        return fail(be, GPT2_ERR_ARG, "gpt2 %s: row %d is outside [0, B * T = %lld)", op, row,
                    (long long)B * T);
    }
    return head_logits_row(be, d, w, x, row, host_logits, scratch);
}

// --------------------------------------------------------- lifetime

void cuda_destroy(gpt2_backend *be) {
    if (be == nullptr) return;
    cuda_impl *ci = impl_of(be);
    // Errors here have no one to go to; the stream and device stay usable
    // for the caller whatever they are.
    cudaStreamSynchronize(ci->stream);
    if (ci->prof != nullptr) {
        // The user asked for the profile (GPT2_CUDA_PROFILE): it goes to
        // stderr now that every event has completed; a backend whose
        // creation failed has nothing to report.
        char line[512];
        gpt2_cuda_backend_stats(be, nullptr, line, sizeof line);
        profiler_destroy(ci, ci->ready ? line : nullptr);
    }
    for (int i = 0; i < kPinnedSlots; i++) cuda_host_free(be, ci->pinned[i].ptr);
    matmul_cache_destroy(ci);
    // The handles first: the classic one uses lt_workspace as its own.
    if (ci->lt != nullptr) cublasLtDestroy(ci->lt);
    if (ci->blas != nullptr) cublasDestroy(ci->blas);
    if (ci->work != nullptr) cudaFree(ci->work);
    if (ci->lt_workspace != nullptr) cudaFree(ci->lt_workspace);
    if (ci->loss_dev != nullptr) cudaFree(ci->loss_dev);
    std::free(ci);
    std::free(be);
}

gpt2_backend_ops make_ops() {
    gpt2_backend_ops o;
    std::memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.alloc = cuda_alloc;
    o.free = cuda_free;
    o.zero = cuda_zero;
    o.upload = cuda_upload;
    o.download = cuda_download;
    o.copy = cuda_copy;
    o.synchronize = cuda_synchronize;
    o.last_error = cuda_last_error;
    o.host_alloc = cuda_host_alloc;
    o.host_free = cuda_host_free;
    o.upload_async = cuda_upload_async;
    o.host_wait = cuda_host_wait;
    o.losses_sum = cuda_losses_sum;
    o.block_scratch_bytes = cuda_block_scratch_bytes;
    o.head_scratch_bytes = cuda_head_scratch_bytes;
    o.embed_forward = cuda_embed_forward;
    o.embed_backward = cuda_embed_backward;
    o.block_forward = cuda_block_forward;
    o.block_backward = cuda_block_backward;
    o.head_forward_backward = cuda_head_forward_backward;
    o.head_forward = cuda_head_forward;
    o.head_logits = cuda_head_logits;
    o.destroy = cuda_destroy;
    return o;
}

const gpt2_backend_ops cuda_ops = make_ops();

// GPT2_CUDA_FAULT (tests only): a deliberately wrong kernel.
int fault_from_env() {
    const char *f = std::getenv("GPT2_CUDA_FAULT");
    if (f == nullptr || *f == '\0') return FAULT_NONE;
    if (std::strcmp(f, "softmax_no_mask") == 0) return FAULT_SOFTMAX_NO_MASK;
    if (std::strcmp(f, "qkv_transposed") == 0) return FAULT_QKV_TRANSPOSED;
    return FAULT_NONE;
}

} // namespace

} // namespace gpt2cuda

using namespace gpt2cuda;

extern "C" int gpt2_cuda_backend_create(void *cuda_stream, const gpt2_cuda_options *options,
                                        gpt2_backend **out, char *err, size_t cap) {
    if (out == nullptr || options == nullptr) {
        return gpt2__error(err, cap, GPT2_ERR_ARG, "gpt2 cuda: out and options are required");
    }
    *out = nullptr;
    if (options->dtype != GPT2_F32 && options->dtype != GPT2_BF16 && options->dtype != GPT2_F16)
        return gpt2__error(err, cap, GPT2_ERR_ARG, "gpt2 cuda: unknown dtype %d",
                           (int)options->dtype);
    if (options->gelu_fusion < -1 || options->gelu_fusion > 2)
        return gpt2__error(err, cap, GPT2_ERR_ARG,
                           "gpt2 cuda: gelu_fusion = %d; use -1 (the device's default), 0 "
                           "(none), 1 (forward) or 2 (forward and backward)",
                           options->gelu_fusion);
    int devices = 0;
    cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) {
        return gpt2__error(err, cap, GPT2_ERR_UNAVAILABLE,
                           "gpt2 cuda: no usable CUDA device (%s); check the driver and "
                           "CUDA_VISIBLE_DEVICES, or use the cpu backend",
                           e != cudaSuccess ? cudaGetErrorString(e)
                                            : "cudaGetDeviceCount found 0 devices");
    }
    auto *be = static_cast<gpt2_backend *>(std::calloc(1, sizeof(gpt2_backend)));
    auto *ci = static_cast<cuda_impl *>(std::calloc(1, sizeof(cuda_impl)));
    if (be == nullptr || ci == nullptr) {
        std::free(be);
        std::free(ci);
        return gpt2__error(err, cap, GPT2_ERR_NOMEM, "gpt2 cuda: out of host memory");
    }
    be->ops = &cuda_ops;
    be->impl = ci;
    be->dtype = options->dtype;
    ci->dtype = options->dtype;
    ci->stream = static_cast<cudaStream_t>(cuda_stream);
    ci->fault = fault_from_env();
    ci->unfused_bias = options->unfused_bias != 0;
    const int prof_status = profiler_create(ci, std::getenv("GPT2_CUDA_PROFILE"), err, cap);
    if (prof_status != GPT2_OK) {
        cuda_destroy(be);
        return prof_status;
    }
    const char *what = nullptr;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    int sm_minor = 0;
    e = cudaGetDevice(&ci->device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&ci->sm_major, cudaDevAttrComputeCapabilityMajor, ci->device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&sm_minor, cudaDevAttrComputeCapabilityMinor, ci->device);
    ci->sm = ci->sm_major * 10 + sm_minor;
    if (e == cudaSuccess) e = cudaMalloc(&ci->lt_workspace, kLtWorkspace);
    if (e == cudaSuccess) e = cudaMalloc(reinterpret_cast<void **>(&ci->loss_dev), sizeof(double));
    if (e != cudaSuccess) {
        gpt2__error(err, cap, e == cudaErrorMemoryAllocation ? GPT2_ERR_NOMEM : GPT2_ERR_DEVICE,
                    "gpt2 cuda: starting the backend failed: %s", cudaGetErrorString(e));
        cuda_destroy(be);
        return e == cudaErrorMemoryAllocation ? GPT2_ERR_NOMEM : GPT2_ERR_DEVICE;
    }
    ci->lt_workspace_bytes = kLtWorkspace;
    // GELU in the epilogue from Hopper on, in bf16/fp16: the default
    // llm.c's usage text names (its code still picks 0; gpt2_backend.h),
    // not yet measured against the unfused path, which the GPU check does
    // (bench_gpt2_cuda.sh GELU_FUSION="0 2"). fp32, the exact mode, keeps
    // gpt2_math.h's GELU.
    ci->gelu_fusion = options->gelu_fusion >= 0 ? options->gelu_fusion
                      : options->dtype != GPT2_F32 && ci->sm_major >= 9 ? 2
                                                                         : 0;
    // Full fp32 products in fp32 (no TF32) and no atomics inside cuBLAS, so
    // that its results are deterministic.
    if ((st = cublasCreate(&ci->blas)) != CUBLAS_STATUS_SUCCESS) {
        what = "cublasCreate";
    } else if ((st = cublasSetStream(ci->blas, ci->stream)) != CUBLAS_STATUS_SUCCESS) {
        what = "cublasSetStream";
    } else if ((st = cublasSetWorkspace(ci->blas, ci->lt_workspace, ci->lt_workspace_bytes)) !=
               CUBLAS_STATUS_SUCCESS) {
        // After cublasSetStream, which resets it: cuBLAS promises the same
        // bits with other streams running only with a workspace of the
        // handle's own. The Lt GEMMs' workspace serves: both handles
        // enqueue on this one stream, in order.
        what = "cublasSetWorkspace";
    } else if ((st = cublasSetMathMode(ci->blas, CUBLAS_DEFAULT_MATH)) !=
               CUBLAS_STATUS_SUCCESS) {
        what = "cublasSetMathMode";
    } else if ((st = cublasSetAtomicsMode(ci->blas, CUBLAS_ATOMICS_NOT_ALLOWED)) !=
               CUBLAS_STATUS_SUCCESS) {
        what = "cublasSetAtomicsMode";
    } else if ((st = cublasLtCreate(&ci->lt)) != CUBLAS_STATUS_SUCCESS) {
        what = "cublasLtCreate";
    }
    if (what != nullptr) {
        gpt2__error(err, cap, GPT2_ERR_DEVICE, "gpt2 cuda: %s failed: %s (%s)", what,
                    cublasGetStatusName(st), cublasGetStatusString(st));
        cuda_destroy(be);
        return GPT2_ERR_DEVICE;
    }
    ci->ready = true;
    *out = be;
    return GPT2_OK;
}

extern "C" int gpt2_cuda_backend_stats(const gpt2_backend *be, gpt2_cuda_stats *out, char *line,
                                       size_t cap) {
    if (line != nullptr && cap > 0) line[0] = '\0';
    if (be == nullptr || be->ops != &cuda_ops) return GPT2_ERR_ARG;
    const cuda_impl *ci = impl_of(be);
    gpt2_cuda_stats s = ci->stats;
    s.sm = ci->sm;
    s.gelu_fusion = ci->gelu_fusion;
    s.unfused_bias = ci->unfused_bias ? 1 : 0;
    if (out != nullptr) *out = s;
    if (line != nullptr && cap > 0)
        std::snprintf(line, cap,
                      "fusion: bias fused %lld fallback %lld; gelu fused %lld fallback %lld; "
                      "dgelu fused %lld fallback %lld; gemm lt %lld classic %lld "
                      "(gelu_fusion %d, unfused_bias %d, sm_%d)",
                      s.bias_fused, s.bias_fallback, s.gelu_fused, s.gelu_fallback,
                      s.dgelu_fused, s.dgelu_fallback, s.gemm_lt, s.gemm_classic, s.gelu_fusion,
                      s.unfused_bias, s.sm);
    return GPT2_OK;
}
