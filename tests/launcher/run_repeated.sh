#!/usr/bin/env bash
# zs-run under repeated failures, with a program that fails on purpose
# (flaky.sh: rank 3, on host 1, exits 3), over the two simulated hosts:
#   1. every generation fails, --max-restarts 2: three launches, then zs-run
#      gives up with the job's exit code and the log says why;
#   2. --fail-limit 1 --min-ranks 3: the first failure excludes host 1, 2
#      slots are left, below the minimum: zs-run gives up at once;
#   3. --memory-limit with a layout that does not fit on fewer ranks
#      (--estimate-layout "--preset 124M" --memory-limit 64MiB): the
#      relaunch on 2 ranks is refused by the memory estimate;
#   4. --memory-limit with no layout known (no checkpoint, no
#      --estimate-layout): the check is skipped with the reason logged and
#      the relaunch on 2 ranks (host 0) finishes.
# Usage: run_repeated.sh NETNS ZS_RUN ZS_ESTIMATE
NETNS=$1 ZS_RUN=$2 ZS_ESTIMATE=$3
TRAIN=unused ZSCKPT=unused
source "$(dirname "$0")/common.sh"
export FLAKY_RANK=3 FLAKY_GEN=

# zs NAME [options] — zs-run with flaky.sh; its exit code in $rc.
zs() {
    local name=$1
    shift
    python3 "$ZS_RUN" --hosts "$ip0:2,$ip1:2" --mpirun "$work/mpirun" \
        --mpirun-args "--oversubscribe --bind-to none" -x FLAKY_RANK -x FLAKY_GEN \
        --checkpoint-dir "$work/$name" --log "$work/$name.jsonl" --backoff 0.1 --no-overrides \
        --probe-timeout 5 --zs-estimate "$ZS_ESTIMATE" "$@" -- sh "$SRC/tests/launcher/flaky.sh" \
        > "$work/$name.log" 2>&1
    rc=$?
    grep -E '^zs-run' "$work/$name.log"
}
gave_up() { # NAME TEXT — the run gave up with exit code 3, saying TEXT
    [ $rc -eq 3 ] || { cat "$work/$1.log"; fail "$1: zs-run exited $rc, not the job's 3"; }
    json_field "$work/$1.jsonl" give_up reason | grep -qF -- "$2" ||
        { cat "$work/$1.jsonl"; fail "$1: the give_up record does not say '$2'"; }
}

echo "== 1. max restarts"
zs max --max-restarts 2 --fail-limit 10
gave_up max "--max-restarts 2 reached"
[ "$(grep -c '"event": "restart"' "$work/max.jsonl")" = 2 ] || fail "max: not 2 restart records"
gen_dir "$work/max" 3 > /dev/null && ! gen_dir "$work/max" 4 > /dev/null ||
    fail "max: not exactly 3 generations launched"
[ "$(json_field "$work/max.jsonl" give_up restarts)" = 2 ] || fail "max: the give-up does not count 2 restarts"

echo "== 2. min world size"
zs minw --fail-limit 1 --min-ranks 3
gave_up minw "2 slots left after excluding $ip1: below --min-ranks 3"
json_field "$work/minw.jsonl" give_up excluded | grep -q "failed 1 time (--fail-limit 1)" ||
    fail "minw: host 1's exclusion is not logged with its reason"
! gen_dir "$work/minw" 2 > /dev/null || fail "minw: relaunched below the minimum"

echo "== 3. the memory estimate refuses a smaller world"
zs mem --fail-limit 1 --memory-limit 64MiB --estimate-layout "--preset 124M"
gave_up mem "2 ranks would not hold the model: stage 0 does not fit on 2 ranks"

echo "== 4. no layout known: the check is skipped and logged"
FLAKY_GEN=1 zs skip --fail-limit 1 --memory-limit 1GiB
[ $rc -eq 0 ] || { cat "$work/skip.log"; fail "skip: zs-run exited $rc"; }
json_field "$work/skip.jsonl" restart memory_check | grep -q "not checked: the model is unknown" ||
    fail "skip: the skipped memory check is not logged with its reason"
[ "$(json_field "$work/skip.jsonl" restart world_size)" = 2 ] || fail "skip: not relaunched on 2 ranks"
echo "1 passed, 0 failed"
