#!/usr/bin/env bash
# The topology's host identity (src/comm/topology.h) tells apart the two
# simulated hosts of scripts/netns-hosts.sh, which share the host name and
# the kernel (so MPI_Get_processor_name and the boot id alone would make them
# one node): 4 ranks, 2 in each network namespace, are 2 nodes of 2; 2 ranks
# in one namespace are 1 node. Exits 77 where namespaces cannot be made.
# Usage: run_topology_two_hosts.sh NETNS_HOSTS TEST_TOPOLOGY
set -u
netns=$1 test=$2
why=$(bash "$netns" check 2>&1) || { rc=$?; echo "$why"; exit "$rc"; }
bash "$netns" gc
state=''
cleanup() { [ -z "$state" ] || bash "$netns" down "$state"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() { echo "FAIL: $*"; exit 1; }

state=$(bash "$netns" up --owner $$) || fail "netns-hosts.sh up exited $?"
# slots=2 per host: ranks 0-1 in host 0's namespace, 2-3 in host 1's.
bash "$netns" mpirun "$state" --oversubscribe --bind-to none -np 4 "$test" detect 2 ||
    fail "4 ranks across the two namespaces were not told apart as 2 nodes"
# Both ranks fill host 0's slots: one namespace, one node.
bash "$netns" mpirun "$state" --oversubscribe --bind-to none -np 2 "$test" detect 1 ||
    fail "2 ranks in one namespace were not 1 node"
echo "1 passed, 0 failed"
