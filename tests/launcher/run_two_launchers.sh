#!/usr/bin/env bash
# Two zs-run launchers on one checkpoint directory (issue 38): generations
# come from the directory, never twice the same; the older launcher stops
# once the directory names a newer generation; neither launcher's clean-up
# touches the other's job. The program is flaky.sh through rank.sh (each
# rank's pid, generation and report directory in a file), 2 ranks under
# mpirun on this machine, so no network namespaces are needed. Launcher A is
# held with SIGSTOP while B takes over, so that each clean-up provably runs
# while the other launcher's ranks are alive.
#   1. while A's job runs: B takes generation 2, its job fails, B cleans up
#      and relaunches as generation 3 (A's ranks live on); A, continued,
#      sees generation 3, ends its own job and stops with exit code 79 and a
#      "superseded" record (B's ranks live on); B finishes.
#   2. before A relaunches: A's job fails while B's generation 2 runs; A,
#      continued, stops without launching anything.
# Usage: run_two_launchers.sh ZS_RUN
ZS_RUN=$1
set -u
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/zs_two_launchers.XXXXXX)
launchers=()
cleanup() {
    local p
    for p in "${launchers[@]}"; do kill -CONT "$p" 2> /dev/null; kill -9 "$p" 2> /dev/null; done
    # Ranks left by a failed check: every process started with a report
    # directory in this test's directory.
    for p in $(grep -l "ZS_REPORT_DIR=$work/" /proc/[0-9]*/environ 2> /dev/null | cut -d/ -f3); do
        kill -9 "$p" 2> /dev/null
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
    echo "FAIL: $*"
    for f in "$work"/*.log; do echo "--- $f"; tail -20 "$f"; done
    exit 1
}
export OMP_NUM_THREADS=1

# start NAME ROOT PIDS [VAR=value...] — zs-run in the background on ROOT,
# every rank through rank.sh (pid files in PIDS); its pid in $last.
start() {
    local name=$1 root=$2 pids=$3
    shift 3
    mkdir -p "$pids"
    env FLAKY_GEN= FLAKY_RANK=1 FLAKY_FAIL_WHEN= FLAKY_FINISH_WHEN= "$@" \
        python3 "$ZS_RUN" --hosts localhost:2 --mpirun-args "--oversubscribe --bind-to none" \
        -x FLAKY_GEN -x FLAKY_RANK -x FLAKY_FAIL_WHEN -x FLAKY_FINISH_WHEN \
        --checkpoint-dir "$root" --log "$work/$name.jsonl" --backoff 0.1 --probe none \
        --no-overrides -- sh "$here/rank.sh" "$pids" sh "$here/flaky.sh" > "$work/$name.log" 2>&1 &
    last=$!
    launchers+=("$last")
}
# held NAME ROOT PIDS [VAR=value...] — start the launcher, wait for its
# generation 1's ranks and hold the launcher with SIGSTOP (its mpirun and
# ranks run on); its pid in $a, its ranks' in $a_ranks.
held() {
    start "$@"
    a=$last
    ranks "$3" 1
    a_ranks=$ranks
    kill -STOP "$a"
}
# ranks PIDS GEN — until both ranks of that generation recorded their pids
# (20 s at most); their pids in $ranks.
ranks() {
    local i
    for i in $(seq 200); do
        [ -f "$1/g$2.r0" ] && [ -f "$1/g$2.r1" ] && break
        sleep 0.1
    done
    [ -f "$1/g$2.r0" ] && [ -f "$1/g$2.r1" ] || fail "generation $2's ranks never started"
    ranks="$(cut -d' ' -f1 "$1/g$2.r0") $(cut -d' ' -f1 "$1/g$2.r1")"
}
alive() { # PID...: every one still runs (a zombie has ended)
    local p
    for p in "$@"; do
        [ -e "/proc/$p" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$p/status" 2> /dev/null ||
            return 1
    done
}
children() { # PID: the pids of its child processes (from /proc: no procps needed)
    local f st fields
    for f in /proc/[0-9]*/stat; do
        st=$(cat "$f" 2> /dev/null) || continue
        read -r -a fields <<< "${st##*) }"   # after the command name, which may hold spaces
        [ "${fields[1]}" = "$1" ] && echo "${st%% *}"
    done
}
gone() { # PID...: none runs any more, waiting 10 s at most
    local i p left
    for i in $(seq 100); do
        left=0
        for p in "$@"; do alive "$p" && left=1; done
        [ "$left" = 0 ] && return 0
        sleep 0.1
    done
    return 1
}
# finish PID NAME WANT — waits for the launcher (20 s at most) and checks its exit code.
finish() {
    local i
    for i in $(seq 200); do kill -0 "$1" 2> /dev/null || break; sleep 0.1; done
    kill -0 "$1" 2> /dev/null && fail "$2 still runs 20 s after it should have ended"
    wait "$1"
    local rc=$?
    [ "$rc" = "$3" ] || fail "$2 exited $rc, expected $3"
}
field() { # LOG EVENT FIELD — FIELD of the last EVENT record of a restart log
    python3 -c 'import json,sys
recs=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]
recs=[r for r in recs if r["event"]==sys.argv[2]]
v=recs[-1].get(sys.argv[3]) if recs else "NO-EVENT"
print(json.dumps(v) if not isinstance(v,str) else v)' "$@"
}
# generations LOG — the generations a launcher launched, from its restart log.
generations() {
    python3 -c 'import json,sys
print(*[r["generation"] for r in map(json.loads, open(sys.argv[1])) if r["event"] in ("start", "restart")])' "$1"
}

echo "== 1. superseded while its job runs"
t0=$(date +%s%N)
held A "$work/ckpt" "$work/p1" FLAKY_GEN=0 FLAKY_FINISH_WHEN="$work/never"
start B "$work/ckpt" "$work/p1" FLAKY_GEN=2 FLAKY_FAIL_WHEN="$work/t1" \
    FLAKY_FINISH_WHEN="$work/t2"
b=$last
ranks "$work/p1" 2
touch "$work/t1"   # B's generation 2 fails: B cleans up and relaunches
ranks "$work/p1" 3
b_ranks=$ranks
alive $a_ranks || fail "B's clean-up of its generation 2 ended A's ranks ($a_ranks)"
kill -CONT "$a"
finish "$a" "launcher A" 79
[ "$(field "$work/A.jsonl" superseded generation)" = 1 ] &&
    [ "$(field "$work/A.jsonl" superseded newer_generation)" = 3 ] ||
    { cat "$work/A.jsonl"; fail "A's log has no superseded record of generation 1 by 3"; }
grep -q "superseded: .*while its job ran" "$work/A.log" || fail "A did not say why it stopped"
gone $a_ranks || fail "A left its own ranks ($a_ranks) running"
alive $b_ranks || fail "A's clean-up ended B's ranks ($b_ranks)"
touch "$work/t2"
finish "$b" "launcher B" 0
[ "$(generations "$work/A.jsonl")" = 1 ] && [ "$(generations "$work/B.jsonl")" = "2 3" ] ||
    fail "generations launched: A '$(generations "$work/A.jsonl")', B '$(generations "$work/B.jsonl")'; expected 1 and 2 3"
# Each generation's ranks ran with the report directory of the launcher
# that took it: gen-NNNNNN-<that launcher's id>.
for g in 1 2 3; do
    owner=A
    [ "$g" = 1 ] || owner=B
    id=$(field "$work/$owner.jsonl" start launcher)
    dir=$(cut -d' ' -f4 "$work/p1/g$g.r0")
    [ "$(basename "$dir")" = "gen-00000$g-$id" ] ||
        fail "generation $g ran with report directory $dir, not gen-00000$g-$id of launcher $owner"
done
[ "$(cat "$work/ckpt/generation")" = 3 ] || fail "the root names generation $(cat "$work/ckpt/generation"), not 3"
echo "A stopped with 79 (superseded by 3), B ran 2 and 3 and finished;" \
     "no clean-up touched the other's ranks ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"

echo "== 2. superseded before relaunching"
t0=$(date +%s%N)
held A2 "$work/ckpt2" "$work/p2" FLAKY_GEN=1 FLAKY_FAIL_WHEN="$work/t3"
start B2 "$work/ckpt2" "$work/p2" FLAKY_GEN=0 FLAKY_FINISH_WHEN="$work/t4"
b=$last
ranks "$work/p2" 2
b_ranks=$ranks
touch "$work/t3"   # A's job fails while A is held
gone $a_ranks || fail "A2's job did not end after its rank failed"
# and A2's mpirun too (a zombie while A2 is held): otherwise A2, continued,
# may find its job still running and stop "while its job ran" instead.
gone $(children "$a") || fail "A2's mpirun did not end after its job failed"
kill -CONT "$a"
finish "$a" "launcher A2" 79
grep -q "superseded: .*after its job failed" "$work/A2.log" || fail "A2 did not say why it stopped"
[ ! -e "$work/p2/g3.r0" ] || fail "A2 relaunched (generation 3) although superseded"
[ "$(generations "$work/A2.jsonl")" = 1 ] || fail "A2 launched $(generations "$work/A2.jsonl")"
alive $b_ranks || fail "A2's clean-up ended B2's ranks ($b_ranks)"
touch "$work/t4"
finish "$b" "launcher B2" 0
echo "A2 stopped with 79 before relaunching, B2 finished" \
     "($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
echo "1 passed, 0 failed"
