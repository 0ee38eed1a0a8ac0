// The CUDA backend of gpt2_backend.h: the CPU backend's algorithm (see
// gpt2_cpu.c) with cuBLAS for the products and kernels that call the same
// gpt2_math.h functions for everything between them, all enqueued on the
// stream given at creation.
//
// Layout: cuBLAS is column-major and our tensors are row-major. A row-major
// [r][c] matrix with leading dimension ld is, read column-major, its
// transpose, so gemm_rm below computes a row-major C = op(A) op(B) as the
// column-major C^T = op(B)^T op(A)^T: it takes the arguments of
// cblas_sgemm(CblasRowMajor, ...) and every call reads like the CPU's.
//
// Precision: all products are fp32 with fp32 accumulation (cublasSgemm in
// CUBLAS_DEFAULT_MATH: no TF32), the kernels are built with --fmad=false, so
// the element math gives the CPU's bits and only sums differ in order.
//
// Determinism: no float atomics. Column sums (bias and LayerNorm gradients)
// add fixed blocks of kColRows rows in order and then the blocks in order;
// the embedding gradient gives every (column, token class) one thread that
// walks the rows in order; cuBLAS is deterministic on one stream with
// atomics disallowed (set below).
//
// Threads per row: LayerNorm and the attention softmax run one thread per
// row through the gpt2_math.h row functions (rows of C or T floats, and
// B*T or B*NH*T rows, so thousands of threads); the cross-entropy's rows of
// V = 50257 logits get a block each, with gpt2_math.h's element functions.
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "gpt2_backend.h"
#include "gpt2_backend_impl.h"
#include "gpt2_math.h"

namespace {

// ------------------------------------------------------------------ state

struct cuda_impl {
    cudaStream_t stream;
    cublasHandle_t blas;
    int device;
    char err[GPT2_ERR_CAP];
    // Column-sum partials, grown on demand (cudaMalloc; only the first calls
    // at a new size allocate).
    float *work;
    size_t work_floats;
};

cuda_impl *impl_of(gpt2_backend *be) { return static_cast<cuda_impl *>(be->impl); }

// Every failure leaves "gpt2 cuda: what failed at file:line: why" in the
// backend's message and returns a status; nothing exits.
int fail(gpt2_backend *be, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gpt2__verror(impl_of(be)->err, GPT2_ERR_CAP, status, fmt, ap);
    va_end(ap);
    return status;
}

#define CU_TRY(call)                                                                          \
    do {                                                                                      \
        cudaError_t cu_try_err_ = (call);                                                     \
        if (cu_try_err_ != cudaSuccess) {                                                     \
            return fail(be,                                                                   \
                        cu_try_err_ == cudaErrorMemoryAllocation ? GPT2_ERR_NOMEM             \
                                                                 : GPT2_ERR_DEVICE,           \
                        "gpt2 cuda: %s failed at %s:%d: %s (%s)", #call, __FILE__, __LINE__,  \
                        cudaGetErrorName(cu_try_err_), cudaGetErrorString(cu_try_err_));     \
        }                                                                                     \
    } while (0)

#define BLAS_TRY(call)                                                                        \
    do {                                                                                      \
        cublasStatus_t blas_try_st_ = (call);                                                 \
        if (blas_try_st_ != CUBLAS_STATUS_SUCCESS) {                                          \
            return fail(be, GPT2_ERR_DEVICE, "gpt2 cuda: %s failed at %s:%d: %s (%s)", #call, \
                        __FILE__, __LINE__, cublasGetStatusName(blas_try_st_),                \
                        cublasGetStatusString(blas_try_st_));                                 \
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

#define ERR_ARGS(be) impl_of(be)->err, GPT2_ERR_CAP

// ----------------------------------------------------------- launch shapes

// Threads per block: a multiple of the warp size; the reductions assume a
// power of two.
constexpr int kThreads = 256;
// Thread-per-row kernels use smaller blocks so that a few thousand rows
// still spread over every SM.
constexpr int kRowThreads = 64;
// Grid-stride kernels need no more blocks than fill the GPU several times.
constexpr long long kMaxBlocks = 8192;
// Rows per partial sum of the column-sum kernels: part of the definition of
// the result's rounding (fixed, so results do not depend on the launch).
constexpr int kColRows = 32;
// Token classes of the embedding gradient: thread (c, p) owns column c of
// every wte row whose token is p mod kTokenClasses.
constexpr int kTokenClasses = 32;

unsigned grid_for(long long n, int threads) {
    long long blocks = (n + threads - 1) / threads;
    if (blocks < 1) blocks = 1;
    return (unsigned)(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

unsigned blocks_for(long long n, int threads) {
    long long blocks = (n + threads - 1) / threads;
    return (unsigned)(blocks < 1 ? 1 : blocks);
}

#define GRID_STRIDE(k, n)                                                                     \
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < (n);             \
         k += (long long)gridDim.x * blockDim.x)

// ----------------------------------------------------------------- kernels

// x[r][c] = wte[tokens[r]][c] + wpe[r % T][c]; a token outside [0, V) makes
// its row NaN (the CPU backend refuses it; here checking would cost a
// device-to-host wait), so the loss shows it.
__global__ void embed_forward_kernel(long long BT, int T, int C, int V, const float *wte,
                                     const float *wpe, const int *tokens, float *x) {
    GRID_STRIDE(k, BT * C) {
        const long long r = k / C;
        const int c = (int)(k % C);
        const int tok = tokens[r];
        x[k] = tok >= 0 && tok < V ? wte[(size_t)tok * C + c] + wpe[(size_t)(r % T) * C + c]
                                   : __int_as_float(0x7fc00000);
    }
}

// g_wte[tok][c] += dx[r][c] for every row r, in ascending r. Thread (c, p)
// handles column c of the tokens with tok % kTokenClasses == p, so no two
// threads write one element and each element's adds keep row order. The
// block walks the token list through shared memory.
__global__ void embed_backward_wte_kernel(int BT, int C, int V, const int *tokens,
                                          const float *dx, float *g_wte) {
    __shared__ int s_tok[kThreads];
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int p = blockIdx.y;
    for (int r0 = 0; r0 < BT; r0 += kThreads) {
        const int n = BT - r0 < kThreads ? BT - r0 : kThreads;
        __syncthreads();
        if ((int)threadIdx.x < n) s_tok[threadIdx.x] = tokens[r0 + threadIdx.x];
        __syncthreads();
        if (c >= C) continue;
        for (int i = 0; i < n; i++) {
            const int tok = s_tok[i];
            if (tok >= 0 && tok < V && tok % kTokenClasses == p) {
                g_wte[(size_t)tok * C + c] += dx[(size_t)(r0 + i) * C + c];
            }
        }
    }
}

// g_wpe[t][c] += sum over b of dx[b*T + t][c], b ascending.
__global__ void embed_backward_wpe_kernel(int B, int T, int C, const float *dx, float *g_wpe) {
    GRID_STRIDE(k, (long long)T * C) {
        float sum = g_wpe[k];
        for (int b = 0; b < B; b++) sum += dx[(size_t)b * T * C + k];
        g_wpe[k] = sum;
    }
}

__global__ void layernorm_forward_kernel(int rows, int C, const float *x, const float *w,
                                         const float *b, float *out, float *mean, float *rstd) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const size_t off = (size_t)r * C;
    gpt2_layernorm_forward_row(C, x + off, w, b, out + off, &mean[r], &rstd[r]);
}

__global__ void layernorm_backward_kernel(int rows, int C, const float *dout, const float *x,
                                          const float *mean, const float *rstd, const float *w,
                                          const float *dres, float *dx) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const size_t off = (size_t)r * C;
    gpt2_layernorm_backward_row(C, dout + off, x + off, w, mean[r], rstd[r],
                                dres != nullptr ? dres + off : nullptr, dx + off);
}

enum colsum_mode { COLSUM_PLAIN, COLSUM_GELU, COLSUM_LAYERNORM };

// Stage 1 of a column sum over a: [rows][N]: block row y sums rows
// [y*kColRows, (y+1)*kColRows) of each column in order into part[y][c].
//   PLAIN:     the values of a.
//   GELU:      a *= gelu'(pre) in place first (c_fc's gradient through GELU).
//   LAYERNORM: part[y][c] = sum a * xhat (gain), part2[y][c] = sum a (bias),
//              xhat recomputed from x, mean, rstd as the forward did.
template <colsum_mode mode>
__global__ void colsum_partial_kernel(int rows, int N, float *a, const float *pre,
                                      const float *x, const float *mean, const float *rstd,
                                      float *part, float *part2) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= N) return;
    const int nblocks = (rows + kColRows - 1) / kColRows;
    // gridDim.y is capped at 65535; larger inputs loop.
    for (int y = blockIdx.y; y < nblocks; y += gridDim.y) {
        const int r0 = y * kColRows;
        const int r1 = r0 + kColRows < rows ? r0 + kColRows : rows;
        float s = 0.0f, s2 = 0.0f;
        for (int r = r0; r < r1; r++) {
            const size_t k = (size_t)r * N + c;
            float v = a[k];
            if constexpr (mode == COLSUM_GELU) {
                v *= gpt2_gelu_grad(pre[k]);
                a[k] = v;
            }
            if constexpr (mode == COLSUM_LAYERNORM) {
                s += v * gpt2_layernorm_xhat(x[k], mean[r], rstd[r]);
                s2 += v;
            } else {
                s += v;
            }
        }
        part[(size_t)y * N + c] = s;
        if constexpr (mode == COLSUM_LAYERNORM) part2[(size_t)y * N + c] = s2;
    }
}

// Stage 2: out[c] += sum over blocks y (ascending) of part[y][c].
__global__ void colsum_finish_kernel(int nblocks, int N, const float *part, float *out) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= N) return;
    float s = 0.0f;
    for (int y = 0; y < nblocks; y++) s += part[(size_t)y * N + c];
    out[c] += s;
}

// y[r][c] = (res ? res[r][c] : 0) + b[c]: the rows a GEMM with beta = 1 then
// adds onto, so the bias and the residual cost no pass of their own.
__global__ void rows_init_kernel(long long rows, int N, const float *b, const float *res,
                                 float *y) {
    GRID_STRIDE(k, rows * N) {
        const float bias = b[k % N];
        y[k] = res != nullptr ? res[k] + bias : bias;
    }
}

__global__ void gelu_forward_kernel(long long n, const float *pre, float *post) {
    GRID_STRIDE(k, n) { post[k] = gpt2_gelu(pre[k]); }
}

// att rows: [rows][T], row r is query position r % T of its (b, h).
__global__ void causal_softmax_kernel(long long rows, int T, float scale, float *att) {
    const long long r = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (r >= rows) return;
    gpt2_causal_softmax_row((int)(r % T), T, scale, att + (size_t)r * T);
}

__global__ void causal_softmax_backward_kernel(long long rows, int T, float scale,
                                               const float *att, float *datt) {
    const long long r = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (r >= rows) return;
    gpt2_causal_softmax_backward_row((int)(r % T), T, scale, att + (size_t)r * T,
                                     datt + (size_t)r * T);
}

// One block per row of logits: [n][V]. losses[i] = the row's cross-entropy;
// with want_grad, the row becomes dscale * dloss/dlogits. The sums run per
// thread in index order, then in a fixed tree, so they repeat bit for bit.
// A target outside [0, V) gives a NaN loss and no one-hot term.
__global__ void xent_kernel(int V, float *logits, const int *targets, float dscale,
                            int want_grad, float *losses) {
    __shared__ float s_red[kThreads];
    __shared__ float s_target;
    const int i = blockIdx.x;
    const int t = threadIdx.x;
    float *z = logits + (size_t)i * V;
    const int target = targets[i];
    const bool valid = target >= 0 && target < V;
    if (t == 0) s_target = valid ? z[target] : __int_as_float(0x7fc00000);

    float m = z[0];
    for (int k = t; k < V; k += kThreads) m = z[k] > m ? z[k] : m;
    s_red[t] = m;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
        if (t < half) s_red[t] = s_red[t + half] > s_red[t] ? s_red[t + half] : s_red[t];
        __syncthreads();
    }
    m = s_red[0];
    __syncthreads(); // everyone has read s_red[0] before it is reused

    float sum = 0.0f;
    for (int k = t; k < V; k += kThreads) sum += gpt2_expf(z[k] - m);
    s_red[t] = sum;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
        if (t < half) s_red[t] += s_red[t + half];
        __syncthreads();
    }
    sum = s_red[0];
    // s_target was written before the first barrier; every read of z above
    // is ordered before the writes below by the barriers.
    if (t == 0) losses[i] = gpt2_xent_loss(m, sum, s_target);
    if (want_grad) {
        const float inv = 1.0f / sum;
        for (int k = t; k < V; k += kThreads) {
            z[k] = gpt2_xent_dlogit(gpt2_expf(z[k] - m), inv, valid && k == target, dscale);
        }
    }
}

// ------------------------------------------------------------ products

// Row-major C[M][N] = alpha op(A) op(B) + beta C with cblas_sgemm's
// row-major arguments (see the top of the file).
int gemm_rm(gpt2_backend *be, bool ta, bool tb, int M, int N, int K, const float *A, int lda,
            const float *B, int ldb, float beta, float *C, int ldc) {
    const float alpha = 1.0f;
    BLAS_TRY(cublasSgemm(impl_of(be)->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                         ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, A, lda, &beta,
                         C, ldc));
    return GPT2_OK;
}

// The same for `count` products whose operands are sA, sB, sC floats apart.
int gemm_rm_batched(gpt2_backend *be, bool ta, bool tb, int M, int N, int K, const float *A,
                    int lda, long long sA, const float *B, int ldb, long long sB, float *C,
                    int ldc, long long sC, int count) {
    const float alpha = 1.0f, beta = 0.0f;
    BLAS_TRY(cublasSgemmStridedBatched(impl_of(be)->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                       ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb,
                                       sB, A, lda, sA, &beta, C, ldc, sC, count));
    return GPT2_OK;
}

// ------------------------------------------------------------- helpers

int ensure_work(gpt2_backend *be, size_t floats) {
    cuda_impl *ci = impl_of(be);
    if (floats <= ci->work_floats) return GPT2_OK;
    // cudaFree waits for the device, so the old buffer is no longer in use.
    if (ci->work != nullptr) CU_TRY(cudaFree(ci->work));
    ci->work = nullptr;
    ci->work_floats = 0;
    CU_TRY(cudaMalloc(&ci->work, floats * sizeof(float)));
    ci->work_floats = floats;
    return GPT2_OK;
}

template <colsum_mode mode>
int colsum(gpt2_backend *be, int rows, int N, float *a, const float *pre, const float *x,
           const float *mean, const float *rstd, float *out, float *out2) {
    cuda_impl *ci = impl_of(be);
    const int nblocks = (rows + kColRows - 1) / kColRows;
    const size_t part_floats = (size_t)nblocks * N;
    TRY(ensure_work(be, mode == COLSUM_LAYERNORM ? 2 * part_floats : part_floats));
    float *part = ci->work;
    float *part2 = mode == COLSUM_LAYERNORM ? ci->work + part_floats : nullptr;
    const dim3 grid(blocks_for(N, kThreads), (unsigned)(nblocks < 65535 ? nblocks : 65535));
    colsum_partial_kernel<mode><<<grid, kThreads, 0, ci->stream>>>(rows, N, a, pre, x, mean,
                                                                    rstd, part, part2);
    LAUNCHED();
    colsum_finish_kernel<<<blocks_for(N, kThreads), kThreads, 0, ci->stream>>>(nblocks, N, part,
                                                                               out);
    LAUNCHED();
    if constexpr (mode == COLSUM_LAYERNORM) {
        colsum_finish_kernel<<<blocks_for(N, kThreads), kThreads, 0, ci->stream>>>(nblocks, N,
                                                                                   part2, out2);
        LAUNCHED();
    }
    return GPT2_OK;
}

int colsum_add(gpt2_backend *be, int rows, int N, const float *a, float *out) {
    // PLAIN mode never writes a.
    return colsum<COLSUM_PLAIN>(be, rows, N, const_cast<float *>(a), nullptr, nullptr, nullptr,
                                nullptr, out, nullptr);
}

int layernorm_forward(gpt2_backend *be, int rows, int C, const float *x, const float *w,
                      const float *b, float *out, float *mean, float *rstd) {
    layernorm_forward_kernel<<<blocks_for(rows, kRowThreads), kRowThreads, 0,
                               impl_of(be)->stream>>>(rows, C, x, w, b, out, mean, rstd);
    LAUNCHED();
    return GPT2_OK;
}

// dx = dres + LayerNorm's input gradient; dw, db += its parameter gradients.
int layernorm_backward(gpt2_backend *be, int rows, int C, const float *dout, const float *x,
                       const float *mean, const float *rstd, const float *w, const float *dres,
                       float *dx, float *dw, float *db) {
    TRY(colsum<COLSUM_LAYERNORM>(be, rows, C, const_cast<float *>(dout), nullptr, x, mean, rstd,
                                 dw, db));
    layernorm_backward_kernel<<<blocks_for(rows, kRowThreads), kRowThreads, 0,
                                impl_of(be)->stream>>>(rows, C, dout, x, mean, rstd, w, dres,
                                                       dx);
    LAUNCHED();
    return GPT2_OK;
}

// y = (res ? res : 0) + x W^T + b; W: [out][in].
int linear_forward(gpt2_backend *be, int rows, int in, int out, const float *x, const float *W,
                   const float *b, const float *res, float *y) {
    const long long n = (long long)rows * out;
    rows_init_kernel<<<grid_for(n, kThreads), kThreads, 0, impl_of(be)->stream>>>(rows, out, b,
                                                                                  res, y);
    LAUNCHED();
    return gemm_rm(be, false, true, rows, out, in, x, in, W, in, 1.0f, y, out);
}

// dW += dy^T x; dx = dy W when dx is not NULL.
int linear_backward(gpt2_backend *be, int rows, int in, int out, const float *x, const float *W,
                    const float *dy, float *dW, float *dx) {
    TRY(gemm_rm(be, true, false, out, in, rows, dy, out, x, in, 1.0f, dW, in));
    if (dx != nullptr) TRY(gemm_rm(be, false, false, rows, in, out, dy, out, W, in, 0.0f, dx, in));
    return GPT2_OK;
}

// Per sequence b, the NH heads' products are one strided-batched call each:
// head h's q, k, v start h*hs floats into qkv's rows (stride 3C), its output
// h*hs floats into atty's (stride C), its T x T scores T*T floats apart.
int attention_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T, const float *qkv,
                      float *att, float *atty) {
    const int C = d->n_embd, NH = d->n_head, hs = C / NH, C3 = 3 * C;
    const long long TT = (long long)T * T;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * C3;
        float *s = att + (size_t)b * NH * TT;
        // s_h = q_h . k_h^T (raw scores; the scale goes into the softmax).
        TRY(gemm_rm_batched(be, false, true, T, T, hs, q, C3, hs, q + C, C3, hs, s, T, TT, NH));
    }
    const long long rows = (long long)B * NH * T;
    causal_softmax_kernel<<<blocks_for(rows, kRowThreads), kRowThreads, 0,
                            impl_of(be)->stream>>>(rows, T, scale, att);
    LAUNCHED();
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * C3 + 2 * (size_t)C;
        const float *p = att + (size_t)b * NH * TT;
        // y_h = p_h . v_h
        TRY(gemm_rm_batched(be, false, false, T, hs, T, p, T, TT, v, C3, hs,
                            atty + (size_t)b * T * C, C, hs, NH));
    }
    return GPT2_OK;
}

int attention_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T, const float *qkv,
                       const float *att, const float *datty, float *dqkv, float *datt) {
    const int C = d->n_embd, NH = d->n_head, hs = C / NH, C3 = 3 * C;
    const long long TT = (long long)T * T;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        const size_t qoff = (size_t)b * T * C3;
        const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
        const float *p = att + (size_t)b * NH * TT;
        const float *dy = datty + (size_t)b * T * C;
        float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
        // dv_h = p_h^T . dy_h; dp_h = dy_h . v_h^T
        TRY(gemm_rm_batched(be, true, false, T, hs, T, p, T, TT, dy, C, hs, dv, C3, hs, NH));
        TRY(gemm_rm_batched(be, false, true, T, T, hs, dy, C, hs, v, C3, hs, datt, T, TT, NH));
        const long long rows = (long long)NH * T;
        causal_softmax_backward_kernel<<<blocks_for(rows, kRowThreads), kRowThreads, 0,
                                         impl_of(be)->stream>>>(rows, T, scale, p, datt);
        LAUNCHED();
        // dq_h = ds_h . k_h; dk_h = ds_h^T . q_h
        TRY(gemm_rm_batched(be, false, false, T, hs, T, datt, T, TT, k, C3, hs, dq, C3, hs, NH));
        TRY(gemm_rm_batched(be, true, false, T, hs, T, datt, T, TT, q, C3, hs, dk, C3, hs, NH));
    }
    return GPT2_OK;
}

// ------------------------------------------------------------- memory ops

int cuda_alloc(gpt2_backend *be, size_t bytes, void **out) {
    if (out == nullptr) return fail(be, GPT2_ERR_ARG, "gpt2 cuda alloc: out is NULL");
    *out = nullptr;
    void *p = nullptr;
    // cudaMalloc aligns to at least 256 bytes; 0 bytes would give NULL.
    CU_TRY(cudaMalloc(&p, bytes > 0 ? bytes : 1));
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, impl_of(be)->stream);
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

const char *cuda_last_error(const gpt2_backend *be) {
    return static_cast<const cuda_impl *>(be->impl)->err;
}

// ------------------------------------------------------------- model ops

int cuda_embed_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                       const gpt2_embed_w *w, const int *tokens, float *x) {
    TRY(gpt2__check_shape("embed_forward", d, B, T, ERR_ARGS(be)));
    TRY(gpt2__check_embed_w("embed_forward", "w", w, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("embed_forward", "tokens", tokens, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("embed_forward", "x", x, ERR_ARGS(be)));
    const long long BT = (long long)B * T;
    embed_forward_kernel<<<grid_for(BT * d->n_embd, kThreads), kThreads, 0,
                           impl_of(be)->stream>>>(BT, T, d->n_embd, d->vocab, w->wte, w->wpe,
                                                  tokens, x);
    LAUNCHED();
    return GPT2_OK;
}

int cuda_embed_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T, gpt2_embed_w *g,
                        const int *tokens, const float *dx) {
    TRY(gpt2__check_shape("embed_backward", d, B, T, ERR_ARGS(be)));
    TRY(gpt2__check_embed_w("embed_backward", "g", g, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("embed_backward", "tokens", tokens, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("embed_backward", "dx", dx, ERR_ARGS(be)));
    const int C = d->n_embd;
    const dim3 grid(blocks_for(C, kThreads), kTokenClasses);
    embed_backward_wte_kernel<<<grid, kThreads, 0, impl_of(be)->stream>>>(B * T, C, d->vocab,
                                                                          tokens, dx, g->wte);
    LAUNCHED();
    embed_backward_wpe_kernel<<<grid_for((long long)T * C, kThreads), kThreads, 0,
                                impl_of(be)->stream>>>(B, T, C, dx, g->wpe);
    LAUNCHED();
    return GPT2_OK;
}

int cuda_block_forward(gpt2_backend *be, const gpt2_dims *d, int B, int T, const gpt2_block_w *w,
                       const float *x, gpt2_block_acts *a, float *y) {
    TRY(gpt2__check_shape("block_forward", d, B, T, ERR_ARGS(be)));
    TRY(gpt2__check_block_w("block_forward", "w", w, ERR_ARGS(be)));
    TRY(gpt2__check_acts("block_forward", a, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("block_forward", "x", x, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("block_forward", "y", y, ERR_ARGS(be)));
    const int BT = B * T, C = d->n_embd;
    TRY(layernorm_forward(be, BT, C, x, w->ln1w, w->ln1b, a->ln1, a->ln1_mean, a->ln1_rstd));
    TRY(linear_forward(be, BT, C, 3 * C, a->ln1, w->qkvw, w->qkvb, nullptr, a->qkv));
    TRY(attention_forward(be, d, B, T, a->qkv, a->att, a->atty));
    TRY(linear_forward(be, BT, C, C, a->atty, w->attprojw, w->attprojb, x, a->res1));
    TRY(layernorm_forward(be, BT, C, a->res1, w->ln2w, w->ln2b, a->ln2, a->ln2_mean,
                          a->ln2_rstd));
    TRY(linear_forward(be, BT, C, 4 * C, a->ln2, w->fcw, w->fcb, nullptr, a->fch));
    const long long n = (long long)BT * 4 * C;
    gelu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, impl_of(be)->stream>>>(
        n, a->fch, a->fch_gelu);
    LAUNCHED();
    TRY(linear_forward(be, BT, 4 * C, C, a->fch_gelu, w->fcprojw, w->fcprojb, a->res1, y));
    return GPT2_OK;
}

int cuda_block_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                        const gpt2_block_w *w, gpt2_block_w *g, const float *x,
                        const gpt2_block_acts *a, const float *dy, float *dx, float *scratch) {
    TRY(gpt2__check_shape("block_backward", d, B, T, ERR_ARGS(be)));
    TRY(gpt2__check_block_w("block_backward", "w", w, ERR_ARGS(be)));
    TRY(gpt2__check_block_w("block_backward", "g", g, ERR_ARGS(be)));
    TRY(gpt2__check_acts("block_backward", a, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("block_backward", "x", x, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("block_backward", "dy", dy, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("block_backward", "dx", dx, ERR_ARGS(be)));
    TRY(gpt2__check_ptr("block_backward", "scratch", scratch, ERR_ARGS(be)));
    const int BT = B * T, C = d->n_embd;
    float *dbig = scratch;                   // [BT][4C]: d fch, later d qkv ([BT][3C])
    float *dmid = dbig + (size_t)BT * 4 * C; // [BT][C]: d ln2, d atty, d ln1 in turn
    float *datt = dmid + (size_t)BT * C;     // [NH][T][T]

    // MLP half.
    TRY(colsum_add(be, BT, C, dy, g->fcprojb));
    TRY(linear_backward(be, BT, 4 * C, C, a->fch_gelu, w->fcprojw, dy, g->fcprojw, dbig));
    TRY(colsum<COLSUM_GELU>(be, BT, 4 * C, dbig, a->fch, nullptr, nullptr, nullptr, g->fcb,
                            nullptr));
    TRY(linear_backward(be, BT, C, 4 * C, a->ln2, w->fcw, dbig, g->fcw, dmid));
    TRY(layernorm_backward(be, BT, C, dmid, a->res1, a->ln2_mean, a->ln2_rstd, w->ln2w, dy, dx,
                           g->ln2w, g->ln2b));
    // Attention half; dx holds d res1.
    TRY(colsum_add(be, BT, C, dx, g->attprojb));
    TRY(linear_backward(be, BT, C, C, a->atty, w->attprojw, dx, g->attprojw, dmid));
    TRY(attention_backward(be, d, B, T, a->qkv, a->att, dmid, dbig, datt));
    TRY(colsum_add(be, BT, 3 * C, dbig, g->qkvb));
    TRY(linear_backward(be, BT, C, 3 * C, a->ln1, w->qkvw, dbig, g->qkvw, dmid));
    TRY(layernorm_backward(be, BT, C, dmid, x, a->ln1_mean, a->ln1_rstd, w->ln1w, dx, dx,
                           g->ln1w, g->ln1b));
    return GPT2_OK;
}

int check_head(gpt2_backend *be, const char *op, const gpt2_dims *d, int B, int T,
               const gpt2_embed_w *w, const float *x, int chunk_rows, const float *scratch) {
    TRY(gpt2__check_shape(op, d, B, T, ERR_ARGS(be)));
    TRY(gpt2__check_embed_w(op, "w", w, ERR_ARGS(be)));
    TRY(gpt2__check_ptr(op, "x", x, ERR_ARGS(be)));
    TRY(gpt2__check_ptr(op, "scratch", scratch, ERR_ARGS(be)));
    if (chunk_rows < 1) {
        return fail(be, GPT2_ERR_ARG,
                    "gpt2 %s: chunk_rows = %d; need >= 1 (default GPT2_HEAD_CHUNK_ROWS_DEFAULT)",
                    op, chunk_rows);
    }
    return GPT2_OK;
}

// The head over chunks of rows (gpt2_cpu.c's cpu_head_run); gradients only
// when g is not NULL.
int head_run(gpt2_backend *be, const gpt2_dims *d, int BT, const gpt2_embed_w *w,
             gpt2_embed_w *g, const float *x, const int *targets, float dloss_scale, float *dx,
             float *losses, int chunk_rows, float *scratch) {
    const int C = d->n_embd, V = d->vocab;
    const int R = chunk_rows < BT ? chunk_rows : BT;
    float *xn = scratch;                 // [R][C]
    float *mean = xn + (size_t)R * C;    // [R]
    float *rstd = mean + R;              // [R]
    float *logits = rstd + R;            // [R][V], then d logits
    float *dxn = logits + (size_t)R * V; // [R][C]
    const int want_grad = g != nullptr;
    for (int r0 = 0; r0 < BT; r0 += R) {
        const int n = BT - r0 < R ? BT - r0 : R;
        const float *xc = x + (size_t)r0 * C;
        TRY(layernorm_forward(be, n, C, xc, w->lnfw, w->lnfb, xn, mean, rstd));
        TRY(gemm_rm(be, false, true, n, V, C, xn, C, w->wte, C, 0.0f, logits, V));
        xent_kernel<<<(unsigned)n, kThreads, 0, impl_of(be)->stream>>>(
            V, logits, targets + r0, dloss_scale, want_grad, losses + r0);
        LAUNCHED();
        if (!want_grad) continue;
        TRY(linear_backward(be, n, C, V, xn, w->wte, logits, g->wte, dxn));
        TRY(layernorm_backward(be, n, C, dxn, xc, mean, rstd, w->lnfw, nullptr,
                               dx + (size_t)r0 * C, g->lnfw, g->lnfb));
    }
    return GPT2_OK;
}

int cuda_head_forward_backward(gpt2_backend *be, const gpt2_dims *d, int B, int T,
                               const gpt2_embed_w *w, gpt2_embed_w *g, const float *x,
                               const int *targets, float dloss_scale, float *dx, float *losses,
                               int chunk_rows, float *scratch) {
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
                      const float *x, const int *targets, float *losses, int chunk_rows,
                      float *scratch) {
    const char *op = "head_forward";
    TRY(check_head(be, op, d, B, T, w, x, chunk_rows, scratch));
    TRY(gpt2__check_ptr(op, "targets", targets, ERR_ARGS(be)));
    TRY(gpt2__check_ptr(op, "losses", losses, ERR_ARGS(be)));
    return head_run(be, d, B * T, w, nullptr, x, targets, 0.0f, nullptr, losses, chunk_rows,
                    scratch);
}

int cuda_head_logits(gpt2_backend *be, const gpt2_dims *d, int B, int T, const gpt2_embed_w *w,
                     const float *x, int row, float *host_logits, float *scratch) {
    const char *op = "head_logits";
    TRY(check_head(be, op, d, B, T, w, x, 1, scratch));
    TRY(gpt2__check_ptr(op, "host_logits", host_logits, ERR_ARGS(be)));
    if (row < 0 || (long long)row >= (long long)B * T) {
        return fail(be, GPT2_ERR_ARG, "gpt2 %s: row %d is outside [0, B * T = %lld)", op, row,
                    (long long)B * T);
    }
    const int C = d->n_embd, V = d->vocab;
    float *xn = scratch;       // [C], then mean, rstd
    float *logits = xn + C + 2; // [V]
    TRY(layernorm_forward(be, 1, C, x + (size_t)row * C, w->lnfw, w->lnfb, xn, xn + C,
                          xn + C + 1));
    TRY(gemm_rm(be, false, true, 1, V, C, xn, C, w->wte, C, 0.0f, logits, V));
    CU_TRY(cudaMemcpyAsync(host_logits, logits, sizeof(float) * (size_t)V,
                           cudaMemcpyDeviceToHost, impl_of(be)->stream));
    CU_TRY(cudaStreamSynchronize(impl_of(be)->stream));
    return GPT2_OK;
}

void cuda_destroy(gpt2_backend *be) {
    if (be == nullptr) return;
    cuda_impl *ci = impl_of(be);
    // Errors here have no one to go to; the stream and device stay usable
    // for the caller whatever they are.
    cudaStreamSynchronize(ci->stream);
    if (ci->work != nullptr) cudaFree(ci->work);
    if (ci->blas != nullptr) cublasDestroy(ci->blas);
    std::free(ci);
    std::free(be);
}

// In gpt2_backend_ops' order (C++17 has no designated initializers).
const gpt2_backend_ops cuda_ops = {
    "cuda",
    cuda_alloc,
    cuda_free,
    cuda_zero,
    cuda_upload,
    cuda_download,
    cuda_copy,
    cuda_synchronize,
    cuda_last_error,
    cuda_embed_forward,
    cuda_embed_backward,
    cuda_block_forward,
    cuda_block_backward,
    cuda_head_forward_backward,
    cuda_head_forward,
    cuda_head_logits,
    cuda_destroy,
};

} // namespace

extern "C" int gpt2_cuda_backend_create(void *cuda_stream, gpt2_backend **out, char *err,
                                        size_t cap) {
    if (out == nullptr) {
        return gpt2__error(err, cap, GPT2_ERR_ARG, "gpt2 cuda: out is NULL");
    }
    *out = nullptr;
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
    ci->stream = static_cast<cudaStream_t>(cuda_stream);
    // Full fp32 products (no TF32) and no atomics inside cuBLAS, so that its
    // results are deterministic and comparable with the CPU's sgemm.
    const char *what = nullptr;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    e = cudaGetDevice(&ci->device);
    if (e != cudaSuccess) {
        gpt2__error(err, cap, GPT2_ERR_DEVICE, "gpt2 cuda: cudaGetDevice failed: %s",
                    cudaGetErrorString(e));
        std::free(ci);
        std::free(be);
        return GPT2_ERR_DEVICE;
    }
    if ((st = cublasCreate(&ci->blas)) != CUBLAS_STATUS_SUCCESS) {
        what = "cublasCreate";
    } else if ((st = cublasSetStream(ci->blas, ci->stream)) != CUBLAS_STATUS_SUCCESS) {
        what = "cublasSetStream";
    } else if ((st = cublasSetMathMode(ci->blas, CUBLAS_DEFAULT_MATH)) !=
               CUBLAS_STATUS_SUCCESS) {
        what = "cublasSetMathMode";
    } else if ((st = cublasSetAtomicsMode(ci->blas, CUBLAS_ATOMICS_NOT_ALLOWED)) !=
               CUBLAS_STATUS_SUCCESS) {
        what = "cublasSetAtomicsMode";
    }
    if (what != nullptr) {
        gpt2__error(err, cap, GPT2_ERR_DEVICE, "gpt2 cuda: %s failed: %s (%s)", what,
                    cublasGetStatusName(st), cublasGetStatusString(st));
        cuda_destroy(be);
        return GPT2_ERR_DEVICE;
    }
    *out = be;
    return GPT2_OK;
}
