#!/usr/bin/env bash
# Two builds' bench_llama_block side by side: are the blocks of B slower
# than A's? Runs A's and B's binaries alternately (A, B, A, B, ...) ROUNDS
# times each, single-threaded, so that a neighbour's load on a shared machine
# falls on both, and prints the median step time of each block in each
# build and B / A.
#   bash bench/llama/bench_llama_block_ab.sh BUILD_A BUILD_B [ROUNDS] [ARGS...]
# ARGS go to bench_llama_block (--embd, --seq, ...).
set -euo pipefail
a=$(cd "${1:?usage: bench_llama_block_ab.sh BUILD_A BUILD_B [ROUNDS] [ARGS...]}" && pwd)
b=$(cd "${2:?usage: bench_llama_block_ab.sh BUILD_A BUILD_B [ROUNDS] [ARGS...]}" && pwd)
rounds=${3:-9}
shift $(( $# < 3 ? $# : 3 ))
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d /tmp/zs_bench_block_ab.XXXXXX)
trap 'rm -rf "$work"' EXIT
for r in $(seq "$rounds"); do
  for side in a b; do
    build=${!side}
    "$build/bench/bench_llama_block" "$@" > "$work/$side.$r.log"
    grep -E '^(gpt2|llama) ' "$work/$side.$r.log" |
      sed -E 's/^(gpt2|llama) +block.*: +([0-9.]+) ms.*/\1 \2/' >> "$work/$side.times"
  done
done
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
for block in gpt2 llama; do
  ma=$(awk -v k="$block" '$1 == k {print $2}' "$work/a.times" | median)
  mb=$(awk -v k="$block" '$1 == k {print $2}' "$work/b.times" | median)
  awk -v k="$block" -v a="$ma" -v b="$mb" -v r="$rounds" 'BEGIN {
    printf "%-5s block: A %.2f ms, B %.2f ms (medians of %d runs each), B / A %.3f\n", k, a, b, r, b / a }'
done
