#!/usr/bin/env bash
# GPT-2 124M does not fit a simulated device of 700 MB per rank at np 2,
# stage 3, bf16: zs_build refuses it with the bytes needed per tag; with the
# optimizer (and the parameter shard) offloaded to host memory it trains
# under the same cap, two steps, and its losses equal those of the run
# without a cap or offload, bit for bit.
# Usage: run_gpt2_offload.sh MPIEXEC gpt2_train
MPIEXEC=$1 TRAIN=$2 ZSCKPT=
source "$(dirname "$0")/e2e_common.sh"
cat > "$work/124m.cfg" <<CFG
zero: { stage = 3; };
precision: { dtype = "bf16"; };
optimizer: { type = "adamw"; lr = 6e-4; weight_decay = 0.1; };
log: { level = "warn"; };
app: { model = "124M"; seq_len = 32; batch_size = 1; steps = 2; train_data = "$work/corpus.txt";
       val_every = 0; val_batches = 1; sample_tokens = 0; };
CFG
cap=device_memory_bytes=700000000
if "$MPIEXEC" --oversubscribe --bind-to none -np 2 "$TRAIN" "$work/124m.cfg" "$cap" > "$work/refused.log" 2>&1; then
  cat "$work/refused.log"; fail "124M trained in 700 MB per rank without offload"
fi
grep -q "of device memory per rank at stage 3 (params .*optim .*), more than device_memory_bytes = 700000000" \
  "$work/refused.log" || { cat "$work/refused.log"; fail "no refusal naming the bytes per tag"; }
echo "refused without offload: $(grep -m1 -o 'this model needs [0-9]* bytes of device memory per rank' "$work/refused.log")"
run 2 "$work/plain.log" "$work/124m.cfg" "app.loss_log=$work/plain.loss"
run 2 "$work/offloaded.log" "$work/124m.cfg" "$cap" 'offload.optimizer="host"' 'offload.params="host"' \
    "app.loss_log=$work/offloaded.loss"
cmp -s "$work/plain.loss" "$work/offloaded.loss" ||
  { paste "$work/plain.loss" "$work/offloaded.loss"; fail "offloaded losses differ"; }
echo "trained under the cap with the optimizer and parameters on the host; losses bit-identical"
echo "1 passed, 0 failed"
