#!/usr/bin/env bash
# Checkpoint soak: ZS_SOAK_SAVES saves (default 500, about 7 s; raise it for a long soak)
# in four processes. The first three end with a rank killed at a point of the
# save protocol (SIGKILL through ZS_FAULT); each next process continues the
# same root and model. The work directory is removed whatever happens.
# Usage: run_ckpt_soak.sh MPIRUN TEST_BINARY
set -u
mpirun=("$1" --oversubscribe --bind-to none -np 2)
binary=$2
total=${ZS_SOAK_SAVES:-500}
seed=${ZS_SOAK_SEED:-$$}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "soak: $total saves, seed $seed (ZS_SOAK_SEED=$seed repeats this run)"
per=$((total / 4 > 3 ? total / 4 : 3))
points=(write shard manifest rename latest)
failed=0
for segment in 1 2 3 4; do
  point=none
  [ "$segment" -lt 4 ] && point=${points[$(((seed + segment) % 5))]}
  "${mpirun[@]}" -x ZS_FAULT_ERRNO "$binary" "$work/root" "$work/state" "$per" "$((seed + segment))" "$point" \
    > "$work/log" 2>&1
  rc=$?
  if [ "$point" = none ]; then
    [ $rc -eq 0 ] || { echo "FAIL segment $segment (exit $rc):"; grep -A3 "^FAIL" "$work/log" | head -40; failed=1; }
    grep '^soak:' "$work/log"
  else
    if grep -q "ZS_FAULT=$point" "$work/log" && ! grep -q '^FAIL' "$work/log"; then
      echo "segment $segment: killed at '$point' as planned"
    else
      echo "FAIL segment $segment (kill at $point, exit $rc):"; grep -A3 "^FAIL" "$work/log" | head -40; failed=1
    fi
  fi
done
[ $failed -eq 0 ] && echo "soak passed"
exit $failed
