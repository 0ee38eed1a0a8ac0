#!/usr/bin/env bash
# Failing together: how long after one rank dies every other rank is gone,
# and which of them left an exit report (issue 38, item 5). mlp_train runs
# under mpirun (np ranks, a long run); once it trains, one rank is ended by
# the chosen way and the other ranks' processes are watched every 2 ms.
# Each trial runs twice, with the peer watch (core/peer_watch.h) and
# without it (ZS_PEER_WATCH_OFF=1: the runtime as it was before issue 38).
# Prints one line per trial and run, then the medians and their ratio, from
# one run of this script:
#   gone_s     seconds from the end of the victim to the last rank gone
#   reports    exit reports written by the surviving ranks (of np - 1)
#   mpirun_s   seconds from the end of the victim to mpirun's exit
# Usage: bench/reliability/bench_fail_together.sh [BUILD_DIR] [NP] [TRIALS] [HOW] [STOP_SIGNAL]
#   HOW: kill9 (SIGKILL to the rank, the default) | abort (SIGABRT: the rank
#   ends as abort() ends it); STOP_SIGNAL: job.stop_signal (USR1, the
#   default, or none: no handler of SIGTERM either)
set -u
build=${1:-build}
np=${2:-4}
trials=${3:-5}
how=${4:-kill9}
stop_signal=${5:-USR1}
here=$(cd "$(dirname "$0")/../.." && pwd)
binary=$build/examples/mlp/mlp_train
[ -x "$binary" ] || { echo "bench_fail_together: build first ($binary is missing)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d /tmp/zs_bench_fail.XXXXXX)
trap 'pkill -KILL -f "$work" 2>/dev/null; rm -rf "$work"' EXIT

# The rank processes of this trial, as "pid rank" lines.
ranks() {
  for p in $(pgrep -f "mlp_train .*$1"); do
    [ "$(cat /proc/$p/comm 2>/dev/null)" = mlp_train ] || continue
    r=$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ -n "$r" ] && echo "$p $r"
  done
}

now() { date +%s%N; }

printf "%-6s %-6s %-8s %-8s %-9s %s\n" trial watch gone_s mpirun_s reports exit
results_on=()
results_off=()
for t in $(seq 1 "$trials"); do
 for watch in on off; do
  dir=$work/t$t-$watch
  mkdir -p "$dir"
  off=()
  [ "$watch" = off ] && off=(-x ZS_PEER_WATCH_OFF=1)
  mpirun --oversubscribe --bind-to none -np "$np" -x OMP_NUM_THREADS=1 "${off[@]}" \
    "$binary" "$here/configs/mlp_zero3.cfg" app.steps=100000 scheduler.total_steps=100000 \
    app.target_loss=100 app.log_every=1000000 "job.report_dir=\"$dir/reports\"" \
    "job.stop_signal=\"$stop_signal\"" "checkpoint.dir=\"$dir/ckpt\"" > "$dir/log" 2>&1 &
  launcher=$!
  # Until every rank trains (its step line or a second of steps).
  for _ in $(seq 1 200); do
    [ "$(ranks "$dir" | wc -l)" -eq "$np" ] && break
    sleep 0.05
  done
  sleep 1.5
  victim=$(ranks "$dir" | awk '$2 == 1 {print $1}')
  survivors=$(ranks "$dir" | awk '$2 != 1 {print $1}')
  t0=$(now)
  if [ "$how" = abort ]; then kill -ABRT "$victim"; else kill -KILL "$victim"; fi
  gone=""
  mpirun_end=""
  for _ in $(seq 1 10000); do
    alive=0
    for p in $survivors; do
      # The state is field 3 (the command name, mlp_train, has no space).
      s=''
      { read -r _ _ s _ < "/proc/$p/stat"; } 2> /dev/null
      [ -n "$s" ] && [ "$s" != Z ] && alive=1
    done
    [ -z "$gone" ] && [ "$alive" -eq 0 ] && gone=$(now)
    [ -z "$mpirun_end" ] && ! kill -0 "$launcher" 2> /dev/null && mpirun_end=$(now)
    [ -n "$gone" ] && [ -n "$mpirun_end" ] && break
    sleep 0.002
  done
  wait "$launcher"
  rc=$?
  n_reports=$(ls "$dir/reports" 2>/dev/null | grep -c '^rank-.*\.json$')
  g=$(awk -v a="$t0" -v b="${gone:-0}" 'BEGIN {printf "%.3f", (b - a) / 1e9}')
  m=$(awk -v a="$t0" -v b="${mpirun_end:-0}" 'BEGIN {printf "%.3f", (b - a) / 1e9}')
  printf "%-6s %-6s %-8s %-8s %-9s %s\n" "$t" "$watch" "$g" "$m" "$n_reports/$((np - 1))" "$rc"
  if [ "$watch" = on ]; then results_on+=("$g"); else results_off+=("$g"); fi
 done
done
median() { printf "%s\n" "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }
on=$(median "${results_on[@]}")
off=$(median "${results_off[@]}")
printf "median gone_s over %d trials (%s, np %d, job.stop_signal %s): watch on %s, off %s; off / on = %s\n" \
  "$trials" "$how" "$np" "$stop_signal" "$on" "$off" \
  "$(awk -v a="$off" -v b="$on" 'BEGIN {printf "%.1f", (b > 0 ? a / b : 0)}')"
