/* CUDA conversion and accumulation kernels: grid-stride loops around the
 * element conversions of kernels/convert.h, matching the CPU backend's
 * convert and accumulate (cpu_kernels_impl.h) bit for bit. Each thread
 * handles a 16-byte-aligned vector of ZS_CUDA_VEC elements per iteration
 * (zs__cuda_vec_loop), and the leading and trailing elements one at a time:
 * these kernels only stream memory, so the width of the accesses decides
 * their speed. */
#include "kernels/cuda_elem.cuh"
#include "kernels/cuda_launch.h"

/* Converting through fp32 rounds once: widening fp16 or bf16 to fp32 is exact,
 * which is also how the CPU converts fp16 <-> bf16. */
template <int D, int S>
__global__ void __launch_bounds__(ZS_CUDA_THREADS, ZS_CUDA_ONE_WAVE)
zs__cuda_convert_kernel(void *dst, const void *src, int64_t n, int64_t head) {
    zs__cuda_vec_loop(
        n, head,
        [&](int64_t i) {
            float f[ZS_CUDA_VEC];
            zs__cuda_load_vec<S>(src, i, f);
            zs__cuda_store_vec<D>(dst, i, f);
        },
        [&](int64_t i) { zs__cuda_store<D>(dst, i, zs__cuda_load<S>(src, i)); });
}

/* One fp32 addition and one rounding per element. dst and src may alias
 * exactly (x += x): each thread reads both before it writes, and no two
 * threads touch the same element. */
template <int D, int S>
__global__ void __launch_bounds__(ZS_CUDA_THREADS, ZS_CUDA_ONE_WAVE)
zs__cuda_accumulate_kernel(void *dst, const void *src, int64_t n, int64_t head) {
    zs__cuda_vec_loop(
        n, head,
        [&](int64_t i) {
            float d[ZS_CUDA_VEC], s[ZS_CUDA_VEC];
            zs__cuda_load_vec<D>(dst, i, d);
            zs__cuda_load_vec<S>(src, i, s);
#pragma unroll
            for (int k = 0; k < ZS_CUDA_VEC; k++) d[k] = d[k] + s[k];
            zs__cuda_store_vec<D>(dst, i, d);
        },
        [&](int64_t i) {
            const float d = zs__cuda_load<D>(dst, i);
            const float s = zs__cuda_load<S>(src, i);
            zs__cuda_store<D>(dst, i, d + s);
        });
}

extern "C" cudaError_t zs__cuda_launch_convert(zs__cuda_launch launch, void *dst,
                                               zs_dtype dst_dtype, const void *src,
                                               zs_dtype src_dtype, int64_t count) {
    if (count <= 0) return cudaSuccess;
    const int64_t head = zs__cuda_vec_head(
        count, {{dst, zs_dtype_size(dst_dtype)}, {src, zs_dtype_size(src_dtype)}});
    const unsigned blocks = zs__cuda_blocks(zs__cuda_vec_items(count, head), launch.max_blocks);
    return zs__cuda_with_dtype(dst_dtype, [&](auto d) {
        return zs__cuda_with_dtype(src_dtype, [&](auto s) {
            zs__cuda_convert_kernel<decltype(d)::value, decltype(s)::value>
                <<<blocks, ZS_CUDA_THREADS, 0, launch.stream>>>(dst, src, count, head);
            return cudaGetLastError();
        });
    });
}

extern "C" cudaError_t zs__cuda_launch_accumulate(zs__cuda_launch launch, void *dst,
                                                  zs_dtype dst_dtype, const void *src,
                                                  zs_dtype src_dtype, int64_t count) {
    if (count <= 0) return cudaSuccess;
    const int64_t head = zs__cuda_vec_head(
        count, {{dst, zs_dtype_size(dst_dtype)}, {src, zs_dtype_size(src_dtype)}});
    const unsigned blocks = zs__cuda_blocks(zs__cuda_vec_items(count, head), launch.max_blocks);
    return zs__cuda_with_dtype(dst_dtype, [&](auto d) {
        return zs__cuda_with_dtype(src_dtype, [&](auto s) {
            zs__cuda_accumulate_kernel<decltype(d)::value, decltype(s)::value>
                <<<blocks, ZS_CUDA_THREADS, 0, launch.stream>>>(dst, src, count, head);
            return cudaGetLastError();
        });
    });
}
