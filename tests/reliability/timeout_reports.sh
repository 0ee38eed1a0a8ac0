# Shared by the deadline tests (sourced, not run): run_deadlines.sh and
# tests/e2e/run_example_deadlines.sh. The caller defines check NAME RESULT
# DETAIL and sets $log to the job's combined output.
#
# check_timeout_reports NAME NP BAD OP_REGEX: every rank but BAD logged a
# timeout (an ERROR line of that rank) whose collective matches OP_REGEX and
# which names rank BAD: as the peer it waited for, the rank that sent no
# report, or a rank that timed out elsewhere.
check_timeout_reports() {
  local name=$1 np=$2 bad=$3 op=$4
  for ((r = 0; r < np; r++)); do
    [ "$r" -eq "$bad" ] && continue
    local line
    line=$(grep -a "zeroshard: rank $r: ERROR .* timed out" "$log" | head -1)
    [ -n "$line" ]
    check "$name: rank $r reports a timeout" $? "$(tail -5 "$log")"
    echo "$line" | grep -Eq "$op"
    check "$name: rank $r names the collective ($op)" $? "$line"
    echo "$line" | grep -Eq "waiting for rank $bad |no report from rank $bad|rank $bad timed out too|ranks? [0-9, ]*\b$bad\b"
    check "$name: rank $r names rank $bad" $? "$line"
  done
}
