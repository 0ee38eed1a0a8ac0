#!/usr/bin/env bash
# zs-run, a rank stopped with SIGSTOP mid-run (rank 2, on host 1: alive,
# holding its connections, silent): the other ranks' deadline
# (comm.timeout_s = 3) ends the job with exit code 75; their exit reports
# name the silent rank and its host's address; zs-run blames that host once
# (under --fail-limit 2, so it stays) and restarts on both hosts, and the
# job finishes.
# Usage: run_sigstop.sh NETNS ZS_RUN TRAIN ZSCKPT
NETNS=$1 ZS_RUN=$2 TRAIN=$3 ZSCKPT=$4
source "$(dirname "$0")/common.sh"
STEPS=40

start_zs_run run $STEPS --fail-limit 2 --kill-after 15 --probe-timeout 10 --
wait_step run 12
victim=$(rank_pid 1 2)
kill -STOP "$victim"
echo "stopped rank 2 (pid $victim) of generation 1 after step 12"
wait_zs_run
kill -9 "$victim" 2> /dev/null # if the job's end left it stopped
grep -E '^zs-run' "$work/run.log"
[ $rc -eq 0 ] || { cat "$work/run.log"; fail "zs-run exited $rc"; }

# The reports of generation 1: a timeout naming rank 2 and host 1's address.
reports=$(gen_dir "$work/run" 1) || fail "generation 1 has no report directory"
ls "$reports"
python3 - "$reports" "$ip1" << 'PY' || fail "no exit report names the stopped rank 2 and its host"
import glob, json, sys
named = []
for path in sorted(glob.glob(sys.argv[1] + "/rank-*.json")):
    r = json.load(open(path))
    print(f"rank {r['rank']}: cause {r['cause']}, exit {r['exit_code']}, peer {r['peer']} on "
          f"{r['peer_addresses']}, op {r['op']}")
    if r["cause"] == "timeout" and r["peer"] == 2 and sys.argv[2] in r["peer_addresses"]:
        named.append(r["rank"])
print(f"ranks naming rank 2 on {sys.argv[2]}: {named}")
sys.exit(0 if named else 1)
PY
log=$work/run.jsonl
cat "$log"
[ "$(json_field "$log" restart cause)" = timeout ] || fail "the restart's cause is not 'timeout'"
[ "$(json_field "$log" restart exit_code)" = 75 ] || fail "generation 1 did not end with exit code 75"
json_field "$log" restart culprits | grep -q "\"rank\": 2, \"host\": \"$ip1\"" ||
    fail "the restart does not blame rank 2 on $ip1"
[ "$(json_field "$log" restart world_size)" = 4 ] || fail "the restart did not keep both hosts"
[ "$(json_field "$log" finish restarts)" = 1 ] || fail "no finish record with 1 restart"
echo "1 passed, 0 failed"
