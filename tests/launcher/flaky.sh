#!/bin/sh
# flaky.sh — a stand-in for a training program that fails, for zs-run's
# tests: rank $FLAKY_RANK (default 3) exits 3 after a moment (0.3 s, or once
# the file $FLAKY_FAIL_WHEN exists), in every generation or only in
# generation $FLAKY_GEN; the other ranks then wait for mpirun to end them.
# In a generation where no rank fails, every rank exits 0: at once, or once
# the file $FLAKY_FINISH_WHEN exists (a job that runs until the test says).
rank=${OMPI_COMM_WORLD_RANK:?not started by Open MPI}
wait_for() { while [ ! -e "$1" ]; do sleep 0.05; done; }
finish() {
    [ -z "${FLAKY_FINISH_WHEN:-}" ] || wait_for "$FLAKY_FINISH_WHEN"
    exit 0
}
if [ -n "${FLAKY_GEN:-}" ] && [ "${ZS_JOB_GENERATION:-}" != "$FLAKY_GEN" ]; then
    finish
fi
if [ "$rank" = "${FLAKY_RANK:-3}" ]; then
    if [ -n "${FLAKY_FAIL_WHEN:-}" ]; then wait_for "$FLAKY_FAIL_WHEN"; else sleep 0.3; fi
    echo "flaky.sh: rank $rank of generation ${ZS_JOB_GENERATION:-?} fails with exit code 3" >&2
    exit 3
fi
# The world may have shrunk below the failing rank: nobody fails then.
[ "${OMPI_COMM_WORLD_SIZE:-0}" -gt "${FLAKY_RANK:-3}" ] || finish
exec sleep 30
