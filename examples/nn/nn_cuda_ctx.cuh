// What the CUDA kernels of every model share on one device (private to
// examples/nn and the models' CUDA backends): the device's state (the
// stream, the cuBLAS and cuBLASLt handles and workspace, the algorithm
// cache, launch counts, the profiler, internal scratch, page-locked
// buffers), error handling, the storage types and their conversions,
// 16-byte packs, warp reductions, launch shapes, and the shared layers
// that nn_cuda_*.cu provide: matrix products (nn_cuda_matmul.cu),
// grouped-query causal attention (nn_cuda_attention.cu), the chunked fused
// classifier (nn_cuda_classifier.cu), the token embedding
// (nn_cuda_embedding.cu), column sums and the element kernels
// (nn_cuda_elementwise.cu), LayerNorm, RMSNorm, RoPE and the activations
// (nn_cuda_layernorm.cu, nn_cuda_rmsnorm.cu, nn_cuda_rope.cu,
// nn_cuda_activations.cu), the profiler (nn_cuda_profile.cu), and the
// device's nn_layers.h table over all of them (nn_cuda_layers.cu), which
// the models' one orchestration calls (gpt2_layers.c, llama_layers.c);
// nothing here knows a model.
//
// Storage and arithmetic. Tensors are stored in the device's dtype (fp32,
// bf16 or fp16, chosen at creation); every kernel widens what it reads to
// fp32, computes in fp32 with the host/device math headers (nn_math.h and
// each model's), and rounds once (to nearest even) when it stores. GEMMs
// accumulate in fp32 (CUBLAS_COMPUTE_32F; in fp32 without TF32).
// Statistics, partial sums and losses are fp32.
//
// Determinism. No float atomics anywhere: every sum runs in a fixed order
// (warp shuffles in a fixed tree, blocks of rows in order, partials added in
// order by a second kernel), cuBLAS runs with atomics disallowed and
// cuBLASLt's algorithms are chosen once per shape and alignment class, so
// the same inputs give the same bits on every run.
#ifndef NN_CUDA_CTX_CUH
#define NN_CUDA_CTX_CUH

#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "nn_cpu.h" // nn_attn_layout
#include "nn_cuda.h"
#include "nn_device.h"
#include "nn_impl.h"
#include "nn_layers.h"
#include "nn_math.h"

namespace nncuda {

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
// Every alignment is clamped to kMaxAlignClass (nn_cuda_matmul.cu says
// why): the key, and so the algorithm and the fused-or-fallback choice,
// depends on the shapes and on which of 1, 2, 4, 8 or 16 bytes each
// pointer is aligned to, never on where a buffer happens to start beyond
// that.
constexpr int kMatmulCache = 128;
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

struct profiler; // nn_cuda_profile.cu

// Deliberately wrong kernels for the accuracy tests (a model backend sets
// ctx::fault from its test hook, e.g. GPT2_CUDA_FAULT): the shared
// attention honours FAULT_SOFTMAX_NO_MASK; the others are the models'.
enum fault_kind { FAULT_NONE = 0, FAULT_SOFTMAX_NO_MASK = 1, FAULT_QKV_TRANSPOSED = 2 };

// One CUDA device: nn_device's impl.
struct ctx {
    cudaStream_t stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *lt_workspace;
    size_t lt_workspace_bytes;
    int device;
    int sm_major;
    int sm; // compute capability, major * 10 + minor
    nn_dtype dtype;
    // What a model's options set (GPT-2's gpt2_cuda_options); 0 for others.
    int gelu_fusion;   // 0 none, 1 forward, 2 forward and backward (GPT-2's c_fc)
    bool unfused_bias; // never use the BIAS epilogue (tests, measurements)
    int fault;         // fault_kind
    // Launch counts by path (nn_cuda_device_stats); sm, gelu_fusion and
    // unfused_bias are filled when they are read.
    nn_cuda_stats stats;
    // The per-op profile a model backend asked for; nullptr when none.
    profiler *prof;
    bool ready; // creation completed (destroy reports only then)
    char err[NN_ERR_CAP];
    // Internal scratch of fp32 partial sums, sort keys and CUB's temporary
    // storage, grown on demand (cudaFree waits for the device, so growing
    // never frees memory a queued kernel still reads). One user at a time:
    // every user takes it, launches, and is done before the next op.
    unsigned char *work;
    size_t work_bytes;
    double *loss_dev; // losses_sum's device double (every use is stream-ordered)
    pinned_buffer pinned[kPinnedSlots];
    matmul_entry matmuls[kMatmulCache];
    int matmul_next; // the next cache slot to reuse when full
};

// The context of a device from nn_cuda_device_create; nullptr for any
// other device (a CPU one, NULL).
ctx *ctx_of(nn_device *dev);
const ctx *ctx_of(const nn_device *dev);

// ------------------------------------------------------------------ errors

// Every failure leaves "cuda: what failed at file:line: why" in the
// device's message (ctx::err, which last_error returns) and returns an
// nn_status; nothing exits.
int fail(ctx *cx, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

// These macros expect `cx` (the ctx *) in scope.
#define CU_TRY(call)                                                                          \
    do {                                                                                      \
        cudaError_t cu_try_err_ = (call);                                                     \
        if (cu_try_err_ != cudaSuccess) {                                                     \
            return ::nncuda::fail(cx,                                                         \
                                  cu_try_err_ == cudaErrorMemoryAllocation ? NN_ERR_NOMEM     \
                                                                           : NN_ERR_DEVICE,   \
                                  "cuda: %s failed at %s:%d: %s (%s)", #call, __FILE__,       \
                                  __LINE__, cudaGetErrorName(cu_try_err_),                    \
                                  cudaGetErrorString(cu_try_err_));                           \
        }                                                                                     \
    } while (0)

#define BLAS_TRY(call)                                                                        \
    do {                                                                                      \
        cublasStatus_t blas_try_st_ = (call);                                                 \
        if (blas_try_st_ != CUBLAS_STATUS_SUCCESS) {                                          \
            return ::nncuda::fail(cx, NN_ERR_DEVICE, "cuda: %s failed at %s:%d: %s (%s)",     \
                                  #call, __FILE__, __LINE__, cublasGetStatusName(blas_try_st_), \
                                  cublasGetStatusString(blas_try_st_));                       \
        }                                                                                     \
    } while (0)

// A kernel launch: its configuration errors show at once.
#define LAUNCHED() CU_TRY(cudaGetLastError())

// Propagate a failure from a helper that already wrote the message.
#define TRY(call)                                                                             \
    do {                                                                                      \
        int try_status_ = (call);                                                             \
        if (try_status_ != NN_OK) return try_status_;                                         \
    } while (0)

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
inline cudaDataType_t cuda_type_of(nn_dtype t) {
    return t == NN_BF16 ? CUDA_R_16BF : t == NN_F16 ? CUDA_R_16F : CUDA_R_32F;
}

// Runs f with a value of the storage type of `t` (its type selects the
// template instances): with_type(t, [&](auto tag) { using E = decltype(tag); ... }).
template <typename F> int with_type(nn_dtype t, F &&f) {
    switch (t) {
    case NN_BF16:
        return f(__nv_bfloat16{});
    case NN_F16:
        return f(__half{});
    case NN_F32:
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

// p advanced by n elements of `t` (pointer arithmetic on untyped tensors).
inline void *elem_at(void *p, nn_dtype t, size_t n) {
    return static_cast<unsigned char *>(p) + n * nn_dtype_size(t);
}
inline const void *elem_at(const void *p, nn_dtype t, size_t n) {
    return static_cast<const unsigned char *>(p) + n * nn_dtype_size(t);
}

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
// The most blocks in a grid's y dimension (CUDA's limit).
constexpr long long kMaxGridY = 65535;
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

// Bytes rounded up to NN_ALIGN (carving scratch).
inline size_t round_up(size_t bytes) { return (bytes + NN_ALIGN - 1) / NN_ALIGN * NN_ALIGN; }

// The internal scratch of at least `bytes` (see ctx::work).
int ensure_work(ctx *cx, size_t bytes);

// Rows of the logits buffer are this many elements apart (V rounded up to
// 64, as llm.c pads its vocabulary), so that every row starts 16-byte
// aligned for the classifier's vector loads.
inline int padded_vocab(int V) { return (V + 63) / 64 * 64; }

// ---------------------------------------------------- nn_cuda_profile.cu

// The ops a profile times, each by its own pair of events. The shared
// layers' ops come first; a model numbers its own from kProfModelBase
// (its names go to profiler_create). Names have no spaces so that scripts
// can split the table's rows on white space.
enum prof_op {
    PROF_ENCODER_FWD,
    PROF_ENCODER_BWD_SORT,
    PROF_ENCODER_BWD_WTE,
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
    PROF_MATMUL_WTE_DW, // the classifier's weight gradient (GPT-2's wte, Llama's lm_head)
    PROF_MATMUL_HEAD_DX,
    PROF_LOSSES_SUM,
    kProfModelBase
};
// The most ops one profile holds (shared and the model's), and the
// longest name.
constexpr int kProfMaxOps = 64;
constexpr int kProfNameCap = 40;

// The profile's specification "STEPS" or "STEPS,WARMUP" (training
// micro-steps to time, 1..100000, after WARMUP ones, 0..100000, default 2);
// false when malformed. Pure: backends check it before creating anything.
bool profile_spec_parse(const char *spec, int *steps, int *warmup);
// The variable `env` read and parsed: 0 steps when unset or empty, else
// the spec's; NN_ERR_ARG with "<model> cuda: <env>=...; use ..." in err
// when malformed. A backend calls it before it creates anything.
int profile_from_env(const char *env, const char *model, int *steps, int *warmup, char *err,
                     size_t cap);
// Starts a profile on cx (no-op when one runs already): `label` starts the
// table's header ("gpt2 cuda profile: ..."), `env` names the variable in
// its messages, model_names (n_model, copied) give the model's ops' order
// in the table; the layers add the rest as they run (prof_op). NN_ERR_NOMEM
// with a message in err.
int profiler_create(ctx *cx, const char *label, const char *env, int steps, int warmup,
                    const char *const *model_names, int n_model, char *err, size_t cap);
// Prints the table and `fusion_line` to stderr (the stream must have been
// synchronized: every event is read) and frees the profiler; with
// fusion_line nullptr it frees without printing. No profiler: a no-op.
void profiler_destroy(ctx *cx, const char *fusion_line);
// The start of a micro-step (a model's embed_forward) and the end of a
// training one (after its embed_backward): they open and close the
// profiled window.
void prof_step_begin(ctx *cx);
void prof_step_end(ctx *cx);
void prof_begin(ctx *cx, int op);
void prof_end(ctx *cx);
// Drops the open outermost scope's record (its launches did not happen).
void prof_cancel(ctx *cx);
// The op named prefix + name + suffix ("matmul_" "qkv" "_fwd"; a NULL name
// reads "linear"), added to the profile at its first use: what the layers
// time their launches as. -1 (times nothing) without a profile, or when
// the table is full.
int prof_op(ctx *cx, const char *prefix, const char *name = "", const char *suffix = "");

// Times the enclosed launches as `op` while the profile's window is open;
// nothing without a profile. A scope inside another is not recorded (the
// outer one's time includes it), so scopes sit around leaves: a call
// site's GEMM, a kernel or two.
struct prof_scope {
    ctx *cx;
    prof_scope(ctx *c, int op) : cx(c) {
        if (cx->prof != nullptr) prof_begin(cx, op);
    }
    ~prof_scope() {
        if (cx->prof != nullptr) prof_end(cx);
    }
    prof_scope(const prof_scope &) = delete;
    prof_scope &operator=(const prof_scope &) = delete;
};

// f() timed as `op`. An NN_ERR_UNAVAILABLE answer (a fused epilogue
// refused before anything was launched) leaves no record, so that the
// fallback's launches, timed next under the same op, are its one call.
template <typename F> int timed(ctx *cx, int op, F &&f) {
    prof_scope scope(cx, op);
    const int status = f();
    if (status == NN_ERR_UNAVAILABLE) prof_cancel(scope.cx);
    return status;
}

// ----------------------------------------------------- nn_cuda_matmul.cu

enum epilogue {
    EPI_NONE = 0,     // D = A.B (+ beta C)
    EPI_BIAS = 1,     // D = A.B + bias (+ beta C)
    EPI_GELU_AUX = 2, // aux = A.B + bias, D = gelu(aux)
    EPI_DGELU = 3     // D = (A.B) * gelu'(aux)
};

// Row-major D[M][N] = op(A) op(B) (+ C when c is not NULL, beta 1) with
// cblas_sgemm's row-major arguments (ta: A is [K][M]; tb: B is [N][K]); C
// and D share ldc and may be the same buffer (accumulation: a weight
// gradient, a residual added in place). The leading dimensions let a
// product read or write columns of a wider row (q, k and v side by side in
// one row). bias: [N]; aux: [M][N] with leading dimension ldc. Elements of
// the device's dtype, fp32 accumulation.
// EPI_NONE always runs: through cuBLASLt, or classic cuBLAS for a shape
// cuBLASLt has no algorithm for. EPI_BIAS always runs: fused, or (cuBLASLt
// refuses the epilogue, or unfused_bias) the plain product and add_bias.
// The GELU epilogues return NN_ERR_UNAVAILABLE (no message) when cuBLASLt
// refuses them, so that the caller runs its unfused path; they count
// nothing themselves (GPT-2 counts gelu and dgelu).
int matmul(ctx *cx, bool ta, bool tb, int M, int N, int K, const void *A, int lda, const void *B,
           int ldb, const void *c, void *d, int ldc, epilogue epi, const void *bias, void *aux);

// The alignment class of p: the largest power of two up to kMaxAlignClass
// that divides its address (kMaxAlignClass for NULL, which constrains
// nothing).
int align_class(const void *p);

// `count` independent products whose operands are sA, sB, sC elements
// apart, C = op(A) op(B) + beta C (beta 0: written; 1: accumulated), in
// one cublasGemmStridedBatchedEx: the attention's per-head products.
int matmul_batched(ctx *cx, bool ta, bool tb, int M, int N, int K, const void *A, int lda,
                   long long sA, const void *B, int ldb, long long sB, float beta, void *C,
                   int ldc, long long sC, int count);

void matmul_cache_destroy(ctx *cx);

// ------------------------------------------------ nn_cuda_elementwise.cu

// out[c] += sum over rows of a[r][c] (rows lda elements apart) for c < N:
// bias gradients, deterministic (timed as PROF_BIAS_GRAD_SUMS).
int colsum_add(ctx *cx, int rows, int N, const void *a, int lda, void *out);
// d[r][c] += bias[c] for r < rows, c < N, rows ld elements apart (the bias
// epilogue's fallback).
int add_bias(ctx *cx, int rows, int N, void *d, int ld, const void *bias);
// *out_dev = sum of losses[0..n) in double, in a fixed order.
int losses_sum_device(ctx *cx, const float *losses, int n, double *out_dev);
// dst[i] = float(src[i]) for n elements of the device's dtype.
int to_fp32(ctx *cx, long long n, const void *src, float *dst);

// -------------------------------------------------- nn_cuda_attention.cu

// Causal grouped-query attention on the layout nn_cpu.h describes (q, k
// and v at offsets in rows of stride ld; NKV K/V heads, each serving NH /
// NKV consecutive query heads; the output's heads side by side, rows ldy
// apart). Scratch of the two ops below, in bytes.
size_t attention_scratch_bytes(nn_dtype t, const nn_attn_layout *s);
// atty = attention(qkv) with att: [B][NH][T][T] (the probabilities) kept.
int attention_forward(ctx *cx, const nn_attn_layout *s, const void *qkv, void *att, void *atty,
                      void *scratch);
// dqkv (its q, k and v columns; others untouched) from datty through the
// attention; datt: [B][NH][T][T] elements of scratch (the score
// gradients). A K/V head's gradient adds its query heads' products in
// ascending head order.
int attention_backward(ctx *cx, const nn_attn_layout *s, const void *qkv, const void *att,
                       const void *datty, void *dqkv, void *datt, void *scratch);

// ------------------------------------------------- nn_cuda_classifier.cu

// Bytes of the classifier's scratch for chunks of chunk_rows rows (the
// logits of a chunk, and an fp32 row for classifier_logits_row).
size_t classifier_scratch_bytes(nn_dtype t, int V, int chunk_rows);
// The fused classifier over `rows` rows of xn: [rows][C] (the model's final
// norm's output), in chunks of chunk_rows rows so that the logits never
// exist for more: logits = xn W^T (W: [V][C]) into a vocabulary padded to
// padded_vocab(V) columns, losses[i] = softmax cross-entropy against
// targets[i]; with gW not NULL the row becomes dloss_scale * dloss/dlogits,
// gW += dlogits^T xn and dxn: [rows][C] = dlogits W (dxn may be xn itself:
// a chunk's dxn is written after its xn was last read). Chunks run in
// order, so gW's sums do too: keep chunk_rows fixed within a run.
int classifier(ctx *cx, int rows, int C, int V, const void *xn, const void *W,
               const int *targets, float dloss_scale, float *losses, void *gW, void *dxn,
               int chunk_rows, void *scratch);
// One row's logits (W: [V][C] times xn: [C]) into host_logits: [V] fp32
// HOST memory, waiting for them. scratch: classifier_scratch_bytes(t, V, 1).
int classifier_logits_row(ctx *cx, int C, int V, const void *xn, const void *W,
                          float *host_logits, void *scratch);

// -------------------------------------------------- nn_cuda_embedding.cu

// x[r] = wte[tokens[r]] (+ pos[r % T] when pos is not NULL: GPT-2's
// learned positions), r < BT, rows of C elements. A token outside [0, V)
// makes its row NaN (checking would cost a wait for the device).
int embedding_forward(ctx *cx, long long BT, int T, int C, int V, const void *wte,
                      const void *pos, const int *tokens, void *x);
// g_wte[tokens[r]] += dx[r] for r < BT, deterministic without atomics:
// each token's rows in ascending r within fixed tiles of sorted positions,
// the tiles' sums in a fixed tree, rounded once. Invalid tokens add
// nothing.
int embedding_backward(ctx *cx, int BT, int C, int V, void *g_wte, const int *tokens,
                       const void *dx);
// g_pos[t] += the sum over b of dx[b T + t] (b ascending, one rounding):
// the gradient of GPT-2's learned positions, dx: [B][T][C].
int embedding_backward_positions(ctx *cx, int B, int T, int C, void *g_pos, const void *dx);

// ------------------------------------------ nn_cuda_layernorm.cu, rmsnorm, rope

// out = LayerNorm(x) with w, b; mean, rstd: [rows] fp32. A warp per row.
int layernorm_forward(ctx *cx, int rows, int C, const void *x, const void *w, const void *b,
                      void *out, float *mean, float *rstd);
// dx = dres + LayerNorm's input gradient (dres may be NULL or alias dx;
// dout may be dx too); dw, db += its parameter gradients.
int layernorm_backward(ctx *cx, int rows, int C, const void *dout, const void *x,
                       const float *mean, const float *rstd, const void *w, const void *dres,
                       void *dx, void *dw, void *db);
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
// angles of position r % T (cos, sin: [>= T][hd / 2] fp32 on the device),
// or by their transpose (backward). Each thread rotates one pair (i, i +
// hd/2) through nn_rope_forward / nn_rope_backward.
int rope(ctx *cx, bool backward, long long BT, int T, int heads, int hd, int ld, void *qkv,
         const float *cos, const float *sin);

// ------------------------------------------------ nn_cuda_activations.cu

// post = gelu(pre), n elements.
int gelu_forward(ctx *cx, long long n, const void *pre, void *post);
// x *= s in place, n elements (LoRA's alpha / r).
int scale_elements(ctx *cx, long long n, float s, void *x);
int dropout_elements(ctx *cx, int rows, int cols, float p, uint64_t seed, const void *src,
                     int lds, void *dst, int ldd, int add);
// d *= gelu'(pre) in place (d, pre: [rows][N]), and out[c] += the column
// sums of the new d.
int gelu_backward_colsum(ctx *cx, int rows, int N, void *d, const void *pre, void *out);
// h = silu(gate) * up, n elements (nn_swiglu).
int swiglu_forward(ctx *cx, long long n, const void *gate, const void *up, void *h);
// d: [rows][2F]: holds dh in columns [0, F) on entry; on return d gate
// there and d up in columns [F, 2F) (nn_swiglu_backward). gate, up:
// [rows][F].
int swiglu_backward(ctx *cx, int rows, int F, const void *gate, const void *up, void *d);

// ----------------------------------------------------- nn_cuda_layers.cu

// The device's layers (nn_layer_ops over the kernels above): every CUDA
// device's dev->layers.
extern const nn_layer_ops cuda_layer_ops;

} // namespace nncuda

#endif // NN_CUDA_CTX_CUH
