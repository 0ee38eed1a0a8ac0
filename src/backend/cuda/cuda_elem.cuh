/* Device-side element access for kernels/cuda_*.cu: loading an element of any
 * storage dtype as fp32 and storing fp32 as any dtype, through the
 * conversions of kernels/convert.h (the only copy of that math). The dtype is
 * a template parameter so each kernel instance is branch-free. */
#ifndef ZS_BACKEND_CUDA_CUDA_ELEM_CUH
#define ZS_BACKEND_CUDA_CUDA_ELEM_CUH

#include <stdint.h>

#include <type_traits>

#include <cuda_runtime.h>

#include "kernels/convert.h"
#include "zeroshard.h"

template <int D>
__device__ __forceinline__ float zs__cuda_load(const void *base, int64_t i) {
    if (D == ZS_DTYPE_FP32) return static_cast<const float *>(base)[i];
    const uint16_t h = static_cast<const uint16_t *>(base)[i];
    return D == ZS_DTYPE_FP16 ? zs_k_fp16_to_fp32(h) : zs_k_bf16_to_fp32(h);
}

template <int D>
__device__ __forceinline__ void zs__cuda_store(void *base, int64_t i, float value) {
    if (D == ZS_DTYPE_FP32) {
        static_cast<float *>(base)[i] = value;
        return;
    }
    static_cast<uint16_t *>(base)[i] =
        D == ZS_DTYPE_FP16 ? zs_k_fp32_to_fp16(value) : zs_k_fp32_to_bf16(value);
}

/* Grid-stride loop bounds in 64-bit: counts may exceed 2^31 elements. */
__device__ __forceinline__ int64_t zs__cuda_first(void) {
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t zs__cuda_stride(void) {
    return (int64_t)gridDim.x * blockDim.x;
}

/* Threads per block of the element-wise kernels. */
#define ZS_CUDA_THREADS 256

/* Blocks for `n` work items (threads), capped by the launch. */
static inline unsigned zs__cuda_blocks(int64_t n, int max_blocks) {
    int64_t b = (n + ZS_CUDA_THREADS - 1) / ZS_CUDA_THREADS;
    if (b > max_blocks) b = max_blocks;
    return b < 1 ? 1u : (unsigned)b;
}

/* Calls f(std::integral_constant<int, D>{}) for the runtime dtype, so a
 * launcher can pick a kernel instance: nested calls dispatch over pairs. */
template <typename F>
static cudaError_t zs__cuda_with_dtype(zs_dtype dtype, F f) {
    switch (dtype) {
    case ZS_DTYPE_FP32: return f(std::integral_constant<int, ZS_DTYPE_FP32>{});
    case ZS_DTYPE_FP16: return f(std::integral_constant<int, ZS_DTYPE_FP16>{});
    case ZS_DTYPE_BF16: return f(std::integral_constant<int, ZS_DTYPE_BF16>{});
    }
    return cudaErrorInvalidValue;
}

#endif
