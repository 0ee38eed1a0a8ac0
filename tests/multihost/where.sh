#!/bin/sh
# where.sh DIR PROGRAM [ARGS...] — records where this MPI rank runs (network
# namespace, host name, whether OMP_NUM_THREADS arrived) in DIR/rank.<rank>,
# then becomes PROGRAM. The MLP example prints nothing per host, so this is
# the multi-host test's evidence that the ranks really ran in two namespaces.
dir=$1
shift
ns=$(ip netns identify $$)
echo "${ns:-root} $(hostname) OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}" > "$dir/rank.${OMPI_COMM_WORLD_RANK:?not started by Open MPI}"
exec "$@"
