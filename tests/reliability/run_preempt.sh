#!/usr/bin/env bash
# Stops, ends and fences through real processes (issue 29), driving
# preempt.c under mpirun:
#   - SIGUSR1 to one rank (np 3, 2 micro-steps per step, raised between the
#     micro-steps): every rank stops after the same step with
#     ZS_STOPPED_EXIT_CODE (76), the checkpoint verifies, every rank's exit
#     report says "stopped", and resuming to the end gives the bits of an
#     uninterrupted run (parameters and every saved tensor's hash);
#   - SIGUSR1 without checkpoint.dir: the agreed stop without a checkpoint
#     (ZS_TERMINATED_EXIT_CODE, 78), the reports (job.report_dir) say so;
#   - SIGUSR1 to mpirun (forwarded to every rank): the same;
#   - SIGTERM to every rank at once, all alive (what scancel does): the
#     peer watch finds no dead rank, the vote commits the checkpoint, 76;
#   - checkpoint.every_seconds: checkpoints appear without checkpoint.every,
#     and the training is bitwise the uninterrupted run's;
#   - a rank killed with SIGKILL (comm.timeout_s = 120, mpirun told to wait
#     60 s before its own SIGTERM): the peer watch ends every other rank at
#     once on mpirun's SIGCONT (issue 38: 2 s before, and no reports), each
#     report says "terminated" and names the dead rank, nothing is committed;
#   - the same with the watch off (ZS_PEER_WATCH_OFF=1, as when the dead rank
#     was alone on another machine), then SIGTERM to the others
#     (job.term_grace_s = 2): the job ends within seconds, commits nothing,
#     leaves nothing that looks committed, and the reports say "terminated";
#   - a rank stopped with SIGSTOP (comm.timeout_s = 3): exit code 75, and the
#     reports name the silent rank and its host;
#   - a second SIGUSR1 ends the process at once (report "terminated");
#   - the job generation fence: a higher generation written into the root
#     mid-run makes the next save fail on every rank with nothing committed,
#     and a new start of the old generation fails at zs_build; zs-ckpt
#     verify and info still read the root (its generation file and reports/
#     directory are not checkpoints);
#   - ranks end when mpirun is killed with SIGKILL (parent-death signal).
# Usage: run_preempt.sh MPIRUN PREEMPT_BINARY ZS_CKPT_BINARY
set -u
mpirun=$1
binary=$2
zsckpt=$3
work=$(mktemp -d /tmp/zs_preempt.XXXXXX)
leftover=()
cleanup() {
  for p in "${leftover[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
passed=0 failed=0
check() { # name, condition result (0 = ok), detail
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else echo "FAIL $1: $3"; failed=$((failed + 1)); fi
}
launch=("$mpirun" --oversubscribe --bind-to none)
host=$(hostname)

# run NP TAG ARGS... (in the foreground) -> rc, log
run() {
  local np=$1 tag=$2
  shift 2
  log="$work/$tag.log"
  # The outer timeout only keeps a regression from hanging the suite.
  timeout -s KILL 60 "${launch[@]}" -np "$np" "$binary" "$work" "$tag" "$@" > "$log" 2>&1
  rc=$?
}

# start NP TAG ARGS... in the background -> job (mpirun's pid), log
start() {
  local np=$1 tag=$2
  shift 2
  log="$work/$tag.log"
  "${launch[@]}" -np "$np" "$binary" "$work" "$tag" "$@" > "$log" 2>&1 &
  job=$!
  leftover+=("$job")
}

# wait_for PATTERN SECONDS: until the log has a line matching PATTERN.
wait_for() {
  local i
  for ((i = 0; i < $2 * 20; i++)); do
    grep -aq "$1" "$log" && return 0
    sleep 0.05
  done
  return 1
}

# alive PID: running (a zombie waiting to be reaped has ended).
alive() { [ -e "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
# until_gone SECONDS PID...: waits (polling every 10 ms) until none of the
# processes runs, at most SECONDS; sets `took` to the milliseconds waited.
until_gone() {
  local limit=$(($1 * 100)) i p left from
  shift
  from=$(date +%s%N)
  for ((i = 0; i < limit; i++)); do
    left=0
    for p in "$@"; do alive "$p" && left=1; done
    [ "$left" -eq 0 ] && break
    sleep 0.01
  done
  took=$((($(date +%s%N) - from) / 1000000))
}
digest_of() { grep -ao "finished step [0-9]* digest [0-9a-f]*" "$1" | awk '{print $5}'; }
pid_of() { grep -a "^rank $2 pid " "$1" | awk '{print $4}'; }
steps_in() { ls "$1" 2>/dev/null | grep -c '^step_'; }

# report_field DIR RANK FIELD: one field of a rank's exit report, as JSON.
report_field() {
  python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))[sys.argv[2]]))' \
    "$1/rank-$(printf %05d "$2").json" "$3" 2>/dev/null
}

# check_reports NAME DIR CAUSE EXIT_CODE RANKS...: each rank's report
# parses, has every contract field, and says CAUSE and EXIT_CODE.
check_reports() {
  local name=$1 dir=$2 cause=$3 code=$4
  shift 4
  for r in "$@"; do
    local file="$dir/rank-$(printf %05d "$r").json"
    python3 - "$file" "$cause" "$code" "$r" <<'EOF'
import json, sys
path, cause, code, rank = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
r = json.load(open(path))
fields = ["version", "cause", "exit_code", "rank", "world_size", "host", "addresses", "pid",
          "generation", "step", "last_committed_step", "checkpoint_dir", "peer", "peer_host",
          "peer_addresses", "op", "message", "time"]
missing = [f for f in fields if f not in r]
assert not missing, f"missing fields {missing}"
assert r["version"] == 1 and r["cause"] == cause and r["exit_code"] == code and r["rank"] == rank, r
assert isinstance(r["addresses"], list) and isinstance(r["time"], float), r
EOF
    check "$name: rank $r's report says $cause, exit code $code" $? "$(cat "$file" 2>&1)"
  done
}

# same_tensors A B: two checkpoints hold the same tensors with the same hashes.
same_tensors() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
def tensors(d):
    m = json.load(open(d + "/step_00000010/manifest.json"))
    return sorted((t["key"], t["offset"], t["count"], t["xxh3"]) for t in m["tensors"])
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert a == b, f"{len(a)} vs {len(b)} tensors; first difference: " + str(
    next((x, y) for x, y in zip(a, b) if x != y) if len(a) == len(b) else "count")
EOF
}

base=(accumulate=2 steps=10)

# The uninterrupted run every stopped and resumed one must match.
run 3 ref "${base[@]}" checkpoint.dir="$work/ref" final="$work/ref-final"
ref=$(digest_of "$log")
[ "$rc" -eq 0 ] && [ -n "$ref" ]
check "uninterrupted run" $? "exit $rc: $(tail -5 "$log")"

# --- SIGUSR1 to one rank, between the two micro-steps of step 4's window.
dir="$work/one"
run 3 one "${base[@]}" checkpoint.dir="$dir" signal_rank=1 signal_step=4
[ "$rc" -eq 76 ]
check "one rank signalled: exit code 76" $? "exit $rc: $(tail -5 "$log")"
[ "$(grep -ac 'stopped after step 4 code 76 committed 4' "$log")" -eq 3 ]
check "one rank signalled: every rank stops after step 4 with 76" $? "$(grep -a stopped "$log")"
"$zsckpt" verify --quiet "$dir" > "$work/verify.log" 2>&1
check "one rank signalled: the checkpoint verifies" $? "$(cat "$work/verify.log")"
[ -d "$dir/step_00000004" ]
check "one rank signalled: step 4 committed" $? "$(ls "$dir")"
check_reports "one rank signalled" "$dir/reports" stopped 76 0 1 2
[ "$(report_field "$dir/reports" 0 last_committed_step)" = 4 ] &&
  report_field "$dir/reports" 1 message | grep -q "this rank: SIGUSR1"
check "one rank signalled: reports name the step and the signal" $? "$(cat "$dir/reports/rank-00001.json")"
run 3 one-resume "${base[@]}" checkpoint.dir="$dir" final="$work/one-final"
[ "$rc" -eq 0 ] && [ "$(digest_of "$log")" = "$ref" ]
check "one rank signalled: resumed to the end, the parameters are the uninterrupted run's" $? \
  "exit $rc, digest $(digest_of "$log") vs $ref: $(tail -3 "$log")"
out=$(same_tensors "$work/ref-final" "$work/one-final" 2>&1)
check "one rank signalled: every saved tensor is the uninterrupted run's" $? "$out"

# --- A stop without checkpoint.dir: the agreed stop, no checkpoint, 78.
run 2 nodir steps=6 signal_rank=0 signal_step=2 checkpoint.dir='""' job.report_dir="$work/nodir"
[ "$rc" -eq 78 ] && [ "$(grep -ac 'stopped after step 2 code 78 committed -1' "$log")" -eq 2 ]
check "no checkpoint.dir: every rank stops after step 2 with 78" $? "exit $rc: $(tail -5 "$log")"
check_reports "no checkpoint.dir" "$work/nodir" stopped 78 0 1
report_field "$work/nodir" 0 message | grep -q "no checkpoint was saved"
check "no checkpoint.dir: the report says no checkpoint" $? "$(cat "$work/nodir/rank-00000.json")"

# --- SIGUSR1 to mpirun, which forwards it to every rank.
dir="$work/all"
start 3 all "${base[@]}" checkpoint.dir="$dir" sleep_ms=80
wait_for "rank 0: step 2" 20
kill -USR1 "$job"
wait "$job"
rc=$?
[ "$rc" -eq 76 ]
check "every rank signalled: exit code 76" $? "exit $rc: $(tail -5 "$log")"
stops=$(grep -ao 'stopped after step [0-9]* code 76' "$log" | sort -u)
[ "$(grep -ac 'stopped after step' "$log")" -eq 3 ] && [ "$(echo "$stops" | wc -l)" -eq 1 ]
check "every rank signalled: all stop after the same step" $? "$(grep -a stopped "$log")"
"$zsckpt" verify --quiet "$dir" > "$work/verify.log" 2>&1
check "every rank signalled: the checkpoint verifies" $? "$(cat "$work/verify.log")"
check_reports "every rank signalled" "$dir/reports" stopped 76 0 1 2
run 3 all-resume "${base[@]}" checkpoint.dir="$dir"
[ "$rc" -eq 0 ] && [ "$(digest_of "$log")" = "$ref" ]
check "every rank signalled: resumed to the end, bitwise the uninterrupted run" $? \
  "exit $rc, digest $(digest_of "$log") vs $ref"

# --- checkpoint.every_seconds without checkpoint.every.
dir="$work/timed"
run 3 timed "${base[@]}" checkpoint.dir="$dir" sleep_ms=40 checkpoint.every_seconds=0.3
[ "$rc" -eq 0 ] && [ "$(digest_of "$log")" = "$ref" ]
check "every_seconds: bitwise the run without it" $? "exit $rc, digest $(digest_of "$log") vs $ref"
[ "$(steps_in "$dir")" -ge 1 ]
check "every_seconds: checkpoints were saved" $? "$(ls "$dir")"

# --- SIGTERM to every rank, all alive (scancel, a container stop): the
# peer watch looks and finds nobody dead; the vote's checkpoint stands.
dir="$work/term-all"
start 3 term-all "${base[@]}" checkpoint.dir="$dir" sleep_ms=80
wait_for "rank 0: step 2" 20
kill -TERM $(pid_of "$log" 0) $(pid_of "$log" 1) $(pid_of "$log" 2)
wait "$job"
rc=$?
[ "$rc" -eq 76 ] && [ "$(grep -ac 'stopped after step' "$log")" -eq 3 ]
check "SIGTERM to every rank: the agreed stop, exit code 76" $? "exit $rc: $(tail -5 "$log")"
"$zsckpt" verify --quiet "$dir" > "$work/verify.log" 2>&1
check "SIGTERM to every rank: the checkpoint verifies" $? "$(cat "$work/verify.log")"
check_reports "SIGTERM to every rank" "$dir/reports" stopped 76 0 1 2

# --- A rank killed: the peer watch ends the others at once. mpirun's own
# SIGTERM would come 60 s after its SIGCONT and comm.timeout_s is 120 s, so
# only the watch ends them within the bound.
dir="$work/dead"
launch=("$mpirun" --oversubscribe --bind-to none --mca odls_base_sigkill_timeout 60)
start 3 dead steps=1000 sleep_ms=40 checkpoint.dir="$dir" die_rank=2 die_step=3 \
  comm.timeout_s=120
launch=("$mpirun" --oversubscribe --bind-to none)
wait_for "^rank 2 pid" 20
dead=$(pid_of "$log" 2)
survivors=("$(pid_of "$log" 0)" "$(pid_of "$log" 1)")
leftover+=("${survivors[@]}")
until_gone 20 "$dead"
until_gone 8 "${survivors[@]}"
kill -9 "$job" 2>/dev/null
wait "$job" 2>/dev/null
echo "a rank killed: the other ranks were gone $took ms after it"
[ "$took" -le 8000 ]
check "a rank killed: the others end by themselves (peer watch), long before mpirun's SIGTERM" \
  $? "took $took ms: $(tail -5 "$log")"
check_reports "a rank killed" "$dir/reports" terminated 78 0 1
for r in 0 1; do
  [ "$(report_field "$dir/reports" $r peer)" = 2 ] &&
    report_field "$dir/reports" $r message | grep -q "rank 2 is dead: its process (pid $dead, on this node) is gone"
  check "a rank killed: rank $r's report names the dead rank 2 (pid $dead)" $? \
    "$(cat "$dir/reports/rank-0000$r.json" 2>&1)"
done
[ "$(steps_in "$dir")" -eq 0 ] && [ ! -e "$dir/latest" ] && [ ! -e "$dir/reports/rank-00002.json" ]
check "a rank killed: nothing committed, the killed rank wrote nothing" $? "$(ls -a "$dir" "$dir/reports")"

# --- A rank killed, the watch off, then SIGTERM: end within the grace,
# commit nothing.
dir="$work/term"
launch=("$mpirun" --oversubscribe --bind-to none --mca odls_base_sigkill_timeout 60
        -x ZS_PEER_WATCH_OFF=1)
start 3 term steps=1000 sleep_ms=40 checkpoint.dir="$dir" die_rank=2 die_step=3 \
  job.term_grace_s=2 comm.timeout_s=120
launch=("$mpirun" --oversubscribe --bind-to none)
wait_for "^rank 2 pid" 20
dead=$(pid_of "$log" 2)
until_gone 20 "$dead"
survivors=("$(pid_of "$log" 0)" "$(pid_of "$log" 1)")
leftover+=("${survivors[@]}")
kill -TERM "${survivors[@]}" 2>/dev/null
until_gone 20 "${survivors[@]}"
# mpirun itself sleeps out odls_base_sigkill_timeout before it exits.
kill -9 "$job" 2>/dev/null
wait "$job" 2>/dev/null
[ "$took" -le 8000 ]
check "SIGTERM after a dead rank: the ranks end within 8 s (grace 2 s, comm.timeout_s 120)" $? \
  "took $took ms: $(tail -5 "$log")"
[ "$(steps_in "$dir")" -eq 0 ] && [ ! -e "$dir/latest" ]
check "SIGTERM after a dead rank: nothing committed" $? "$(ls -a "$dir")"
check_reports "SIGTERM after a dead rank" "$dir/reports" terminated 78 0 1
report_field "$dir/reports" 0 message | grep -q "grace after SIGTERM ran out"
check "SIGTERM after a dead rank: the wait ended at the grace" $? "$(cat "$dir/reports/rank-00000.json")"
[ ! -e "$dir/reports/rank-00002.json" ]
check "SIGTERM after a dead rank: the killed rank wrote nothing" $? "$(ls "$dir/reports")"

# --- A stopped rank: the deadline ends the job and the reports name it.
dir="$work/stop"
run 3 stop steps=6 checkpoint.dir="$dir" stop_rank=2 stop_step=3 comm.timeout_s=3
[ "$rc" -eq 75 ]
check "SIGSTOP: exit code 75" $? "exit $rc: $(tail -5 "$log")"
check_reports "SIGSTOP" "$dir/reports" timeout 75 0 1
for r in 0 1; do
  [ "$(report_field "$dir/reports" $r peer)" = 2 ] &&
    [ "$(report_field "$dir/reports" $r peer_host)" = "\"$host\"" ] &&
    [ "$(report_field "$dir/reports" $r peer_addresses)" = \
      "$(report_field "$dir/reports" $r addresses)" ]
  check "SIGSTOP: rank $r's report names rank 2 and its host" $? \
    "$(cat "$dir/reports/rank-0000$r.json")"
done

# --- A second signal ends the process at once.
dir="$work/twice"
run 2 twice steps=6 checkpoint.dir="$dir" signal_rank=1 signal_step=3 twice=1
[ "$rc" -ne 0 ] && [ "$rc" -ne 76 ] && [ "$(steps_in "$dir")" -eq 0 ]
check "second signal: the job ends without a checkpoint" $? "exit $rc: $(ls "$dir"; tail -5 "$log")"
report_field "$dir/reports" 1 message | grep -q "a second signal (SIGUSR1) after SIGUSR1"
check "second signal: rank 1's report says so" $? "$(cat "$dir/reports/rank-00001.json" 2>&1)"
check_reports "second signal" "$dir/reports" terminated 78 1

# --- The job generation fence.
dir="$work/fence"
run 2 fence steps=8 checkpoint.dir="$dir" checkpoint.every=2 job.generation=1 fence_step=3
message="belongs to job generation 2; this job is generation 1 (an old job fenced out by zs-run); nothing committed"
[ "$rc" -ne 0 ] && [ "$(grep -a FAILED "$log" | grep -c "$message")" -eq 2 ]
check "fence: the save refuses on every rank" $? "exit $rc: $(tail -5 "$log")"
[ "$(ls "$dir" | grep '^step_')" = step_00000002 ] && [ "$(cat "$dir/latest")" = step_00000002 ]
check "fence: nothing committed after the generation changed" $? "$(ls -a "$dir")"
check_reports "fence" "$dir/reports" failed 1 0 1
"$zsckpt" verify --quiet "$dir" > "$work/verify.log" 2>&1 &&
  "$zsckpt" info "$dir" > "$work/info.log" 2>&1
check "fence: zs-ckpt verify and info read a root with generation and reports/" $? \
  "$(cat "$work/verify.log" "$work/info.log")"
run 2 fence-again steps=8 checkpoint.dir="$dir" job.generation=1
[ "$rc" -ne 0 ] && [ "$(grep -a "FAILED.*in zs_build" "$log" | grep -c "belongs to job generation 2")" -eq 2 ]
check "fence: the old generation cannot start again" $? "exit $rc: $(tail -5 "$log")"

# --- Ranks end when mpirun dies.
start 2 orphan steps=100000 sleep_ms=50 checkpoint.dir="$work/orphan"
wait_for "^rank 1 pid" 20 && wait_for "^rank 0 pid" 5
ranks=("$(pid_of "$log" 0)" "$(pid_of "$log" 1)")
leftover+=("${ranks[@]}")
sleep 0.3
kill -9 "$job"
sleep 1
still=""
for p in "${ranks[@]}"; do alive "$p" && still="$still $p"; done
[ -z "$still" ]
check "ranks are gone 1 s after mpirun's SIGKILL" $? "still alive:$still"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
