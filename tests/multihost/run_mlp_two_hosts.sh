#!/usr/bin/env bash
# The MLP example at np 4 across two simulated hosts (network namespaces
# joined by a veth pair, scripts/netns-hosts.sh; 2 ranks per host, MPI over
# TCP across the link) ends bitwise where np 4 on one host ends: the same
# exported parameters (cmp of the safetensors files) and the same printed
# losses. Also checks that ranks 0-1 ran in host 0's namespace and ranks 2-3
# in host 1's, and that OMP_NUM_THREADS reached the remote ranks through -x.
#
# Bitwise equality across hosts needs the same kernels on every host: the
# remote ranks start with a cleared environment, so whatever selects the
# numerics (OPENBLAS_CORETYPE picks OpenBLAS's kernel; see docs/MULTIHOST.md)
# travels with -x whenever it is set here. When OPENBLAS_CORETYPE is set
# (ctest's mlp_two_hosts_coretype sets one this machine would not pick by
# itself), the test also leaves it behind on purpose: the ranks must then
# warn that they compute with different BLAS kernels, naming the ranks and
# the kernels, and with app.require_same_kernels = true refuse to train.
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
# environment, as ssh would. The threads and the log level, and every
# variable that selects the numerics when it is set (docs/MULTIHOST.md).
travel=(-x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x ZS_LOG_LEVEL)
numerics=(OPENBLAS_CORETYPE MKL_CBWR MKL_ENABLE_INSTRUCTIONS ZS_CPU_ISA)
for name in "${numerics[@]}"; do
    [ -z "${!name+set}" ] || travel+=(-x "$name")
done
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

# The kernel check, where this machine's environment chose a BLAS kernel.
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
    partial=()
    for item in "${travel[@]}"; do
        [ "$item" = OPENBLAS_CORETYPE ] && { unset 'partial[${#partial[@]}-1]'; continue; }
        partial+=("$item")
    done
    short=("$config" app.steps=2 scheduler.total_steps=30 app.target_loss=100 app.log_every=1)
    bash "$netns" mpirun "$state" --oversubscribe --bind-to none -np 4 "${partial[@]}" \
        "$trainer" "${short[@]}" > "$dir/mixed.log" 2>&1
    rc=$?
    local_kernel=$(sed -n 's/^numerics: BLAS kernel \([^,]*\),.*/\1/p' "$dir/mixed.log")
    if grep -q "ranks compute with different BLAS kernels" "$dir/mixed.log"; then
        line=$(grep -m1 "ranks compute with different BLAS kernels" "$dir/mixed.log")
        echo "$line"
        [ $rc -eq 0 ] || { cat "$dir/mixed.log"; fail "the mixed-kernel run exited $rc (a warning must not stop it)"; }
        echo "$line" | grep -q "ranks 0-1: '$local_kernel'" ||
            fail "the warning does not name ranks 0-1 with kernel '$local_kernel'"
        echo "$line" | grep -Eq "ranks 2-3: '[^']+'" || fail "the warning does not name ranks 2-3 and their kernel"
        echo "$line" | grep -q "OPENBLAS_CORETYPE" || fail "the warning does not say what to forward"
        bash "$netns" mpirun "$state" --oversubscribe --bind-to none -np 4 "${partial[@]}" \
            "$trainer" "${short[@]}" app.require_same_kernels=true > "$dir/strict.log" 2>&1
        rc=$?
        [ $rc -ne 0 ] || { cat "$dir/strict.log"; fail "app.require_same_kernels = true did not stop the mixed-kernel run"; }
        grep -q "ZS_ERR_MISMATCH.*ranks compute with different BLAS kernels" "$dir/strict.log" ||
            { cat "$dir/strict.log"; fail "the refusal does not name the kernels"; }
        echo "app.require_same_kernels = true: refused with ZS_ERR_MISMATCH"
    else
        cat "$dir/mixed.log"
        [ $rc -eq 0 ] || fail "the run without OPENBLAS_CORETYPE on host 1 exited $rc"
        grep -q "^numerics: BLAS kernel" "$dir/mixed.log" || fail "no numerics line"
        echo "note: OpenBLAS picks '$local_kernel' here by itself too; the mismatch check was not exercised"
    fi
fi
echo "1 passed, 0 failed"
