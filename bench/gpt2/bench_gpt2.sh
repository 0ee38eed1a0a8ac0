#!/usr/bin/env bash
# GPT-2 training throughput through zeroshard, against this machine's sgemm,
# all measured in one run (bench/README: ratios, not absolute times).
#
#   bash bench/gpt2/bench_gpt2.sh [BUILD_DIR] [STEPS]
#
# For the demo's model (configs/gpt2_demo.cfg: 4 layers, width 192, T 128,
# B 8 per rank) and GPT-2 124M (T 64, B 1 per rank), in bf16 as trained:
#   - sgemm GFLOP/s of one core at the model's MLP shapes (bench_gpt2_model,
#     the bulk of a step's FLOPs), the reference;
#   - gpt2_train at np 1 and np 2 (one core per rank), stages 0 and 3: the
#     median step time over STEPS steps (after 2 warm-up steps), tokens/s and
#     achieved FLOP/s (nanoGPT's 6N + 12LCT per token, gpt2_model.h);
#   - achieved / sgemm (per core: np cores against np x one core's sgemm) and
#     the stage-3 / stage-0 step time at np 2 (the cost of sharding
#     parameters: three collectives per unit instead of two, the gathers).
set -euo pipefail
build=${1:-build}
steps=${2:-12}
src=$(cd "$(dirname "$0")/../.." && pwd)
train=$build/examples/gpt2/gpt2_train
model_bench=$build/bench/bench_gpt2_model
source "$src/bench/lib/common.sh"

printf '%-6s %3s %5s %10s %10s %12s %14s\n' model np stage "ms/step" "tokens/s" "GFLOP/s" "achieved/sgemm"
declare -A result
for model in demo 124M; do
  if [ "$model" = demo ]; then
    config=$src/configs/gpt2_demo.cfg
    T=128 B=8 flags="--layers 4 --heads 4 --embd 192 --vocab 256"
  else
    # The demo's runtime settings with the preset's sizes (a preset and
    # explicit sizes in one app group are refused).
    config=$work/124M.cfg
    sed -E '/^  (n_layer|n_head|n_embd|vocab|block_size) =/d; s/^app: \{/app: { model = "124M";/' \
      "$src/configs/gpt2_demo.cfg" > "$config"
    T=64 B=1 flags="--preset 124M"
  fi
  sgemm=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$model_bench" $flags --seq $T --batch $B --steps 1 |
          sed -nE 's/.*-> MLP ([0-9.]+) GFLOP\/s.*/\1/p')
  flops_line=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$model_bench" $flags --seq $T --batch $B --steps 1 |
               sed -nE 's/.* ([0-9.e+]+) FLOP\/step.*/\1/p')
  flop_per_token=$(awk -v f="$flops_line" -v n=$((T * B)) 'BEGIN {print f / n}')
  for np in 1 2; do
    for stage in 0 3; do
      log=$work/$model.$np.$stage.log
      mpirun --oversubscribe --bind-to none -np $np -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 \
        "$train" "$config" zero.stage=$stage app.seq_len=$T \
        app.batch_size=$B app.steps=$steps scheduler.total_steps=$((steps + 1)) \
        scheduler.warmup_steps=1 app.log_every=1 app.val_every=0 app.val_batches=1 \
        app.sample_tokens=0 "app.train_data=$corpus" log.level=\"warn\" > "$log" 2>&1 ||
        { cat "$log"; echo "bench_gpt2: gpt2_train failed"; exit 1; }
      ms=$(median_ms "$log")
      tokens=$((np * B * T))
      awk -v m="$model" -v np=$np -v s=$stage -v ms="$ms" -v t=$tokens -v f="$flop_per_token" -v g="$sgemm" \
        'BEGIN {tps = t / (ms / 1000); gf = tps * f / 1e9;
                printf "%-6s %3d %5d %10.1f %10.0f %12.2f %14.3f\n", m, np, s, ms, tps, gf, gf / (np * g)}'
      result[$model.$np.$stage]=$ms
    done
  done
  echo "       $model: one core's sgemm at the MLP shapes = $sgemm GFLOP/s"
  awk -v m="$model" -v a="${result[$model.2.3]}" -v b="${result[$model.2.0]}" \
    'BEGIN {printf "       %s: stage-3 / stage-0 step time at np 2 = %.3f\n", m, a / b}'
done
