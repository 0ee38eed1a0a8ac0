#!/usr/bin/env bash
# A LoRA step against a full fine-tuning step of the same model and batch
# (issue 42): llama_train at np 1 (stage 3, bf16, one OpenMP thread: the
# Llama demo's settings), full training, LoRA rank 8 on q_proj and v_proj
# (PEFT's default targets) and LoRA rank 8 on every Linear, each from the
# same initialization, interleaved over ROUNDS rounds; a run's ms per step
# is median_ms of its log (bench/lib/common.sh: the first two steps left
# out), a row's the median over rounds. Two shapes: the demo's "tiny"
# (128 channels, 4 blocks) and a wider one (512 channels, MLP 1376, 8 query
# / 4 key-value heads, 2 blocks), sequences of 128, 8 per step.
# Usage: bench_lora_step.sh BUILD_DIR [STEPS] [ROUNDS]
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: bench_lora_step.sh BUILD_DIR [STEPS] [ROUNDS]}" && pwd)
steps=${2:-10}
rounds=${3:-3}
source "$src/bench/lib/common.sh"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ZS_LOG_LEVEL=warn

cat > "$work/wide.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256,
 "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 2,
 "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 128,
 "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false,
 "hidden_act": "silu", "attention_bias": false, "mlp_bias": false}
JSON

# run SHAPE_KEYS LOG [OVERRIDES...]
run() {
  local shape=$1 log=$2
  shift 2
  mpirun --oversubscribe --bind-to none -np 1 "$build/examples/llama/llama_train" \
    "$src/configs/llama_demo.cfg" $shape app.steps=$steps scheduler.total_steps=$((steps + 1)) \
    scheduler.warmup_steps=1 app.log_every=1 app.val_every=0 app.sample_tokens=0 \
    "app.train_data=\"$corpus\"" "checkpoint.dir=$work/ckpt.$RANDOM" checkpoint.every=0 "$@" \
    > "$log" 2>&1 || { tail -20 "$log"; echo "bench_lora_step: a run failed" >&2; exit 1; }
}
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

for row in "tiny|app.model=\"tiny\"" "wide|app.model=\"\" app.config=\"$work/wide.json\""; do
  name=${row%%|*} shape=${row#*|}
  full=() qv=() all=()
  for r in $(seq "$rounds"); do
    run "$shape" "$work/full.log"
    run "$shape" "$work/qv.log" app.lora_r=8 app.lora_alpha=16
    run "$shape" "$work/all.log" app.lora_r=8 app.lora_alpha=16 'app.lora_target_modules="all-linear"'
    full+=("$(median_ms "$work/full.log")") qv+=("$(median_ms "$work/qv.log")")
    all+=("$(median_ms "$work/all.log")")
    echo "$name round $r: full ${full[-1]} ms, LoRA q,v ${qv[-1]} ms, LoRA all-linear ${all[-1]} ms"
  done
  f=$(med "${full[@]}") q=$(med "${qv[@]}") a=$(med "${all[@]}")
  awk -v n="$name" -v f="$f" -v q="$q" -v a="$a" 'BEGIN {
    printf "%s: full %.1f ms/step, LoRA q,v %.1f (%.3f of full), LoRA all-linear %.1f (%.3f)\n",
      n, f, q, q / f, a, a / f }'
done
