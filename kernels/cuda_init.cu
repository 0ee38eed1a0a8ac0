/* Parameter initialization on CUDA: element j gets zs_k_init_value of its
 * global index first + j (kernels/init.h), the same counter-based value the
 * CPU backend computes, so any rank can fill any range. */
#include "kernels/cuda_elem.cuh"
#include "kernels/cuda_launch.h"

__global__ void zs__cuda_init_fill_kernel(float *dst, int64_t first, int64_t n,
                                          zs_k_init_kind kind, double a, double b,
                                          uint64_t key) {
    for (int64_t j = zs__cuda_first(); j < n; j += zs__cuda_stride())
        dst[j] = zs_k_init_value(kind, a, b, key, (uint64_t)(first + j));
}

extern "C" cudaError_t zs__cuda_launch_init_fill(zs__cuda_launch launch, float *dst,
                                                 int64_t first, int64_t count,
                                                 zs_k_init_kind kind, double a, double b,
                                                 uint64_t key) {
    if (count <= 0) return cudaSuccess;
    zs__cuda_init_fill_kernel<<<zs__cuda_blocks(count, launch.max_blocks), ZS_CUDA_THREADS, 0,
                                launch.stream>>>(dst, first, count, kind, a, b, key);
    return cudaGetLastError();
}
