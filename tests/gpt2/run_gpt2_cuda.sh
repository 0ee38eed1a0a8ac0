#!/usr/bin/env bash
# The GPT-2 trainer on the CUDA backend (cuBLAS, NCCL): the tiny configuration
# at np 2, stage 3, fp32, 3 steps; its losses and gradient norms must match
# the CPU backend's within 1e-4 (relative: the same math in another summation
# order). Without a usable GPU the runtime refuses backend = "cuda" with
# ZS_ERR_UNSUPPORTED and its reason; the test then reports SKIP (77).
# Usage: run_gpt2_cuda.sh MPIEXEC gpt2_train
MPIEXEC=$1 TRAIN=$2 ZSCKPT=
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
python3 - "$work/cpu.loss" "$work/cuda.loss" <<'PY' || fail "CUDA and CPU disagree"
import sys
a = [l.split() for l in open(sys.argv[1])]
b = [l.split() for l in open(sys.argv[2])]
assert len(a) == len(b) == 3, (len(a), len(b))
for x, y in zip(a, b):
    for i, what in ((1, "loss"), (2, "grad norm")):
        u, v = float.fromhex(x[i]), float.fromhex(y[i])
        assert abs(u - v) <= 1e-4 * abs(u), f"step {x[0]} {what}: cpu {u!r} cuda {v!r}"
    print(f"step {x[0]}: loss cpu {float.fromhex(x[1]):.6f} cuda {float.fromhex(y[1]):.6f}")
PY
echo "1 passed, 0 failed"
