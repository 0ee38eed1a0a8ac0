#!/usr/bin/env bash
# Every bad configuration, given to the real training program under mpirun,
# must end with a nonzero exit (not a crash, not a hang) and print the
# message named on the file's first line ("# expect: <text>").
# Also: ranks that load different valid configurations (an MPMD launch) and a
# missing file. Usage: run_bad_configs.sh MPIRUN TRAINER BAD_DIR CONFIGS_DIR
set -u
mpirun_cmd=$1 trainer=$2 bad_dir=$3 configs_dir=$4
mpirun=("$mpirun_cmd" --oversubscribe --bind-to none)
passed=0 failed=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# check NAME EXPECTED_TEXT COMMAND...
check() {
  local name=$1 expect=$2; shift 2
  timeout 60 "$@" >"$work/out" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then
    echo "FAIL $name: exited 0; expected an error containing: $expect"; failed=$((failed + 1))
  elif [ $rc -eq 124 ]; then
    echo "FAIL $name: hung (killed after 60 s)"; failed=$((failed + 1))
  elif [ $rc -ge 128 ] || grep -qE "Segmentation|core dumped|signal [0-9]+|AddressSanitizer" "$work/out"; then
    echo "FAIL $name: crashed (exit $rc)"; sed 's/^/    /' "$work/out" | head -20; failed=$((failed + 1))
  elif ! grep -qF -- "$expect" "$work/out"; then
    echo "FAIL $name: exit $rc but the output lacks: $expect"; sed 's/^/    /' "$work/out" | head -20
    failed=$((failed + 1))
  else
    echo "ok   $name: exit $rc: $(grep -F -m1 -- "$expect" "$work/out" | cut -c1-150)"
    passed=$((passed + 1))
  fi
}

count=0
for cfg in "$bad_dir"/*.cfg; do
  expect=$(head -n1 "$cfg" | sed -n 's/^# expect: //p')
  if [ -z "$expect" ]; then
    echo "FAIL $(basename "$cfg"): first line has no '# expect: ' text"; failed=$((failed + 1)); continue
  fi
  check "$(basename "$cfg")" "$expect" "${mpirun[@]}" -np 2 "$trainer" "$cfg"
  count=$((count + 1))
done
if [ "$count" -lt 12 ]; then
  echo "FAIL: only $count bad configurations found in $bad_dir (at least 12 expected)"; failed=$((failed + 1))
fi

check "missing file" "cannot open" "${mpirun[@]}" -np 2 "$trainer" "$work/does_not_exist.cfg"
check "bad override" "did you mean 'zero.stage'" "${mpirun[@]}" -np 2 "$trainer" "$configs_dir/mlp_zero1.cfg" zero.stag=2
check "MPMD: ranks load different files" "ranks disagree on the configuration hash" \
  "${mpirun[@]}" -np 1 "$trainer" "$configs_dir/mlp_zero1.cfg" : -np 1 "$trainer" "$configs_dir/mlp_zero2.cfg"
check "MPMD: one rank overrides a value" "ranks disagree on the configuration hash" \
  "${mpirun[@]}" -np 2 "$trainer" "$configs_dir/mlp_zero3.cfg" : -np 1 "$trainer" "$configs_dir/mlp_zero3.cfg" optimizer.lr=0.02

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
