#!/usr/bin/env bash
# zs-run, a rank killed with SIGKILL mid-run (rank 2, on host 1): zs-run
# finds it from mpirun's account (a SIGKILLed rank writes no report),
# relaunches on both hosts from the last committed checkpoint, and the
# final model is bitwise the uninterrupted run's (zs-ckpt export of both
# final checkpoints compared byte for byte). The restart log names the
# cause, the rank and host, the step resumed from, steps lost and seconds
# to recover.
# Usage: run_kill9.sh NETNS ZS_RUN TRAIN ZSCKPT
NETNS=$1 ZS_RUN=$2 TRAIN=$3 ZSCKPT=$4
source "$(dirname "$0")/common.sh"
STEPS=60

reference straight $STEPS
start_zs_run run $STEPS --kill-after 10 --probe-timeout 10 --
wait_step run 22
victim=$(rank_pid 1 2)
kill -9 "$victim"
echo "killed rank 2 (pid $victim) of generation 1 after step 22"
wait_zs_run
grep -E '^zs-run' "$work/run.log"
[ $rc -eq 0 ] || { cat "$work/run.log"; fail "zs-run exited $rc"; }
[ -f "$work/pids/g2.r2" ] || fail "zs-run did not relaunch (no generation 2)"
[ ! -f "$work/pids/g3.r0" ] || fail "zs-run relaunched more than once"
for r in 0 1 2 3; do
    ns=$(cut -d' ' -f2 "$work/pids/g2.r$r")
    want=$ns0
    [ $r -lt 2 ] || want=$ns1
    [ "$ns" = "$want" ] || fail "generation 2's rank $r ran in '$ns', not on host $((r / 2)) ($want)"
done
[ "$(cat "$work/run/generation")" = 2 ] || fail "the generation file holds $(cat "$work/run/generation"), not 2"

log=$work/run.jsonl
cat "$log"
[ "$(json_field "$log" restart cause)" = killed ] || fail "the restart's cause is not 'killed'"
json_field "$log" restart culprits | grep -q "\"rank\": 2, \"host\": \"$ip1\"" ||
    fail "the restart does not name rank 2 on $ip1"
resumed=$(json_field "$log" restart step_resumed_from)
lost=$(json_field "$log" restart steps_lost)
recover=$(json_field "$log" restart recover_s)
[ "$resumed" -ge 20 ] && [ $((resumed % 4)) -eq 0 ] ||
    fail "resumed from step $resumed: expected a committed step (every 4) at or after 20"
grep -q "resumed at step $resumed," "$work/run.log" || fail "the trainer did not resume at step $resumed"
[ "$lost" -ge 0 ] && [ "$lost" -lt 8 ] || fail "steps lost $lost: expected under 8 (checkpoint every 4)"
python3 -c "import sys; sys.exit(0 if 0 < float(sys.argv[1]) < 60 else 1)" "$recover" ||
    fail "seconds to recover '$recover' is not a number between 0 and 60"
[ "$(json_field "$log" finish restarts)" = 1 ] || fail "no finish record with 1 restart"

export_ckpt "$work/straight" "$work/straight.safetensors"
export_ckpt "$work/run" "$work/run.safetensors"
cmp "$work/straight.safetensors" "$work/run.safetensors" ||
    fail "the final parameters differ from the uninterrupted run's"
echo "killed rank 2 at step 22: resumed from step $resumed, $lost step(s) lost, recovered in $recover s;"
echo "final parameters bitwise equal to the uninterrupted run"
echo "1 passed, 0 failed"
