#!/usr/bin/env bash
# ZeRO++'s bytes across nodes against plain stage 3's, by node count: GPT-2
# 124M in bf16, nodes of 2 ranks, qwZ (int8 weights) + hpZ + qgZ (int4
# gradients) against stage 3, from zs-estimate's formula (src/zero/comm_plan.c,
# which test_comm_plan and bench_nodes_bytes hold equal to the counters).
# Not a timing: the ratio of the busiest-rank-summed bytes across nodes per
# step, which the quantized gathers and reductions shrink and the hops'
# share of a node's own data (1/M of each) grows with the node count M.
# Usage: bench/nodes/zeropp_ratio_by_nodes.sh [BUILD_DIR] [RANKS_PER_NODE]
set -eu
build=${1:-build}
per_node=${2:-2}
estimate=$build/tools/zs-estimate
[ -x "$estimate" ] || { echo "build zs-estimate first ($estimate is missing)"; exit 1; }
across() { # world, extra settings...: stage 3's bytes across nodes, every rank together
  local world=$1
  shift
  "$estimate" --preset 124M --world "$world" --dtype bf16 --set zero.stage=3 \
    --set comm.ranks_per_node="$per_node" "$@" |
    awk '/^stage 3 on/ {s = 1} s && /bytes per step/ {print; exit}' |
    sed -n 's/.*across nodes [^(]*(\([0-9]*\)).*/\1/p'
}
printf "%-6s %-6s %-16s %-16s %s\n" nodes ranks stage3_bytes zeropp_bytes ratio
for nodes in 2 4 8 16 32 64; do
  world=$((nodes * per_node))
  plain=$(across "$world")
  zpp=$(across "$world" --set comm.quantize_weights=int8 --set zero.secondary_partition=node \
    --set comm.quantize_grads=int4)
  printf "%-6s %-6s %-16s %-16s %s\n" "$nodes" "$world" "$plain" "$zpp" \
    "$(awk -v a="$zpp" -v b="$plain" 'BEGIN {printf "%.4f", a / b}')"
done
