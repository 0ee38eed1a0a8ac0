#!/usr/bin/env bash
# The batch script of docs/UNATTENDED.md on a real Slurm (Debian's slurmctld,
# slurmd and munged, started here by tests/slurm/cluster.sh): two nodes of 2
# CPUs on the two simulated hosts of scripts/netns-hosts.sh (one node of 4
# where network namespaces cannot be made, saying why), GPT-2's tiny model of
# tests/launcher at np 4.
#   1. the uninterrupted run: srun --mpi=pmix, 4 ranks, STEPS steps;
#   2. the docs' script through sbatch: zs-run takes the hosts from the
#      allocation and starts the ranks with srun; after step 8 Slurm itself
#      delivers the warning to the batch shell (scancel --batch
#      --signal=USR1, what --signal=B:USR1@120 sends ahead of the time
#      limit); the script passes it to zs-run, zs-run to srun, srun to the
#      ranks: they commit a checkpoint and exit 76, the script requeues the
#      job (scontrol requeue), Slurm starts it again and zs-run resumes it
#      from that checkpoint to the end;
#   3. the final parameters are bitwise the uninterrupted run's (zs-ckpt
#      export of both), the stop's checkpoint verifies (zs-ckpt verify), the
#      job ran twice (Restarts=1) and completed.
# Skipped (77) without root or the packages, or when a daemon cannot run
# here, with the reason. Every daemon and process it started is killed and
# its files removed on any exit.
# Usage: run_requeue.sh NETNS ZS_RUN TRAIN ZSCKPT DOC
# ZS_SLURM_ONE_NODE=1 takes the one-node path even where namespaces work.
NETNS=$1 ZS_RUN=$2 TRAIN=$3 ZSCKPT=$4 DOC=$5
STEPS=240
set -u
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cluster.sh"
slurm_prereqs
slurm_gc
started=$(date +%s.%N)

if [ -z "${ZS_SLURM_ONE_NODE:-}" ] && why=$(bash "$NETNS" check 2>&1); then
    # The simulated hosts, $work, the tiny config (TINY) and a clean-up
    # that removes the hosts and $work.
    source "$here/../launcher/common.sh"
    nodes=2 per=2
    addrs=("$ip0" "$ip1") namespaces=("$ns0" "$ns1")
    # The ranks of both hosts talk TCP over the link (as tests/launcher's
    # mpirun does): both hosts share one /dev/shm and one host name, so
    # Open MPI's shared memory would mix up their segments.
    export OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$subnet
else
    why=${why:-ZS_SLURM_ONE_NODE is set}
    echo "one node: ${why#*SKIP: } (two need network namespaces)"
    source "$here/../gpt2/e2e_common.sh"
    cleanup() { rm -rf "$work"; }
    tiny_config "$work/tiny.cfg" 3 bf16
    TINY=("$work/tiny.cfg" comm.timeout_s=3 checkpoint.every=4 app.batch_size=2 app.global_batch=8)
    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
    nodes=1 per=4
    addrs=(127.0.0.1) namespaces=()
fi
trap 'slurm_down; cleanup' EXIT
trap 'exit 130' INT TERM

slurm_up "$work/slurm" "$nodes" "$per" "${addrs[@]}" "${namespaces[@]}"
hosts=$(for ((i = 1; i <= nodes; i++)); do printf 'node%d:%d, ' "$i" "$per"; done)
hosts=${hosts%, }

echo "== 1. the uninterrupted run: srun --mpi=pmix, 4 ranks, $STEPS steps"
sl srun --nodes="$nodes" --ntasks=4 --ntasks-per-node="$per" --mpi=pmix --kill-on-bad-exit=1 \
    "$TRAIN" "${TINY[@]}" "checkpoint.dir=$work/straight" "app.steps=$STEPS" > "$work/straight.log" 2>&1 ||
    { rc=$?; cat "$work/straight.log"; fail "the uninterrupted run exited $rc"; }

echo "== 2. the docs' batch script through sbatch, preempted by Slurm, requeued"
sed -n '/<!-- unattended.sbatch begin -->/,/<!-- unattended.sbatch end -->/p' "$DOC" |
    sed '1,2d;$d' | sed '$d' > "$work/job.sbatch"
grep -q '^#SBATCH --signal=B:USR1@120$' "$work/job.sbatch" || fail "no batch script found in $DOC"
grep -q '^#SBATCH --requeue$' "$work/job.sbatch" || fail "the docs' batch script does not allow a requeue"
out=$work/job.out ckpt=$work/ckpt
# The script's settings from sbatch's environment; this machine's sizes on
# sbatch's command line (they win over the script's #SBATCH lines); the
# tiny model's settings as the script's arguments (after its own).
job=$(ZS_RUN=$ZS_RUN TRAIN=$TRAIN CONFIG=${TINY[0]} CKPT=$ckpt sl sbatch --parsable \
    --nodes="$nodes" --ntasks-per-node="$per" --cpus-per-task=1 --time=10 --output="$out" \
    --chdir="$work" "$work/job.sbatch" "${TINY[@]:1}" "app.steps=$STEPS") ||
    fail "sbatch refused the docs' batch script"
job=${job%%;*}
echo "submitted job $job"
for i in $(seq 300); do
    grep -qE '^step +8/' "$out" 2> /dev/null && break
    [ "$i" = 300 ] && { cat "$out"; sl scontrol show job "$job"; fail "the job never reached step 8"; }
    sleep 0.1
done
sl scancel --batch --signal=USR1 "$job" || fail "scancel --batch --signal=USR1 $job failed"
echo "step 8: scancel --batch --signal=USR1 $job"
# ($state is common.sh's: the simulated hosts)
shown=''
for i in $(seq 600); do
    shown=$(sl scontrol show job "$job" 2> /dev/null)
    grep -qE 'JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) ' <<< "$shown" && break
    [ "$i" = 600 ] && { cat "$out"; echo "$shown"; fail "the job did not end within 60 s of the warning"; }
    sleep 0.1
done
grep -v '^step ' "$out"
grep -E 'JobState|Restarts' <<< "$shown"

echo "== 3. checks"
grep -q 'JobState=COMPLETED ' <<< "$shown" || fail "job $job did not complete"
grep -q ' Restarts=1 ' <<< "$shown" || fail "job $job was not requeued exactly once"
[ "$(grep -c "^zs-run: hosts $hosts; .*launching with srun (Slurm allocation)$" "$out")" = 2 ] ||
    fail "zs-run did not take the hosts $hosts from the allocation in both runs"
grep -q "^zs-run: stop requested: forwarding SIGUSR1 to the job" "$out" ||
    fail "Slurm's warning did not reach zs-run through the batch script"
stopped=$(sed -n 's/^stopped after step \([0-9]*\) on a signal: checkpoint committed; exit code 76$/\1/p' "$out" |
    sort -u)
[ -n "$stopped" ] && [ "$(wc -l <<< "$stopped")" = 1 ] || fail "the ranks did not commit a stop checkpoint"
[ "$stopped" -lt "$STEPS" ] || fail "the warning came after the last step ($stopped)"
grep '"event": "stop"' "$ckpt/restarts.jsonl" | grep -q '"exit_code": 76' ||
    { cat "$ckpt/restarts.jsonl"; fail "no stop record with exit code 76 in the restart log"; }
grep -q "Requeuing JobId=$job\$" "$work/slurm/slurmctld.log" ||
    fail "the controller did not requeue job $job (the batch script's scontrol requeue)"
grep -qE "^zs-run: generation [0-9]+: 4 ranks on $hosts, resuming from step $stopped$" "$out" ||
    fail "the requeued job's zs-run did not resume from step $stopped"
grep -q "^resumed at step $stopped," "$out" || fail "the trainer did not resume at step $stopped"
grep -qE "^step +$STEPS/$STEPS " "$out" || fail "the requeued job did not reach step $STEPS"
# srun started the ranks on every node in each run (step 0 of each start).
for ((i = 1; i <= nodes; i++)); do
    [ "$(grep -c "launch task StepId=$job.0 request" "$work/slurm/node$i/slurmd.log")" = 2 ] ||
        fail "node$i's slurmd did not start ranks for both runs of job $job (step $job.0)"
done
stop_dir=$(printf '%s/step_%08d' "$ckpt" "$stopped")
"$ZSCKPT" verify "$stop_dir" > "$work/verify.log" 2>&1 ||
    { cat "$work/verify.log"; fail "zs-ckpt verify $stop_dir failed"; }
export_ckpt "$work/straight" "$work/straight.safetensors"
export_ckpt "$ckpt" "$work/requeued.safetensors"
cmp "$work/straight.safetensors" "$work/requeued.safetensors" ||
    fail "the requeued job's final parameters differ from the uninterrupted run's"
echo "preempted by Slurm after step 8: checkpoint of step $stopped committed and verified, job" \
    "requeued and resumed on $hosts; final parameters bitwise the uninterrupted run's" \
    "($(python3 -c "import sys,time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$started") s)"
echo "1 passed, 0 failed"
