#!/usr/bin/env bash
# The examples' own collectives have the runtime's deadline (issue 22, item 8).
# Their losses and reports go through zs_all_reduce_host / zs_all_gather_host
# instead of MPI's blocking collectives, so a rank stopped during validation
# (EX_TEST_STOP=validation:RANK raises SIGSTOP on it, examples/common/
# test_stop.h) no longer hangs the job: with comm.timeout_s = 3 every other
# rank reports a timeout that names the collective (op, number, label) and
# the stopped rank, and the job ends with ZS_TIMEOUT_EXIT_CODE (75), or with
# comm.on_timeout = "return" the program gets ZS_ERR_TIMEOUT from the call.
#   - gpt2_train, np 2, stage 2: the ranks left running finish their
#     validation and wait in all_reduce of 'validation loss';
#   - gpt2_train, np 3, stage 3: they wait in the evaluation's gathers;
#   - gpt2_train, np 2, stage 1, on_timeout = "return": rank 0's program
#     gets ZS_ERR_TIMEOUT naming 'validation loss', and the job ends;
#   - mlp_train, np 2, stage 1: they wait in all_reduce of 'held-out loss';
#   - and a clean gpt2 run with validation exits 0.
# "Nothing hangs" is the outer timeout of each run (60 s, well above the
# 3 s deadline: before the fix the stopped cases ran into it); the elapsed
# time is printed, not asserted.
# Usage: run_example_deadlines.sh MPIRUN GPT2_TRAIN MLP_TRAIN SOURCE_DIR
set -u
MPIEXEC=$1 gpt2=$2 mlp=$3
SRC=$4
source "$SRC/tests/gpt2/e2e_common.sh" # work, tiny_config, fail
source "$SRC/tests/reliability/timeout_reports.sh" # check_timeout_reports
timeout_s=3
passed=0 failed=0
check() { # name, condition result (0 = ok), detail
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else echo "FAIL $1: $3"; failed=$((failed + 1)); fi
}

# launch NAME NP STOP BINARY ARGS... -> sets rc and log. STOP is
# EX_TEST_STOP's value ("" for none). The stopped rank's pid is read from
# its own line and the process killed afterwards, if mpirun left it.
launch() {
  local name=$1 np=$2 stop=$3 binary=$4
  shift 4
  log="$work/$name.log"
  local start end
  start=$(date +%s%N)
  # A hang ends at 60 s with SIGTERM to mpirun, which takes its ranks
  # down with it (a SIGKILL would leave them running), then SIGKILL.
  EX_TEST_STOP=$stop timeout -k 10 60 "$MPIEXEC" --oversubscribe --bind-to none -np "$np" \
    -x EX_TEST_STOP -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 "$binary" "$@" > "$log" 2>&1
  rc=$?
  end=$(date +%s%N)
  echo "$name: exit $rc after $(((end - start) / 1000000)) ms"
  local pid
  pid=$(sed -n 's/.*(pid \([0-9]*\)): EX_TEST_STOP=.*/\1/p' "$log" | head -1)
  if [ -n "$pid" ] && grep -qa "$(basename "$binary")" "/proc/$pid/cmdline" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null
  fi
}

# check_stopped NAME NP BAD OP_REGEX: rank BAD said it stopped; every other
# rank logged a timeout naming a collective that matches OP_REGEX and rank BAD.
check_stopped() {
  grep -aq "rank $3 (pid [0-9]*): EX_TEST_STOP=validation:$3: stopping at 'validation'" "$log"
  check "$1: rank $3 stopped during validation" $? "$(tail -5 "$log")"
  check_timeout_reports "$@"
}

tiny=(app.steps=4 app.val_every=2 app.batch_size=2 "comm.timeout_s=$timeout_s")
tiny_config "$work/s2.cfg" 2 fp32
tiny_config "$work/s3.cfg" 3 fp32
tiny_config "$work/s1.cfg" 1 fp32

launch gpt2_clean 2 "" "$gpt2" "$work/s2.cfg" "${tiny[@]}"
[ "$rc" -eq 0 ] && grep -q "validation at step 2: loss" "$log"
check "gpt2 clean run: exits 0 with a validation loss" $? "exit $rc: $(tail -5 "$log")"

launch gpt2_stage2 2 validation:1 "$gpt2" "$work/s2.cfg" "${tiny[@]}"
[ "$rc" -eq 75 ]
check "gpt2 np 2 stage 2: the job exits with ZS_TIMEOUT_EXIT_CODE (75)" $? "exit $rc: $(tail -5 "$log")"
check_stopped "gpt2 np 2 stage 2" 2 1 "all_reduce #[0-9]+ of 'validation loss'"

launch gpt2_stage3 3 validation:2 "$gpt2" "$work/s3.cfg" "${tiny[@]}"
[ "$rc" -eq 75 ]
check "gpt2 np 3 stage 3: the job exits with ZS_TIMEOUT_EXIT_CODE (75)" $? "exit $rc: $(tail -5 "$log")"
check_stopped "gpt2 np 3 stage 3" 3 2 "(all_gather|all_reduce) #[0-9]+ of '[^']+'"

launch gpt2_return 2 validation:1 "$gpt2" "$work/s1.cfg" "${tiny[@]}" 'comm.on_timeout="return"'
[ "$rc" -ne 0 ]
check "gpt2 return policy: the job fails" $? "exit $rc"
grep -aq "gpt2_train: ZS_ERR_TIMEOUT: all_reduce #[0-9]* of 'validation loss' .* on rank 0 timed out" "$log"
check "gpt2 return policy: rank 0's program gets ZS_ERR_TIMEOUT from 'validation loss'" $? \
  "$(tail -5 "$log")"
check_stopped "gpt2 return policy" 2 1 "all_reduce #[0-9]+ of 'validation loss'"

launch mlp_stage1 2 validation:1 "$mlp" "$SRC/configs/mlp_zero1.cfg" app.steps=4 app.log_every=2 \
  app.eval_samples=512 "comm.timeout_s=$timeout_s"
[ "$rc" -eq 75 ]
check "mlp np 2 stage 1: the job exits with ZS_TIMEOUT_EXIT_CODE (75)" $? "exit $rc: $(tail -5 "$log")"
check_stopped "mlp np 2 stage 1" 2 1 "all_reduce #[0-9]+ of 'held-out loss'"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
