#!/usr/bin/env bash
# A program's own configuration error is not blamed on a host (issue 38):
# GPT-2's tiny trainer on two simulated hosts, one rank on each, with
# --fail-limit 1 (one failure blamed on a host would exclude it):
#   1. an unknown app key (refused before zs_create),
#   2. a missing app.train_data (refused after it, by every rank) and
#   3. a configuration file that does not exist (zs-run says so before it
#      launches: it may run where the ranks' files are not, so it warns)
# each end after one launch: the ranks exit 64 (ZS_CONFIG_EXIT_CODE) with
# exit reports of cause "config", zs-run stops at once with the program's
# message, exit code 64 and a "stop" record of cause "config", without a
# probe, a back-off, a restart or an excluded host.
# Usage: run_config_error.sh NETNS ZS_RUN TRAIN
NETNS=$1 ZS_RUN=$2 TRAIN=$3
ZSCKPT=unused
source "$(dirname "$0")/common.sh"

# zs NAME CONFIG [overrides] — zs-run with 2 ranks, one per host; exit code in $rc.
zs() {
    local name=$1
    shift
    mkdir -p "$work/pids/$name"
    python3 "$ZS_RUN" --hosts "$ip0:1,$ip1:1" --mpirun "$work/mpirun" \
        --mpirun-args "--oversubscribe --bind-to none" -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS \
        --checkpoint-dir "$work/$name" --log "$work/$name.jsonl" --backoff 0.2 --fail-limit 1 \
        --max-restarts 3 -- sh "$SRC/tests/launcher/rank.sh" "$work/pids/$name" "$TRAIN" \
        "$@" > "$work/$name.log" 2>&1
    rc=$?
    grep -E '^zs-run' "$work/$name.log"
}

# stopped NAME MESSAGE — one launch, exit 64, the message, no exclusion.
stopped() {
    local name=$1 message=$2
    [ $rc -eq 64 ] || { cat "$work/$name.log"; fail "$name: zs-run exited $rc, not 64"; }
    [ "$(ls "$work/pids/$name")" = "$(printf 'g1.r0\ng1.r1')" ] ||
        fail "$name: not exactly one launch of 2 ranks: $(ls "$work/pids/$name" | tr '\n' ' ')"
    grep '^zs-run: stopped: the program refused its configuration (' "$work/$name.log" |
        grep -qF -- "$message" ||
        { cat "$work/$name.log"; fail "$name: zs-run did not stop with the program's message"; }
    [ "$(json_field "$work/$name.jsonl" stop cause)" = config ] ||
        { cat "$work/$name.jsonl"; fail "$name: no stop record of cause config"; }
    json_field "$work/$name.jsonl" stop reason | grep -qF -- "$message" ||
        fail "$name: the stop record does not carry the message"
    ! grep -qE '"event": "(restart|give_up)"|excluded|UNREACHABLE' "$work/$name.jsonl" ||
        { cat "$work/$name.jsonl"; fail "$name: restarted, gave up or excluded a host"; }
    ! grep -q "probed" "$work/$name.log" || fail "$name: the hosts were probed"
    local causes
    causes=$(python3 -c 'import glob,json,sys
print(*sorted({json.load(open(p))["cause"] for p in glob.glob(sys.argv[1] + "/gen-000001-*/rank-*.json")}))' \
        "$work/$name/reports")
    [ "$causes" = config ] || fail "$name: the exit reports say '$causes', not config"
    echo "$name: one launch, exit 64, stopped with the message, no host excluded"
}

TINY2=("${TINY[@]}" app.global_batch=2 app.steps=2)
echo "== 1. an unknown app key"
zs bogus "${TINY2[@]}" app.bogus=1
stopped bogus "unknown key 'app.bogus'"

echo "== 2. app.train_data cannot be opened"
zs nodata "${TINY2[@]}" "app.train_data=\"$work/none.txt\""
stopped nodata "app.train_data: cannot open $work/none.txt"

echo "== 3. no configuration file"
zs nocfg "$work/none.cfg" app.steps=2
said="zs-run: warning: the program's configuration file $work/none.cfg (its first .cfg argument)"
grep -qF "$said does not exist here" "$work/nocfg.log" ||
    { cat "$work/nocfg.log"; fail "nocfg: zs-run did not say the file is missing"; }
stopped nocfg "cannot open '$work/none.cfg'"
echo "1 passed, 0 failed"
