#!/usr/bin/env bash
# zs-run's Slurm path under stand-ins for scontrol, srun and sbatch
# (tests/launcher/slurm; no Slurm, no root needed):
#   1. inside an "allocation" of node1, node2 with 2 tasks each, zs-run takes
#      the hosts from `scontrol show hostnames`, starts srun with the layout
#      in SLURM_HOSTFILE (node1 node1 node2 node2) and no --nodelist (a real
#      srun takes one as the layout under --distribution=arbitrary, one name
#      per task: the stand-in refuses node1,node2 for 4 tasks as srun
#      does; tests/slurm runs the real one), the generation in the
#      environment; task 3 fails on node2, the srun probe cannot reach node2,
#      and the relaunch runs 2 tasks on node1 (generation 2);
#   2. the batch script of docs/UNATTENDED.md, submitted to the sbatch
#      stand-in, which sends it SIGUSR1 as --signal=B:USR1@... would: the
#      warning reaches the tasks through zs-run and srun, they exit 76, zs-run
#      exits 76 without a restart, and the script requeues the job.
# Usage: run_slurm.sh ZS_RUN DOC
ZS_RUN=$1 DOC=$2
set -u
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/zs_launcher_slurm.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export PATH="$here/slurm:$PATH" FAKE_SLURM_LOG=$work/slurm.log TASK_LOG=$work/tasks.log

echo "== 1. hosts from the allocation, a failed node excluded"
(
    export SLURM_JOB_ID=77 SLURM_JOB_NODELIST="node[1-2]" SLURM_TASKS_PER_NODE="2(x2)"
    export FAIL_TASK=3 FAKE_DOWN=node2
    python3 "$ZS_RUN" --checkpoint-dir "$work/ckpt1" --log "$work/r1.jsonl" --backoff 0.1 \
        --no-overrides --fail-limit 5 -- "$here/slurm/task.sh" > "$work/r1.log" 2>&1
)
rc=$?
cat "$work/r1.log" "$work/slurm.log"
[ $rc -eq 0 ] || fail "zs-run exited $rc"
grep -q '^scontrol show hostnames node\[1-2\]$' "$work/slurm.log" || fail "scontrol was not asked for the hosts"
grep -q -- '--nodes=2 --ntasks=4 --distribution=arbitrary --kill-on-bad-exit=1 .* | layout=node1,node1,node2,node2 generation=1$' \
    "$work/slurm.log" || fail "generation 1 was not started with srun on node1,node2 (2 tasks each)"
grep -q -- '--nodelist=node2 true | ' "$work/slurm.log" || fail "node2 was not probed with srun"
grep -q -- '--nodes=1 --ntasks=2 --distribution=arbitrary .* | layout=node1,node1 generation=2$' \
    "$work/slurm.log" || fail "generation 2 did not run 2 tasks on node1"
grep -q '^1 3 node2$' "$TASK_LOG" && grep -q '^2 1 node1$' "$TASK_LOG" ||
    { cat "$TASK_LOG"; fail "the tasks did not run where srun's layout put them"; }
grep -q '"cause": "failed".*"rank": 3, "host": "node2"' "$work/r1.jsonl" ||
    { cat "$work/r1.jsonl"; fail "the restart does not blame task 3 on node2"; }
grep -q '"excluded": \[{"name": "node2", "addresses": \[\], "why": "cannot be reached"}\]' \
    "$work/r1.jsonl" || fail "node2 was not excluded as unreachable"

echo "== 2. the documented batch script: preempted, checkpointed, requeued"
: > "$work/slurm.log"
sed -n '/<!-- unattended.sbatch begin -->/,/<!-- unattended.sbatch end -->/p' "$DOC" |
    sed '1,2d;$d' | sed '$d' > "$work/job.sbatch"
head -3 "$work/job.sbatch"
grep -q '^#SBATCH --signal=B:USR1@120$' "$work/job.sbatch" || fail "no batch script found in $DOC"
ZS_RUN=$ZS_RUN TRAIN=$here/slurm/task.sh CONFIG=$work/none.cfg CKPT=$work/ckpt2 WAIT_FOR_STOP=1 \
    FAKE_SIGNAL_AFTER=1.5 sbatch "$work/job.sbatch" > "$work/r2.log" 2>&1
rc=$?
cat "$work/r2.log" "$work/slurm.log"
[ $rc -eq 76 ] || fail "the batch script exited $rc, not 76"
grep -q 'forwarding SIGUSR1 to the job' "$work/r2.log" || fail "zs-run did not forward the warning"
grep -q -- '--nodes=2 --ntasks=8 --distribution=arbitrary .*--mpi=pmix .* | layout=node1,node1,node1,node1,node2,node2,node2,node2 ' \
    "$work/slurm.log" ||
    fail "the script's job step is not 8 tasks on node1,node2 with --mpi=pmix"
[ "$(grep -c '^srun .*generation=' "$work/slurm.log")" = 1 ] || fail "the job was restarted"
grep -q '^scontrol requeue 4242$' "$work/slurm.log" || fail "the script did not requeue the job"
grep -q '"event": "stop"' "$work/ckpt2/restarts.jsonl" || fail "no stop record in the restart log"
echo "1 passed, 0 failed"
