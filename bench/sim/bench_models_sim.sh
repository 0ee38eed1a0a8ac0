#!/usr/bin/env bash
# What the simulated device (backend = "sim") costs the language models
# against the cpu backend (issue 41): GPT-2's and Llama's demo models
# (configs/gpt2_demo.cfg, configs/llama_demo.cfg: stage 3, bf16, one OpenMP
# thread per rank) at np 1, the median ms per step of each backend and the
# ratio sim / cpu, with the sim's simulated time at its defaults
# (ZS_SIM_LAUNCH_US of launch latency per op, copies at ZS_SIM_HOST_GBPS and
# ZS_SIM_DEVICE_GBPS) and with all three at 0 (the queue's own overhead: an
# op handed to the device's thread, the host's waits). The runs are
# interleaved over ROUNDS rounds so that a disturbance on a shared machine
# hits every arrangement alike; a run's ms per step is median_ms of its log
# (bench/lib/common.sh: the first two steps left out).
# Usage: bench_models_sim.sh BUILD_DIR [STEPS] [ROUNDS]
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: bench_models_sim.sh BUILD_DIR [STEPS] [ROUNDS]}" && pwd)
steps=${2:-12}
rounds=${3:-3}
source "$src/bench/lib/common.sh"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ZS_LOG_LEVEL=warn

# run MODEL PROGRAM CONFIG BACKEND LOG [ENV...]
run() {
  local model=$1 program=$2 config=$3 backend=$4 log=$5
  shift 5
  env "$@" mpirun --oversubscribe --bind-to none -np 1 "$build/examples/$model/$program" \
    "$src/configs/$config" backend="\"$backend\"" app.steps=$steps \
    scheduler.total_steps=$((steps + 1)) scheduler.warmup_steps=1 app.log_every=1 \
    app.val_every=0 app.sample_tokens=0 "app.train_data=\"$corpus\"" \
    "checkpoint.dir=$work/ckpt.$RANDOM" checkpoint.every=0 > "$log" 2>&1 ||
    { tail -20 "$log"; echo "bench_models_sim: $model on $backend failed" >&2; exit 1; }
}

for row in "gpt2 gpt2_train gpt2_demo.cfg" "llama llama_train llama_demo.cfg"; do
  read -r model program config <<< "$row"
  cpu=() sim=() queue=()
  for r in $(seq "$rounds"); do
    run "$model" "$program" "$config" cpu "$work/cpu.log"
    run "$model" "$program" "$config" sim "$work/sim.log"
    run "$model" "$program" "$config" sim "$work/queue.log" ZS_SIM_LAUNCH_US=0 \
      ZS_SIM_HOST_GBPS=0 ZS_SIM_DEVICE_GBPS=0
    cpu+=("$(median_ms "$work/cpu.log")") sim+=("$(median_ms "$work/sim.log")")
    queue+=("$(median_ms "$work/queue.log")")
    echo "$model round $r: cpu ${cpu[-1]} ms, sim ${sim[-1]} ms, sim without simulated time ${queue[-1]} ms"
  done
  med() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
  c=$(med "${cpu[@]}") s=$(med "${sim[@]}") q=$(med "${queue[@]}")
  awk -v m="$model" -v c="$c" -v s="$s" -v q="$q" 'BEGIN {
    printf "%s np1: cpu %.1f ms/step, sim %.1f (%.2fx), sim without simulated time %.1f (%.2fx)\n",
      m, c, s, s / c, q, q / c }'
done
