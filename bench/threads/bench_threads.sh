#!/usr/bin/env bash
# One rank with N threads against N ranks with one thread each, on the demo's
# GPT-2 (configs/gpt2_demo.cfg) with the same 16 sequences per step in total:
# the median step of each arrangement over interleaved runs, and the ratio
# (N ranks x 1 thread step) / (1 rank x N threads step), i.e. the throughput
# of the threads relative to the ranks (issue 19 wants >= 0.9).
# With a second build directory (e.g. of an older commit) its 1 rank x N
# threads runs too, with OPENBLAS_NUM_THREADS=N as a user would have set it.
# Usage: bench_threads.sh BUILD_DIR [STEPS] [ROUNDS] [N] [OLD_BUILD_DIR]
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
source "$src/bench/lib/common.sh"
build=$(cd "${1:?usage: bench_threads.sh BUILD_DIR [STEPS] [ROUNDS] [N] [OLD_BUILD_DIR]}" && pwd)
steps=${2:-30}
rounds=${3:-3}
n=${4:-$(nproc)}
old=${5:-}
[ -z "$old" ] || old=$(cd "$old" && pwd)
total=16
per_rank=$((total / n))
mpirun=(mpirun --oversubscribe --bind-to none)
common=(configs/gpt2_demo.cfg "app.steps=$steps" app.val_every=0 app.log_every=1 app.sample_tokens=0)
cd "$src"

# run NAME BUILD RANKS THREADS BATCH [mpirun args...]
run() {
  local name=$1 dir=$2 ranks=$3 threads=$4 batch=$5
  shift 5
  "${mpirun[@]}" -np "$ranks" -x "OMP_NUM_THREADS=$threads" "$@" "$dir/examples/gpt2/gpt2_train" \
      "${common[@]}" "app.batch_size=$batch" > "$work/$name.$round.log" 2>&1
  median_ms "$work/$name.$round.log" >> "$work/$name.ms"
}
for ((round = 0; round < rounds; round++)); do
  run ranks "$build" "$n" 1 "$per_rank" -x OPENBLAS_NUM_THREADS=1
  run threads "$build" 1 "$n" "$total"
  [ -z "$old" ] || run old_threads "$old" 1 "$n" "$total" -x "OPENBLAS_NUM_THREADS=$n"
done
med() { sort -g "$1" | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
row() { printf '%-48s %-10s %s\n' "$1" "$(med "$work/$2.ms")" "$(tr '\n' ' ' < "$work/$2.ms")"; }
printf '%-48s %-10s %s\n' "arrangement ($total sequences per step)" "median" "ms/step of each run"
row "$n ranks x 1 thread" ranks
row "1 rank x $n threads" threads
[ -z "$old" ] || row "1 rank x $n threads, $old" old_threads
ratio() { awk -v a="$(med "$work/ranks.ms")" -v b="$(med "$work/$1.ms")" 'BEGIN {printf "%.3f", a / b}'; }
echo "throughput, 1 rank x $n threads / $n ranks x 1 thread: $(ratio threads)"
[ -z "$old" ] || echo "throughput, old build's 1 rank x $n threads / $n ranks x 1 thread: $(ratio old_threads)"
grep -h "threading" "$work/threads.0.log" | head -1 || true
