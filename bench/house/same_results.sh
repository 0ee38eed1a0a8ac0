#!/usr/bin/env bash
# Two builds, the same results to the byte? For a change that must not
# change behaviour (issue 40 moved zero/, comm/ and core/ into floors; issue
# 41 put the models' CPU math behind the shared layers of examples/nn).
#
#   bash bench/house/same_results.sh BUILD_A BUILD_B
#
# Runs, in each build, the MLP example (configs/mlp_zero3.cfg, 2 ranks,
# stage 3, and configs/mlp_zero2_bf16.cfg, stage 2 bf16 with accumulation;
# checkpoints at steps 150 and 300)
# and the GPT-2 demo model (configs/gpt2_demo.cfg, 2 ranks, stage 3, bf16,
# 20 steps), the Llama demo model (configs/llama_demo.cfg, the same way),
# and two more Llama-family shapes at 2 ranks, stage 3, bf16, 12 steps: an
# untied head, and Qwen2's q/k/v biases; each ends with a checkpoint. Then compares, A against B:
# every loss line the program printed (the step time cut off), and every
# shard file of the last checkpoint (parameters, master weights, optimizer
# moments, the program's state), byte for byte with cmp, and for the two
# language models the Hugging Face export of that checkpoint (zs-ckpt
# export --hf: every file of the directory). Prints one line per
# comparison and exits 1 on any difference.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
source "$src/bench/lib/common.sh"
a=$(cd "${1:?usage: same_results.sh BUILD_A BUILD_B}" && pwd)
b=$(cd "${2:?usage: same_results.sh BUILD_A BUILD_B}" && pwd)
mpirun=(mpirun --oversubscribe --bind-to none -np 2)

# losses LOG: the numbers a run printed, without its times.
losses() {
  grep -E '^(step |final|held-out|val |validation)' "$1" |
    sed -E 's/ \| [0-9.]+ (ms|ms\/step|tok\/s|TFLOP\/s)//g' || true
}

# run NAME BUILD PROGRAM CONFIG [OVERRIDES...]
run() {
  local name=$1 build=$2 program=$3 config=$4
  shift 4
  "${mpirun[@]}" "$build/examples/$program" "$src/configs/$config" \
    "checkpoint.dir=$work/$name.ckpt" "$@" > "$work/$name.log" 2>&1 ||
    { tail -20 "$work/$name.log"; echo "same_results: $name failed"; exit 1; }
}

differ=0
# compare NAME: the two builds' runs of NAME.
compare() {
  local name=$1
  if diff <(losses "$work/$name.a.log") <(losses "$work/$name.b.log") > "$work/$name.diff"; then
    echo "same   $name: $(losses "$work/$name.a.log" | wc -l) loss lines"
  else
    echo "DIFFER $name: loss lines (< A, > B):"; head -20 "$work/$name.diff"; differ=1
  fi
  local last_a last_b
  last_a=$(ls -d "$work/$name.a.ckpt"/step_* | tail -1)
  last_b=$(ls -d "$work/$name.b.ckpt"/step_* | tail -1)
  [ "$(basename "$last_a")" = "$(basename "$last_b")" ] ||
    { echo "DIFFER $name: last checkpoints $last_a and $last_b"; differ=1; return; }
  local n=0 f
  for f in "$last_a"/*.safetensors; do
    if cmp -s "$f" "$last_b/$(basename "$f")"; then
      n=$((n + 1))
    else
      echo "DIFFER $name: $(basename "$last_a")/$(basename "$f")"; differ=1
    fi
  done
  echo "same   $name: $n shard files of $(basename "$last_a"), byte for byte"
}

# compare_export NAME: the Hugging Face exports of the two last checkpoints.
compare_export() {
  local name=$1 side n=0 f
  for side in a b; do
    local build=${!side} last
    last=$(ls -d "$work/$name.$side.ckpt"/step_* | tail -1)
    "$build/tools/zs-ckpt" export --hf "$work/$name.$side.hf" "$last" > "$work/$name.$side.export.log" 2>&1 ||
      { tail -5 "$work/$name.$side.export.log"; echo "same_results: export of $name.$side failed"; exit 1; }
  done
  for f in "$work/$name.a.hf"/*; do
    if cmp -s "$f" "$work/$name.b.hf/$(basename "$f")"; then
      n=$((n + 1))
    else
      echo "DIFFER $name: Hugging Face export $(basename "$f")"; differ=1
    fi
  done
  [ "$n" -gt 0 ] || { echo "DIFFER $name: empty Hugging Face export"; differ=1; }
  echo "same   $name: $n files of the Hugging Face export, byte for byte"
}

# Two more Llama-family shapes (tests/llama/run_llama_train.sh's): an untied
# head, and Qwen2's q/k/v biases with a tied one (tests/llama/shapes).
cp "$src/tests/llama/shapes/untied.json" "$work/untied.json"
cp "$src/tests/llama/shapes/qwen2_tied.json" "$work/qwen2.json"
for shape in untied qwen2; do
  cat > "$work/$shape.cfg" <<CFG
zero: { stage = 3; };
precision: { dtype = "bf16"; };
optimizer: { type = "adamw"; lr = 3e-3; weight_decay = 0.1; };
log: { level = "warn"; };
app: { config = "$work/$shape.json"; seq_len = 32; batch_size = 4; steps = 12;
       train_data = "$corpus"; val_every = 6; val_batches = 2; sample_tokens = 0;
       log_every = 1; };
CFG
done

for side in a b; do
  build=${!side}
  run mlp_zero3.$side "$build" mlp/mlp_train mlp_zero3.cfg checkpoint.every=150 app.log_every=1
  run mlp_zero2_bf16.$side "$build" mlp/mlp_train mlp_zero2_bf16.cfg checkpoint.every=150 \
    app.log_every=1
  run gpt2_demo.$side "$build" gpt2/gpt2_train gpt2_demo.cfg zero.stage=3 app.steps=20 \
    scheduler.total_steps=21 scheduler.warmup_steps=2 app.log_every=1 app.val_every=10 \
    app.val_batches=2 app.sample_tokens=0 checkpoint.every=10 "app.train_data=$corpus"
  run llama_demo.$side "$build" llama/llama_train llama_demo.cfg zero.stage=3 app.steps=20 \
    scheduler.total_steps=21 scheduler.warmup_steps=2 app.log_every=1 app.val_every=10 \
    app.val_batches=2 app.sample_tokens=0 checkpoint.every=10
  for shape in untied qwen2; do
    "${mpirun[@]}" "$build/examples/llama/llama_train" "$work/$shape.cfg" \
      "checkpoint.dir=$work/llama_$shape.$side.ckpt" checkpoint.every=6 \
      > "$work/llama_$shape.$side.log" 2>&1 ||
      { tail -20 "$work/llama_$shape.$side.log"; echo "same_results: llama_$shape.$side failed"; exit 1; }
  done
done
compare mlp_zero3
compare mlp_zero2_bf16
compare gpt2_demo
compare_export gpt2_demo
compare llama_demo
compare_export llama_demo
for shape in untied qwen2; do
  compare llama_$shape
  compare_export llama_$shape
done
[ $differ -eq 0 ] && echo "same_results: A and B agree to the byte" || echo "same_results: A and B differ"
exit $differ
