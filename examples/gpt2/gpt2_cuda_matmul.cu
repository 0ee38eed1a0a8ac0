// The CUDA backend's matrix products: cuBLASLt for the model's GEMMs (bias,
// residual and GELU fused in the epilogue), cublasGemmStridedBatchedEx for
// the attention's per-head products.
//
// Layout: cuBLAS is column-major and our tensors are row-major. A row-major
// [r][c] matrix with leading dimension ld is, read column-major, its
// transpose, so a row-major D = op(A) op(B) is computed as the column-major
// D^T = op(B)^T op(A)^T: cuBLAS's first operand is our B, its second our A,
// and every call site reads like cblas_sgemm(CblasRowMajor, ...).
//
// Precision: inputs and outputs in the backend's dtype, accumulation and
// scaling in fp32 (CUBLAS_COMPUTE_32F: in fp32 this is full fp32, no TF32;
// in bf16 and fp16 it is tensor cores with fp32 accumulators).
//
// Determinism: cuBLASLt's heuristic returns the same algorithm for the same
// shapes, layouts and alignments on the same GPU (the algorithm is chosen
// once per key and cached), every GEMM gets the backend's own workspace, and
// split-K reduction schemes are limited to those that combine partial sums
// in a fixed order (INPLACE is left out as a precaution: it is sequential
// too, but writes partial results into D). The classic handle (the batched
// attention GEMMs) runs with atomics disallowed and its own workspace, which
// cuBLAS requires for the same bits while other streams (zeroshard's) run.
//
// Alignment: the heuristic reads the bias and aux pointers' values to know
// their alignment, so they are set on the descriptor before it runs, and
// their alignments are part of the cache key. The GELU epilogues have more
// requirements (an aux leading dimension divisible by 8, supported types):
// any refusal of theirs, by the heuristic or at launch, is reported as
// GPT2_ERR_UNAVAILABLE and the callers fall back to the unfused path.
#include <cstring>

#include "gpt2_cuda_common.cuh"

namespace gpt2cuda {

namespace {

// The alignment (a power of two, at most 256 bytes) of every pointer given.
int common_alignment(const void *const *ptrs, int n) {
    uintptr_t bits = 256;
    for (int i = 0; i < n; i++) {
        if (ptrs[i] == nullptr) continue;
        bits |= (uintptr_t)ptrs[i];
    }
    return (int)(bits & (~bits + 1)); // lowest set bit
}

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
            return fail(be, GPT2_ERR_DEVICE, "gpt2 cuda: %s failed at %s:%d: %s (%s)", #call, \
                        __FILE__, __LINE__, cublasGetStatusName(lt_set_st_),                  \
                        cublasGetStatusString(lt_set_st_));                                   \
        }                                                                                     \
    } while (0)

bool is_gelu(int epi) { return epi == EPI_GELU_AUX || epi == EPI_DGELU; }

// Builds the descriptors of `key` in slot e and asks the heuristic for an
// algorithm (e->supported = 0 when it has none, or when a GELU epilogue is
// refused in any way). bias and aux are the call's pointers: the heuristic
// judges their alignment from them.
int entry_create(gpt2_backend *be, const matmul_key &key, const void *bias, const void *aux,
                 matmul_entry *e) {
    cuda_impl *ci = impl_of(be);
    std::memset(e, 0, sizeof *e);
    e->key = key;
    e->valid = true;
    const cudaDataType_t type = cuda_type_of((gpt2_dtype)key.dtype);
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
        LT_SET(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type,
                                              sizeof type));
        LT_SET(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                              sizeof bias));
    }
    if (is_gelu(key.epilogue)) {
        const int64_t ld = key.ldc;
        LT_SET(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                              sizeof ld));
        LT_SET(cublasLtMatmulDescSetAttribute(e->desc,
                                              CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &type,
                                              sizeof type));
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
    const uint64_t workspace = ci->lt_workspace_bytes;
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_INPLACE;
    const uint32_t align = (uint32_t)key.align;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                  &schemes, sizeof schemes);
    const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof align);
    cublasLtMatmulHeuristicResult_t result;
    std::memset(&result, 0, sizeof result);
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(ci->lt, e->desc, e->a, e->b, e->c, e->d, pref, 1,
                                            &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    // No algorithm is an answer, not a failure: the caller may fall back.
    // The result's fields count only when its own state says success.
    if (st == CUBLAS_STATUS_NOT_SUPPORTED ||
        (st == CUBLAS_STATUS_SUCCESS && (found == 0 || result.state != CUBLAS_STATUS_SUCCESS)) ||
        (st != CUBLAS_STATUS_SUCCESS && is_gelu(key.epilogue))) {
        e->supported = false;
        return GPT2_OK;
    }
    LT_SET(st);
    e->algo = result.algo;
    e->supported = true;
    return GPT2_OK;
}

#undef LT_SET

// The cached entry of `key`, made on first use; the cache is a ring.
int entry_for(gpt2_backend *be, const matmul_key &key, const void *bias, const void *aux,
              matmul_entry **out) {
    cuda_impl *ci = impl_of(be);
    for (int i = 0; i < kMatmulCache; i++) {
        matmul_entry *e = &ci->matmuls[i];
        if (e->valid && std::memcmp(&e->key, &key, sizeof key) == 0) {
            *out = e;
            return GPT2_OK;
        }
    }
    matmul_entry *e = &ci->matmuls[ci->matmul_next];
    ci->matmul_next = (ci->matmul_next + 1) % kMatmulCache;
    entry_destroy(e);
    TRY(entry_create(be, key, bias, aux, e));
    *out = e;
    return GPT2_OK;
}

} // namespace

cudaDataType_t cuda_type_of(gpt2_dtype t) {
    return t == GPT2_BF16 ? CUDA_R_16BF : t == GPT2_F16 ? CUDA_R_16F : CUDA_R_32F;
}

int matmul(gpt2_backend *be, bool ta, bool tb, int M, int N, int K, const void *A, int lda,
           const void *B, int ldb, const void *c, void *d, int ldc, epilogue epi,
           const void *bias, void *aux) {
    cuda_impl *ci = impl_of(be);
    if (M <= 0 || N <= 0) return GPT2_OK;
    const void *ptrs[5] = {A, B, c, d, aux};
    matmul_key key;
    std::memset(&key, 0, sizeof key);
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
    key.align = common_alignment(ptrs, 5);
    key.bias_align = bias != nullptr ? common_alignment(&bias, 1) : 0;
    key.dtype = ci->dtype;
    matmul_entry *e = nullptr;
    TRY(entry_for(be, key, bias, aux, &e));
    if (!e->supported) {
        if (is_gelu(epi)) return GPT2_ERR_UNAVAILABLE;
        return fail(be, GPT2_ERR_DEVICE,
                    "gpt2 cuda: cuBLASLt has no algorithm for a %s %dx%dx%d product (ta %d, tb "
                    "%d, lda %d, ldb %d, ldc %d, alignment %d)",
                    gpt2_dtype_name(ci->dtype), M, N, K, (int)ta, (int)tb, lda, ldb, ldc,
                    key.align);
    }
    if (epi == EPI_BIAS || epi == EPI_GELU_AUX)
        BLAS_TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof bias));
    if (epi == EPI_GELU_AUX || epi == EPI_DGELU)
        BLAS_TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                &aux, sizeof aux));
    const float alpha = 1.0f, beta = c != nullptr ? 1.0f : 0.0f;
    const cublasStatus_t st =
        cublasLtMatmul(ci->lt, e->desc, &alpha, B, e->a, A, e->b, &beta, c ? c : d, e->c, d,
                       e->d, &e->algo, ci->lt_workspace, ci->lt_workspace_bytes, ci->stream);
    // A GELU epilogue refused at launch (nothing was written): remembered,
    // and the caller runs the unfused path.
    if (is_gelu(epi) && (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)) {
        e->supported = false;
        return GPT2_ERR_UNAVAILABLE;
    }
    BLAS_TRY(st);
    return GPT2_OK;
}

int matmul_batched(gpt2_backend *be, bool ta, bool tb, int M, int N, int K, const void *A,
                   int lda, long long sA, const void *B, int ldb, long long sB, void *C, int ldc,
                   long long sC, int count) {
    cuda_impl *ci = impl_of(be);
    const cudaDataType_t type = cuda_type_of(ci->dtype);
    const float alpha = 1.0f, beta = 0.0f;
    BLAS_TRY(cublasGemmStridedBatchedEx(ci->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, type,
                                        ldb, sB, A, type, lda, sA, &beta, C, type, ldc, sC, count,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return GPT2_OK;
}

void matmul_cache_destroy(cuda_impl *ci) {
    for (int i = 0; i < kMatmulCache; i++) entry_destroy(&ci->matmuls[i]);
}

} // namespace gpt2cuda
