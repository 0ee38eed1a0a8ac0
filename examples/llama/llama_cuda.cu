// The Llama family on CUDA (llama_backend.h's llama_cuda_backend_create):
// the one orchestration every device runs (llama_layers.c) on a device of
// nn_cuda_device_create, whose layers (nn_cuda_layers.cu) launch the
// kernels in the device's dtype (fp32 exact, no TF32; bf16/fp16 on tensor
// cores with fp32 accumulation and fp32 statistics): every Linear one
// cuBLASLt product (biases in the epilogue, residuals as its C input, q, k
// and v one product when their weights lie one after the other, d gate and
// d up side by side so that xn2's gradient is one), grouped-query causal
// attention, RMSNorm, RoPE, SwiGLU, the fused classifier, the sorted
// deterministic embedding backward. What is here: the device check and
// LLAMA_CUDA_PROFILE=STEPS[,WARMUP], read at creation, which times the
// device's ops as GPT2_CUDA_PROFILE does GPT-2's (gpt2_backend.h says
// how); the device prints the table when it is destroyed.
#include <cstdlib>

#include "llama_backend.h"
#include "nn_cuda_ctx.cuh"

using namespace nncuda;

namespace {

// The family's ops in the profile's table, in this order (the layers time
// them under these names; nn_cuda_profile.cu names the shared ones).
const char *const kLlamaOpNames[] = {
    "rmsnorm_fwd",       "rmsnorm_bwd_dw",    "rmsnorm_bwd_dx",     "matmul_qkv_fwd",
    "rope_fwd",          "matmul_o_fwd",      "matmul_gate_up_fwd", "swiglu_fwd",
    "matmul_down_fwd",   "matmul_down_dw",    "matmul_down_dx",     "swiglu_bwd",
    "matmul_gate_up_dw", "matmul_gate_up_dx", "matmul_o_dw",        "matmul_o_dx",
    "rope_bwd",          "matmul_qkv_dw",     "matmul_qkv_dx"};
constexpr int kLlamaOps = (int)(sizeof kLlamaOpNames / sizeof kLlamaOpNames[0]);

} // namespace

extern "C" int llama_cuda_backend_create(nn_device *dev, const llama_dims *dims, int max_T,
                                         llama_backend **out, char *err, size_t cap) {
    if (out == nullptr) return ex_error(err, cap, NN_ERR_ARG, "llama cuda backend: out is NULL");
    *out = nullptr;
    ctx *cx = ctx_of(dev);
    if (cx == nullptr)
        return ex_error(err, cap, NN_ERR_ARG,
                        "llama cuda backend: the device must come from nn_cuda_device_create");
    int steps = 0, warmup = 0;
    const int spec = profile_from_env("LLAMA_CUDA_PROFILE", "llama", &steps, &warmup, err, cap);
    if (spec != NN_OK) return spec;
    const int s = llama_layers_backend_create(dev, dims, max_T, out, err, cap);
    if (s != NN_OK || steps < 1) return s;
    // The profile goes with the device (the caller's), which prints it.
    const int p = profiler_create(cx, "llama", "LLAMA_CUDA_PROFILE", steps, warmup, kLlamaOpNames,
                                  kLlamaOps, err, cap);
    if (p != NN_OK) {
        (*out)->ops->destroy(*out);
        *out = nullptr;
    }
    return p;
}
