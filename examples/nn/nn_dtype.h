/*
 * nn_dtype — what the examples' models store tensors in, shared by every
 * model and both backends: fp32 is the exact mode (the CPU backends' only
 * one, and the CUDA-vs-CPU equality tests'); bf16 and fp16 put activations
 * and GEMM operands in the training's compute dtype, with fp32 arithmetic
 * inside every kernel and fp32 accumulation in every GEMM.
 */
#ifndef NN_DTYPE_H
#define NN_DTYPE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nn_dtype { NN_F32 = 0, NN_BF16 = 1, NN_F16 = 2 } nn_dtype;

/* Bytes per element (4 or 2), and "fp32", "bf16", "fp16". */
static inline size_t nn_dtype_size(nn_dtype t) { return t == NN_F32 ? 4 : 2; }
static inline const char *nn_dtype_name(nn_dtype t) {
    return t == NN_F32 ? "fp32" : t == NN_BF16 ? "bf16" : "fp16";
}

/* Tensors carved from one allocation start at multiples of this many bytes:
 * 16-byte vector loads and cuBLASLt's preferred alignment on the GPU. */
#define NN_ALIGN 256

#ifdef __cplusplus
}
#endif
#endif /* NN_DTYPE_H */
