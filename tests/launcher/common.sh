# Shared by the launcher's end-to-end tests (sourced, not run). The caller
# sets ZS_RUN, TRAIN, ZSCKPT and NETNS (scripts/netns-hosts.sh) first.
#
# Each test makes its own two simulated hosts (network namespaces joined by
# a veth pair, 2 slots each) and an mpirun wrapper for zs-run (--mpirun):
# Open MPI's mpirun inside host 0 with the namespaces' agent, TCP only on
# the link's subnet, but without netns-hosts.sh's --hostfile, since zs-run
# names the hosts itself (-H). The trainer is GPT-2's with the tiny model
# of tests/gpt2 (2 layers, width 32, sequences of 16 bytes, bf16, ZeRO-3),
# 4 ranks x 2 sequences = app.global_batch 8, a checkpoint every 4 steps and
# comm.timeout_s = 3, on the project's own documentation as text.
set -u
why=$(bash "$NETNS" check 2>&1) || { rc=$?; echo "$why"; exit "$rc"; }
bash "$NETNS" gc
# The GPT-2 end-to-end tests' helpers: $work (a temporary directory), $SRC,
# the corpus, fail, tiny_config and export_ckpt.
MPIEXEC=mpirun
source "$(dirname "${BASH_SOURCE[0]}")/../gpt2/e2e_common.sh"
state=''
zs_run_pid=''
cleanup() {
    [ -z "$zs_run_pid" ] || kill -9 "$zs_run_pid" 2> /dev/null
    if [ -n "$state" ]; then
        # Whatever still runs inside the hosts (a daemon cut off with its
        # link) goes with them.
        for ns in $(sed -n 's/^ZS_NETNS_NS[01]=//p' "$state/env"); do
            pids=$(ip netns pids "$ns" 2> /dev/null)
            [ -z "$pids" ] || kill -9 $pids 2> /dev/null
        done
        bash "$NETNS" down "$state"
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

state=$(bash "$NETNS" up --owner $$) || fail "netns-hosts.sh up exited $?"
ns0=$(sed -n 's/^ZS_NETNS_NS0=//p' "$state/env") ns1=$(sed -n 's/^ZS_NETNS_NS1=//p' "$state/env")
if1=$(sed -n 's/^ZS_NETNS_IF1=//p' "$state/env")
ip0=$(sed -n 's/^ZS_NETNS_IP0=//p' "$state/env") ip1=$(sed -n 's/^ZS_NETNS_IP1=//p' "$state/env")
subnet=$(sed -n 's/^ZS_NETNS_SUBNET=//p' "$state/env")
cat > "$work/mpirun" << END
#!/bin/sh
exec ip netns exec $ns0 mpirun --mca plm_rsh_agent $state/agent --mca btl tcp,self \\
    --mca btl_tcp_if_include $subnet --mca oob_tcp_if_include $subnet "\$@"
END
chmod +x "$work/mpirun"

tiny_config "$work/tiny.cfg" 3 bf16
# The launcher's settings on top: a deadline of 3 s, a checkpoint every 4
# steps, 4 ranks x 2 sequences = a global batch of 8.
TINY=("$work/tiny.cfg" comm.timeout_s=3 checkpoint.every=4 app.batch_size=2 app.global_batch=8)
mkdir -p "$work/pids"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# reference NAME STEPS [overrides] — the uninterrupted run, 4 ranks on host 0
# and host 1 like the runs under zs-run; its log in $work/NAME.log.
reference() {
    local name=$1 steps=$2
    shift 2
    "$work/mpirun" -H "$ip0:2,$ip1:2" -np 4 --map-by slot --oversubscribe --bind-to none \
        -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS "$TRAIN" "${TINY[@]}" \
        "checkpoint.dir=$work/$name" "app.steps=$steps" "$@" > "$work/$name.log" 2>&1 ||
        { cat "$work/$name.log"; fail "the reference run exited $?"; }
}

# start_zs_run NAME STEPS [zs-run options] -- [overrides] — zs-run in the
# background over both hosts; every rank through rank.sh (pids in
# $work/pids); output in $work/NAME.log, restart log $work/NAME.jsonl.
start_zs_run() {
    local name=$1 steps=$2
    shift 2
    local opts=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    python3 "$ZS_RUN" --hosts "$ip0:2,$ip1:2" --mpirun "$work/mpirun" \
        --mpirun-args "--oversubscribe --bind-to none" -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS \
        --checkpoint-dir "$work/$name" --log "$work/$name.jsonl" --backoff 0.2 "${opts[@]}" \
        -- sh "$SRC/tests/launcher/rank.sh" "$work/pids" "$TRAIN" "${TINY[@]}" \
        "app.steps=$steps" "$@" > "$work/$name.log" 2>&1 &
    zs_run_pid=$!
}

# wait_zs_run — zs-run's exit code into $rc.
wait_zs_run() {
    wait "$zs_run_pid"
    rc=$?
    zs_run_pid=''
}

# wait_step NAME STEP — until the run's log shows that step (30 s at most).
wait_step() {
    local i
    for i in $(seq 300); do
        grep -qE "^step +$2/" "$work/$1.log" && return 0
        [ -n "$zs_run_pid" ] && ! kill -0 "$zs_run_pid" 2> /dev/null && break
        sleep 0.1
    done
    cat "$work/$1.log"
    fail "the run never reached step $2"
}

# rank_pid GENERATION RANK
rank_pid() { cut -d' ' -f1 "$work/pids/g$1.r$2"; }

# final_loss LOG STEP — the loss printed for that step.
final_loss() { sed -n "s/^step  *$2\/[0-9]* | loss \([0-9.]*\) .*/\1/p" "$1" | tail -1; }

# gen_dir ROOT GENERATION — the report directory of that generation in the
# checkpoint root ROOT (gen-NNNNNN-<launcher id>), or nothing when none was
# made; each launcher names its own.
gen_dir() { compgen -G "$1/reports/gen-$(printf %06d "$2")-*"; }

# json_field FILE EVENT FIELD — FIELD of the last EVENT record of a restart log.
json_field() {
    python3 -c 'import json,sys
recs=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]
recs=[r for r in recs if r["event"]==sys.argv[2]]
v=recs[-1].get(sys.argv[3]) if recs else "NO-EVENT"
print(json.dumps(v) if not isinstance(v,str) else v)' "$@"
}
