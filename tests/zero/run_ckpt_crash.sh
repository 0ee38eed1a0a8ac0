#!/usr/bin/env bash
# Crash safety and retention of checkpoints, through real processes:
#  - for each point of the save protocol, a run that saved step 5 is killed
#    (SIGKILL, one rank) while saving step 10; a restart resumes from step 5
#    if the crash came before the step directory was renamed into place, and
#    from step 10 if after; a later successful save leaves no temporary or
#    replaced directory behind;
#  - 10 saves with checkpoint.keep = 3 leave exactly 3 step directories.
# Usage: run_ckpt_crash.sh MPIRUN TEST_BINARY
set -u
mpirun=("$1" --oversubscribe --bind-to none -np 2)
binary=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
check() { # name, condition result (0 = ok), detail
  if [ "$2" -eq 0 ]; then echo "ok   $1"; passed=$((passed + 1)); else echo "FAIL $1: $3"; failed=$((failed + 1)); fi
}

# point:rank_killed:expected_resume_step
# rename: the step directory (with its commit record) is in place, which is
# the commit; `latest` still names step 5, and the records win (select.h).
for spec in write:1:5 shard:1:5 manifest:0:5 rename:0:10 latest:0:10; do
  IFS=: read -r point rank expect <<< "$spec"
  dir="$work/$point"
  "${mpirun[@]}" "$binary" "$dir" 5 5 0 > /dev/null 2>&1
  ZS_FAULT="$point:$rank:10" "${mpirun[@]}" -x ZS_FAULT "$binary" "$dir" 12 5 0 > "$work/crash.log" 2>&1
  crashed=$?
  check "$point: the run is killed while saving step 10" $((crashed == 0)) "it exited 0"
  grep -q "ZS_FAULT=$point" "$work/crash.log"
  check "$point: the fault hook fired" $? "$(tail -3 "$work/crash.log")"
  # Restart to step 10: nothing more to save when it resumes at 10.
  "${mpirun[@]}" "$binary" "$dir" 10 5 0 > "$work/restart.log" 2>&1
  rc=$?
  got=$(sed -n 's/^resumed from step //p' "$work/restart.log")
  [ $rc -eq 0 ] && [ "$got" = "$expect" ]
  check "$point: a restart resumes from step $expect" $? "exit $rc, resumed from '${got}': $(tail -3 "$work/restart.log")"
  "${mpirun[@]}" "$binary" "$dir" 15 5 0 > /dev/null 2>&1
  leftovers=$(ls -A "$dir" | grep -c '^\.' || true)
  [ "$leftovers" -eq 0 ] && [ -d "$dir/step_00000015" ]
  check "$point: a later save commits and leaves no temporary directory" $? "$(ls -A "$dir" | tr '\n' ' ')"
done

dir="$work/retention"
"${mpirun[@]}" "$binary" "$dir" 50 5 3 > /dev/null 2>&1
steps=$(ls "$dir" | grep -c '^step_' || true)
[ "$steps" -eq 3 ] && [ -d "$dir/step_00000040" ] && [ -d "$dir/step_00000050" ] && [ "$(cat "$dir/latest")" = step_00000050 ]
check "retention: 10 saves with keep = 3 leave the 3 newest" $? "$(ls "$dir" | tr '\n' ' ')"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
