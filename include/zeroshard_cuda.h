/* zeroshard on the CUDA backend (backend = "cuda" in the configuration).
 *
 * On this backend zs_param_data and zs_param_grad return DEVICE pointers, and
 * every zeroshard call that touches them is ordered on the context's compute
 * stream: a kernel the program launches on that stream after zs_fetch sees
 * the gathered parameters, and zs_grads_ready / zs_step see every gradient
 * the program's kernels wrote on it before the call. zeroshard orders its own
 * communication stream against it with events and blocks the host only where
 * it must return a value (zs_step waits for the gradient norm).
 *
 * The device is chosen at zs_create: this rank's rank among the ranks of its
 * node, modulo the visible devices. With one rank per GPU the collectives
 * run on NCCL; ranks beyond a node's GPUs share them, and the collectives
 * then go through MPI with host staging (comm.impl, docs/GPU.md). */
#ifndef ZEROSHARD_CUDA_H
#define ZEROSHARD_CUDA_H

#include <cuda_runtime_api.h>

#include "zeroshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Makes `stream` the compute stream (created by the program, on the
 * context's device; it must outlive the context or be replaced first). The
 * switch is ordered: work zeroshard enqueued on the previous stream completes
 * before anything enqueued on the new one. Not collective.
 * ZS_ERR_UNSUPPORTED on a context whose backend is not "cuda". */
zs_status zs_cuda_set_stream(zs_ctx *zs, cudaStream_t stream);

/* The compute stream (the one zeroshard created unless set above); NULL for
 * a context whose backend is not "cuda". */
cudaStream_t zs_cuda_stream(const zs_ctx *zs);

/* The CUDA device ordinal this rank uses, or -1 when the backend is not "cuda". */
int zs_cuda_device(const zs_ctx *zs);

#ifdef __cplusplus
}
#endif
#endif
