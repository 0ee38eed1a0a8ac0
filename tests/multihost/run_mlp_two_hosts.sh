#!/usr/bin/env bash
# The MLP example at np 4 across two simulated hosts (network namespaces
# joined by a veth pair, scripts/netns-hosts.sh; 2 ranks per host, MPI over
# TCP across the link) ends bitwise where np 4 on one host ends: the same
# exported parameters (cmp of the safetensors files) and the same printed
# losses. Also checks that ranks 0-1 ran in host 0's namespace and ranks 2-3
# in host 1's, and that OMP_NUM_THREADS reached the remote ranks through -x.
# Exits 77 when network namespaces cannot be made here (not root).
# Usage: run_mlp_two_hosts.sh NETNS_HOSTS MPIRUN TRAINER ZS_CKPT CONFIG WHERE
set -u
netns=$1 mpirun=$2 trainer=$3 zs_ckpt=$4 config=$5 where=$6

why=$(bash "$netns" check 2>&1) || { rc=$?; echo "$why"; exit "$rc"; }

# Hosts left by an earlier run that was killed (a ctest timeout sends SIGKILL).
bash "$netns" gc
dir=$(mktemp -d)
state=''
cleanup() {
    [ -z "$state" ] || bash "$netns" down "$state"
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 60 steps (schedule included) keep the test short; the held-out loss then
# is near 2.20, so the target is set just under chance (ln 10 = 2.3026):
# the run still has to learn something to exit 0.
args=("$config" app.steps=60 scheduler.total_steps=60 app.target_loss=2.3
      checkpoint.every=60 app.log_every=10)
# What must reach the remote ranks: the agent starts them with a cleared
# environment, as ssh would.
travel=(-x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x ZS_LOG_LEVEL)
fail() { echo "FAIL: $*"; exit 1; }

"$mpirun" --oversubscribe --bind-to none -np 4 "$trainer" "${args[@]}" "checkpoint.dir=$dir/one" \
    > "$dir/one.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$dir/one.log"; fail "the one-host run exited $rc"; }

state=$(bash "$netns" up --owner $$) || fail "netns-hosts.sh up exited $?"
mkdir "$dir/where"
bash "$netns" mpirun "$state" --oversubscribe --bind-to none -np 4 "${travel[@]}" \
    sh "$where" "$dir/where" "$trainer" "${args[@]}" "checkpoint.dir=$dir/two" \
    > "$dir/two.log" 2>&1
rc=$?
cat "$dir/two.log"
[ $rc -eq 0 ] || fail "the two-host run exited $rc"

# Where the ranks ran: by slot, 2 per host.
ns0=$(sed -n 's/^ZS_NETNS_NS0=//p' "$state/env") ns1=$(sed -n 's/^ZS_NETNS_NS1=//p' "$state/env")
for rank in 0 1 2 3; do
    want=$ns0
    [ "$rank" -lt 2 ] || want=$ns1
    read -r got _ threads < "$dir/where/rank.$rank" || fail "rank $rank left no record of where it ran"
    echo "rank $rank: namespace $got, $threads"
    [ "$got" = "$want" ] || fail "rank $rank ran in namespace '$got', expected '$want'"
    [ "$threads" = "OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}" ] ||
        fail "rank $rank saw $threads, mpirun had OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}"
done

# The traffic crossed the link: host 1's end of the veth carried the ring's
# inter-host share both ways. Each rank sends about 13 MiB in this run (the
# communication table above) and the ring crosses the link once each way,
# so 8 MiB is far above what the launch and control messages alone (KiB) make.
if1=$(sed -n 's/^ZS_NETNS_IF1=//p' "$state/env")
for way in rx tx; do
    bytes=$(bash "$netns" exec "$state" 1 cat "/sys/class/net/$if1/statistics/${way}_bytes")
    echo "host 1 link $way: $bytes bytes"
    [ "$bytes" -ge $((8 << 20)) ] || fail "host 1's link $way only $bytes bytes, expected >= 8 MiB of MPI traffic"
done

# The same losses, step by step and final (timings differ and are dropped).
losses() { grep -E '^(step |final:)' "$1" | sed 's/ | [0-9.]* ms\/step$//'; }
losses "$dir/one.log" > "$dir/one.losses"
losses "$dir/two.log" > "$dir/two.losses"
grep -q '^final:' "$dir/one.losses" || fail "the one-host run printed no final loss line"
diff "$dir/one.losses" "$dir/two.losses" || fail "the printed losses differ (one host < > two hosts)"

for run in one two; do
    "$zs_ckpt" export "$dir/$run" "$dir/$run.safetensors" > /dev/null ||
        fail "zs-ckpt export of the $run-host checkpoint exited $?"
done
cmp "$dir/one.safetensors" "$dir/two.safetensors" ||
    fail "the exported parameters differ between one host and two hosts"
echo "$(grep '^final:' "$dir/one.losses")"
echo "1 passed, 0 failed"
