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
#     every 0.2 s: what llm.c's users compare);
#   - after the table, for each run: the fused-epilogue counts of the model
#     alone and of the trainer (gpt2_cuda_backend_stats's line, "fusion: bias
#     fused N fallback M; gelu fused N fallback M; dgelu fused N fallback M;
#     gemm lt N classic M (gelu_fusion G, unfused_bias U, sm_XY)") and the
#     trainer's per-op device times of PROFILE micro-steps (GPT2_CUDA_PROFILE:
#     the "profile " rows, op calls total_ms ms_per_step pct_step, longest
#     first, then all_ops, outside_ops and step).
# Environment:
#   GELU_FUSION  the app.gelu_fusion modes to run, each a row (default "-1",
#                the device's default; "0 2" measures unfused against fused)
#   PROFILE      GPT2_CUDA_PROFILE for the trainer, STEPS[,WARMUP] (default
#                "3,4": three micro-steps after four; "" turns it off). The
#                events add no host wait; the step times still include the
#                profiled steps, so compare tokens/s with PROFILE="" if in doubt.
# The GPU's name is printed first: a number without its GPU means nothing.
set -euo pipefail
build=${1:-build}
steps=${2:-20}
fusions=${GELU_FUSION:--1}
profile=${PROFILE-3,4}
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

printf '%4s %5s %10s %10s %9s %7s %12s %10s %14s\n' B gelu "ms/step" "tokens/s" "TFLOP/s" MFU \
  "model ms" "runtime" "peak MiB/rank"
T=1024
runs=()
for B in 16 64; do
  for f in $fusions; do
    run=$B.$f
    flop_step=$("$model_bench" --backend cuda --dtype bf16 --preset 124M --seq $T --batch $B \
                --steps 5 --gelu-fusion "$f" > "$work/model.$run.log" 2>&1 &&
                sed -nE 's/.* ([0-9.e+]+) FLOP\/step.*/\1/p' "$work/model.$run.log") ||
      { cat "$work/model.$run.log"
        echo "bench_gpt2_cuda: the model alone failed at B $B, gelu_fusion $f"; continue; }
    model_ms=$(sed -nE 's/.*median ([0-9.]+) s over.*/\1/p' "$work/model.$run.log" |
               awk '{print $1 * 1000}')
    rm -f "$work/done"
    sample_memory "$work/mem.$run" &
    sampler=$!
    log=$work/train.$run.log
    ok=1
    GPT2_CUDA_PROFILE=$profile mpirun --bind-to none -np 1 -x GPT2_CUDA_PROFILE "$train" \
      "$config" backend=\"cuda\" zero.stage=3 app.gelu_fusion="$f" \
      app.seq_len=$T app.batch_size=$B app.steps=$steps scheduler.total_steps=$((steps + 1)) \
      scheduler.warmup_steps=1 app.log_every=1 app.val_every=0 app.val_batches=1 \
      app.sample_tokens=0 "app.train_data=$corpus" log.level=\"warn\" > "$log" 2>&1 || ok=0
    touch "$work/done"
    wait "$sampler"
    if [ $ok = 0 ]; then
      tail -20 "$log"
      echo "bench_gpt2_cuda: gpt2_train failed at B $B, gelu_fusion $f"
      continue
    fi
    runs+=("$run")
    ms=$(median_ms "$log")
    awk -v B=$B -v g="$f" -v T=$T -v ms="$ms" -v f="$flop_step" -v peak="${peak:-0}" \
        -v mm="$model_ms" -v mem="$(cat "$work/mem.$run")" \
      'BEGIN {tps = B * T / (ms / 1000); tf = f / (ms / 1000) / 1e12;
              mfu = peak > 0 ? sprintf("%.3f", tf / peak) : "n/a";
              printf "%4d %5s %10.1f %10.0f %9.1f %7s %12.1f %9.1f%% %14d\n", B, g, ms, tps, tf,
                     mfu, mm, 100 * (ms - mm) / ms, mem}'
  done
done
echo "tokens/s = B x T / median step; TFLOP/s = (6N + 12LCT) x tokens/s; runtime = (step - model alone) / step"
echo "gelu: app.gelu_fusion (-1: the device's default, 0 none, 1 forward, 2 forward and backward)"
for run in "${runs[@]}"; do
  echo
  echo "== B ${run%%.*}, gelu_fusion ${run#*.}"
  echo "model alone: $(grep -m1 -E '^ *fusion: ' "$work/model.$run.log" | sed -E 's/^ *//')"
  # The trainer's backend prints its table and fusion line at its end
  # (GPT2_CUDA_PROFILE); without a profile there is neither.
  grep -E '^(gpt2 cuda profile|profile |fusion: )' "$work/train.$run.log" |
    sed -E 's/^fusion: /trainer: fusion: /' || echo "trainer: no profile (PROFILE=\"\")"
done
