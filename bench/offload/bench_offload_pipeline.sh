#!/usr/bin/env bash
# The offloaded optimizer's pipeline (issue 21): GPT-2 through gpt2_train with
# the optimizer on the device (none), in host memory updated inside zs_step
# (host, offload.overlap = false), and in host memory updated on its own
# thread while the next forward runs (host, overlapped), all in one run.
# Per configuration, medians over STEPS steps (after 2 warm-up steps) from the
# metrics file (log.metrics_file): the step, the host update's whole pass
# (offload.host_update_ms), the program's waits for it (offload.waited_ms),
# the bytes moved between host and device per step (offload.copied_bytes);
# then the step against the physical bound of the overlap,
#     step / max(compute, host update, copies),
# where compute is the step without offload, and copies = copied bytes /
# COPY_GBPS when that variable gives the link's measured rate (GB/s), and the
# step against no offload.
#
#   bash bench/offload/bench_offload_pipeline.sh [BUILD_DIR] [STEPS]            # CPU backend
#   BACKEND=cuda COPY_GBPS=25 bash bench/offload/bench_offload_pipeline.sh build 10   # a GPU
#
# CPU backend: np 1, one OpenMP thread for the model, offload.threads = 1 for
# the host update (the machine's second core), the demo's model and GPT-2
# 124M (T 64, B 4), stage 3, bf16. CUDA: GPT-2 774M and 1558M, T 1024, B 4
# and 8, recompute, stage 3, bf16, np 1, offload.threads = the default.
set -euo pipefail
build=${1:-build}
steps=${2:-12}
backend=${BACKEND:-cpu}
src=$(cd "$(dirname "$0")/../.." && pwd)
train=$build/examples/gpt2/gpt2_train
source "$src/bench/lib/common.sh"

# run NAME CONFIG T B extra... — one configuration's metrics file.
run() {
  local name=$1 config=$2 T=$3 B=$4
  shift 4
  local envs=(-x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)
  [ "$backend" = cpu ] || envs=()
  mpirun --oversubscribe --bind-to none -np 1 "${envs[@]}" "$train" "$config" \
    backend=\"$backend\" zero.stage=3 precision.dtype=\"bf16\" app.seq_len=$T \
    app.batch_size=$B app.steps=$steps scheduler.total_steps=$((steps + 1)) \
    scheduler.warmup_steps=1 app.log_every=1 app.val_every=0 app.val_batches=1 \
    app.sample_tokens=0 "app.train_data=$corpus" log.level=\"warn\" \
    "log.metrics_file=\"$work/$name.jsonl\"" "$@" > "$work/$name.log" 2>&1 ||
    { tail -20 "$work/$name.log"; echo "bench_offload_pipeline: $name failed"; exit 1; }
}

summarize() { # NAME: median step, host update, waited, copied bytes
  python3 - "$work/$1.jsonl" <<'PY'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1])][2:]
def med(f):
    v = [f(x) for x in lines]
    return statistics.median(v) if v else 0.0
off = lambda x, k: x.get("offload", {}).get(k, 0.0)
print(med(lambda x: x["time_ms"]["step"]), med(lambda x: off(x, "host_update_ms")),
      med(lambda x: off(x, "waited_ms")), med(lambda x: off(x, "copied_bytes")))
PY
}

if [ "$backend" = cpu ]; then
  cases=("demo $src/configs/gpt2_demo.cfg 128 8" "124M 124M 64 4")
  threads=(offload.threads=1)
else
  cases=("774M 774M 1024 4" "774M 774M 1024 8" "1558M 1558M 1024 4" "1558M 1558M 1024 8")
  threads=()
fi
printf '%-6s %2s %-16s %9s %11s %10s %9s %11s %8s\n' model B offload "step ms" "host upd ms" \
  "waited ms" "copied GB" "step/bound" "vs none"
for c in "${cases[@]}"; do
  set -- $c
  model=$1 config=$2 T=$3 B=$4
  if [ "$config" != "$src/configs/gpt2_demo.cfg" ]; then
    config=$work/$model.cfg
    sed -E '/^  (n_layer|n_head|n_embd|vocab|block_size) =/d; s/^app: \{/app: { model = "'"$model"'";/' \
      "$src/configs/gpt2_demo.cfg" > "$config"
  fi
  extra=()
  [ "$backend" = cpu ] || extra=(app.recompute=true)
  run "$model.$B.none" "$config" "$T" "$B" "${extra[@]}"
  run "$model.$B.host" "$config" "$T" "$B" "${extra[@]}" 'offload.optimizer="host"' \
      offload.overlap=false "${threads[@]}"
  run "$model.$B.over" "$config" "$T" "$B" "${extra[@]}" 'offload.optimizer="host"' \
      offload.overlap=true "${threads[@]}"
  read -r none_ms _ _ _ < <(summarize "$model.$B.none")
  for mode in none host over; do
    read -r step upd waited copied < <(summarize "$model.$B.$mode")
    label=$([ $mode = none ] && echo none || ([ $mode = host ] && echo "host" || echo "host, overlapped"))
    awk -v m="$model" -v b="$B" -v l="$label" -v s="$step" -v u="$upd" -v w="$waited" \
        -v c="$copied" -v n="$none_ms" -v g="${COPY_GBPS:-0}" \
      'BEGIN {copy_ms = g > 0 ? c / (g * 1e9) * 1000 : 0;
              bound = n; if (u > bound) bound = u; if (copy_ms > bound) bound = copy_ms;
              printf "%-6s %2d %-16s %9.1f %11.1f %10.1f %9.3f %11.3f %8.3f\n", m, b, l, s, u, w,
                     c / 1e9, s / bound, s / n}'
  done
done
echo "bound = max(step without offload, host update${COPY_GBPS:+, copied bytes at $COPY_GBPS GB/s})"
