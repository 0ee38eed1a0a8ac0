/* The fused optimizer pass on CUDA: per element, widen the gradient, run the
 * element function of kernels/optimizer.h on the fp32 master and state, and
 * narrow the new master into the compute-dtype parameter: one read and one
 * write of each array, as on the CPU (cpu_kernels_impl.h's kernel_update).
 * Instances are per (optimizer, gradient dtype, parameter dtype) so the loop
 * body has no dtype branches; P = -1 means no parameter copy (fp32 training,
 * where the master is the parameter).
 *
 * The pass is memory-bound, so each thread moves a 16-byte-aligned vector of
 * ZS_CUDA_VEC elements of every array per iteration (zs__cuda_vec_loop) and
 * runs the element function on each of them in turn; leading and trailing
 * elements, and calls whose arrays cannot be aligned together, go one
 * element at a time through the same element function. */
#include "kernels/cuda_elem.cuh"
#include "kernels/cuda_launch.h"

#define ZS_CUDA_NO_PARAM (-1)

/* One element: the scalar path, and the reference the vector path repeats. */
template <int K, int G, int P>
__device__ __forceinline__ void zs__cuda_update_one(float *master, void *param, const void *grad,
                                                    float *m, float *v, int64_t i,
                                                    const zs_k_optim_scalars &s) {
    const float g = zs__cuda_load<G>(grad, i);
    float p = master[i];
    if (K == ZS_K_OPTIM_SGD) {
        if (m) {
            float b = m[i];
            zs_k_sgd_element(&p, &b, g, &s);
            m[i] = b;
        } else {
            zs_k_sgd_element(&p, nullptr, g, &s);
        }
    } else {
        float mi = m[i], vi = v[i];
        zs_k_adam_element(&p, &mi, &vi, g, &s, K == ZS_K_OPTIM_ADAMW);
        m[i] = mi;
        v[i] = vi;
    }
    master[i] = p;
    if constexpr (P != ZS_CUDA_NO_PARAM) zs__cuda_store<P>(param, i, p);
}

/* ZS_CUDA_VEC elements from i: every array read as whole vectors first, the
 * element function run on each element, every array written back. */
template <int K, int G, int P>
__device__ __forceinline__ void zs__cuda_update_vec(float *master, void *param, const void *grad,
                                                    float *m, float *v, int64_t i,
                                                    const zs_k_optim_scalars &s) {
    float g[ZS_CUDA_VEC], p[ZS_CUDA_VEC];
    zs__cuda_load_vec<G>(grad, i, g);
    zs__cuda_load_vec<ZS_DTYPE_FP32>(master, i, p);
    if (K == ZS_K_OPTIM_SGD) {
        if (m) {
            float b[ZS_CUDA_VEC];
            zs__cuda_load_vec<ZS_DTYPE_FP32>(m, i, b);
#pragma unroll
            for (int k = 0; k < ZS_CUDA_VEC; k++) zs_k_sgd_element(&p[k], &b[k], g[k], &s);
            zs__cuda_store_vec<ZS_DTYPE_FP32>(m, i, b);
        } else {
#pragma unroll
            for (int k = 0; k < ZS_CUDA_VEC; k++) zs_k_sgd_element(&p[k], nullptr, g[k], &s);
        }
    } else {
        float mi[ZS_CUDA_VEC], vi[ZS_CUDA_VEC];
        zs__cuda_load_vec<ZS_DTYPE_FP32>(m, i, mi);
        zs__cuda_load_vec<ZS_DTYPE_FP32>(v, i, vi);
#pragma unroll
        for (int k = 0; k < ZS_CUDA_VEC; k++)
            zs_k_adam_element(&p[k], &mi[k], &vi[k], g[k], &s, K == ZS_K_OPTIM_ADAMW);
        zs__cuda_store_vec<ZS_DTYPE_FP32>(m, i, mi);
        zs__cuda_store_vec<ZS_DTYPE_FP32>(v, i, vi);
    }
    zs__cuda_store_vec<ZS_DTYPE_FP32>(master, i, p);
    if constexpr (P != ZS_CUDA_NO_PARAM) zs__cuda_store_vec<P>(param, i, p);
}

template <int K, int G, int P>
__global__ void __launch_bounds__(ZS_CUDA_THREADS, ZS_CUDA_TWO_WAVES)
zs__cuda_update_kernel(float *master, void *param, const void *grad, float *m, float *v, int64_t n,
                       int64_t head, zs_k_optim_scalars s) {
    zs__cuda_vec_loop(
        n, head,
        [&](int64_t i) { zs__cuda_update_vec<K, G, P>(master, param, grad, m, v, i, s); },
        [&](int64_t i) { zs__cuda_update_one<K, G, P>(master, param, grad, m, v, i, s); });
}

template <int K>
static cudaError_t zs__cuda_update_kind(unsigned blocks, cudaStream_t stream, float *master,
                                        void *param, zs_dtype param_dtype, const void *grad,
                                        zs_dtype grad_dtype, float *m, float *v, int64_t n,
                                        int64_t head, const zs_k_optim_scalars &s) {
    return zs__cuda_with_dtype(grad_dtype, [&](auto g) {
        constexpr int G = decltype(g)::value;
        if (!param) {
            zs__cuda_update_kernel<K, G, ZS_CUDA_NO_PARAM>
                <<<blocks, ZS_CUDA_THREADS, 0, stream>>>(master, param, grad, m, v, n, head, s);
            return cudaGetLastError();
        }
        return zs__cuda_with_dtype(param_dtype, [&](auto p) {
            zs__cuda_update_kernel<K, G, decltype(p)::value>
                <<<blocks, ZS_CUDA_THREADS, 0, stream>>>(master, param, grad, m, v, n, head, s);
            return cudaGetLastError();
        });
    });
}

extern "C" cudaError_t zs__cuda_launch_update(zs__cuda_launch launch, zs_k_optim_kind kind,
                                              float *master, void *param, zs_dtype param_dtype,
                                              const void *grad, zs_dtype grad_dtype, float *m,
                                              float *v, int64_t count,
                                              zs_k_optim_scalars scalars) {
    if (count <= 0) return cudaSuccess;
    const size_t f32 = sizeof(float);
    const int64_t head = zs__cuda_vec_head(
        count, {{master, f32}, {m, f32}, {v, f32}, {grad, zs_dtype_size(grad_dtype)},
                {param, param ? zs_dtype_size(param_dtype) : 0}});
    const unsigned blocks = zs__cuda_blocks(zs__cuda_vec_items(count, head), launch.max_blocks);
    switch (kind) {
    case ZS_K_OPTIM_SGD:
        return zs__cuda_update_kind<ZS_K_OPTIM_SGD>(blocks, launch.stream, master, param,
                                                    param_dtype, grad, grad_dtype, m, v, count,
                                                    head, scalars);
    case ZS_K_OPTIM_ADAM:
        return zs__cuda_update_kind<ZS_K_OPTIM_ADAM>(blocks, launch.stream, master, param,
                                                     param_dtype, grad, grad_dtype, m, v,
                                                     count, head, scalars);
    case ZS_K_OPTIM_ADAMW:
        return zs__cuda_update_kind<ZS_K_OPTIM_ADAMW>(blocks, launch.stream, master, param,
                                                      param_dtype, grad, grad_dtype, m, v,
                                                      count, head, scalars);
    }
    return cudaErrorInvalidValue;
}
