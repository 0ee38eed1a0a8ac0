// The example MLP on the GPU; see mlp_cuda.h for the contracts and
// mlp_model.c for the same math on the CPU.
//
// Layout: cuBLAS is column-major and our tensors are row-major. A row-major
// [r][c] matrix is, read column-major, its transpose [c x r] with leading
// dimension c, so every GEMM below computes the transpose of the row-major
// product (C^T = B^T A^T) and states the row-major meaning next to it.
//
// Precision: activations and the per-layer math are fp32. For fp16/bf16
// parameters the weight is widened into fp32 scratch before its GEMMs (cuBLAS
// needs A and B of one type), and the weight gradient is computed in fp32
// scratch (beta = 0) and then added into the low-precision gradient with one
// rounding, as the CPU path does with zs_convert. Every GEMM accumulates in
// fp32 (CUBLAS_COMPUTE_32F: no TF32, so results stay comparable to the CPU's
// sgemm up to summation order).
#include "mlp_cuda.h"

#include <cstdio>
#include <cstdlib>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mpi.h>

#include "zeroshard_cuda.h"

// ------------------------------------------------------------------ errors

// It is an example: a failed call is reported with its text and location, and
// the job goes down, because the other ranks would otherwise block in their
// next collective waiting for this one.
[[noreturn]] static void mlp_cuda_fail(const char *call, const char *file, int line,
                                       const char *name, const char *message) {
    std::fprintf(stderr, "mlp_train: %s:%d: %s failed: %s (%s); aborting the job\n", file, line,
                 call, name, message);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort(); // MPI_Abort does not return, but is not declared noreturn
}

#define CUDA_CHECK(call)                                                                      \
    do {                                                                                      \
        cudaError_t cuda_check_err_ = (call);                                                 \
        if (cuda_check_err_ != cudaSuccess) {                                                 \
            mlp_cuda_fail(#call, __FILE__, __LINE__, cudaGetErrorName(cuda_check_err_),       \
                          cudaGetErrorString(cuda_check_err_));                               \
        }                                                                                     \
    } while (0)

#define CUBLAS_CHECK(call)                                                                    \
    do {                                                                                      \
        cublasStatus_t cublas_check_st_ = (call);                                             \
        if (cublas_check_st_ != CUBLAS_STATUS_SUCCESS) {                                      \
            mlp_cuda_fail(#call, __FILE__, __LINE__, cublasGetStatusName(cublas_check_st_),   \
                          cublasGetStatusString(cublas_check_st_));                           \
        }                                                                                     \
    } while (0)

// ----------------------------------------------------------------- kernels

// Threads per block of the element-wise and reduction kernels: a multiple of
// the warp size that keeps enough blocks resident on every SM. The reductions
// below assume a power of two.
constexpr int kThreads = 256;
// Grid-stride kernels need no more blocks than fill the GPU several times
// over; capping keeps the grid within limits for any tensor size.
constexpr long long kMaxBlocks = 4096;

static unsigned grid_for(long long n) {
    long long blocks = (n + kThreads - 1) / kThreads;
    if (blocks < 1) blocks = 1;
    return (unsigned)(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

// Round to nearest even, as zs_convert does on the host.
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// dst: [n] = src: [n] widened to fp32.
template <typename T> __global__ void widen_kernel(long long n, const T *src, float *dst) {
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n;
         k += (long long)gridDim.x * blockDim.x) {
        dst[k] = to_f32(src[k]);
    }
}

// grad: [n] += add: [n], computed in fp32 and rounded once into grad's dtype.
template <typename T> __global__ void add_into_kernel(long long n, const float *add, T *grad) {
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n;
         k += (long long)gridDim.x * blockDim.x) {
        grad[k] = from_f32<T>(to_f32(grad[k]) + add[k]);
    }
}

// y: [batch][out] = act(y + b) with b: [out] broadcast over rows. The GEMM
// wrote x W^T into y; the bias joins here so that it costs no extra pass.
template <typename T>
__global__ void bias_act_kernel(int batch, int out, const T *b, int relu, float *y) {
    const long long n = (long long)batch * out;
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n;
         k += (long long)gridDim.x * blockDim.x) {
        float v = y[k] + to_f32(b[k % out]);
        y[k] = relu ? (v > 0.0f ? v : 0.0f) : v;
    }
}

// dy: [n] = 0 where y: [n] <= 0. y is the ReLU's output, positive exactly
// where the pre-activation was, so the pre-activation need not be kept. The
// test is written as in mlp_model.c so that NaN outputs also stop the gradient.
__global__ void relu_backward_kernel(long long n, const float *y, float *dy) {
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n;
         k += (long long)gridDim.x * blockDim.x) {
        if (!(y[k] > 0.0f)) dy[k] = 0.0f;
    }
}

// db: [out] += column sums of dz: [batch][out]. One thread per column walks
// the rows in order: adjacent threads read adjacent addresses, and the sum
// has a fixed order, so it is the same on every run.
template <typename T> __global__ void bias_grad_kernel(int batch, int out, const float *dz, T *db) {
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= out) return;
    float sum = 0.0f;
    for (int i = 0; i < batch; i++) sum += dz[(size_t)i * out + o];
    db[o] = from_f32<T>(to_f32(db[o]) + sum);
}

// One block per row of logits: [batch][classes]. Writes the row's loss
// (lse - z[label]) to row_loss: [batch] and whether its first largest logit
// is the label to row_hit: [batch]; with dlogits (which may alias logits)
// writes row_scale * (softmax - onehot). Sums run in double, as in
// mlp_softmax_xent, and in a fixed tree order, so results repeat bit for bit.
__global__ void softmax_xent_kernel(int classes, const float *logits, const int *labels,
                                    double row_scale, float *dlogits, double *row_loss,
                                    int *row_hit) {
    __shared__ float s_val[kThreads];
    __shared__ int s_idx[kThreads];
    __shared__ double s_sum[kThreads];
    const int i = blockIdx.x;
    const int t = threadIdx.x;
    const float *z = logits + (size_t)i * classes; // [classes]

    // The first largest logit: each thread scans a strided slice, then the
    // tree keeps the larger value and, on ties, the smaller index.
    float best = z[0];
    int best_idx = 0;
    for (int c = t; c < classes; c += kThreads) {
        if (z[c] > best || (z[c] == best && c < best_idx)) {
            best = z[c];
            best_idx = c;
        }
    }
    s_val[t] = best;
    s_idx[t] = best_idx;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
        if (t < half) {
            float v = s_val[t + half];
            int j = s_idx[t + half];
            if (v > s_val[t] || (v == s_val[t] && j < s_idx[t])) {
                s_val[t] = v;
                s_idx[t] = j;
            }
        }
        __syncthreads();
    }
    const int argmax = s_idx[0];
    // log-sum-exp shifted by the largest logit so that exp cannot overflow.
    const double zmax = (double)s_val[0];
    double sum = 0.0;
    for (int c = t; c < classes; c += kThreads) sum += exp((double)z[c] - zmax);
    s_sum[t] = sum;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
        if (t < half) s_sum[t] += s_sum[t + half];
        __syncthreads();
    }
    const double lse = zmax + log(s_sum[0]);
    const int y = labels[i];
    if (t == 0) {
        row_loss[i] = lse - (double)z[y];
        row_hit[i] = argmax == y;
    }
    if (dlogits != nullptr) {
        // Every thread has read z[c] for the c it writes, and the barriers
        // above order all other reads of this row before any write.
        __syncthreads();
        float *g = dlogits + (size_t)i * classes; // [classes]
        for (int c = t; c < classes; c += kThreads) {
            double p = exp((double)z[c] - lse);
            g[c] = (float)(row_scale * (p - (c == y ? 1.0 : 0.0)));
        }
    }
}

// metrics: [2] += {sum of row_loss: [batch], sum of row_hit: [batch]}, in one
// block with a fixed order (no atomics), so the logged loss repeats exactly.
__global__ void metrics_kernel(int batch, const double *row_loss, const int *row_hit,
                               double *metrics) {
    __shared__ double s_loss[kThreads];
    __shared__ double s_hit[kThreads];
    const int t = threadIdx.x;
    double loss = 0.0, hit = 0.0;
    for (int i = t; i < batch; i += kThreads) {
        loss += row_loss[i];
        hit += (double)row_hit[i];
    }
    s_loss[t] = loss;
    s_hit[t] = hit;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
        if (t < half) {
            s_loss[t] += s_loss[t + half];
            s_hit[t] += s_hit[t + half];
        }
        __syncthreads();
    }
    if (t == 0) {
        metrics[0] += s_loss[0];
        metrics[1] += s_hit[0];
    }
}

// ------------------------------------------------------------------- state

struct mlp_cuda {
    mlp_shape shape;
    int max_batch;
    cudaStream_t stream; // zeroshard's compute stream (not ours to destroy)
    cublasHandle_t blas;
    // Device memory, one allocation carved by offsets (each piece aligned to
    // 256 bytes so that every tensor suits vectorized and cuBLAS access).
    void *device;
    float *acts[MLP_MAX_LAYERS + 1]; // acts[l]: [max_batch][dims[l]]; acts[L] = logits
    float *grad[2];                  // ping-pong, each [max_batch][max_dim]
    float *weight32;                 // [largest weight]: fp16/bf16 weight widened
    float *dweight32;                // [largest weight]: fp32 weight-gradient contribution
    int *labels;                     // [max_batch]
    double *row_loss;                // [max_batch]
    int *row_hit;                    // [max_batch]
    double *metrics;                 // [2]: loss summed over samples, correct rows
    // Pinned host staging, two sets so the host can fill one while the
    // other's upload runs; uploaded[s] marks when set s may be written again.
    float *host_x[2];   // [max_batch][dims[0]]
    int *host_labels[2];// [max_batch]
    double *host_metrics; // [2]
    cudaEvent_t uploaded[2];
    int slot;           // the set last returned by mlp_cuda_stage
};

static size_t align_up(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

static void *carve(char **cursor, size_t bytes) {
    void *p = *cursor;
    *cursor += align_up(bytes);
    return p;
}

// C = op(A) op(B) + beta C on fp32 column-major operands, accumulated in fp32.
// alpha and beta are host fp32 scalars, as CUBLAS_COMPUTE_32F expects. A
// launch error shows at once; an execution error shows at a later check on
// the stream, which is as precise as asynchronous work allows.
static void gemm(mlp_cuda *mc, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    const float alpha = 1.0f;
    CUBLAS_CHECK(cublasGemmEx(mc->blas, ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda, B,
                              CUDA_R_32F, ldb, &beta, C, CUDA_R_32F, ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The weight as fp32 on the device: the runtime's buffer itself, or widened
// into scratch.
static const float *weight_f32(mlp_cuda *mc, zs_dtype dtype, const void *W, long long n) {
    switch (dtype) {
    case ZS_DTYPE_FP32:
        return static_cast<const float *>(W);
    case ZS_DTYPE_FP16:
        widen_kernel<<<grid_for(n), kThreads, 0, mc->stream>>>(
            n, static_cast<const __half *>(W), mc->weight32);
        break;
    case ZS_DTYPE_BF16:
        widen_kernel<<<grid_for(n), kThreads, 0, mc->stream>>>(
            n, static_cast<const __nv_bfloat16 *>(W), mc->weight32);
        break;
    }
    CUDA_CHECK(cudaGetLastError());
    return mc->weight32;
}

// ------------------------------------------------------------------ public

extern "C" mlp_cuda *mlp_cuda_create(zs_ctx *zs, const mlp_shape *shape, int max_batch) {
    auto *mc = static_cast<mlp_cuda *>(std::calloc(1, sizeof(mlp_cuda)));
    if (mc == nullptr) {
        std::fprintf(stderr, "mlp_train: out of host memory for the CUDA model state\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
        std::abort();
    }
    mc->shape = *shape;
    mc->max_batch = max_batch;
    // zeroshard selected the device at zs_create; select it on this thread
    // too in case the program created the context on another one.
    CUDA_CHECK(cudaSetDevice(zs_cuda_device(zs)));
    mc->stream = zs_cuda_stream(zs);
    CUBLAS_CHECK(cublasCreate(&mc->blas));
    CUBLAS_CHECK(cublasSetStream(mc->blas, mc->stream));
    // The default math mode never uses TF32 under CUBLAS_COMPUTE_32F; it is
    // set explicitly so the choice of full fp32 products is visible here.
    CUBLAS_CHECK(cublasSetMathMode(mc->blas, CUBLAS_DEFAULT_MATH));

    const int L = shape->num_layers;
    const size_t B = (size_t)max_batch;
    const size_t max_dim = (size_t)mlp_max_dim(shape);
    size_t max_weight = 0;
    for (int l = 0; l < L; l++) {
        size_t w = (size_t)mlp_layer_weight_numel(shape, l);
        if (w > max_weight) max_weight = w;
    }
    size_t bytes = 0;
    for (int l = 0; l <= L; l++) bytes += align_up(sizeof(float) * B * (size_t)shape->dims[l]);
    bytes += 2 * align_up(sizeof(float) * B * max_dim);
    bytes += 2 * align_up(sizeof(float) * max_weight);
    bytes += align_up(sizeof(int) * B) + align_up(sizeof(double) * B) +
             align_up(sizeof(int) * B) + align_up(sizeof(double) * 2);
    CUDA_CHECK(cudaMalloc(&mc->device, bytes));
    char *cursor = static_cast<char *>(mc->device);
    for (int l = 0; l <= L; l++) {
        mc->acts[l] = static_cast<float *>(carve(&cursor, sizeof(float) * B * (size_t)shape->dims[l]));
    }
    mc->grad[0] = static_cast<float *>(carve(&cursor, sizeof(float) * B * max_dim));
    mc->grad[1] = static_cast<float *>(carve(&cursor, sizeof(float) * B * max_dim));
    mc->weight32 = static_cast<float *>(carve(&cursor, sizeof(float) * max_weight));
    mc->dweight32 = static_cast<float *>(carve(&cursor, sizeof(float) * max_weight));
    mc->labels = static_cast<int *>(carve(&cursor, sizeof(int) * B));
    mc->row_loss = static_cast<double *>(carve(&cursor, sizeof(double) * B));
    mc->row_hit = static_cast<int *>(carve(&cursor, sizeof(int) * B));
    mc->metrics = static_cast<double *>(carve(&cursor, sizeof(double) * 2));
    CUDA_CHECK(cudaMemsetAsync(mc->metrics, 0, sizeof(double) * 2, mc->stream));

    for (int s = 0; s < 2; s++) {
        CUDA_CHECK(cudaMallocHost(&mc->host_x[s], sizeof(float) * B * (size_t)shape->dims[0]));
        CUDA_CHECK(cudaMallocHost(&mc->host_labels[s], sizeof(int) * B));
        // Only ever waited on by the host: no timing needed.
        CUDA_CHECK(cudaEventCreateWithFlags(&mc->uploaded[s], cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaMallocHost(&mc->host_metrics, sizeof(double) * 2));
    mc->slot = 1; // the first mlp_cuda_stage returns set 0
    return mc;
}

extern "C" void mlp_cuda_destroy(mlp_cuda *mc) {
    if (mc == nullptr) return;
    CUDA_CHECK(cudaStreamSynchronize(mc->stream));
    for (int s = 0; s < 2; s++) {
        CUDA_CHECK(cudaEventDestroy(mc->uploaded[s]));
        CUDA_CHECK(cudaFreeHost(mc->host_x[s]));
        CUDA_CHECK(cudaFreeHost(mc->host_labels[s]));
    }
    CUDA_CHECK(cudaFreeHost(mc->host_metrics));
    CUDA_CHECK(cudaFree(mc->device));
    CUBLAS_CHECK(cublasDestroy(mc->blas));
    std::free(mc);
}

extern "C" void mlp_cuda_stage(mlp_cuda *mc, float **x, int **labels) {
    mc->slot ^= 1;
    // An event never recorded counts as complete, so the first two batches
    // do not wait.
    CUDA_CHECK(cudaEventSynchronize(mc->uploaded[mc->slot]));
    *x = mc->host_x[mc->slot];
    *labels = mc->host_labels[mc->slot];
}

extern "C" void mlp_cuda_upload(mlp_cuda *mc, int batch) {
    if (batch <= 0) return;
    const int s = mc->slot;
    CUDA_CHECK(cudaMemcpyAsync(mc->acts[0], mc->host_x[s],
                               sizeof(float) * (size_t)batch * (size_t)mc->shape.dims[0],
                               cudaMemcpyHostToDevice, mc->stream));
    CUDA_CHECK(cudaMemcpyAsync(mc->labels, mc->host_labels[s], sizeof(int) * (size_t)batch,
                               cudaMemcpyHostToDevice, mc->stream));
    CUDA_CHECK(cudaEventRecord(mc->uploaded[s], mc->stream));
}

extern "C" void mlp_cuda_layer_forward(mlp_cuda *mc, int layer, int batch, zs_dtype dtype,
                                       const void *W, const void *b) {
    if (batch <= 0) return;
    const int in = mc->shape.dims[layer];
    const int out = mc->shape.dims[layer + 1];
    const float *x = mc->acts[layer];    // [batch][in]
    float *y = mc->acts[layer + 1];      // [batch][out]
    const float *W32 = weight_f32(mc, dtype, W, (long long)out * in); // [out][in]
    // y: [batch][out] = x: [batch][in] . W^T: [in][out]
    // (column-major: y^T [out x batch] = W^T^T [out x in] . x^T [in x batch]).
    gemm(mc, CUBLAS_OP_T, CUBLAS_OP_N, out, batch, in, W32, in, x, in, 0.0f, y, out);
    const int relu = mlp_layer_activation(&mc->shape, layer) == MLP_ACT_RELU;
    const unsigned grid = grid_for((long long)batch * out);
    switch (dtype) {
    case ZS_DTYPE_FP32:
        bias_act_kernel<<<grid, kThreads, 0, mc->stream>>>(batch, out,
                                                           static_cast<const float *>(b), relu, y);
        break;
    case ZS_DTYPE_FP16:
        bias_act_kernel<<<grid, kThreads, 0, mc->stream>>>(batch, out,
                                                           static_cast<const __half *>(b), relu, y);
        break;
    case ZS_DTYPE_BF16:
        bias_act_kernel<<<grid, kThreads, 0, mc->stream>>>(
            batch, out, static_cast<const __nv_bfloat16 *>(b), relu, y);
        break;
    }
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void mlp_cuda_loss(mlp_cuda *mc, int batch, float grad_scale, int want_grad) {
    if (batch <= 0) return;
    const int L = mc->shape.num_layers;
    const int classes = mc->shape.dims[L];
    // The last layer's backward reads its output gradient from grad[0]
    // (mlp_cuda_layer_backward's ping-pong starts there).
    float *dlogits = want_grad ? mc->grad[0] : nullptr; // [batch][classes]
    const double row_scale = (double)grad_scale / (double)batch;
    softmax_xent_kernel<<<(unsigned)batch, kThreads, 0, mc->stream>>>(
        classes, mc->acts[L], mc->labels, row_scale, dlogits, mc->row_loss, mc->row_hit);
    CUDA_CHECK(cudaGetLastError());
    metrics_kernel<<<1, kThreads, 0, mc->stream>>>(batch, mc->row_loss, mc->row_hit, mc->metrics);
    CUDA_CHECK(cudaGetLastError());
}

template <typename T>
static void add_weight_and_bias_grads(mlp_cuda *mc, int batch, int in, int out, const float *dz,
                                      void *dW, void *db) {
    const long long n = (long long)out * in;
    add_into_kernel<<<grid_for(n), kThreads, 0, mc->stream>>>(n, mc->dweight32,
                                                             static_cast<T *>(dW));
    CUDA_CHECK(cudaGetLastError());
    bias_grad_kernel<<<(unsigned)((out + kThreads - 1) / kThreads), kThreads, 0, mc->stream>>>(
        batch, out, dz, static_cast<T *>(db));
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void mlp_cuda_layer_backward(mlp_cuda *mc, int layer, int batch, zs_dtype dtype,
                                        const void *W, void *dW, void *db) {
    if (batch <= 0) return;
    const int L = mc->shape.num_layers;
    const int in = mc->shape.dims[layer];
    const int out = mc->shape.dims[layer + 1];
    const float *x = mc->acts[layer];       // [batch][in]
    const float *y = mc->acts[layer + 1];   // [batch][out]
    // Ping-pong, as in mlp_train.c's CPU path: layer l's output gradient is
    // in one buffer and its input gradient goes to the other.
    float *dz = mc->grad[(L - 1 - layer) % 2];                     // [batch][out]
    float *dx = layer > 0 ? mc->grad[(L - layer) % 2] : nullptr;   // [batch][in]
    if (mlp_layer_activation(&mc->shape, layer) == MLP_ACT_RELU) {
        const long long n = (long long)batch * out;
        relu_backward_kernel<<<grid_for(n), kThreads, 0, mc->stream>>>(n, y, dz);
        CUDA_CHECK(cudaGetLastError());
    }
    const unsigned bias_grid = (unsigned)((out + kThreads - 1) / kThreads);
    // dW: [out][in] (+)= dz^T: [out][batch] . x: [batch][in]
    // (column-major: dW^T [in x out] = x^T [in x batch] . dz [batch x out]).
    if (dtype == ZS_DTYPE_FP32) {
        // The runtime's fp32 gradient accumulates directly (beta = 1).
        gemm(mc, CUBLAS_OP_N, CUBLAS_OP_T, in, out, batch, x, in, dz, out, 1.0f,
             static_cast<float *>(dW), in);
        bias_grad_kernel<<<bias_grid, kThreads, 0, mc->stream>>>(batch, out, dz,
                                                                 static_cast<float *>(db));
        CUDA_CHECK(cudaGetLastError());
    } else {
        // cuBLAS cannot add an fp32 product into an fp16/bf16 C, so the
        // contribution goes to scratch and is added with one rounding.
        gemm(mc, CUBLAS_OP_N, CUBLAS_OP_T, in, out, batch, x, in, dz, out, 0.0f, mc->dweight32,
             in);
        if (dtype == ZS_DTYPE_FP16) {
            add_weight_and_bias_grads<__half>(mc, batch, in, out, dz, dW, db);
        } else {
            add_weight_and_bias_grads<__nv_bfloat16>(mc, batch, in, out, dz, dW, db);
        }
    }
    if (dx != nullptr) {
        const float *W32 = weight_f32(mc, dtype, W, (long long)out * in); // [out][in]
        // dx: [batch][in] = dz: [batch][out] . W: [out][in]
        // (column-major: dx^T [in x batch] = W^T [in x out] . dz^T [out x batch]).
        gemm(mc, CUBLAS_OP_N, CUBLAS_OP_N, in, batch, out, W32, in, dz, out, 0.0f, dx, in);
    }
}

extern "C" void mlp_cuda_metrics_reset(mlp_cuda *mc) {
    CUDA_CHECK(cudaMemsetAsync(mc->metrics, 0, sizeof(double) * 2, mc->stream));
}

extern "C" void mlp_cuda_metrics_read(mlp_cuda *mc, double *loss_sum, double *correct) {
    CUDA_CHECK(cudaMemcpyAsync(mc->host_metrics, mc->metrics, sizeof(double) * 2,
                               cudaMemcpyDeviceToHost, mc->stream));
    CUDA_CHECK(cudaStreamSynchronize(mc->stream));
    *loss_sum = mc->host_metrics[0];
    *correct = mc->host_metrics[1];
}
