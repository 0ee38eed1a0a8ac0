#!/usr/bin/env bash
# 20 steps straight against 10 steps + save + a new process + load + 10 steps,
# at np 2 in stages 1, 2 and 3 (fp16): the outputs must be identical.
# Usage: run_ckpt_resume.sh MPIRUN TEST_BINARY
set -u
mpirun=("$1" --oversubscribe --bind-to none -np 2)
binary=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
for stage in 1 2 3; do
  ok=1
  "${mpirun[@]}" "$binary" full "$stage" "$work/full$stage" || ok=0
  "${mpirun[@]}" "$binary" first "$stage" "$work/ckpt$stage" || ok=0
  "${mpirun[@]}" "$binary" second "$stage" "$work/ckpt$stage" "$work/resumed$stage" || ok=0
  for rank in 0 1; do
    if [ $ok -eq 1 ] && ! diff "$work/full$stage.rank$rank" "$work/resumed$stage.rank$rank"; then
      echo "stage $stage rank $rank: the resumed run differs from the straight run (diff above)"
      ok=0
    fi
  done
  if [ $ok -eq 1 ]; then
    echo "ok   stage $stage: resumed run bit-identical ($(grep -c '^step' "$work/full$stage.rank0") steps compared)"
    passed=$((passed + 1))
  else
    echo "FAIL stage $stage"; failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
