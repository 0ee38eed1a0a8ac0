#!/bin/sh
# A job step's task for zs-run's Slurm tests: records "generation task
# node" in $TASK_LOG; task $FAIL_TASK fails (exit 3) in generation 1; with
# WAIT_FOR_STOP set every task runs until SIGUSR1, then exits 76 as a
# trainer does after its stop checkpoint.
echo "${ZS_JOB_GENERATION:-?} ${SLURM_PROCID:?} ${SLURMD_NODENAME:-?}" >> "${TASK_LOG:?}"
trap 'exit 76' USR1
if [ "$SLURM_PROCID" = "${FAIL_TASK:-none}" ] && [ "${ZS_JOB_GENERATION:-}" = 1 ]; then
    sleep 0.2
    exit 3
fi
if [ -n "${WAIT_FOR_STOP:-}" ]; then
    while :; do sleep 0.1; done
fi
exit 0
