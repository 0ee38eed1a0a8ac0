#!/bin/sh
# flaky.sh — a stand-in for a training program that fails, for zs-run's
# tests: rank $FLAKY_RANK (default 3) exits 3 after a moment, in every
# generation or only in generation $FLAKY_GEN; the other ranks then wait
# for mpirun to end them. In a generation where no rank fails, every rank
# exits 0 at once.
rank=${OMPI_COMM_WORLD_RANK:?not started by Open MPI}
if [ -n "${FLAKY_GEN:-}" ] && [ "${ZS_JOB_GENERATION:-}" != "$FLAKY_GEN" ]; then
    exit 0
fi
if [ "$rank" = "${FLAKY_RANK:-3}" ]; then
    sleep 0.3
    echo "flaky.sh: rank $rank of generation ${ZS_JOB_GENERATION:-?} fails with exit code 3" >&2
    exit 3
fi
# The world may have shrunk below the failing rank: nobody fails then.
[ "${OMPI_COMM_WORLD_SIZE:-0}" -gt "${FLAKY_RANK:-3}" ] || exit 0
exec sleep 30
