/*
 * nn_cuda — what a CUDA nn_device (nn_device.h's nn_cuda_device_create)
 * tells beyond the device ops: how its matrix products ran. The models'
 * CUDA backends (gpt2_cuda*.cu, llama_cuda*.cu) compute on one such device
 * and share its kernels (nn_cuda_*.cu: cuBLASLt products, attention, the
 * fused classifier, the embedding backward, column sums), its cuBLAS
 * handles, its algorithm cache and these counts.
 *
 * Per-op profile. A model backend created on the device may start a
 * profile of the device's ops from its own environment variable
 * (GPT2_CUDA_PROFILE for GPT-2, LLAMA_CUDA_PROFILE for the Llama family,
 * both STEPS[,WARMUP]: gpt2_backend.h says the format); the device prints
 * the table and nn_cuda_device_stats's line to stderr when it is destroyed
 * (the one thing a device prints, and only when asked).
 */
#ifndef NN_CUDA_H
#define NN_CUDA_H

#include <stddef.h>

#include "nn_device.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * What the device has launched since its creation: for each fused
 * epilogue, the products that ran it (fused) and those that ran the unfused
 * path (fallback: a plain GEMM and a separate kernel) although the fusion
 * was asked for, because cuBLASLt found no algorithm or refused the launch,
 * the shape cannot take it, or unfused_bias forced it. The GELU epilogues
 * are GPT-2's (its backend counts them here); a Llama model leaves them 0.
 * Counts of launches, cumulative.
 */
typedef struct nn_cuda_stats {
    int sm;           /* the device's compute capability, major * 10 + minor (90: Hopper) */
    int gelu_fusion;  /* GPT-2's GELU fusion mode in effect (0 for other models) */
    int unfused_bias; /* bias epilogues forced off (a GPT-2 option; 0 otherwise) */
    long long bias_fused, bias_fallback;   /* the BIAS epilogue (with or without a residual) */
    long long gelu_fused, gelu_fallback;   /* GELU_AUX_BIAS */
    long long dgelu_fused, dgelu_fallback; /* DGELU */
    long long gemm_lt;      /* model GEMMs through cuBLASLt, any epilogue */
    long long gemm_classic; /* model GEMMs cuBLASLt had no algorithm for: classic cuBLAS */
} nn_cuda_stats;

/*
 * Fills *out (when not NULL) with dev's counts and, when line is not NULL,
 * writes them as one line (cap bytes, no newline), the format the
 * benchmarks print and scripts parse:
 *   fusion: bias fused N fallback M; gelu fused N fallback M; dgelu fused N fallback M;
 *   gemm lt N classic M (gelu_fusion G, unfused_bias U, sm_XY)
 * (on one line). Synchronous, no device access. NN_ERR_ARG when dev is not
 * a CUDA device; NN_ERR_UNAVAILABLE in builds without CUDA.
 */
int nn_cuda_device_stats(const nn_device *dev, nn_cuda_stats *out, char *line, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* NN_CUDA_H */
