/* CUDA conversion and accumulation kernels: grid-stride loops around the
 * element conversions of kernels/convert.h, matching the CPU backend's
 * convert and accumulate (cpu_kernels_impl.h) bit for bit. */
#include "backend/cuda/cuda_elem.cuh"
#include "backend/cuda/cuda_kernels.h"

/* Converting through fp32 rounds once: widening fp16 or bf16 to fp32 is exact,
 * which is also how the CPU converts fp16 <-> bf16. */
template <int D, int S>
__global__ void zs__cuda_convert_kernel(void *dst, const void *src, int64_t n) {
    for (int64_t i = zs__cuda_first(); i < n; i += zs__cuda_stride())
        zs__cuda_store<D>(dst, i, zs__cuda_load<S>(src, i));
}

/* One fp32 addition and one rounding per element. dst and src may alias
 * exactly (x += x): each thread reads both before it writes. */
template <int D, int S>
__global__ void zs__cuda_accumulate_kernel(void *dst, const void *src, int64_t n) {
    for (int64_t i = zs__cuda_first(); i < n; i += zs__cuda_stride()) {
        const float d = zs__cuda_load<D>(dst, i);
        const float s = zs__cuda_load<S>(src, i);
        zs__cuda_store<D>(dst, i, d + s);
    }
}

extern "C" cudaError_t zs__cuda_launch_convert(zs__cuda_launch launch, void *dst,
                                               zs_dtype dst_dtype, const void *src,
                                               zs_dtype src_dtype, int64_t count) {
    if (count <= 0) return cudaSuccess;
    const unsigned blocks = zs__cuda_blocks(count, launch.max_blocks);
    return zs__cuda_with_dtype(dst_dtype, [&](auto d) {
        return zs__cuda_with_dtype(src_dtype, [&](auto s) {
            zs__cuda_convert_kernel<decltype(d)::value, decltype(s)::value>
                <<<blocks, ZS_CUDA_THREADS, 0, launch.stream>>>(dst, src, count);
            return cudaGetLastError();
        });
    });
}

extern "C" cudaError_t zs__cuda_launch_accumulate(zs__cuda_launch launch, void *dst,
                                                  zs_dtype dst_dtype, const void *src,
                                                  zs_dtype src_dtype, int64_t count) {
    if (count <= 0) return cudaSuccess;
    const unsigned blocks = zs__cuda_blocks(count, launch.max_blocks);
    return zs__cuda_with_dtype(dst_dtype, [&](auto d) {
        return zs__cuda_with_dtype(src_dtype, [&](auto s) {
            zs__cuda_accumulate_kernel<decltype(d)::value, decltype(s)::value>
                <<<blocks, ZS_CUDA_THREADS, 0, launch.stream>>>(dst, src, count);
            return cudaGetLastError();
        });
    });
}
