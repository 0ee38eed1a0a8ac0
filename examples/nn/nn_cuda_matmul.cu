// The matrix products of every model on a CUDA device (GPT-2's and the
// Llama family's, once): cuBLASLt for the model's GEMMs (bias, residual and
// GELU fused in the epilogue; leading dimensions that read or write columns
// of a wider row), cublasGemmStridedBatchedEx for the attention's per-head
// products.
//
// Layout: cuBLAS is column-major and our tensors are row-major. A row-major
// [r][c] matrix with leading dimension ld is, read column-major, its
// transpose, so a row-major D = op(A) op(B) is computed as the column-major
// D^T = op(B)^T op(A)^T: cuBLAS's first operand is our B, its second our A,
// and every call site reads like cblas_sgemm(CblasRowMajor, ...).
//
// Precision: inputs and outputs in the device's dtype, accumulation and
// scaling in fp32 (CUBLAS_COMPUTE_32F: in fp32 this is full fp32, no TF32;
// in bf16 and fp16 it is tensor cores with fp32 accumulators).
//
// Determinism: cuBLASLt's heuristic returns the same algorithm for the same
// shapes, layouts and alignment classes on the same GPU (the algorithm is chosen
// once per key and cached), every GEMM gets the device's own workspace, and
// split-K reduction schemes are limited to those that combine partial sums
// in a fixed order (INPLACE is left out as a precaution: it is sequential
// too, but writes partial results into D). The classic handle (the batched
// attention GEMMs) runs with atomics disallowed and its own workspace, which
// cuBLAS requires for the same bits while other streams (zeroshard's) run.
//
// Alignment: cuBLASLt's heuristic judges A, B, C and D by the minimum
// alignments the preferences state, and the bias and aux matrices by the
// pointers on the descriptor. Each is clamped to an alignment class of at
// most 16 bytes (kMaxAlignClass), in the cache key and in what the
// heuristic is shown. 16 bytes covers the widest loads (128-bit vectors;
// Hopper's TMA needs 16-byte addresses), while stage 0's flat parameter
// buffer, stage 3's live buffers and the activations' 256-byte carving
// start tensors at 32, 64 or 256-byte boundaries by chance of layout: a
// kernel that asked for more would be chosen in one stage and not in
// another. Keyed on the raw alignment (up to 256 bytes), the
// same product could get another algorithm in another stage (another
// summation order: other bits), or a fused epilogue in one stage and the
// fallback in another; clamped, the algorithm and the fused-or-fallback
// choice are functions of the shapes and of the classes 1, 2, 4, 8 or 16,
// which ZeRO's layout (zero.align, 16 elements by default) keeps at 16 in
// every stage. The heuristic is shown the bias and aux as pointers into the
// workspace with exactly the class's alignment, so the first caller's
// pointer cannot sway it either; each launch sets the real ones.
//
// Fallbacks: any refusal of an epilogue, by the heuristic or at launch, is
// remembered for its key. The bias epilogue then runs as the plain product
// and add_bias (two roundings instead of one); the GELU epilogues return
// NN_ERR_UNAVAILABLE and the callers run their unfused path; a plain
// product cuBLASLt has no algorithm for runs through classic cuBLAS (its
// handle has atomics disallowed; it picks its kernel per shape too, and the
// clamped classes that select the fallback are the same in every stage).
#include <cstring>

#include "nn_cuda_ctx.cuh"

namespace nncuda {

namespace {

cublasLtEpilogue_t lt_epilogue(epilogue e) {
    switch (e) {
    case EPI_BIAS:
        return CUBLASLT_EPILOGUE_BIAS;
    case EPI_GELU_AUX:
        return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case EPI_DGELU:
        return CUBLASLT_EPILOGUE_DGELU;
    case EPI_NONE:
        break;
    }
    return CUBLASLT_EPILOGUE_DEFAULT;
}

void entry_destroy(matmul_entry *e) {
    if (!e->valid) return;
    if (e->d) cublasLtMatrixLayoutDestroy(e->d);
    if (e->c) cublasLtMatrixLayoutDestroy(e->c);
    if (e->b) cublasLtMatrixLayoutDestroy(e->b);
    if (e->a) cublasLtMatrixLayoutDestroy(e->a);
    if (e->desc) cublasLtMatmulDescDestroy(e->desc);
    std::memset(e, 0, sizeof *e);
}

#define LT_SET(call)                                                                          \
    do {                                                                                      \
        cublasStatus_t lt_set_st_ = (call);                                                   \
        if (lt_set_st_ != CUBLAS_STATUS_SUCCESS) {                                            \
            entry_destroy(e);                                                                 \
            return fail(cx, NN_ERR_DEVICE, "cuda: %s failed at %s:%d: %s (%s)", #call,       \
                        __FILE__, __LINE__, cublasGetStatusName(lt_set_st_),                  \
                        cublasGetStatusString(lt_set_st_));                                   \
        }                                                                                     \
    } while (0)

bool is_gelu(int epi) { return epi == EPI_GELU_AUX || epi == EPI_DGELU; }

// A device pointer with exactly `align_bytes` of alignment (a class below
// 256, the workspace's own alignment): what the heuristic is shown for the
// bias and aux, so that it judges the class, not the caller's pointer.
const void *representative(const ctx *cx, int align_bytes) {
    return static_cast<const unsigned char *>(cx->lt_workspace) + align_bytes;
}

// Builds the descriptors of `key` in slot e and asks the heuristic for an
// algorithm (e->supported = false when it has none, or when an epilogue is
// refused in any way: the callers fall back).
int entry_create(ctx *cx, const matmul_key &key, matmul_entry *e) {
    std::memset(e, 0, sizeof *e);
    e->key = key;
    e->valid = true;
    const cudaDataType_t type = cuda_type_of((nn_dtype)key.dtype);
    LT_SET(cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_x = key.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_y = key.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_SET(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_x,
                                          sizeof op_x));
    LT_SET(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_y,
                                          sizeof op_y));
    const cublasLtEpilogue_t epi = lt_epilogue((epilogue)key.epilogue);
    LT_SET(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                          sizeof epi));
    if (key.epilogue == EPI_BIAS || key.epilogue == EPI_GELU_AUX) {
    const void *bias = representative(cx, key.align_bias);
        LT_SET(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type,
                                              sizeof type));
        LT_SET(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                              sizeof bias));
    }
    if (is_gelu(key.epilogue)) {
    // The aux matrix's type is left at its default, D's type: cuBLASLt
        // documents setting CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE for
        // fp8 outputs only, and a value set for a combination it does not
        // support makes cublasLtMatmul fail with CUBLAS_STATUS_INVALID_VALUE
        // (cublasLt.h), which would silently send every GELU to the unfused
        // path. llm.c, whose fused GELU runs, leaves it unset too.
        const int64_t ld = key.ldc;
        const void *aux = representative(cx, key.align_aux);
        LT_SET(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                              sizeof ld));
        LT_SET(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                              &aux, sizeof aux));
    }
    // Column-major views (see the top of the file): cuBLASLt's A is our B,
    // its B our A, its D our D transposed.
    const uint64_t x_rows = key.tb ? key.K : key.N, x_cols = key.tb ? key.N : key.K;
    const uint64_t y_rows = key.ta ? key.M : key.K, y_cols = key.ta ? key.K : key.M;
    LT_SET(cublasLtMatrixLayoutCreate(&e->a, type, x_rows, x_cols, key.ldb));
    LT_SET(cublasLtMatrixLayoutCreate(&e->b, type, y_rows, y_cols, key.lda));
    LT_SET(cublasLtMatrixLayoutCreate(&e->c, type, key.N, key.M, key.ldc));
    LT_SET(cublasLtMatrixLayoutCreate(&e->d, type, key.N, key.M, key.ldc));

    cublasLtMatmulPreference_t pref = nullptr;
    LT_SET(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t workspace = cx->lt_workspace_bytes;
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_INPLACE;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                  &schemes, sizeof schemes);
    // The clamped classes, never the raw alignments (see the top of the
    // file); cuBLASLt's A is our B and its B our A.
    const struct {
    cublasLtMatmulPreferenceAttributes_t attr;
        uint32_t bytes;
    } aligns[4] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, (uint32_t)key.align_b},
                   {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, (uint32_t)key.align_a},
                   {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, (uint32_t)key.align_c},
                   {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, (uint32_t)key.align_d}};
    for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i].attr, &aligns[i].bytes,
                                                  sizeof aligns[i].bytes);
    cublasLtMatmulHeuristicResult_t result;
    std::memset(&result, 0, sizeof result);
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(cx->lt, e->desc, e->a, e->b, e->c, e->d, pref, 1,
                                            &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    // No algorithm is an answer, not a failure: the caller falls back. The
    // result's fields count only when its own state says success. Any other
    // refusal of an epilogue, or of a plain product, falls back too (the
    // fallbacks compute the same product by other means; a real argument
    // error shows there).
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE ||
        (st == CUBLAS_STATUS_SUCCESS && (found == 0 || result.state != CUBLAS_STATUS_SUCCESS)) ||
        (st != CUBLAS_STATUS_SUCCESS && key.epilogue != EPI_NONE)) {
    e->supported = false;
        return NN_OK;
    }
    LT_SET(st);
    e->algo = result.algo;
    e->supported = true;
    return NN_OK;
}

#undef LT_SET

// The cached entry of `key`, made on first use; the cache is a ring.
int entry_for(ctx *cx, const matmul_key &key, matmul_entry **out) {
    for (int i = 0; i < kMatmulCache; i++) {
    matmul_entry *e = &cx->matmuls[i];
        if (e->valid && std::memcmp(&e->key, &key, sizeof key) == 0) {
            *out = e;
            return NN_OK;
        }
    }
    matmul_entry *e = &cx->matmuls[cx->matmul_next];
    cx->matmul_next = (cx->matmul_next + 1) % kMatmulCache;
    entry_destroy(e);
    TRY(entry_create(cx, key, e));
    *out = e;
    return NN_OK;
}

// One cuBLASLt product with epilogue `epi`; NN_ERR_UNAVAILABLE (no
// message, nothing written) when cuBLASLt refuses it for this key, now or
// at an earlier call.
int lt_matmul(ctx *cx, bool ta, bool tb, int M, int N, int K, const void *A, int lda,
              const void *B, int ldb, const void *c, void *d, int ldc, epilogue epi,
              const void *bias, void *aux) {
    matmul_key key;
    std::memset(&key, 0, sizeof key); // the key is compared as bytes
    key.ta = ta;
    key.tb = tb;
    key.M = M;
    key.N = N;
    key.K = K;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    key.epilogue = epi;
    key.has_c = c != nullptr;
    key.align_a = align_class(A);
    key.align_b = align_class(B);
    key.align_c = align_class(c != nullptr ? c : d);
    key.align_d = align_class(d);
    key.align_bias = bias != nullptr ? align_class(bias) : 0;
    key.align_aux = aux != nullptr ? align_class(aux) : 0;
    key.dtype = cx->dtype;
    matmul_entry *e = nullptr;
    TRY(entry_for(cx, key, &e));
    if (!e->supported) return NN_ERR_UNAVAILABLE;
    if (epi == EPI_BIAS || epi == EPI_GELU_AUX)
        BLAS_TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof bias));
    if (is_gelu(epi))
        BLAS_TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                &aux, sizeof aux));
    const float alpha = 1.0f, beta = c != nullptr ? 1.0f : 0.0f;
    const cublasStatus_t st =
        cublasLtMatmul(cx->lt, e->desc, &alpha, B, e->a, A, e->b, &beta, c ? c : d, e->c, d,
                       e->d, &e->algo, cx->lt_workspace, cx->lt_workspace_bytes, cx->stream);
    // Refused at launch (nothing was written): remembered for the key, so
    // that every later call of this shape and class takes the same path.
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
    e->supported = false;
        return NN_ERR_UNAVAILABLE;
    }
    BLAS_TRY(st);
    cx->stats.gemm_lt++;
    return NN_OK;
}

// The same product through classic cuBLAS (cublasGemmEx, fp32 compute, no
// TF32, atomics disallowed: deterministic), for shapes cuBLASLt has no
// algorithm for. cublasGemmEx accumulates in place, so a separate C is
// first copied into D.
int classic_matmul(ctx *cx, bool ta, bool tb, int M, int N, int K, const void *A,
                   int lda, const void *B, int ldb, const void *c, void *d, int ldc) {
    const cudaDataType_t type = cuda_type_of(cx->dtype);
    const size_t e = nn_dtype_size(cx->dtype);
    if (c != nullptr && c != d)
        CU_TRY(cudaMemcpy2DAsync(d, (size_t)ldc * e, c, (size_t)ldc * e, (size_t)N * e,
                                 (size_t)M, cudaMemcpyDeviceToDevice, cx->stream));
    const float alpha = 1.0f, beta = c != nullptr ? 1.0f : 0.0f;
    BLAS_TRY(cublasGemmEx(cx->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                          N, M, K, &alpha, B, type, ldb, A, type, lda, &beta, d, type, ldc,
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    cx->stats.gemm_classic++;
    return NN_OK;
}

// A product without epilogue: cuBLASLt, or classic cuBLAS where it has no
// algorithm.
int plain_matmul(ctx *cx, bool ta, bool tb, int M, int N, int K, const void *A, int lda,
                 const void *B, int ldb, const void *c, void *d, int ldc) {
    const int s = lt_matmul(cx, ta, tb, M, N, K, A, lda, B, ldb, c, d, ldc, EPI_NONE, nullptr,
                            nullptr);
    if (s != NN_ERR_UNAVAILABLE) return s;
    return classic_matmul(cx, ta, tb, M, N, K, A, lda, B, ldb, c, d, ldc);
}

} // namespace

int align_class(const void *p) {
    const uintptr_t bits = (uintptr_t)p | (uintptr_t)kMaxAlignClass;
    return (int)(bits & (~bits + 1)); // the lowest set bit
}

int matmul(ctx *cx, bool ta, bool tb, int M, int N, int K, const void *A, int lda,
           const void *B, int ldb, const void *c, void *d, int ldc, epilogue epi,
           const void *bias, void *aux) {
    if (M <= 0 || N <= 0) return NN_OK;
    switch (epi) {
    case EPI_NONE:
        return plain_matmul(cx, ta, tb, M, N, K, A, lda, B, ldb, c, d, ldc);
    case EPI_BIAS:
        if (!cx->unfused_bias) {
            const int s =
                lt_matmul(cx, ta, tb, M, N, K, A, lda, B, ldb, c, d, ldc, EPI_BIAS, bias, nullptr);
            if (s != NN_ERR_UNAVAILABLE) {
                if (s == NN_OK) cx->stats.bias_fused++;
                return s;
            }
        }
        // D = A.B (+ C), then D += bias: the epilogue's sum in two roundings.
        TRY(plain_matmul(cx, ta, tb, M, N, K, A, lda, B, ldb, c, d, ldc));
        TRY(add_bias(cx, M, N, d, ldc, bias));
        cx->stats.bias_fallback++;
        return NN_OK;
    case EPI_GELU_AUX:
    case EPI_DGELU:
        break;
    }
    return lt_matmul(cx, ta, tb, M, N, K, A, lda, B, ldb, c, d, ldc, epi, bias, aux);
}

int matmul_batched(ctx *cx, bool ta, bool tb, int M, int N, int K, const void *A, int lda,
                   long long sA, const void *B, int ldb, long long sB, float beta, void *C,
                   int ldc, long long sC, int count) {
    const cudaDataType_t type = cuda_type_of(cx->dtype);
    const float alpha = 1.0f;
    BLAS_TRY(cublasGemmStridedBatchedEx(cx->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, type,
                                        ldb, sB, A, type, lda, sA, &beta, C, type, ldc, sC, count,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return NN_OK;
}

void matmul_cache_destroy(ctx *cx) {
    for (int i = 0; i < kMatmulCache; i++) entry_destroy(&cx->matmuls[i]);
}

} // namespace nncuda
