// What the CUDA backend's files share (gpt2_cuda*.cu): the backend's state,
// error handling, the storage types and their conversions, 16-byte packs,
// warp reductions, launch shapes, and the functions each file provides to
// gpt2_cuda.cu, which composes them into gpt2_backend.h's ops.
//
// Storage and arithmetic. Tensors are stored in the backend's dtype (fp32,
// bf16 or fp16, chosen at creation); every kernel widens what it reads to
// fp32, computes in fp32 with gpt2_math.h's element functions, and rounds
// once (to nearest even) when it stores. GEMMs accumulate in fp32
// (CUBLAS_COMPUTE_32F; in fp32 without TF32). Statistics (LayerNorm's mean
// and rstd), partial sums and losses are fp32.
//
// Determinism. No float atomics anywhere: every sum runs in a fixed order
// (warp shuffles in a fixed tree, blocks of rows in order, partials added in
// order by a second kernel), cuBLAS runs with atomics disallowed and
// cuBLASLt's algorithms are chosen by the same heuristic for the same shapes,
// so the same inputs give the same bits on every run.
#ifndef GPT2_CUDA_COMMON_CUH
#define GPT2_CUDA_COMMON_CUH

#include <cstdarg>
#include <cstddef>
#include <cstdint>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "gpt2_backend.h"
#include "gpt2_backend_impl.h"
#include "gpt2_math.h"

namespace gpt2cuda {

// ------------------------------------------------------------------ state

// Host buffers of host_alloc (page-locked) and the event of the last
// transfer that used each: host_wait waits for that one event.
constexpr int kPinnedSlots = 64;
struct pinned_buffer {
    unsigned char *ptr;
    size_t bytes;
    cudaEvent_t last_use;
    bool used; // an event was recorded since the allocation
};

// A cached cuBLASLt configuration: descriptors and the algorithm the
// heuristic chose, for one shape, layout, alignment class and epilogue.
// Every alignment is clamped to kMaxAlignClass (gpt2_cuda_matmul.cu says
// why): the key, and so the algorithm and the fused-or-fallback choice,
// depends on the shapes and on which of 1, 2, 4, 8 or 16 bytes each
// pointer is aligned to, never on where a buffer happens to start beyond
// that.
constexpr int kMatmulCache = 96;
constexpr int kMaxAlignClass = 16;
struct matmul_key {
    int ta, tb, M, N, K, lda, ldb, ldc, epilogue, has_c;
    // Alignment classes in bytes (powers of two, at most kMaxAlignClass) of
    // our operands A and B, of C (D when there is no C), of D, of the bias
    // and of the aux matrix (0 for an absent bias or aux).
    int align_a, align_b, align_c, align_d, align_bias, align_aux;
    int dtype;
};
struct matmul_entry {
    matmul_key key;
    bool valid;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c, d;
    cublasLtMatmulAlgo_t algo;
    bool supported; // the heuristic found an algorithm and no launch was refused
};

struct profiler; // gpt2_cuda_profile.cu

struct cuda_impl {
    cudaStream_t stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *lt_workspace;
    size_t lt_workspace_bytes;
    int device;
    int sm_major;
    gpt2_dtype dtype;
    int gelu_fusion; // 0 none, 1 forward, 2 forward and backward
    bool unfused_bias; // gpt2_cuda_options::unfused_bias
    int sm;            // compute capability, major * 10 + minor
    // Launch counts by path (gpt2_cuda_backend_stats); the fields sm,
    // gelu_fusion and unfused_bias are filled when they are read.
    gpt2_cuda_stats stats;
    // GPT2_CUDA_PROFILE's state; nullptr when not profiling.
    profiler *prof;
    bool ready; // creation completed (destroy reports only then)
    char err[GPT2_ERR_CAP];
    // Internal scratch of fp32 partial sums, sort keys and CUB's temporary
    // storage, grown on demand (cudaFree waits for the device, so growing
    // never frees memory a queued kernel still reads).
    unsigned char *work;
    size_t work_bytes;
    double *loss_dev; // losses_sum's device double (every use is stream-ordered)
    pinned_buffer pinned[kPinnedSlots];
    matmul_entry matmuls[kMatmulCache];
    int matmul_next; // the next cache slot to reuse when full
    // Test hook (GPT2_CUDA_FAULT, read at creation): a deliberately wrong
    // kernel, so that the accuracy tests can show they catch one.
    int fault;
};

enum fault_kind { FAULT_NONE = 0, FAULT_SOFTMAX_NO_MASK = 1, FAULT_QKV_TRANSPOSED = 2 };

inline cuda_impl *impl_of(gpt2_backend *be) { return static_cast<cuda_impl *>(be->impl); }
inline const cuda_impl *impl_of(const gpt2_backend *be) {
    return static_cast<const cuda_impl *>(be->impl);
}

// ------------------------------------------------------------------ errors

// Every failure leaves "gpt2 cuda: what failed at file:line: why" in the
// backend's message and returns a status; nothing exits.
int fail(gpt2_backend *be, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#define CU_TRY(call)                                                                          \
    do {                                                                                      \
        cudaError_t cu_try_err_ = (call);                                                     \
        if (cu_try_err_ != cudaSuccess) {                                                     \
            return ::gpt2cuda::fail(be,                                                       \
                                    cu_try_err_ == cudaErrorMemoryAllocation ? GPT2_ERR_NOMEM \
                                                                             : GPT2_ERR_DEVICE, \
                                    "gpt2 cuda: %s failed at %s:%d: %s (%s)", #call,          \
                                    __FILE__, __LINE__, cudaGetErrorName(cu_try_err_),        \
                                    cudaGetErrorString(cu_try_err_));                         \
        }                                                                                     \
    } while (0)

#define BLAS_TRY(call)                                                                        \
    do {                                                                                      \
        cublasStatus_t blas_try_st_ = (call);                                                 \
        if (blas_try_st_ != CUBLAS_STATUS_SUCCESS) {                                          \
            return ::gpt2cuda::fail(be, GPT2_ERR_DEVICE,                                      \
                                    "gpt2 cuda: %s failed at %s:%d: %s (%s)", #call,          \
                                    __FILE__, __LINE__, cublasGetStatusName(blas_try_st_),    \
                                    cublasGetStatusString(blas_try_st_));                     \
        }                                                                                     \
    } while (0)

// A kernel launch: its configuration errors show at once.
#define LAUNCHED() CU_TRY(cudaGetLastError())

// Propagate a failure from a helper that already wrote the message.
#define TRY(call)                                                                             \
    do {                                                                                      \
        int try_status_ = (call);                                                             \
        if (try_status_ != GPT2_OK) return try_status_;                                       \
    } while (0)

#define ERR_ARGS(be) ::gpt2cuda::impl_of(be)->err, GPT2_ERR_CAP

// ----------------------------------------------------------- storage types

// fp32 view of an element, and an element from fp32 (round to nearest even).
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_f32<__half>(float x) {
    return __float2half_rn(x);
}

// cuBLAS's name of a storage type.
template <typename T> constexpr cudaDataType_t cuda_type();
template <> constexpr cudaDataType_t cuda_type<float>() { return CUDA_R_32F; }
template <> constexpr cudaDataType_t cuda_type<__nv_bfloat16>() { return CUDA_R_16BF; }
template <> constexpr cudaDataType_t cuda_type<__half>() { return CUDA_R_16F; }

cudaDataType_t cuda_type_of(gpt2_dtype t);

// Runs f with a value of the storage type of `t` (its type selects the
// template instances): with_type(t, [&](auto tag) { using T = decltype(tag); ... }).
template <typename F> int with_type(gpt2_dtype t, F &&f) {
    switch (t) {
    case GPT2_BF16:
        return f(__nv_bfloat16{});
    case GPT2_F16:
        return f(__half{});
    case GPT2_F32:
        break;
    }
    return f(float{});
}

// 16 bytes of elements, loaded and stored as one vector (the pointer must be
// 16-byte aligned; the host checks before choosing a vector kernel).
template <typename T> struct alignas(16) pack {
    static constexpr int n = 16 / (int)sizeof(T);
    T v[n];
};

template <typename T> __device__ __forceinline__ pack<T> load_pack(const T *p) {
    return *reinterpret_cast<const pack<T> *>(p);
}
template <typename T> __device__ __forceinline__ void store_pack(T *p, const pack<T> &x) {
    *reinterpret_cast<pack<T> *>(p) = x;
}

// 1 when p is 16-byte aligned (the vector kernels' precondition).
inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// ------------------------------------------------------- warp reductions

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;

// Sums and maxima over the 32 lanes in a fixed butterfly: every lane gets
// the same bits, and the order never depends on timing.
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) {
        const float u = __shfl_xor_sync(kFullMask, v, o);
        v = u > v ? u : v;
    }
    return v;
}

// ---------------------------------------------------------- launch shapes

// Threads per block of the element-wise and column kernels.
constexpr int kThreads = 256;
// Warps per block of the warp-per-row kernels.
constexpr int kRowWarps = 4;
// Grid-stride kernels need no more blocks than fill the GPU several times.
constexpr long long kMaxBlocks = 8192;
// Rows per partial sum of the column sums: part of the definition of the
// result's rounding (fixed, so results do not depend on the launch).
constexpr int kColRows = 32;
// The column sums' finish adds the partials of a column in kFinishLanes
// interleaved lanes (lane l: partials l, l + kFinishLanes, ... in order),
// then the lanes in a fixed tree: also part of the rounding's definition.
// 32 lanes keep a column's serial chain at nblocks / 32 additions (16 for
// B*T = 16384) and the block at 32 columns x 32 lanes = 1024 threads.
constexpr int kFinishLanes = 32;
constexpr int kFinishCols = 32;

// The sum of a column's partials load(0), ..., load(nparts - 1): lane l =
// threadIdx.y adds load(l), load(l + kFinishLanes), ... in order, then the
// lanes are added in a fixed tree through `shared` (kFinishLanes *
// kFinishCols floats; threadIdx.x is the column within the block, blockDim
// = (kFinishCols, kFinishLanes)). Every thread of the block must call it
// (it has barriers); `active` false makes a thread's lane contribute 0.
// Returns the sum in lane 0 (threadIdx.y == 0), 0 elsewhere. It ends with
// a barrier after its last read of another thread's slot, so a second call
// may reuse `shared` at once.
template <typename Load>
__device__ __forceinline__ float finish_lanes(Load load, int nparts, bool active,
                                              float *shared) {
    const int lane = threadIdx.y, col = threadIdx.x;
    float s = 0.0f;
    if (active)
        for (int y = lane; y < nparts; y += kFinishLanes) s += load(y);
    shared[lane * kFinishCols + col] = s;
    __syncthreads();
    for (int half = kFinishLanes / 2; half > 0; half /= 2) {
        if (lane < half)
            shared[lane * kFinishCols + col] += shared[(lane + half) * kFinishCols + col];
        __syncthreads();
    }
    return lane == 0 ? shared[col] : 0.0f;
}

// finish_lanes over part[y * N + c], y < nparts (the column sums' layout).
__device__ __forceinline__ float finish_column(const float *part, int nparts, int N, int c,
                                               float *shared) {
    return finish_lanes([&](int y) { return part[(size_t)y * N + c]; }, nparts, c < N, shared);
}

inline unsigned grid_for(long long n, int threads) {
    long long blocks = (n + threads - 1) / threads;
    if (blocks < 1) blocks = 1;
    return (unsigned)(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

inline unsigned blocks_for(long long n, int per_block) {
    long long blocks = (n + per_block - 1) / per_block;
    return (unsigned)(blocks < 1 ? 1 : blocks);
}

#define GRID_STRIDE(k, n)                                                                     \
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < (n);             \
         k += (long long)gridDim.x * blockDim.x)

// Bytes rounded up to GPT2_ALIGN (carving scratch).
inline size_t round_up(size_t bytes) { return (bytes + GPT2_ALIGN - 1) / GPT2_ALIGN * GPT2_ALIGN; }

// The internal scratch of at least `bytes` (see cuda_impl::work).
int ensure_work(gpt2_backend *be, size_t bytes);

// Rows of the logits buffer are this many elements apart (V rounded up to
// 64, as llm.c pads its vocabulary), so that every row starts 16-byte
// aligned for the classifier's vector loads.
inline int padded_vocab(int V) { return (V + 63) / 64 * 64; }

// ----------------------------------------------- gpt2_cuda_matmul.cu

enum epilogue {
    EPI_NONE = 0,      // D = A.B (+ beta C)
    EPI_BIAS = 1,      // D = A.B + bias (+ beta C)
    EPI_GELU_AUX = 2,  // aux = A.B + bias, D = gelu(aux)
    EPI_DGELU = 3      // D = (A.B) * gelu'(aux)
};

// Row-major D[M][N] = op(A) op(B) (+ C when c is not NULL, beta 1) with
// cblas_sgemm's row-major arguments (ta: A is [K][M]; tb: B is [N][K]); C
// and D share ldc and may be the same buffer (accumulation). bias: [N];
// aux: [M][N] with leading dimension ldc. Elements of the backend's dtype,
// fp32 accumulation.
// EPI_NONE always runs: through cuBLASLt, or classic cuBLAS for a shape
// cuBLASLt has no algorithm for. EPI_BIAS always runs: fused, or (cuBLASLt
// refuses the epilogue, or unfused_bias) the plain product and add_bias.
// The GELU epilogues return GPT2_ERR_UNAVAILABLE (no message) when cuBLASLt
// refuses them, so that the caller runs its unfused path; they count
// nothing themselves (the callers count gelu and dgelu).
int matmul(gpt2_backend *be, bool ta, bool tb, int M, int N, int K, const void *A, int lda,
           const void *B, int ldb, const void *c, void *d, int ldc, epilogue epi,
           const void *bias, void *aux);

// The alignment class of p: the largest power of two up to kMaxAlignClass
// that divides its address (kMaxAlignClass for NULL, which constrains
// nothing).
int align_class(const void *p);

// The same for `count` independent products whose operands are sA, sB, sC
// elements apart (beta 0): the attention's per-head products in one call.
int matmul_batched(gpt2_backend *be, bool ta, bool tb, int M, int N, int K, const void *A,
                   int lda, long long sA, const void *B, int ldb, long long sB, void *C, int ldc,
                   long long sC, int count);

void matmul_cache_destroy(cuda_impl *ci);

// --------------------------------------------- gpt2_cuda_layernorm.cu

// out = LayerNorm(x) with w, b; mean, rstd: [rows] fp32. A warp per row.
int layernorm_forward(gpt2_backend *be, int rows, int C, const void *x, const void *w,
                      const void *b, void *out, float *mean, float *rstd);
// dx = dres + LayerNorm's input gradient (dres may be NULL or alias dx);
// dw, db += its parameter gradients.
int layernorm_backward(gpt2_backend *be, int rows, int C, const void *dout, const void *x,
                       const float *mean, const float *rstd, const void *w, const void *dres,
                       void *dx, void *dw, void *db);

// ------------------------------------------- gpt2_cuda_elementwise.cu

// out[c] += sum over rows of a[r][c] (bias gradients); deterministic.
int colsum_add(gpt2_backend *be, int rows, int N, const void *a, void *out);
// d[r][c] += bias[c] for r < rows, c < N, rows ld elements apart (the bias
// epilogue's fallback).
int add_bias(gpt2_backend *be, int rows, int N, void *d, int ld, const void *bias);
// d *= gelu'(pre) in place, and out[c] += the column sums of the new d.
int gelu_backward_colsum(gpt2_backend *be, int rows, int N, void *d, const void *pre, void *out);
// post = gelu(pre), n elements.
int gelu_forward(gpt2_backend *be, long long n, const void *pre, void *post);
// *out_dev = sum of losses[0..n) in double, in a fixed order.
int losses_sum_device(gpt2_backend *be, const float *losses, int n, double *out_dev);
// dst[i] = float(src[i]) for n elements of the backend's dtype.
int to_fp32(gpt2_backend *be, long long n, const void *src, float *dst);

// --------------------------------------------- gpt2_cuda_attention.cu

// Scratch of the two ops below, in bytes.
size_t attention_scratch_bytes(const gpt2_backend *be, const gpt2_dims *d, int B, int T);
// atty = attention(qkv) with att (the probabilities) kept; scratch as above.
int attention_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T, const void *qkv,
                      void *att, void *atty, void *scratch);
// dqkv from datty through the attention; datt_scratch holds B*NH*T*T
// elements (the score gradients); scratch as above.
int attention_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T, const void *qkv,
                       const void *att, const void *datty, void *dqkv, void *datt,
                       void *scratch);

// ----------------------------------------------- gpt2_cuda_encoder.cu

int encoder_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T, const gpt2_embed_w *w,
                    const int *tokens, void *x);
int encoder_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T, gpt2_embed_w *g,
                     const int *tokens, const void *dx);

// -------------------------------------------- gpt2_cuda_classifier.cu

// The head (gpt2_backend.h's head ops) over chunks of rows; gradients only
// when g is not NULL.
int head_run(gpt2_backend *be, const gpt2_dims *d, int BT, const gpt2_embed_w *w,
             gpt2_embed_w *g, const void *x, const int *targets, float dloss_scale, void *dx,
             float *losses, int chunk_rows, void *scratch);
size_t head_scratch_bytes(const gpt2_backend *be, const gpt2_dims *d, int chunk_rows);
// The logits of one row into host_logits (fp32), waiting for them.
int head_logits_row(gpt2_backend *be, const gpt2_dims *d, const gpt2_embed_w *w, const void *x,
                    int row, float *host_logits, void *scratch);

// ---------------------------------------------- gpt2_cuda_profile.cu

// The ops GPT2_CUDA_PROFILE times, each by its own pair of events. The
// names (gpt2_cuda_profile.cu) have no spaces so that scripts can split the
// table's rows on white space.
enum prof_op {
    PROF_ENCODER_FWD,
    PROF_ENCODER_BWD_SORT,
    PROF_ENCODER_BWD_WTE,
    PROF_ENCODER_BWD_WPE,
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
    PROF_BIAS_GRAD_SUMS,
    PROF_ATTN_FWD_PERMUTE,
    PROF_ATTN_FWD_QK,
    PROF_ATTN_FWD_SOFTMAX,
    PROF_ATTN_FWD_AV,
    PROF_ATTN_FWD_UNPERMUTE,
    PROF_ATTN_BWD_PERMUTE,
    PROF_ATTN_BWD_DP_DV,
    PROF_ATTN_BWD_SOFTMAX,
    PROF_ATTN_BWD_DQ_DK,
    PROF_ATTN_BWD_UNPERMUTE,
    PROF_MATMUL_LOGITS,
    PROF_CLASSIFIER_XENT,
    PROF_MATMUL_WTE_DW,
    PROF_MATMUL_HEAD_DX,
    PROF_LOSSES_SUM,
    PROF_OPS
};

// GPT2_CUDA_PROFILE's value into a profiler (ci->prof stays nullptr when
// the variable is unset or empty); GPT2_ERR_ARG with a message in err for a
// malformed value.
int profiler_create(cuda_impl *ci, const char *spec, char *err, size_t cap);
// Prints the table and `fusion_line` to stderr (the stream must have been
// synchronized: every event is read) and frees the profiler; with
// fusion_line nullptr it frees without printing. No profiler: a no-op.
void profiler_destroy(cuda_impl *ci, const char *fusion_line);
// The start of a micro-step (embed_forward) and the end of a training one
// (after embed_backward): they open and close the profiled window.
void prof_step_begin(cuda_impl *ci);
void prof_step_end(cuda_impl *ci);
void prof_begin(cuda_impl *ci, prof_op op);
void prof_end(cuda_impl *ci);
// Drops the open outermost scope's record (its launches did not happen).
void prof_cancel(cuda_impl *ci);

// Times the enclosed launches as `op` while the profile's window is open;
// nothing without GPT2_CUDA_PROFILE. A scope inside another is not
// recorded (the outer one's time includes it), so scopes sit around
// leaves: a call site's GEMM, a kernel or two.
struct prof_scope {
    cuda_impl *ci;
    prof_scope(gpt2_backend *be, prof_op op) : ci(impl_of(be)) {
        if (ci->prof != nullptr) prof_begin(ci, op);
    }
    ~prof_scope() {
        if (ci->prof != nullptr) prof_end(ci);
    }
    prof_scope(const prof_scope &) = delete;
    prof_scope &operator=(const prof_scope &) = delete;
};

// f() timed as `op`. A GPT2_ERR_UNAVAILABLE answer (a fused epilogue
// refused before anything was launched) leaves no record, so that the
// fallback's launches, timed next under the same op, are its one call.
template <typename F> int timed(gpt2_backend *be, prof_op op, F &&f) {
    prof_scope scope(be, op);
    const int status = f();
    if (status == GPT2_ERR_UNAVAILABLE) prof_cancel(scope.ci);
    return status;
}

} // namespace gpt2cuda

#endif // GPT2_CUDA_COMMON_CUH
