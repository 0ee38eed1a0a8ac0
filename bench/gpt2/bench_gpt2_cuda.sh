#!/usr/bin/env bash
# GPT-2 124M training on one GPU through zeroshard, all measured in one run:
#
#   bash bench/gpt2/bench_gpt2_cuda.sh [BUILD_DIR] [STEPS]
#
# For B = 16 and B = 64 sequences of T = 1024 tokens, bf16, stage 3, np 1
# (configs/gpt2_124m.cfg on the CUDA backend):
#   - the trainer's median step time over STEPS steps (after 2 warm-up
#     steps), tokens/s, achieved TFLOP/s (nanoGPT's 6N + 12LCT per token,
#     gpt2_model.h, the count llm.c reports too) and MFU against the device's
#     dense bf16 peak (the table below, by the name nvidia-smi gives;
#     ZS_PEAK_TFLOPS=... overrides it);
#   - the model alone (bench_gpt2_model --backend cuda: the same kernels on
#     the same shapes, no runtime) and the runtime's share of the step,
#     (trainer - model) / trainer: the optimizer, gathers, reductions,
#     conversions and the step's one host wait;
#   - the peak device memory of the rank's process (nvidia-smi, sampled
#     every 0.2 s: what llm.c's users compare).
# The GPU's name is printed first: a number without its GPU means nothing.
set -euo pipefail
build=${1:-build}
steps=${2:-20}
src=$(cd "$(dirname "$0")/../.." && pwd)
train=$build/examples/gpt2/gpt2_train
model_bench=$build/bench/bench_gpt2_model
source "$src/bench/lib/common.sh"

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null || echo unknown)
# Dense bf16 tensor-core peaks with fp32 accumulation, TFLOP/s (NVIDIA's
# datasheets; the sparse figures are twice these).
peak_of() {
  case "$1" in
    *H200*|*GH200*) echo 989 ;;
    *H100*PCIe*) echo 756 ;;
    *H100*NVL*) echo 835 ;;
    *H100*) echo 989 ;;
    *H800*) echo 989 ;;
    *A100*) echo 312 ;;
    *A800*) echo 312 ;;
    *L40S*) echo 362 ;;
    *RTX\ 4090*) echo 165 ;;
    *) echo "" ;;
  esac
}
peak=${ZS_PEAK_TFLOPS:-$(peak_of "$gpu")}
echo "GPU: $gpu; dense bf16 peak ${peak:-unknown (set ZS_PEAK_TFLOPS)} TFLOP/s"

# The trainer's setting: the 124M preset at T 1024 on the demo's corpus.
config=$work/124M.cfg
sed -E 's/^  steps = [0-9]+;/  steps = 1;/' "$src/configs/gpt2_124m.cfg" > "$config"

# sample_memory OUT — samples the GPU memory of every compute process until
# $work/done exists; writes the largest sum (MiB) into OUT.
sample_memory() {
  local out=$1 max=0
  while [ ! -f "$work/done" ]; do
    used=$(nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits 2>/dev/null |
           awk '{s += $1} END {print s + 0}')
    [ "$used" -gt "$max" ] && max=$used
    sleep 0.2
  done
  echo "$max" > "$out"
}

printf '%4s %10s %10s %9s %7s %12s %10s %14s\n' B "ms/step" "tokens/s" "TFLOP/s" MFU \
  "model ms" "runtime" "peak MiB/rank"
T=1024
for B in 16 64; do
  flop_step=$("$model_bench" --backend cuda --dtype bf16 --preset 124M --seq $T --batch $B \
              --steps 5 > "$work/model.$B.log" 2>&1 && cat "$work/model.$B.log" |
              sed -nE 's/.* ([0-9.e+]+) FLOP\/step.*/\1/p') ||
    { cat "$work/model.$B.log"; echo "bench_gpt2_cuda: the model alone failed at B $B"; continue; }
  model_ms=$(sed -nE 's/.*median ([0-9.]+) s over.*/\1/p' "$work/model.$B.log" |
             awk '{print $1 * 1000}')
  rm -f "$work/done"
  sample_memory "$work/mem.$B" &
  sampler=$!
  log=$work/train.$B.log
  ok=1
  mpirun --bind-to none -np 1 "$train" "$config" backend=\"cuda\" zero.stage=3 \
    app.seq_len=$T app.batch_size=$B app.steps=$steps scheduler.total_steps=$((steps + 1)) \
    scheduler.warmup_steps=1 app.log_every=1 app.val_every=0 app.val_batches=1 \
    app.sample_tokens=0 "app.train_data=$corpus" log.level=\"warn\" > "$log" 2>&1 || ok=0
  touch "$work/done"
  wait "$sampler"
  if [ $ok = 0 ]; then
    tail -20 "$log"
    echo "bench_gpt2_cuda: gpt2_train failed at B $B"
    continue
  fi
  ms=$(median_ms "$log")
  awk -v B=$B -v T=$T -v ms="$ms" -v f="$flop_step" -v peak="${peak:-0}" -v mm="$model_ms" \
      -v mem="$(cat "$work/mem.$B")" \
    'BEGIN {tps = B * T / (ms / 1000); tf = f / (ms / 1000) / 1e12;
            mfu = peak > 0 ? sprintf("%.3f", tf / peak) : "n/a";
            printf "%4d %10.1f %10.0f %9.1f %7s %12.1f %9.1f%% %14d\n", B, ms, tps, tf, mfu, mm,
                   100 * (ms - mm) / ms, mem}'
done
echo "tokens/s = B x T / median step; TFLOP/s = (6N + 12LCT) x tokens/s; runtime = (step - model alone) / step"
