#!/usr/bin/env bash
# Two builds of the GPT-2 trainer side by side on the CPU: is B slower than A?
#
#   bash bench/gpt2/bench_gpt2_ab.sh BUILD_A BUILD_B [ROUNDS] [STEPS] [MODEL]
#
# MODEL is `demo` (the default: configs/gpt2_demo.cfg's model) or `124M`
# (GPT-2 124M with the demo's runtime settings, T 64, B 1, as in
# bench_gpt2.sh).
#
# On a shared machine the step time of one run drifts by tens of percent
# from one minute to the next (other tenants), more than the differences
# worth measuring, so sequential runs of A then B compare noise. Here A and
# B run at the same time, each one rank with one thread pinned to its own
# core (taskset), the demo's model (configs/gpt2_demo.cfg, stage 3), and then
# again with the cores swapped; both see the same neighbours. Each round
# prints both medians (gpt2_train's step times after 2 warm-up steps); the
# last line is the median over rounds of B / A (each round's two core
# assignments combined so that the cores' speeds cancel).
# Needs 2 cores.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
source "$src/bench/lib/common.sh"
a=$(cd "${1:?usage: bench_gpt2_ab.sh BUILD_A BUILD_B [ROUNDS] [STEPS]}" && pwd)
b=$(cd "${2:?usage: bench_gpt2_ab.sh BUILD_A BUILD_B [ROUNDS] [STEPS]}" && pwd)
rounds=${3:-3}
steps=${4:-30}
model=${5:-demo}
config=$src/configs/gpt2_demo.cfg
sizes=()
case $model in
  demo) ;;
  124M)
    # The demo's runtime settings with the preset's sizes (a preset and
    # explicit sizes in one app group are refused).
    config=$work/124M.cfg
    sed -E '/^  (n_layer|n_head|n_embd|vocab|block_size) =/d; s/^app: \{/app: { model = "124M";/' \
      "$src/configs/gpt2_demo.cfg" > "$config"
    sizes=(app.seq_len=64 app.batch_size=1) ;;
  *) echo "bench_gpt2_ab: MODEL is demo or 124M, not '$model'"; exit 2 ;;
esac

# one CORE BUILD LOG
one() {
  taskset -c "$1" mpirun --oversubscribe --bind-to none -np 1 -x OMP_NUM_THREADS=1 \
    -x OPENBLAS_NUM_THREADS=1 "$2/examples/gpt2/gpt2_train" "$config" ${sizes[@]+"${sizes[@]}"} \
    zero.stage=3 app.steps=$steps scheduler.total_steps=$((steps + 1)) \
    scheduler.warmup_steps=1 app.log_every=1 app.val_every=0 app.val_batches=1 \
    app.sample_tokens=0 "app.train_data=$corpus" 'log.level="warn"' > "$3" 2>&1 ||
    { cat "$3"; echo "bench_gpt2_ab: gpt2_train of $2 failed"; exit 1; }
}

printf '%5s %6s %10s %10s\n' round cores "A ms" "B ms"
ratios=()
for round in $(seq "$rounds"); do
  for cores in "0 1" "1 0"; do
    set -- $cores
    one "$1" "$a" "$work/a.log" & pa=$!
    one "$2" "$b" "$work/b.log" & pb=$!
    wait $pa $pb
    ma=$(median_ms "$work/a.log")
    mb=$(median_ms "$work/b.log")
    # Pair A on core c with B on core c (the next half-round has them).
    echo "$round A@$1 B@$2 $ma $mb" >> "$work/pairs"
    printf '%5d %6s %10.1f %10.1f\n' "$round" "A$1 B$2" "$ma" "$mb"
  done
done
# Per round, the geometric mean of B / A over the two core assignments
# (core speed cancels: (B1 / A0) x (B0 / A1) = (B0 / A0) x (B1 / A1)); the
# last line is the median over rounds.
awk '{r[$1] = (r[$1] ? r[$1] : 1) * $5 / $4} END {for (k in r) print sqrt(r[k])}' "$work/pairs" |
  sort -g > "$work/ratios"
while read -r ratio; do printf 'B / A: %.3f\n' "$ratio"; done < "$work/ratios"
awk '{v[NR] = $1} END {printf "B / A, median of %d rounds: %.3f\n", NR,
                            NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}' "$work/ratios"
