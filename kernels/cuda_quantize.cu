/* CUDA block quantization: the element math of kernels/quantize.h (the same
 * functions the CPU backend runs) in grid-stride kernels, so quantized
 * values, scales and dequantized values are the CPU's bits
 * (tests/cuda/test_cuda_quantize.c). The divisions are IEEE divisions
 * (nvcc's default --prec-div=true), subnormals are kept (the default
 * -ftz=false) and --fmad=false keeps the multiply and the add of
 * dequantize-and-add separately rounded.
 *
 * Quantizing is two kernels:
 *   - scales: one group of threads per block, each thread taking the
 *     maximum of zs_k_quant_magnitude over a stride of the block, combined
 *     by shuffles (and, for 256-thread groups, through shared memory). An
 *     integer maximum is exact in any order, so the scale is the CPU's. A
 *     group is a warp, or a whole 256-thread block for blocks of
 *     ZS_CUDA_QUANT_WIDE elements and more.
 *   - values: each thread quantizes 8 consecutive elements (an item),
 *     finding each element's block by walking from the item's first one, and
 *     writes their 8 int8 bytes or 4 int4 or NF4 bytes (an item starts on an even
 *     element, so no byte has two writers).
 * Dequantizing is one kernel over the same items. Items read and write whole
 * vectors (16-byte loads and stores of the fp32/fp16/bf16 side, 8- or 4-byte
 * ones of the integers) when every pointer of the call is aligned for them,
 * and element by element otherwise and for the last, short item: the bits
 * do not depend on the path. */
#include <type_traits>

#include "kernels/cuda_elem.cuh"
#include "kernels/cuda_launch.h"
#include "kernels/quantize.h"

static_assert(ZS_CUDA_VEC == 8, "an item is one 16-byte vector of 8 elements");
static_assert(ZS_CUDA_THREADS % 32 == 0, "groups of whole warps");

/* Blocks of at least this many elements get a 256-thread group for their
 * maximum, shorter ones a warp. */
#define ZS_CUDA_QUANT_WIDE 2048

/* The maximum of a over the GROUP threads of a group (32: a warp; the CUDA
 * block's size: the whole block, through `shared`, which holds one value
 * per warp). Every thread of the group gets it. */
template <int GROUP>
__device__ __forceinline__ uint32_t zs__cuda_group_max(uint32_t a, uint32_t *shared) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
        const uint32_t other = __shfl_xor_sync(0xffffffffu, a, off);
        a = other > a ? other : a;
    }
    if constexpr (GROUP > 32) {
        const int warp = (int)threadIdx.x / 32;
        __syncthreads(); /* the previous block's readers are done with `shared` */
        if (threadIdx.x % 32 == 0) shared[warp] = a;
        __syncthreads();
        a = 0;
#pragma unroll
        for (int w = 0; w < GROUP / 32; w++) a = shared[w] > a ? shared[w] : a;
    }
    return a;
}

template <int S, int GROUP>
__global__ void __launch_bounds__(ZS_CUDA_THREADS, ZS_CUDA_ONE_WAVE)
zs__cuda_quant_scales_kernel(float *scales, const void *src, int64_t count, int64_t block,
                             int64_t blocks, int bits) {
    static_assert(GROUP == 32 || GROUP == ZS_CUDA_THREADS, "a warp or the whole block");
    __shared__ uint32_t shared[ZS_CUDA_THREADS / 32];
    const int lane = (int)(threadIdx.x % GROUP);
    /* Every thread of a group walks the same blocks, so the group's
     * shuffles and barriers see all of its threads. */
    for (int64_t b = zs__cuda_first() / GROUP; b < blocks; b += zs__cuda_stride() / GROUP) {
        const int64_t begin = b * block;
        const int64_t end = count - begin < block ? count : begin + block;
        uint32_t amax = 0;
        for (int64_t i = begin + lane; i < end; i += GROUP) {
            const uint32_t a = zs_k_quant_magnitude(zs__cuda_load<S>(src, i));
            amax = a > amax ? a : amax;
        }
        amax = zs__cuda_group_max<GROUP>(amax, shared);
        if (lane == 0) scales[b] = zs_k_quant_scale(amax, bits);
    }
}

/* Loads, by item: the `n` (<= 8) elements from element e0, as fp32. */
template <int D, bool ALIGNED>
__device__ __forceinline__ void zs__cuda_quant_load(const void *base, int64_t e0, int n,
                                                    float (&x)[ZS_CUDA_VEC]) {
    if (ALIGNED && n == ZS_CUDA_VEC) {
        zs__cuda_load_vec<D>(base, e0, x);
        return;
    }
#pragma unroll
    for (int k = 0; k < ZS_CUDA_VEC; k++) x[k] = k < n ? zs__cuda_load<D>(base, e0 + k) : 0.0f;
}

/* The bytes of an item's integers: 8 for int8, 4 for int4. */
template <int BITS>
struct zs__cuda_item_bytes {
    static constexpr int value = BITS == 8 ? ZS_CUDA_VEC : ZS_CUDA_VEC / 2; /* int4, NF4 */
};

/* Walks the blocks of an item's elements: `scale` is the scale of the
 * current element's block, at(e) moves to element e, the one after the
 * previous (the first is e0 itself). Consecutive elements are at most one
 * block apart, so a comparison per element replaces a 64-bit division. */
struct zs__cuda_block_walk {
    int64_t next; /* first element of the block after the current one */
    int64_t b;
    int64_t block;
    const float *scales;
    float scale;
    __device__ __forceinline__ zs__cuda_block_walk(const float *s, int64_t e0, int64_t blk)
        : next((e0 / blk + 1) * blk), b(e0 / blk), block(blk), scales(s), scale(s[e0 / blk]) {}
    __device__ __forceinline__ void at(int64_t e) {
        if (e == next) {
            b++;
            next += block;
            scale = scales[b];
        }
    }
};

template <int S, int BITS, bool ALIGNED>
__global__ void __launch_bounds__(ZS_CUDA_THREADS, ZS_CUDA_TWO_WAVES)
zs__cuda_quantize_kernel(uint8_t *q, const float *scales, const void *src, int64_t count,
                         int64_t block) {
    const float qmax = (float)zs_k_quant_qmax(BITS);
    const int64_t items = (count + ZS_CUDA_VEC - 1) / ZS_CUDA_VEC;
    for (int64_t t = zs__cuda_first(); t < items; t += zs__cuda_stride()) {
        const int64_t e0 = t * ZS_CUDA_VEC;
        const int n = count - e0 < ZS_CUDA_VEC ? (int)(count - e0) : ZS_CUDA_VEC;
        float x[ZS_CUDA_VEC];
        zs__cuda_quant_load<S, ALIGNED>(src, e0, n, x);
        zs__cuda_block_walk walk(scales, e0, block);
        int32_t v[ZS_CUDA_VEC];
#pragma unroll
        for (int k = 0; k < ZS_CUDA_VEC; k++) {
            v[k] = 0;
            if (k < n) {
                walk.at(e0 + k);
                v[k] = zs_k_quant_code(x[k], walk.scale, qmax, BITS);
            }
        }
        /* An odd n leaves v[n] = 0: the high nibble of the last int4 or NF4
         * byte. */
        uint8_t bytes[zs__cuda_item_bytes<BITS>::value];
#pragma unroll
        for (int j = 0; j < zs__cuda_item_bytes<BITS>::value; j++) {
            if constexpr (BITS == 8) bytes[j] = (uint8_t)(int8_t)v[j];
            else bytes[j] = zs_k_int4_pack(v[2 * j], v[2 * j + 1]);
        }
        const int64_t at = BITS == 8 ? e0 : e0 / 2;
        const int used = BITS == 8 ? n : (n + 1) / 2;
        if (ALIGNED && n == ZS_CUDA_VEC) {
            if constexpr (BITS == 8) {
                uint2 w;
                w.x = (uint32_t)bytes[0] | (uint32_t)bytes[1] << 8 | (uint32_t)bytes[2] << 16 |
                      (uint32_t)bytes[3] << 24;
                w.y = (uint32_t)bytes[4] | (uint32_t)bytes[5] << 8 | (uint32_t)bytes[6] << 16 |
                      (uint32_t)bytes[7] << 24;
                *reinterpret_cast<uint2 *>(q + at) = w;
            } else {
                *reinterpret_cast<uint32_t *>(q + at) =
                    (uint32_t)bytes[0] | (uint32_t)bytes[1] << 8 | (uint32_t)bytes[2] << 16 |
                    (uint32_t)bytes[3] << 24;
            }
        } else {
#pragma unroll
            for (int j = 0; j < zs__cuda_item_bytes<BITS>::value; j++)
                if (j < used) q[at + j] = bytes[j];
        }
    }
}

template <int D, int BITS, bool ACC, bool ALIGNED>
__global__ void __launch_bounds__(ZS_CUDA_THREADS, ZS_CUDA_TWO_WAVES)
zs__cuda_dequantize_kernel(void *dst, const uint8_t *q, const float *scales, int64_t count,
                           int64_t block) {
    const int64_t items = (count + ZS_CUDA_VEC - 1) / ZS_CUDA_VEC;
    for (int64_t t = zs__cuda_first(); t < items; t += zs__cuda_stride()) {
        const int64_t e0 = t * ZS_CUDA_VEC;
        const int n = count - e0 < ZS_CUDA_VEC ? (int)(count - e0) : ZS_CUDA_VEC;
        const int64_t at = BITS == 8 ? e0 : e0 / 2;
        const int used = BITS == 8 ? n : (n + 1) / 2;
        uint8_t bytes[zs__cuda_item_bytes<BITS>::value];
        if (ALIGNED && n == ZS_CUDA_VEC) {
            if constexpr (BITS == 8) {
                const uint2 w = *reinterpret_cast<const uint2 *>(q + at);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    bytes[j] = (uint8_t)(w.x >> (8 * j));
                    bytes[4 + j] = (uint8_t)(w.y >> (8 * j));
                }
            } else {
                const uint32_t w = *reinterpret_cast<const uint32_t *>(q + at);
#pragma unroll
                for (int j = 0; j < 4; j++) bytes[j] = (uint8_t)(w >> (8 * j));
            }
        } else {
#pragma unroll
            for (int j = 0; j < zs__cuda_item_bytes<BITS>::value; j++)
                bytes[j] = j < used ? q[at + j] : (uint8_t)0;
        }
        int32_t v[ZS_CUDA_VEC];
#pragma unroll
        for (int k = 0; k < ZS_CUDA_VEC; k++) {
            if constexpr (BITS == 8) v[k] = (int32_t)(int8_t)bytes[k];
            else v[k] = k % 2 ? zs_k_int4_high(bytes[k / 2]) : zs_k_int4_low(bytes[k / 2]);
        }
        float y[ZS_CUDA_VEC];
        if (ACC) zs__cuda_quant_load<D, ALIGNED>(dst, e0, n, y);
        zs__cuda_block_walk walk(scales, e0, block);
#pragma unroll
        for (int k = 0; k < ZS_CUDA_VEC; k++) {
            if (k < n) {
                walk.at(e0 + k);
                y[k] = ACC ? zs_k_dequant_code_add(y[k], v[k], walk.scale, BITS)
                           : zs_k_dequant_code(v[k], walk.scale, BITS);
            }
        }
        if (ALIGNED && n == ZS_CUDA_VEC) {
            zs__cuda_store_vec<D>(dst, e0, y);
        } else {
#pragma unroll
            for (int k = 0; k < ZS_CUDA_VEC; k++)
                if (k < n) zs__cuda_store<D>(dst, e0 + k, y[k]);
        }
    }
}

/* f(std::integral_constant<int, BITS>{}) for bits 8, 4 or NF4, and
 * f(std::integral_constant<bool, B>{}) for a flag: kernel instances. */
template <typename F>
static cudaError_t zs__cuda_with_bits(int bits, F f) {
    if (bits == 8) return f(std::integral_constant<int, 8>{});
    if (bits == 4) return f(std::integral_constant<int, 4>{});
    if (bits == ZS_K_QUANT_NF4) return f(std::integral_constant<int, ZS_K_QUANT_NF4>{});
    return cudaErrorInvalidValue;
}

template <typename F>
static cudaError_t zs__cuda_with_flag(bool flag, F f) {
    return flag ? f(std::true_type{}) : f(std::false_type{});
}

extern "C" cudaError_t zs__cuda_launch_quantize(zs__cuda_launch launch, void *q, float *scales,
                                                const void *src, zs_dtype src_dtype,
                                                int64_t count, int64_t block, int bits) {
    if (count <= 0) return cudaSuccess;
    if (block < 1 || !zs_k_quant_bits_valid(bits)) return cudaErrorInvalidValue;
    if (block > count) block = count; /* one block either way; keeps block indices small */
    const int64_t blocks = zs_k_quant_blocks(count, block);
    const bool wide = block >= ZS_CUDA_QUANT_WIDE;
    const unsigned scale_grid =
        zs__cuda_blocks(blocks * (wide ? ZS_CUDA_THREADS : 32), launch.max_blocks);
    const int64_t items = (count + ZS_CUDA_VEC - 1) / ZS_CUDA_VEC;
    const unsigned value_grid = zs__cuda_blocks(items, launch.max_blocks);
    const bool aligned = (uintptr_t)src % ZS_CUDA_VEC_BYTES == 0 &&
                         (uintptr_t)q % (bits == 8 ? 8u : 4u) == 0;
    return zs__cuda_with_dtype(src_dtype, [&](auto s) {
        constexpr int S = decltype(s)::value;
        if (wide)
            zs__cuda_quant_scales_kernel<S, ZS_CUDA_THREADS>
                <<<scale_grid, ZS_CUDA_THREADS, 0, launch.stream>>>(scales, src, count, block,
                                                                    blocks, bits);
        else
            zs__cuda_quant_scales_kernel<S, 32><<<scale_grid, ZS_CUDA_THREADS, 0, launch.stream>>>(
                scales, src, count, block, blocks, bits);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
        return zs__cuda_with_bits(bits, [&](auto b) {
            return zs__cuda_with_flag(aligned, [&](auto a) {
                zs__cuda_quantize_kernel<S, decltype(b)::value, decltype(a)::value>
                    <<<value_grid, ZS_CUDA_THREADS, 0, launch.stream>>>(
                        static_cast<uint8_t *>(q), scales, src, count, block);
                return cudaGetLastError();
            });
        });
    });
}

extern "C" cudaError_t zs__cuda_launch_dequantize(zs__cuda_launch launch, void *dst,
                                                  zs_dtype dst_dtype, int accumulate,
                                                  const void *q, const float *scales,
                                                  int64_t count, int64_t block, int bits) {
    if (count <= 0) return cudaSuccess;
    if (block < 1 || !zs_k_quant_bits_valid(bits)) return cudaErrorInvalidValue;
    if (block > count) block = count;
    const int64_t items = (count + ZS_CUDA_VEC - 1) / ZS_CUDA_VEC;
    const unsigned grid = zs__cuda_blocks(items, launch.max_blocks);
    const bool aligned = (uintptr_t)dst % ZS_CUDA_VEC_BYTES == 0 &&
                         (uintptr_t)q % (bits == 8 ? 8u : 4u) == 0;
    return zs__cuda_with_dtype(dst_dtype, [&](auto d) {
        return zs__cuda_with_bits(bits, [&](auto b) {
            return zs__cuda_with_flag(accumulate != 0, [&](auto acc) {
                return zs__cuda_with_flag(aligned, [&](auto a) {
                    zs__cuda_dequantize_kernel<decltype(d)::value, decltype(b)::value,
                                               decltype(acc)::value, decltype(a)::value>
                        <<<grid, ZS_CUDA_THREADS, 0, launch.stream>>>(
                            dst, static_cast<const uint8_t *>(q), scales, count, block);
                    return cudaGetLastError();
                });
            });
        });
    });
}
