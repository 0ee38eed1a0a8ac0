#!/usr/bin/env bash
# GPT-2 124M builds and trains on this machine: np 2, stage 3, bf16, two
# steps at seq_len 32, and every rank's memory per tag equals the ZeRO
# formula computed independently from the model's shapes (check_memory.py).
# Usage: run_gpt2_124m.sh MPIEXEC gpt2_train
MPIEXEC=$1 TRAIN=$2 ZSCKPT=
source "$(dirname "$0")/e2e_common.sh"
cat > "$work/124m.cfg" <<CFG
zero: { stage = 3; prefetch_bytes = 0; };   # no gathering ahead: the peaks below are exact
precision: { dtype = "bf16"; };
optimizer: { type = "adamw"; lr = 6e-4; weight_decay = 0.1; };
log: { level = "warn"; };
app: { model = "124M"; seq_len = 32; batch_size = 1; steps = 2; train_data = "$work/corpus.txt";
       val_every = 0; val_batches = 1; sample_tokens = 0; memory_file = "$work/memory.json"; };
CFG
run 2 "$work/124m.log" "$work/124m.cfg"
cat "$work/124m.log"
grep -q "step     2/2" "$work/124m.log" || fail "no second step"
python3 "$SRC/tests/gpt2/check_memory.py" "$work/memory.json" --preset 124M || fail "memory differs from the formula"
echo "1 passed, 0 failed"
