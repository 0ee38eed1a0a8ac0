#!/usr/bin/env bash
# The GPT-2 trainer on the CUDA backend, the tiny configuration, 3 steps:
#   - fp32 (exact: no TF32) at np 2, stage 3: losses and gradient norms
#     within 1e-4 (relative) of the CPU backend's: the same math in another
#     summation order;
#   - bf16 (tensor cores, activations in bf16) at np 1 against the CPU's
#     bf16 run, which rounds the same parameters but computes and stores
#     activations in fp32: mean loss within 2^-9 and gradient norm within
#     2^-6 (relative), the bounds derived in test_gpt2_cuda.c (measured
#     there in an emulation: at most 2^-12.2 and 2^-9.8). SGD, so that the
#     parameters of steps 2 and 3 move by lr x gradient and stay as close as
#     the gradients (Adam's first step is lr x sign, which turns rounding in
#     a near-zero gradient into a full step);
#   - bf16 stages 0-3 at np 2 (the ranks share this GPU through host-staged
#     MPI): bit-identical losses, norms and exported parameters;
#   - determinism: stage 3 again, the same bits.
# Without a usable GPU the runtime refuses backend = "cuda" with
# ZS_ERR_UNSUPPORTED and its reason; the test then reports SKIP (77).
# Usage: run_gpt2_cuda.sh MPIEXEC gpt2_train zs-ckpt
MPIEXEC=$1 TRAIN=$2 ZSCKPT=$3
source "$(dirname "$0")/e2e_common.sh"
tiny_config "$work/c.cfg" 3 fp32
if ! "$MPIEXEC" --oversubscribe --bind-to none -np 2 "$TRAIN" "$work/c.cfg" backend=\"cuda\" \
     app.steps=3 app.batch_size=2 "app.loss_log=$work/cuda.loss" > "$work/cuda.log" 2>&1; then
  if grep -q "ZS_ERR_UNSUPPORTED" "$work/cuda.log"; then
    echo "SKIP: $(grep -m1 ZS_ERR_UNSUPPORTED "$work/cuda.log")"
    exit 77
  fi
  cat "$work/cuda.log"
  fail "gpt2_train on CUDA exited nonzero"
fi
run 2 "$work/cpu.log" "$work/c.cfg" app.steps=3 app.batch_size=2 "app.loss_log=$work/cpu.loss"

# compare CPU_LOSS CUDA_LOSS LOSS_BOUND NORM_BOUND — relative bounds per step.
compare() {
  python3 - "$@" <<'PY'
import sys
a = [l.split() for l in open(sys.argv[1])]
b = [l.split() for l in open(sys.argv[2])]
num = lambda s: float.fromhex(s) if 'p' in s else float(s)
bounds = {1: num(sys.argv[3]), 2: num(sys.argv[4])}
assert len(a) == len(b) == 3, (len(a), len(b))
for x, y in zip(a, b):
    for i, what in ((1, "loss"), (2, "grad norm")):
        u, v = float.fromhex(x[i]), float.fromhex(y[i])
        d = abs(u - v) / abs(u)
        print(f"step {x[0]} {what}: cpu {u:.7g} cuda {v:.7g}, relative {d:.3g} (bound {bounds[i]:.3g})")
        assert d <= bounds[i], f"step {x[0]} {what}: cpu {u!r} cuda {v!r}"
PY
}
compare "$work/cpu.loss" "$work/cuda.loss" 1e-4 1e-4 || fail "fp32: CUDA and CPU disagree"
echo "fp32: CUDA matches the CPU within 1e-4"

tiny_config "$work/b.cfg" 3 bf16
for be in cpu cuda; do
  run 1 "$work/bf16.$be.log" "$work/b.cfg" "backend=\"$be\"" 'optimizer.type="sgd"' \
      app.steps=3 app.batch_size=2 "app.loss_log=$work/bf16.$be.loss"
done
compare "$work/bf16.cpu.loss" "$work/bf16.cuda.loss" 0x1p-9 0x1p-6 ||
  fail "bf16: CUDA and the CPU's fp32 activations disagree beyond bf16 rounding"
echo "bf16: CUDA within bf16 rounding of the CPU"

for stage in 0 1 2 3 3again; do
  tiny_config "$work/s.cfg" "${stage%again}" bf16
  run 2 "$work/s$stage.log" "$work/s.cfg" backend=\"cuda\" app.steps=3 app.batch_size=2 \
      "checkpoint.dir=$work/ckpt.s$stage" checkpoint.every=3 "app.loss_log=$work/s$stage.loss"
  export_ckpt "$work/ckpt.s$stage" "$work/s$stage.safetensors"
  [ "$(wc -l < "$work/s$stage.loss")" -eq 3 ] || fail "stage $stage: expected 3 loss lines"
done
for stage in 1 2 3 3again; do
  cmp -s "$work/s0.loss" "$work/s$stage.loss" ||
    { paste "$work/s0.loss" "$work/s$stage.loss"; fail "bf16 on CUDA: stage $stage losses differ from stage 0"; }
  cmp -s "$work/s0.safetensors" "$work/s$stage.safetensors" ||
    fail "bf16 on CUDA: stage $stage parameters are not bit-identical to stage 0"
done
echo "bf16 on CUDA, np 2: stages 0-3 bit-identical, and a second run gives the same bits"
echo "1 passed, 0 failed"
