/* The fused optimizer pass on CUDA: per element, widen the gradient, run the
 * element function of kernels/optimizer.h on the fp32 master and state, and
 * narrow the new master into the compute-dtype parameter: one read and one
 * write of each array, as on the CPU (cpu_kernels_impl.h's kernel_update).
 * Instances are per (optimizer, gradient dtype, parameter dtype) so the loop
 * body has no dtype branches; P = -1 means no parameter copy (fp32 training,
 * where the master is the parameter). */
#include "backend/cuda/cuda_elem.cuh"
#include "backend/cuda/cuda_kernels.h"

#define ZS_CUDA_NO_PARAM (-1)

template <int K, int G, int P>
__global__ void zs__cuda_update_kernel(float *master, void *param, const void *grad, float *m,
                                       float *v, int64_t n, zs_k_optim_scalars s) {
    for (int64_t i = zs__cuda_first(); i < n; i += zs__cuda_stride()) {
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
}

template <int K>
static cudaError_t zs__cuda_update_kind(unsigned blocks, cudaStream_t stream, float *master,
                                        void *param, zs_dtype param_dtype, const void *grad,
                                        zs_dtype grad_dtype, float *m, float *v, int64_t n,
                                        const zs_k_optim_scalars &s) {
    return zs__cuda_with_dtype(grad_dtype, [&](auto g) {
        constexpr int G = decltype(g)::value;
        if (!param) {
            zs__cuda_update_kernel<K, G, ZS_CUDA_NO_PARAM>
                <<<blocks, ZS_CUDA_THREADS, 0, stream>>>(master, param, grad, m, v, n, s);
            return cudaGetLastError();
        }
        return zs__cuda_with_dtype(param_dtype, [&](auto p) {
            zs__cuda_update_kernel<K, G, decltype(p)::value>
                <<<blocks, ZS_CUDA_THREADS, 0, stream>>>(master, param, grad, m, v, n, s);
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
    const unsigned blocks = zs__cuda_blocks(count, launch.max_blocks);
    switch (kind) {
    case ZS_K_OPTIM_SGD:
        return zs__cuda_update_kind<ZS_K_OPTIM_SGD>(blocks, launch.stream, master, param,
                                                    param_dtype, grad, grad_dtype, m, v, count,
                                                    scalars);
    case ZS_K_OPTIM_ADAM:
        return zs__cuda_update_kind<ZS_K_OPTIM_ADAM>(blocks, launch.stream, master, param,
                                                     param_dtype, grad, grad_dtype, m, v,
                                                     count, scalars);
    case ZS_K_OPTIM_ADAMW:
        return zs__cuda_update_kind<ZS_K_OPTIM_ADAMW>(blocks, launch.stream, master, param,
                                                      param_dtype, grad, grad_dtype, m, v,
                                                      count, scalars);
    }
    return cudaErrorInvalidValue;
}
