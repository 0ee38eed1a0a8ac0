#!/usr/bin/env bash
# The MLP example on the CUDA backend (np 2, stage 3, bf16, NCCL) must reach
# its target loss. Without a usable GPU the runtime refuses backend = "cuda"
# with ZS_ERR_UNSUPPORTED and its reason; the test then reports SKIP (77).
# Usage: run_mlp_cuda.sh MPIRUN TRAINER CONFIG
set -u
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$1" --oversubscribe --bind-to none -np 2 "$2" "$3" app.log_every=100 > "$log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "ZS_ERR_UNSUPPORTED" "$log"; then
  echo "SKIP: $(grep -m1 ZS_ERR_UNSUPPORTED "$log")"
  exit 77
fi
cat "$log"
[ $rc -eq 0 ] || { echo "FAIL: mlp_train on CUDA exited $rc"; exit 1; }
grep -qE "target loss <= [0-9.]+ reached" "$log" || { echo "FAIL: target not reached"; exit 1; }
echo "1 passed, 0 failed"
