// The CUDA nn_device (nn_device.h): memory, transfers and page-locked
// buffers on one stream, and the context every model's kernels on it share
// (nn_cuda_ctx.cuh): the cuBLAS and cuBLASLt handles and their workspace,
// the algorithm cache, launch counts, the profile, internal scratch.
//
// Every op is enqueued on the stream given at creation and returns without
// waiting, except download (returns host data), upload (returns when the
// host buffer may be reused), host_wait, synchronize, free and destroy.
// Host transfers that must not block go through host_alloc's page-locked
// buffers, each with the event of its last transfer, which host_wait waits
// for.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "nn_cuda_ctx.cuh"

namespace nncuda {

int fail(ctx *cx, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ex_verror(cx->err, NN_ERR_CAP, status, fmt, ap);
    va_end(ap);
    return status;
}

int ensure_work(ctx *cx, size_t bytes) {
    if (bytes <= cx->work_bytes) return NN_OK;
    // cudaFree waits for the device, so the old area is no longer in use.
    if (cx->work != nullptr) CU_TRY(cudaFree(cx->work));
    cx->work = nullptr;
    cx->work_bytes = 0;
    CU_TRY(cudaMalloc(&cx->work, bytes));
    cx->work_bytes = bytes;
    return NN_OK;
}

namespace {

// Bytes of cuBLASLt's workspace: what NVIDIA recommends for Hopper (and
// more than enough before it); allocated once at creation.
constexpr size_t kLtWorkspace = (size_t)32 << 20;

// The device and its context in one allocation.
struct cuda_device {
    nn_device dev;
    ctx cx;
};

ctx *cx_of(nn_device *dev) { return static_cast<ctx *>(dev->impl); }

int check_ptr(ctx *cx, const char *op, const char *what, const void *p) {
    if (p == nullptr) return fail(cx, NN_ERR_ARG, "nn cuda %s: %s is NULL", op, what);
    return NN_OK;
}

// ------------------------------------------------------- pinned buffers

pinned_buffer *pinned_find(ctx *cx, const void *p) {
    const unsigned char *q = (const unsigned char *)p;
    for (int i = 0; i < kPinnedSlots; i++) {
        pinned_buffer *b = &cx->pinned[i];
        if (b->ptr != nullptr && q >= b->ptr && q < b->ptr + b->bytes) return b;
    }
    return nullptr;
}

int pinned_or_fail(ctx *cx, const void *host, const char *op, pinned_buffer **out) {
    *out = pinned_find(cx, host);
    if (*out == nullptr)
        return fail(cx, NN_ERR_ARG, "nn cuda %s: the host buffer does not come from "
                    "host_alloc (page-locked memory is needed for a transfer that does not wait)",
                    op);
    return NN_OK;
}

int dev_host_alloc(nn_device *dev, size_t bytes, void **out) {
    ctx *cx = cx_of(dev);
    TRY(check_ptr(cx, "host_alloc", "out", out));
    *out = nullptr;
    pinned_buffer *slot = nullptr;
    for (int i = 0; i < kPinnedSlots && slot == nullptr; i++)
        if (cx->pinned[i].ptr == nullptr) slot = &cx->pinned[i];
    if (slot == nullptr)
        return fail(cx, NN_ERR_NOMEM, "nn cuda host_alloc: all %d page-locked buffer slots "
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
    return NN_OK;
}

void dev_host_free(nn_device *dev, void *host) {
    if (host == nullptr) return;
    pinned_buffer *b = pinned_find(cx_of(dev), host);
    if (b == nullptr) return;
    // The buffer's last transfer completes before the memory goes.
    if (b->used) (void)cudaEventSynchronize(b->last_use);
    cudaFreeHost(b->ptr);
    cudaEventDestroy(b->last_use);
    *b = pinned_buffer{nullptr, 0, nullptr, false};
}

int dev_upload_async(nn_device *dev, void *dst, const void *host_src, size_t bytes) {
    ctx *cx = cx_of(dev);
    if (bytes == 0) return NN_OK;
    TRY(check_ptr(cx, "upload_async", "dst", dst));
    pinned_buffer *b = nullptr;
    TRY(pinned_or_fail(cx, host_src, "upload_async", &b));
    CU_TRY(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cx->stream));
    CU_TRY(cudaEventRecord(b->last_use, cx->stream));
    b->used = true;
    return NN_OK;
}

int dev_host_wait(nn_device *dev, const void *host) {
    ctx *cx = cx_of(dev);
    pinned_buffer *b = nullptr;
    TRY(pinned_or_fail(cx, host, "host_wait", &b));
    if (b->used) CU_TRY(cudaEventSynchronize(b->last_use));
    return NN_OK;
}

// --------------------------------------------------------- memory ops

int dev_alloc(nn_device *dev, size_t bytes, void **out) {
    ctx *cx = cx_of(dev);
    TRY(check_ptr(cx, "alloc", "out", out));
    *out = nullptr;
    void *p = nullptr;
    // cudaMalloc aligns to at least 256 bytes; 0 bytes would give NULL.
    CU_TRY(cudaMalloc(&p, bytes > 0 ? bytes : 1));
    // Zeroed before alloc returns, not just in stream order: the memory may
    // be written next through another stream or a synchronous copy.
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, cx->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cx->stream);
    if (e != cudaSuccess) {
        cudaFree(p);
        CU_TRY(e);
    }
    *out = p;
    return NN_OK;
}

void dev_free(nn_device *dev, void *ptr) {
    (void)dev;
    if (ptr != nullptr) cudaFree(ptr); // nothing to report to: free cannot fail usefully
}

int dev_zero(nn_device *dev, void *ptr, size_t bytes) {
    ctx *cx = cx_of(dev);
    if (bytes == 0) return NN_OK;
    TRY(check_ptr(cx, "zero", "ptr", ptr));
    CU_TRY(cudaMemsetAsync(ptr, 0, bytes, cx->stream));
    return NN_OK;
}

int dev_upload(nn_device *dev, void *dst, const void *host_src, size_t bytes) {
    ctx *cx = cx_of(dev);
    if (bytes == 0) return NN_OK;
    TRY(check_ptr(cx, "upload", "dst", dst));
    TRY(check_ptr(cx, "upload", "host_src", host_src));
    // Waits, so that host_src may be reused at return even if it is pinned
    // (then the copy is truly asynchronous).
    CU_TRY(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cx->stream));
    CU_TRY(cudaStreamSynchronize(cx->stream));
    return NN_OK;
}

int dev_download(nn_device *dev, void *host_dst, const void *src, size_t bytes) {
    ctx *cx = cx_of(dev);
    if (bytes == 0) return NN_OK;
    TRY(check_ptr(cx, "download", "host_dst", host_dst));
    TRY(check_ptr(cx, "download", "src", src));
    CU_TRY(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cx->stream));
    CU_TRY(cudaStreamSynchronize(cx->stream));
    return NN_OK;
}

int dev_copy(nn_device *dev, void *dst, const void *src, size_t bytes) {
    ctx *cx = cx_of(dev);
    if (bytes == 0) return NN_OK;
    TRY(check_ptr(cx, "copy", "dst", dst));
    TRY(check_ptr(cx, "copy", "src", src));
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cx->stream));
    return NN_OK;
}

int dev_synchronize(nn_device *dev) {
    ctx *cx = cx_of(dev);
    CU_TRY(cudaStreamSynchronize(cx->stream));
    return NN_OK;
}

const char *dev_last_error(const nn_device *dev) {
    return static_cast<const ctx *>(dev->impl)->err;
}

int dev_losses_sum(nn_device *dev, const float *losses, int n, double *host_out) {
    ctx *cx = cx_of(dev);
    TRY(check_ptr(cx, "losses_sum", "losses", losses));
    pinned_buffer *b = nullptr;
    TRY(pinned_or_fail(cx, host_out, "losses_sum", &b));
    TRY(losses_sum_device(cx, losses, n, cx->loss_dev));
    CU_TRY(cudaMemcpyAsync(host_out, cx->loss_dev, sizeof(double), cudaMemcpyDeviceToHost,
                           cx->stream));
    CU_TRY(cudaEventRecord(b->last_use, cx->stream));
    b->used = true;
    return NN_OK;
}

void stats_line(const ctx *cx, nn_cuda_stats *out, char *line, size_t cap) {
    nn_cuda_stats s = cx->stats;
    s.sm = cx->sm;
    s.gelu_fusion = cx->gelu_fusion;
    s.unfused_bias = cx->unfused_bias ? 1 : 0;
    if (out != nullptr) *out = s;
    if (line != nullptr && cap > 0)
        std::snprintf(line, cap,
                      "fusion: bias fused %lld fallback %lld; gelu fused %lld fallback %lld; "
                      "dgelu fused %lld fallback %lld; gemm lt %lld classic %lld "
                      "(gelu_fusion %d, unfused_bias %d, sm_%d)",
                      s.bias_fused, s.bias_fallback, s.gelu_fused, s.gelu_fallback,
                      s.dgelu_fused, s.dgelu_fallback, s.gemm_lt, s.gemm_classic, s.gelu_fusion,
                      s.unfused_bias, s.sm);
}

void dev_destroy(nn_device *dev) {
    if (dev == nullptr) return;
    ctx *cx = cx_of(dev);
    // Errors here have no one to go to; the stream and device stay usable
    // for the caller whatever they are.
    cudaStreamSynchronize(cx->stream);
    if (cx->prof != nullptr) {
        // A model asked for the profile: it goes to stderr now that every
        // event has completed; a device whose creation failed has nothing
        // to report.
        char line[512];
        stats_line(cx, nullptr, line, sizeof line);
        profiler_destroy(cx, cx->ready ? line : nullptr);
    }
    for (int i = 0; i < kPinnedSlots; i++) dev_host_free(dev, cx->pinned[i].ptr);
    matmul_cache_destroy(cx);
    // The handles first: the classic one uses lt_workspace as its own.
    if (cx->lt != nullptr) cublasLtDestroy(cx->lt);
    if (cx->blas != nullptr) cublasDestroy(cx->blas);
    if (cx->work != nullptr) cudaFree(cx->work);
    if (cx->lt_workspace != nullptr) cudaFree(cx->lt_workspace);
    if (cx->loss_dev != nullptr) cudaFree(cx->loss_dev);
    std::free(reinterpret_cast<cuda_device *>(dev));
}

nn_device_ops make_ops() {
    nn_device_ops o;
    std::memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.alloc = dev_alloc;
    o.free = dev_free;
    o.zero = dev_zero;
    o.upload = dev_upload;
    o.download = dev_download;
    o.copy = dev_copy;
    o.synchronize = dev_synchronize;
    o.host_alloc = dev_host_alloc;
    o.host_free = dev_host_free;
    o.upload_async = dev_upload_async;
    o.host_wait = dev_host_wait;
    o.losses_sum = dev_losses_sum;
    o.last_error = dev_last_error;
    o.destroy = dev_destroy;
    return o;
}

const nn_device_ops cuda_device_ops = make_ops();

} // namespace

ctx *ctx_of(nn_device *dev) {
    return dev != nullptr && dev->ops == &cuda_device_ops ? static_cast<ctx *>(dev->impl)
                                                          : nullptr;
}

const ctx *ctx_of(const nn_device *dev) {
    return dev != nullptr && dev->ops == &cuda_device_ops ? static_cast<const ctx *>(dev->impl)
                                                          : nullptr;
}

} // namespace nncuda

using namespace nncuda;

extern "C" int nn_cuda_device_create(void *cuda_stream, nn_dtype dtype, nn_device **out,
                                     char *err, size_t cap) {
    if (out == nullptr) return ex_error(err, cap, NN_ERR_ARG, "nn cuda: out is NULL");
    *out = nullptr;
    if (dtype != NN_F32 && dtype != NN_BF16 && dtype != NN_F16)
        return ex_error(err, cap, NN_ERR_ARG, "nn cuda: unknown dtype %d", (int)dtype);
    int devices = 0;
    cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) {
        return ex_error(err, cap, NN_ERR_UNAVAILABLE,
                         "nn cuda: no usable CUDA device (%s); check the driver and "
                         "CUDA_VISIBLE_DEVICES, or use the cpu backend",
                         e != cudaSuccess ? cudaGetErrorString(e)
                                          : "cudaGetDeviceCount found 0 devices");
    }
    auto *cd = static_cast<cuda_device *>(std::calloc(1, sizeof(cuda_device)));
    if (cd == nullptr) return ex_error(err, cap, NN_ERR_NOMEM, "nn cuda: out of host memory");
    nn_device *dev = &cd->dev;
    ctx *cx = &cd->cx;
    dev->ops = &cuda_device_ops;
    dev->dtype = dtype;
    dev->layers = &cuda_layer_ops;
    dev->impl = cx;
    cx->dtype = dtype;
    cx->stream = static_cast<cudaStream_t>(cuda_stream);
    const char *what = nullptr;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    int sm_minor = 0;
    e = cudaGetDevice(&cx->device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&cx->sm_major, cudaDevAttrComputeCapabilityMajor, cx->device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&sm_minor, cudaDevAttrComputeCapabilityMinor, cx->device);
    cx->sm = cx->sm_major * 10 + sm_minor;
    if (e == cudaSuccess) e = cudaMalloc(&cx->lt_workspace, kLtWorkspace);
    if (e == cudaSuccess) e = cudaMalloc(reinterpret_cast<void **>(&cx->loss_dev), sizeof(double));
    if (e != cudaSuccess) {
        const int status = e == cudaErrorMemoryAllocation ? NN_ERR_NOMEM : NN_ERR_DEVICE;
        ex_error(err, cap, status, "nn cuda: starting the device failed: %s",
                  cudaGetErrorString(e));
        dev_destroy(dev);
        return status;
    }
    cx->lt_workspace_bytes = kLtWorkspace;
    // Full fp32 products in fp32 (no TF32) and no atomics inside cuBLAS, so
    // that its results are deterministic.
    if ((st = cublasCreate(&cx->blas)) != CUBLAS_STATUS_SUCCESS) {
        what = "cublasCreate";
    } else if ((st = cublasSetStream(cx->blas, cx->stream)) != CUBLAS_STATUS_SUCCESS) {
        what = "cublasSetStream";
    } else if ((st = cublasSetWorkspace(cx->blas, cx->lt_workspace, cx->lt_workspace_bytes)) !=
               CUBLAS_STATUS_SUCCESS) {
        // After cublasSetStream, which resets it: cuBLAS promises the same
        // bits with other streams running only with a workspace of the
        // handle's own. The Lt GEMMs' workspace serves: both handles
        // enqueue on this one stream, in order.
        what = "cublasSetWorkspace";
    } else if ((st = cublasSetMathMode(cx->blas, CUBLAS_DEFAULT_MATH)) !=
               CUBLAS_STATUS_SUCCESS) {
        what = "cublasSetMathMode";
    } else if ((st = cublasSetAtomicsMode(cx->blas, CUBLAS_ATOMICS_NOT_ALLOWED)) !=
               CUBLAS_STATUS_SUCCESS) {
        what = "cublasSetAtomicsMode";
    } else if ((st = cublasLtCreate(&cx->lt)) != CUBLAS_STATUS_SUCCESS) {
        what = "cublasLtCreate";
    }
    if (what != nullptr) {
        ex_error(err, cap, NN_ERR_DEVICE, "nn cuda: %s failed: %s (%s)", what,
                  cublasGetStatusName(st), cublasGetStatusString(st));
        dev_destroy(dev);
        return NN_ERR_DEVICE;
    }
    cx->ready = true;
    *out = dev;
    return NN_OK;
}

extern "C" int nn_cuda_device_stats(const nn_device *dev, nn_cuda_stats *out, char *line,
                                    size_t cap) {
    if (line != nullptr && cap > 0) line[0] = '\0';
    const ctx *cx = ctx_of(dev);
    if (cx == nullptr) return NN_ERR_ARG;
    stats_line(cx, out, line, cap);
    return NN_OK;
}
