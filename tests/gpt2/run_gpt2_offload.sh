#!/usr/bin/env bash
# GPT-2 124M does not fit a simulated device of 700 MB per rank at np 2,
# stage 3, bf16: zs_build refuses it with the bytes needed per tag; with the
# optimizer (and the parameter shard) offloaded to host memory, or both to
# NVMe, it trains under the same cap, two steps, and its losses equal those
# of the run without a cap or offload, bit for bit.
# The tiny model with its optimizer state on NVMe in one-page chunks (so
# parameters straddle chunks) matches no offload bit for bit in stages 1 and
# 3; a killed NVMe run leaves nothing (its swap files are O_TMPFILE files,
# without a name), and no run leaves anything under offload.nvme_path.
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
mkdir -p "$work/nvme"
nvme=("offload.optimizer=\"nvme\"" "offload.nvme_path=\"$work/nvme\"")
left() { find "$work/nvme" -mindepth 1 | head -5; }
run 2 "$work/nvme124.log" "$work/124m.cfg" "$cap" "${nvme[@]}" 'offload.params="nvme"' \
    "app.loss_log=$work/nvme124.loss"
cmp -s "$work/plain.loss" "$work/nvme124.loss" ||
  { paste "$work/plain.loss" "$work/nvme124.loss"; fail "124M with optimizer and parameters on NVMe: losses differ"; }
[ -z "$(left)" ] || fail "left under nvme_path: $(left)"
echo "trained under the cap with the optimizer and parameters on NVMe; losses bit-identical; nothing left on disk"

for stage in 1 3; do
  tiny_config "$work/tiny$stage.cfg" $stage bf16
  run 2 "$work/t$stage.log" "$work/tiny$stage.cfg" app.steps=4 "app.loss_log=$work/t$stage.loss"
  run 2 "$work/tn$stage.log" "$work/tiny$stage.cfg" app.steps=4 "${nvme[@]}" offload.buffer_bytes=4096 \
      "app.loss_log=$work/tn$stage.loss"
  cmp -s "$work/t$stage.loss" "$work/tn$stage.loss" ||
    { paste "$work/t$stage.loss" "$work/tn$stage.loss"; fail "tiny stage $stage on NVMe: losses differ"; }
done
run 2 "$work/tp3.log" "$work/tiny3.cfg" app.steps=4 "${nvme[@]}" 'offload.params="nvme"' \
    offload.buffer_bytes=4096 "app.loss_log=$work/tp3.loss"
cmp -s "$work/t3.loss" "$work/tp3.loss" ||
  { paste "$work/t3.loss" "$work/tp3.loss"; fail "tiny stage 3, parameters on NVMe too: losses differ"; }
[ -z "$(left)" ] || fail "left under nvme_path: $(left)"
echo "tiny model, stages 1 and 3, optimizer (and in stage 3 parameters) on NVMe in one-page chunks: losses bit-identical"

# A killed run leaves nothing: its swap files never had a name (O_TMPFILE;
# the named way for file systems without it is tested in test_swap).
"$MPIEXEC" --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 \
  "$TRAIN" "$work/tiny3.cfg" app.steps=1000000 "${nvme[@]}" > "$work/killed.log" 2>&1 &
launcher=$!
for _ in $(seq 1 300); do
  grep -q "step" "$work/killed.log" && break
  sleep 0.1
done
pkill -9 -f "$TRAIN $work/tiny3.cfg app.steps=1000000" || true
wait "$launcher" 2>/dev/null || true
grep -q "step" "$work/killed.log" || { cat "$work/killed.log"; fail "the run to kill never trained"; }
[ -z "$(left)" ] || fail "the killed run left: $(left)"
run 2 "$work/after.log" "$work/tiny3.cfg" app.steps=2 "${nvme[@]}"
[ -z "$(left)" ] || fail "the run after a killed one left: $(left)"
echo "a killed run and the next one left nothing"

# A real full disk: a 64 KiB tmpfs cannot hold the tiny model's swap files;
# zs_build fails on both ranks, saying how many bytes the tier needs where,
# and leaves nothing there. (Needs root for the mount; skipped otherwise.)
mkdir -p "$work/small"
if mount -t tmpfs -o size=64k tmpfs "$work/small" 2>/dev/null; then
  trap 'umount "$work/small" 2>/dev/null; rm -rf "$work"' EXIT
  if "$MPIEXEC" --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 \
       "$TRAIN" "$work/tiny3.cfg" app.steps=2 "offload.nvme_path=\"$work/small\"" \
       'offload.optimizer="nvme"' > "$work/full.log" 2>&1; then
    cat "$work/full.log"; fail "trained with its swap files on a 64 KiB file system"
  fi
  # Both ranks print the lowest failing rank's error, the other one adding
  # where it came from.
  pattern="No space left on device (the NVMe tier needs [0-9]* bytes under offload.nvme_path = $work/small"
  [ "$(grep -c "$pattern" "$work/full.log")" = 2 ] && grep -q "$pattern.*(reported by rank 0)" "$work/full.log" ||
    { cat "$work/full.log"; fail "no clear ENOSPC error on both ranks"; }
  [ -z "$(find "$work/small" -mindepth 1 | head -1)" ] || fail "left on the full disk: $(find "$work/small" -mindepth 1)"
  umount "$work/small"
  echo "a 64 KiB tmpfs: zs_build failed on both ranks with ENOSPC and the bytes needed; nothing left"
else
  echo "skipped the full-disk case: cannot mount a tmpfs here (not root)"
fi
echo "1 passed, 0 failed"
