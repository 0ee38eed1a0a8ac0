#!/usr/bin/env bash
# Failing together across hosts (issue 38): np 4 of tests/reliability/preempt.c
# on two simulated hosts (scripts/netns-hosts.sh, 2 ranks each); rank 3 (host
# 1) kills itself at step 3. mpirun is told to wait 60 s before its own
# SIGTERM and comm.timeout_s is 120 s, so only the peer watch can end the
# other ranks within the bound: rank 2 sees rank 3's process gone on its own
# host (without any signal: mpirun's daemon on host 1 sends none for
# seconds), and ranks 0 and 1, which cannot see host 1's processes but got
# mpirun's SIGCONT, find rank 2's exit report in the shared report
# directory (or the first of them to end, its neighbour's, naming rank 3
# too). Every survivor's exit report says "terminated", names rank 3,
# and says how it learned. Prints how long after the death the last
# survivor was gone (not asserted beyond the hang guard: timings on a shared
# machine are noise; bench/reliability/bench_fail_together.sh measures).
# Exits 77 when network namespaces cannot be made here (not root).
# Usage: run_fail_together_two_hosts.sh NETNS_HOSTS PREEMPT_BINARY
set -u
netns=$1 binary=$2

why=$(bash "$netns" check 2>&1) || { rc=$?; echo "$why"; exit "$rc"; }
bash "$netns" gc
dir=$(mktemp -d /tmp/zs_fail_together.XXXXXX)
state=''
job=''
cleanup() {
  [ -z "$job" ] || kill -9 "$job" 2> /dev/null
  pkill -9 -f "$dir" 2> /dev/null
  [ -z "$state" ] || bash "$netns" down "$state"
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() { echo "FAIL: $*"; failed=1; }
failed=0

state=$(bash "$netns" up --owner $$) || { echo "FAIL: netns-hosts.sh up exited $?"; exit 1; }
log=$dir/log
bash "$netns" mpirun "$state" --oversubscribe --bind-to none -np 4 \
  --mca odls_base_sigkill_timeout 60 -x OMP_NUM_THREADS \
  "$binary" "$dir" two steps=1000 sleep_ms=40 die_rank=3 die_step=3 \
  "checkpoint.dir=$dir/ckpt" comm.timeout_s=120 > "$log" 2>&1 &
job=$!

pid_of() { grep -a "^rank $1 pid " "$log" | awk '{print $4}'; }
alive() { [ -e "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2> /dev/null; }
for _ in $(seq 1 400); do [ "$(grep -ac '^rank [0-3] pid ' "$log")" -eq 4 ] && break; sleep 0.05; done
dead=$(pid_of 3)
survivors=("$(pid_of 0)" "$(pid_of 1)" "$(pid_of 2)")
[ -n "$dead" ] && [ -n "${survivors[2]}" ] || { cat "$log"; echo "FAIL: the ranks did not start"; exit 1; }
for _ in $(seq 1 600); do alive "$dead" || break; sleep 0.05; done
from=$(date +%s%N)
for _ in $(seq 1 800); do
  left=0
  for p in "${survivors[@]}"; do alive "$p" && left=1; done
  [ "$left" -eq 0 ] && break
  sleep 0.01
done
took=$((($(date +%s%N) - from) / 1000000))
kill -9 "$job" 2> /dev/null
wait "$job" 2> /dev/null
job=''
echo "rank 3 killed on host 1: the other ranks were gone $took ms after it"
[ "$left" -eq 0 ] || fail "ranks still alive 8 s after rank 3 died: $(tail -5 "$log")"

field() { # RANK FIELD
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' \
    "$dir/ckpt/reports/rank-$(printf %05d "$1").json" "$2" 2> /dev/null
}
for r in 0 1 2; do
  [ "$(field $r cause)" = terminated ] && [ "$(field $r peer)" = 3 ] ||
    fail "rank $r's report: $(cat "$dir/ckpt/reports/rank-0000$r.json" 2>&1)"
done
field 2 message | grep -q "rank 3 is dead: its process (pid $dead, on this node) is gone" ||
  fail "rank 2 (host 1) did not see rank 3's process end: $(field 2 message)"
for r in 0 1; do
  # From rank 2's report, or from its neighbour's if that one ended first
  # (which then names rank 3 too).
  field $r message | grep -q "rank 3 is dead: rank [0-2]'s exit report (.*) says \"terminated\" and names it" ||
    fail "rank $r (host 0) did not learn it from a report: $(field $r message)"
done
[ ! -e "$dir/ckpt/reports/rank-00003.json" ] || fail "the killed rank wrote a report"
[ "$failed" -eq 0 ] || { cat "$log"; exit 1; }
echo "PASS"
