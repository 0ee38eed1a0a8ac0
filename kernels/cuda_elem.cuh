/* Device-side element access for kernels/cuda_*.cu: loading an element of any
 * storage dtype as fp32 and storing fp32 as any dtype, through the
 * conversions of kernels/convert.h (the only copy of that math), one element
 * or one 16-byte vector at a time. The dtype is a template parameter so each
 * kernel instance is branch-free. Included only by the kernels/cuda_*.cu
 * files. */
#ifndef ZS_KERNELS_CUDA_ELEM_CUH
#define ZS_KERNELS_CUDA_ELEM_CUH

#include <stddef.h>
#include <stdint.h>

#include <initializer_list>
#include <type_traits>

#include <cuda_runtime.h>

#include "kernels/convert.h"
#include "kernels/cuda_launch.h"
#include "zeroshard.h"

template <int D>
__device__ __forceinline__ float zs__cuda_widen(uint16_t h) {
    return D == ZS_DTYPE_FP16 ? zs_k_fp16_to_fp32(h) : zs_k_bf16_to_fp32(h);
}

template <int D>
__device__ __forceinline__ uint16_t zs__cuda_narrow(float value) {
    return D == ZS_DTYPE_FP16 ? zs_k_fp32_to_fp16(value) : zs_k_fp32_to_bf16(value);
}

template <int D>
__device__ __forceinline__ float zs__cuda_load(const void *base, int64_t i) {
    if (D == ZS_DTYPE_FP32) return static_cast<const float *>(base)[i];
    return zs__cuda_widen<D>(static_cast<const uint16_t *>(base)[i]);
}

template <int D>
__device__ __forceinline__ void zs__cuda_store(void *base, int64_t i, float value) {
    if (D == ZS_DTYPE_FP32) {
        static_cast<float *>(base)[i] = value;
        return;
    }
    static_cast<uint16_t *>(base)[i] = zs__cuda_narrow<D>(value);
}

/* Elements a thread handles per iteration of a vectorized loop, and the
 * width of its accesses: one 16-byte load or store per 16-bit array, two per
 * fp32 array. 16 bytes is the widest access a thread can make, which is what
 * lets a streaming kernel keep enough bytes in flight to reach the device's
 * memory bandwidth. */
#define ZS_CUDA_VEC 8
#define ZS_CUDA_VEC_BYTES 16

/* The 16-bit halves of a 32-bit word: the element at the lower address is
 * the low half (CUDA devices are little-endian). */
__device__ __forceinline__ uint16_t zs__cuda_lo(uint32_t w) { return (uint16_t)(w & 0xffffu); }
__device__ __forceinline__ uint16_t zs__cuda_hi(uint32_t w) { return (uint16_t)(w >> 16); }
__device__ __forceinline__ uint32_t zs__cuda_pack(uint16_t lo, uint16_t hi) {
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

/* out[k] = element i + k as fp32, k < ZS_CUDA_VEC; element i must start a
 * 16-byte aligned address. */
template <int D>
__device__ __forceinline__ void zs__cuda_load_vec(const void *base, int64_t i,
                                                  float (&out)[ZS_CUDA_VEC]) {
    if constexpr (D == ZS_DTYPE_FP32) {
        const float4 *p = reinterpret_cast<const float4 *>(static_cast<const float *>(base) + i);
        const float4 a = p[0], b = p[1];
        out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
        out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
    } else {
        const uint4 q = *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(base) + i);
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            out[2 * k] = zs__cuda_widen<D>(zs__cuda_lo(w[k]));
            out[2 * k + 1] = zs__cuda_widen<D>(zs__cuda_hi(w[k]));
        }
    }
}

/* Elements i .. i + ZS_CUDA_VEC - 1 = in[k] stored as dtype D; element i must
 * start a 16-byte aligned address. */
template <int D>
__device__ __forceinline__ void zs__cuda_store_vec(void *base, int64_t i,
                                                   const float (&in)[ZS_CUDA_VEC]) {
    if constexpr (D == ZS_DTYPE_FP32) {
        float4 *p = reinterpret_cast<float4 *>(static_cast<float *>(base) + i);
        p[0] = make_float4(in[0], in[1], in[2], in[3]);
        p[1] = make_float4(in[4], in[5], in[6], in[7]);
    } else {
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            w[k] = zs__cuda_pack(zs__cuda_narrow<D>(in[2 * k]), zs__cuda_narrow<D>(in[2 * k + 1]));
        *reinterpret_cast<uint4 *>(static_cast<uint16_t *>(base) + i) =
            make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* Grid-stride loop bounds in 64-bit: counts may exceed 2^31 elements. */
__device__ __forceinline__ int64_t zs__cuda_first(void) {
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t zs__cuda_stride(void) {
    return (int64_t)gridDim.x * blockDim.x;
}

/* The element-wise loop of every streaming kernel over [0, n): vec(i) for
 * the whole vectors i = head, head + VEC, ... that end by n, and one(i) for
 * each other element (the `head` leading ones and the tail). head comes from
 * zs__cuda_vec_head; head = n makes every element go through one(). Each
 * element is visited exactly once; which path visits it changes nothing in
 * its value, since both paths run the same element math. */
template <typename Vec, typename One>
__device__ __forceinline__ void zs__cuda_vec_loop(int64_t n, int64_t head, Vec vec, One one) {
    const int64_t first = zs__cuda_first(), stride = zs__cuda_stride();
    const int64_t vecs = (n - head) / ZS_CUDA_VEC;
    for (int64_t k = first; k < vecs; k += stride) vec(head + k * ZS_CUDA_VEC);
    const int64_t tail = head + vecs * ZS_CUDA_VEC; /* first element after the vectors */
    const int64_t rest = head + (n - tail);         /* elements left to one() */
    for (int64_t t = first; t < rest; t += stride) one(t < head ? t : tail + (t - head));
}

/* Threads per block of the element-wise kernels. */
#define ZS_CUDA_THREADS 256

/* Register budgets, as resident blocks per SM (__launch_bounds__). Grids
 * are capped at ZS_CUDA_BLOCKS_PER_SM blocks per SM and every block of a
 * grid-stride loop does the same work, so the grid should run in whole
 * waves: a kernel whose registers let only 6 of the 8 blocks in would run a
 * second wave a third full and lose about a tenth of its time. The light
 * kernels (convert, accumulate) are held to one wave (32 registers); the
 * heavy ones (the fused update, the vector sum of squares) to exactly two
 * (64 registers): 1024 threads per SM, each with 16-byte loads of every
 * array in flight, which is enough bytes in flight to cover the latency of
 * HBM. nvcc -Xptxas -v shows the registers and spills of each instance. */
#define ZS_CUDA_ONE_WAVE ZS_CUDA_BLOCKS_PER_SM
#define ZS_CUDA_TWO_WAVES (ZS_CUDA_BLOCKS_PER_SM / 2)

/* Blocks for `n` work items (threads), capped by the launch. */
static inline unsigned zs__cuda_blocks(int64_t n, int max_blocks) {
    int64_t b = (n + ZS_CUDA_THREADS - 1) / ZS_CUDA_THREADS;
    if (b > max_blocks) b = max_blocks;
    return b < 1 ? 1u : (unsigned)b;
}

/* One array of an element-wise call: its address and element size in bytes
 * (ptr NULL: the array is absent and imposes nothing). */
struct zs__cuda_operand {
    const void *ptr;
    size_t size;
};

/* Host side: the number of leading elements, h < ZS_CUDA_VEC, after which
 * every operand is 16-byte aligned (element h of each array starts a
 * 16-byte boundary; a vector step of ZS_CUDA_VEC elements keeps that), or
 * n when no such h exists (pointers misaligned differently, or not even
 * aligned to their element size) or when not one whole vector would fit:
 * the kernel then runs one element per thread. */
static inline int64_t zs__cuda_vec_head(int64_t n, std::initializer_list<zs__cuda_operand> ops) {
    for (int64_t h = 0; h < ZS_CUDA_VEC && h + ZS_CUDA_VEC <= n; h++) {
        bool aligned = true;
        for (const zs__cuda_operand &o : ops)
            if (o.ptr && ((uintptr_t)o.ptr + (uintptr_t)h * o.size) % ZS_CUDA_VEC_BYTES != 0)
                aligned = false;
        if (aligned) return h;
    }
    return n;
}

/* Work items of a vectorized launch: one per whole vector, or one per
 * element when the call runs element by element; the grid is sized for
 * them (and capped; the loops stride). */
static inline int64_t zs__cuda_vec_items(int64_t n, int64_t head) {
    return head < n ? head + (n - head) / ZS_CUDA_VEC + (n - head) % ZS_CUDA_VEC : n;
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
