#!/usr/bin/env bash
# Overlap of communication with compute (issue 11), on the GPT-2 example at
# np 2, stage 3 (the demo's model, bf16), in one run:
#   compute only   no injected network, collectives synchronous
#   synchronous    injected network, collectives on the calling thread
#   overlapped     injected network, the comm engine's thread (+ prefetch)
#   comm only      synchronous - compute (what the collectives cost alone)
# The network is injected in the comm thread (ZS_COMM_DELAY_US latency per
# collective + bytes / ZS_COMM_DELAY_GBPS), which sleeps and so costs no CPU:
# on 2 cores a real network stack would compete with compute.
# Reports overlapped / max(compute, comm) (1 is perfect overlap) and
# synchronous / overlapped. Then the same over real TCP between two network
# namespaces (scripts/netns-hosts.sh, shaped with tbf) when they can be made.
#
#   bash bench/overlap/bench_overlap.sh [BUILD_DIR] [STEPS] [LATENCY_US] [GBPS]
set -euo pipefail
build=${1:-build}
steps=${2:-12}
latency=${3:-200}
gbps=${4:-0.25}
src=$(cd "$(dirname "$0")/../.." && pwd)
train=$build/examples/gpt2/gpt2_train
source "$src/bench/lib/common.sh"

args=("$src/configs/gpt2_demo.cfg" "app.train_data=$corpus" app.steps=$steps
      scheduler.total_steps=$((steps + 1)) scheduler.warmup_steps=1 app.log_every=1
      app.val_every=0 app.val_batches=1 app.sample_tokens=0 log.level=\"warn\")

# run NAME LAUNCHER... -- extra gpt2_train args
run() {
  local name=$1
  shift
  local launcher=()
  while [ "$1" != "--" ]; do launcher+=("$1"); shift; done
  shift
  "${launcher[@]}" "$train" "${args[@]}" "$@" > "$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; echo "bench_overlap: $name failed"; exit 1; }
  median_ms "$work/$name.log"
}

report() {
  local title=$1 compute=$2 sync=$3 overlapped=$4
  awk -v t="$title" -v c="$compute" -v s="$sync" -v o="$overlapped" 'BEGIN {
    comm = s - c; if (comm < 0) comm = 0; m = c > comm ? c : comm;
    printf "%s\n", t;
    printf "  %-34s %9.1f ms/step\n", "compute only (no network, sync)", c;
    printf "  %-34s %9.1f ms/step\n", "communication only (sync - compute)", comm;
    printf "  %-34s %9.1f ms/step\n", "synchronous", s;
    printf "  %-34s %9.1f ms/step\n", "overlapped", o;
    printf "  overlapped / max(compute, comm) = %.3f   (aim <= 1.15)\n", o / m;
    printf "  synchronous / overlapped        = %.3f\n", s / o }'
}

local_mpi=(mpirun --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)
compute=$(run compute "${local_mpi[@]}" -- comm.overlap=false)
delay=(-x ZS_COMM_DELAY_US=$latency -x ZS_COMM_DELAY_GBPS=$gbps)
sync=$(run sync "${local_mpi[@]}" "${delay[@]}" -- comm.overlap=false)
overlapped=$(run overlapped "${local_mpi[@]}" "${delay[@]}" -- comm.overlap=true)
report "GPT-2 demo model, np 2, stage 3, bf16; injected network: ${latency} us + bytes / ${gbps} Gbit/s per collective" \
       "$compute" "$sync" "$overlapped"

# Real TCP between two namespaces (one rank each), shaped with tbf.
if bash "$src/scripts/netns-hosts.sh" check > "$work/netns.check" 2>&1; then
  mbit=$(awk -v g="$gbps" 'BEGIN {print int(g * 1000)}')
  state=$(bash "$src/scripts/netns-hosts.sh" up --rate "${mbit}mbit" --delay "${latency}us" --best-effort 2> "$work/netns.up") ||
    { cat "$work/netns.up"; echo "TCP between namespaces: could not make them"; exit 0; }
  trap 'bash "$src/scripts/netns-hosts.sh" down "$state" > /dev/null 2>&1; rm -rf "$work"' EXIT
  delay_note=$(grep -E '^ZS_NETNS_DELAY=' "$state/env" 2>/dev/null | cut -d= -f2 || true)
  net_mpi=("$state/mpirun" -np 2 --map-by node --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM)
  net_compute=$(run net_compute "${local_mpi[@]}" -- comm.overlap=false)
  net_sync=$(run net_sync "${net_mpi[@]}" -- comm.overlap=false)
  net_overlapped=$(run net_overlapped "${net_mpi[@]}" -- comm.overlap=true)
  report "the same over TCP between two network namespaces (tbf ${gbps} Gbit/s; netem delay: ${delay_note:-applied})" \
         "$net_compute" "$net_sync" "$net_overlapped"
else
  echo "TCP between namespaces: skipped ($(tail -1 "$work/netns.check"))"
fi
