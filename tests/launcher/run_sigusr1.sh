#!/usr/bin/env bash
# SIGUSR1 (or SIGTERM) to zs-run itself, as Slurm's --signal=B:USR1@120
# sends it to a batch script's processes: zs-run forwards SIGUSR1 to mpirun,
# which forwards it to every rank; the runtime agrees on a stop at the next
# step boundary and commits a checkpoint, the trainer exits 76
# (ZS_STOPPED_EXIT_CODE), and zs-run exits 76 without restarting. The
# checkpoint verifies (zs-ckpt verify) and is the step the reports name.
# Run once with SIGUSR1 and once with SIGTERM.
# Usage: run_sigusr1.sh NETNS ZS_RUN TRAIN ZSCKPT
NETNS=$1 ZS_RUN=$2 TRAIN=$3 ZSCKPT=$4
source "$(dirname "$0")/common.sh"

for sig in USR1 TERM; do
    rm -f "$work"/pids/*
    start_zs_run "run$sig" 100000 --
    wait_step "run$sig" 10
    kill -s "$sig" "$zs_run_pid"
    echo "SIG$sig to zs-run after step 10"
    wait_zs_run
    grep -E '^zs-run|^stopped' "$work/run$sig.log"
    [ $rc -eq 76 ] || { cat "$work/run$sig.log"; fail "SIG$sig: zs-run exited $rc, not 76"; }
    grep -q "forwarding SIGUSR1 to the job" "$work/run$sig.log" || fail "SIG$sig: not forwarded"
    [ ! -f "$work/pids/g2.r0" ] || fail "SIG$sig: zs-run restarted the job"
    log=$work/run$sig.jsonl
    [ "$(json_field "$log" stop exit_code)" = 76 ] || fail "SIG$sig: no stop record with exit code 76"
    ! grep -q '"event": "restart"' "$log" || fail "SIG$sig: a restart was logged"
    committed=$(sed -n 's/^step_0*//p' "$work/run$sig/latest")
    reported=$(python3 -c 'import glob,json,sys
steps={json.load(open(p))["last_committed_step"] for p in glob.glob(sys.argv[1]+"/rank-*.json")}
causes={json.load(open(p))["cause"] for p in glob.glob(sys.argv[1]+"/rank-*.json")}
print(*steps, *causes)' "$(gen_dir "$work/run$sig" 1)")
    [ "$reported" = "$committed stopped" ] ||
        fail "SIG$sig: the reports say '$reported', the root's latest step is $committed"
    "$ZSCKPT" verify "$work/run$sig" > "$work/verify.log" 2>&1 ||
        { cat "$work/verify.log"; fail "SIG$sig: zs-ckpt verify of the stop's checkpoint failed"; }
    echo "SIG$sig: checkpoint of step $committed committed and verified; zs-run exited 76"
done
echo "1 passed, 0 failed"
