#!/usr/bin/env bash
# What the simulated device (backend = "sim", issue 39) costs the MLP example
# against the cpu backend, at np 1 and 2, on the same configuration
# (configs/mlp_zero3.cfg: stage 3, fp32, 240 samples per step, one OpenMP
# thread per rank): the median ms per step of each backend, and the ratio
# sim / cpu, with the sim's simulated time at its defaults (20 us of launch
# latency per op, ZS_SIM_LAUNCH_US; copies at ZS_SIM_HOST_GBPS and
# ZS_SIM_DEVICE_GBPS), and with all three at 0: what is left is the queue's
# own overhead (an op handed to the device's thread, the host's waits on it).
# The runs are interleaved over ROUNDS rounds so that a disturbance on a
# shared machine hits every arrangement alike; a run's ms per step is the
# median of its progress windows (log_every steps each), the first two
# (the first step alone, and the warm-up) left out.
# Usage: bench_mlp_sim.sh BUILD_DIR [STEPS] [ROUNDS]
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: bench_mlp_sim.sh BUILD_DIR [STEPS] [ROUNDS]}" && pwd)
steps=${2:-200}
rounds=${3:-3}
log_every=20
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ZS_LOG_LEVEL=warn
work=$(mktemp -d /tmp/zs_bench_mlp_sim.XXXXXX)
trap 'rm -rf "$work"' EXIT
trainer=$build/examples/mlp/mlp_train
[ -x "$trainer" ] || { echo "no $trainer: build the mlp_train target" >&2; exit 1; }
# A small evaluation: it is not timed, only waited for.
args=("$src/configs/mlp_zero3.cfg" "app.steps=$steps" "scheduler.total_steps=$steps"
      "app.log_every=$log_every" app.eval_samples=480 app.target_loss=100)

# The median of a log's "| X ms/step" windows after the first two.
median_ms() {
    grep -E '^step ' "$1" | sed -E 's/.*\| ([0-9.]+) ms\/step$/\1/' | tail -n +3 | sort -g |
        awk '{v[NR] = $1} END {if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

# run NAME NP BACKEND [VAR=VALUE ...]: one run, its median into $work/NAME.npNP.ms.
run() {
    local name=$1 np=$2 backend=$3
    shift 3
    local log="$work/$name.np$np.$round.log"
    if ! env "$@" mpirun --oversubscribe --bind-to none -np "$np" "$trainer" "${args[@]}" \
            "backend=$backend" > "$log" 2>&1; then
        echo "mlp_train ($name, np $np) failed:" >&2
        tail -20 "$log" >&2
        exit 1
    fi
    median_ms "$log" >> "$work/$name.np$np.ms"
}

for ((round = 0; round < rounds; round++)); do
    for np in 1 2; do
        run cpu "$np" cpu
        run sim "$np" sim
        run queue "$np" sim ZS_SIM_LAUNCH_US=0 ZS_SIM_HOST_GBPS=0 ZS_SIM_DEVICE_GBPS=0
    done
done

med() { sort -g "$1" | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
cell() { # NAME NP: "median (ratio to cpu)"
    awk -v a="$(med "$work/$1.np$2.ms")" -v c="$(med "$work/cpu.np$2.ms")" \
        'BEGIN {printf "%8.2f  %6.2f", a, a / c}'
}
echo "mlp_train, configs/mlp_zero3.cfg, $steps steps, median of $rounds runs each;" \
     "ms/step and sim / cpu"
printf '%-44s %16s %16s\n' "backend" "np 1" "np 2"
printf '%-44s %16s %16s\n' "cpu" "$(cell cpu 1)" "$(cell cpu 2)"
printf '%-44s %16s %16s\n' "sim, default simulated time (launch 20 us)" "$(cell sim 1)" "$(cell sim 2)"
printf '%-44s %16s %16s\n' "sim, ZS_SIM_LAUNCH_US/HOST_GBPS/DEVICE_GBPS=0" "$(cell queue 1)" "$(cell queue 2)"
echo "each run's median (ms/step):"
for name in cpu sim queue; do
    for np in 1 2; do
        printf '  %-6s np %d: %s\n' "$name" "$np" "$(tr '\n' ' ' < "$work/$name.np$np.ms")"
    done
done
