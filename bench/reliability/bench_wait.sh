#!/usr/bin/env bash
# What a rank costs while it waits for a stopped peer, and how long after the
# deadline the job ends: np 2, rank 1 SIGSTOPs itself at step 3 (misbehave.c),
# comm.timeout_s = T. Prints, from one run each:
#   - the CPU time of the waiting rank over 3 s of its wait, as a fraction of
#     one core (1.00 = the busy-polling MPI_Wait of Open MPI);
#   - the job's end after launch, and after the deadline.
# Usage: bench/reliability/bench_wait.sh [BUILD_DIR] [T]
set -u
build=${1:-build}
timeout_s=${2:-8}
binary=$build/tests/reliability/misbehave
[ -x "$binary" ] || { echo "bench_wait: build first ($binary is missing)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d /tmp/zs_bench_wait.XXXXXX)
trap 'rm -rf "$work"' EXIT
tck=$(getconf CLK_TCK)
start=$(date +%s%N)
timeout -s KILL $((timeout_s + 30)) mpirun --oversubscribe --bind-to none -np 2 \
  "$binary" sigstop 1 3 "$timeout_s" abort "$work" > "$work/log" 2>&1 &
launcher=$!
sleep 3 # start-up and three steps, then rank 0 waits for the stopped rank 1
fraction=""
for p in $(pgrep -f "misbehave sigstop 1 3 $timeout_s abort $work"); do
  [ "$(cat /proc/$p/comm 2>/dev/null)" = misbehave ] || continue
  [ "$(awk '{print $3}' /proc/$p/stat)" = T ] && continue # the stopped rank
  a=$(awk '{print $14 + $15}' /proc/$p/stat)
  sleep 3
  b=$(awk '{print $14 + $15}' /proc/$p/stat)
  fraction=$(awk -v t=$((b - a)) -v hz="$tck" 'BEGIN {printf "%.3f", t / (3 * hz)}')
done
wait $launcher
rc=$?
end=$(date +%s%N)
elapsed=$(awk -v ns=$((end - start)) 'BEGIN {printf "%.2f", ns / 1e9}')
printf "%-44s %s\n" "waiting rank's CPU, fraction of one core" "${fraction:-n/a}"
printf "%-44s %s\n" "job end after launch (s)" "$elapsed"
printf "%-44s %s\n" "job end after launch / comm.timeout_s" \
  "$(awk -v e="$elapsed" -v t="$timeout_s" 'BEGIN {printf "%.2f", e / t}')"
printf "%-44s %s\n" "exit code (75 = ZS_TIMEOUT_EXIT_CODE)" "$rc"
