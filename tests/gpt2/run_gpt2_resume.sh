#!/usr/bin/env bash
# Resume is exact: 6 steps straight give the same losses and parameters, bit
# for bit, as 3 steps + checkpoint + a new job resuming (checkpoint.resume =
# "auto") + 3 more steps; the data position travels in the checkpoint (a
# wrong position would feed other batches and change the losses). np 2,
# stage 3, bf16 (master weights, moments and the loss scaler all restored).
# Usage: run_gpt2_resume.sh MPIEXEC gpt2_train zs-ckpt
MPIEXEC=$1 TRAIN=$2 ZSCKPT=$3
source "$(dirname "$0")/e2e_common.sh"

tiny_config "$work/c.cfg" 3 bf16
common=(app.batch_size=2 checkpoint.every=3)
run 2 "$work/straight.log" "$work/c.cfg" "${common[@]}" app.steps=6 \
    "checkpoint.dir=$work/straight" "app.loss_log=$work/straight.loss"
run 2 "$work/first.log" "$work/c.cfg" "${common[@]}" app.steps=3 \
    "checkpoint.dir=$work/split" "app.loss_log=$work/first.loss"
run 2 "$work/second.log" "$work/c.cfg" "${common[@]}" app.steps=6 checkpoint.resume=auto \
    "checkpoint.dir=$work/split" "app.loss_log=$work/second.loss"
grep -q "resumed at step 3, data position 12" "$work/second.log" ||
  { cat "$work/second.log"; fail "the second job did not resume at step 3, data position 12"; }
cat "$work/first.loss" "$work/second.loss" > "$work/split.loss"
cmp -s "$work/straight.loss" "$work/split.loss" ||
  { paste "$work/straight.loss" "$work/split.loss"; fail "losses differ after resuming"; }
export_ckpt "$work/straight" "$work/straight.safetensors"
export_ckpt "$work/split" "$work/split.safetensors"
cmp -s "$work/straight.safetensors" "$work/split.safetensors" ||
  fail "parameters after 6 steps differ between the straight and the resumed run"
echo "6 steps straight = 3 + resume + 3, bit for bit (losses, gradient norms, parameters)"
echo "1 passed, 0 failed"
