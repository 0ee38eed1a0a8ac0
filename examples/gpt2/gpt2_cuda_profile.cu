// GPT2_CUDA_PROFILE: the device time of every op of a few training
// micro-steps, to say which kernels make a gap to llm.c (gpt2_backend.h
// says how to turn it on). The mechanism and the table's format are the
// shared device's (nn_cuda_profile.cu, which also names the shared layers'
// ops: encoder_fwd, encoder_bwd_sort, encoder_bwd_wte, bias_grad_sums, the
// attn_* ops, matmul_logits, classifier_xent, matmul_wte_dw,
// matmul_head_dx, losses_sum); here are GPT-2's own ops' names, in
// gpt2_prof_op's order, and the variable's check.
#include "gpt2_cuda_common.cuh"

namespace gpt2cuda {

namespace {

const char *const kGpt2OpNames[] = {
    "encoder_bwd_wpe",   "layernorm_fwd",      "layernorm_bwd_dwdb", "layernorm_bwd_dx",
    "matmul_qkv_fwd",    "matmul_attproj_fwd", "matmul_fc_fwd",      "gelu_fwd",
    "matmul_fcproj_fwd", "matmul_fcproj_dw",   "matmul_fcproj_dx",   "gelu_bwd_fcb_sum",
    "matmul_fc_dw",      "matmul_fc_dx",       "matmul_attproj_dw",  "matmul_attproj_dx",
    "matmul_qkv_dw",     "matmul_qkv_dx"};
constexpr int kGpt2Ops = (int)(sizeof kGpt2OpNames / sizeof kGpt2OpNames[0]);
static_assert(kGpt2Ops == GPT2_PROF_END - kProfModelBase, "one name per gpt2_prof_op");

} // namespace

int profile_check(const char *spec, int *steps, int *warmup, char *err, size_t cap) {
    *steps = 0;
    *warmup = 0;
    if (spec == nullptr || *spec == '\0') return NN_OK;
    if (!profile_spec_parse(spec, steps, warmup))
        return ex_error(err, cap, NN_ERR_ARG,
                           "gpt2 cuda: GPT2_CUDA_PROFILE=\"%s\"; use STEPS or STEPS,WARMUP "
                           "(training micro-steps to time, 1..100000, after WARMUP ones, "
                           "0..100000, default 2), or unset it",
                           spec);
    return NN_OK;
}

int profile_start(ctx *cx, int steps, int warmup, char *err, size_t cap) {
    if (steps < 1) return NN_OK;
    return profiler_create(cx, "gpt2", "GPT2_CUDA_PROFILE", steps, warmup, kGpt2OpNames,
                           kGpt2Ops, err, cap);
}

} // namespace gpt2cuda
