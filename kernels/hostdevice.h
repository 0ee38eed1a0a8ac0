/* Lets element-wise math be written once and compiled for the host (C11) and
 * for CUDA devices (nvcc, kernels/cuda_*.cu), with no #ifdef in the math itself. */
#ifndef ZS_KERNELS_HOSTDEVICE_H
#define ZS_KERNELS_HOSTDEVICE_H

#if defined(__CUDACC__)
#define ZS_HD __host__ __device__ __forceinline__
#else
#define ZS_HD static inline
#endif

#endif
