#!/usr/bin/env bash
# GPT-2 step time with offload none / host (optimizer) / host (optimizer and
# parameters) / nvme (optimizer, swap files under the scratch directory) /
# nvme+params (the parameters read from the master on NVMe at each gather),
# np 2, stage 3, bf16, in one run (issue 12, part c), for the
# demo's model and GPT-2 124M (T 64, B 1). On the CPU backend "device" and
# host are the same memory, so this measures the cost of the offloaded path
# itself (the staging copy of new parameters, the gradient shard and state
# in other buffers), not a PCIe link; nvme adds reading and writing the
# master weights and moments on the scratch directory's disk every step.
#
#   bash bench/offload/bench_offload_gpt2.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-12}
src=$(cd "$(dirname "$0")/../.." && pwd)
train=$build/examples/gpt2/gpt2_train
source "$src/bench/lib/common.sh"

printf '%-6s %-22s %10s %12s\n' model offload "ms/step" "vs none"
for model in demo 124M; do
  if [ "$model" = demo ]; then
    config=$src/configs/gpt2_demo.cfg T=128 B=8
  else
    config=$work/124M.cfg T=64 B=1
    sed -E '/^  (n_layer|n_head|n_embd|vocab|block_size) =/d; s/^app: \{/app: { model = "124M";/' \
      "$src/configs/gpt2_demo.cfg" > "$config"
  fi
  base=
  for mode in none host host+params nvme nvme+params; do
    case $mode in
      none) extra=() ;;
      host) extra=('offload.optimizer="host"') ;;
      host+params) extra=('offload.optimizer="host"' 'offload.params="host"') ;;
      nvme) mkdir -p "$work/nvme"
            extra=("offload.nvme_path=\"$work/nvme\"" 'offload.optimizer="nvme"') ;;
      nvme+params) extra=("offload.nvme_path=\"$work/nvme\"" 'offload.optimizer="nvme"'
                          'offload.params="nvme"') ;;
    esac
    log=$work/$model.$mode.log
    mpirun --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 \
      "$train" "$config" zero.stage=3 "${extra[@]}" app.seq_len=$T app.batch_size=$B \
      app.steps=$steps scheduler.total_steps=$((steps + 1)) scheduler.warmup_steps=1 \
      app.log_every=1 app.val_every=0 app.val_batches=1 app.sample_tokens=0 \
      "app.train_data=$corpus" log.level=\"warn\" > "$log" 2>&1 ||
      { cat "$log"; echo "bench_offload_gpt2: $model $mode failed"; exit 1; }
    ms=$(median_ms "$log")
    [ -n "$base" ] || base=$ms
    awk -v m="$model" -v o="$mode" -v ms="$ms" -v b="$base" \
      'BEGIN {printf "%-6s %-22s %10.1f %12.3f\n", m, o, ms, ms / b}'
  done
done
