#!/bin/sh
# rank.sh DIR PROGRAM [ARGS...] — records this MPI rank's pid, network
# namespace and job generation in DIR/g<GENERATION>.r<RANK> (so a test can
# kill or stop one rank of one generation, and see where each ran), then
# becomes PROGRAM (exec keeps the pid).
dir=$1
shift
rank=${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:?not started by Open MPI or srun}}
ns=$(ip netns identify $$ 2>/dev/null)
echo "$$ ${ns:-root} ${ZS_JOB_GENERATION:-none} ${ZS_REPORT_DIR:-none}" > "$dir/g${ZS_JOB_GENERATION:-0}.r$rank"
exec "$@"
