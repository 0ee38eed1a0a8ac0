#!/usr/bin/env bash
# mlp_train's exit codes for a launcher (issue 38), at np 2:
#   1. a stop signal: SIGUSR1 to mpirun (which forwards it to both ranks) in
#      the middle of a long run ends the job at the next optimizer step with
#      ZS_STOPPED_EXIT_CODE (76), after the runtime committed the checkpoint
#      of that step; zs-ckpt verify accepts it, and the step the program
#      printed is the step committed. Before the fix the runtime committed
#      and logged "exit with 76" while training went on.
#   2. a configuration it refuses (a missing file, an unknown app key, both
#      before zs_create; a global batch 2 ranks do not divide, after it)
#      exits ZS_CONFIG_EXIT_CODE (64) with every rank's exit report of cause
#      "config" in ZS_REPORT_DIR, carrying the message. Before the fix it
#      exited 1 with no report, which a launcher blamed on the host.
# Usage: run_exit_codes.sh MPIRUN MLP_TRAIN CONFIG ZS_CKPT
set -u
mpirun=$1 trainer=$2 config=$3 zsckpt=$4
work=$(mktemp -d /tmp/zs_mlp_stop.XXXXXX)
job=''
mpirun=("$mpirun" --oversubscribe --bind-to none -np 2)
cleanup() {
    [ -z "$job" ] || kill -9 "$job" 2> /dev/null
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ ! -f "$work/run.log" ] || sed 's/^/    /' "$work/run.log" | tail -30; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

echo "== 1. a stop signal"
# Far more steps than the test waits for: only a stop ends it in time.
"${mpirun[@]}" "$trainer" "$config" "checkpoint.dir=$work/ckpt" \
    app.steps=1000000 app.log_every=1 > "$work/run.log" 2>&1 &
job=$!
for _ in $(seq 300); do
    grep -qE '^step +5 ' "$work/run.log" && break
    kill -0 "$job" 2> /dev/null || fail "mlp_train ended before step 5"
    sleep 0.1
done
grep -qE '^step +5 ' "$work/run.log" || fail "mlp_train did not reach step 5 within 30 s"
t0=$(date +%s%N)
kill -USR1 "$job"
# A stop takes one step and a checkpoint of a small model: well under 20 s.
for _ in $(seq 200); do
    kill -0 "$job" 2> /dev/null || break
    sleep 0.1
done
if kill -0 "$job" 2> /dev/null; then
    fail "mlp_train still runs 20 s after SIGUSR1 (the stop was not honoured)"
fi
wait "$job"
rc=$?
job=''
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$rc" -eq 76 ] || fail "mlp_train exited $rc after SIGUSR1, expected 76 (ZS_STOPPED_EXIT_CODE)"
stopped=$(sed -n 's/^stopped after step \([0-9]*\) on a signal: checkpoint committed; exit code 76$/\1/p' \
    "$work/run.log")
[ -n "$stopped" ] || fail "no 'stopped after step N on a signal: checkpoint committed' line"
committed=$(sed -n 's/^step_0*//p' "$work/ckpt/latest" 2> /dev/null)
[ "$committed" = "$stopped" ] ||
    fail "the root's latest step is '$committed', the program said it stopped after step $stopped"
"$zsckpt" verify "$work/ckpt" > "$work/verify.log" 2>&1 ||
    { cat "$work/verify.log"; fail "zs-ckpt verify of the stop's checkpoint failed"; }
grep -q "^final: held-out loss" "$work/run.log" && fail "the evaluation ran after the stop"
echo "SIGUSR1 after step 5: stopped after step $stopped with exit code 76 ${ms} ms after the signal," \
     "checkpoint committed and verified"

echo "== 2. configuration errors"
# refused NAME MESSAGE ARGS... — exit 64, both ranks' reports say config and MESSAGE.
refused() {
    local name=$1 message=$2
    shift 2
    ZS_REPORT_DIR=$work/$name "${mpirun[@]}" -x ZS_REPORT_DIR "$trainer" "$@" \
        > "$work/$name.log" 2>&1
    local rc=$?
    [ "$rc" -eq 64 ] || { cat "$work/$name.log"; fail "$name: mlp_train exited $rc, not 64"; }
    grep -qF "mlp_train: $message" "$work/$name.log" ||
        { cat "$work/$name.log"; fail "$name: the message '$message' was not printed"; }
    local got
    got=$(python3 -c 'import json,sys
for r in (0, 1):
    rep = json.load(open(f"{sys.argv[1]}/rank-{r:05d}.json"))
    print(rep["rank"], rep["cause"], rep["exit_code"], sys.argv[2] in rep["message"])' \
        "$work/$name" "$message" 2>&1)
    [ "$got" = "$(printf '0 config 64 True\n1 config 64 True')" ] ||
        fail "$name: the exit reports say '$got', expected rank, config, 64 and the message"
    echo "$name: exit 64, both reports of cause config"
}
refused missing "cannot open '$work/none.cfg'" "$work/none.cfg"
refused unknown "unknown key 'app.bogus'" "$config" app.bogus=1
refused batch "app.global_batch = 3 does not divide evenly over 2 ranks" "$config" \
    app.global_batch=3
echo "1 passed, 0 failed"
