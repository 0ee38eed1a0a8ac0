#!/bin/bash
# bench_memory leaves no /tmp/zs_bench_memory_* behind (issue 29, item 6: a
# run that ran out of memory aborted before removing its directory):
#   bench_memory_cleanup.sh <bench_memory> <mpirun and its options...>
# A small run that succeeds, and one that runs out of memory (an address
# space capped with ulimit -v, so the allocation fails whatever the machine's
# overcommit policy), each on 2 ranks: the second must fail, naming the
# cause, and neither may leave a directory it made.
set -u
bench=$1
shift
launcher=("$@")
failures=0

leftovers() { ls -d /tmp/zs_bench_memory_* 2>/dev/null | sort; }

check_run() { # name expected-exit(0|nonzero) words bench-args...
    local name=$1 expect=$2 words=$3
    shift 3
    local before after out rc
    before=$(leftovers)
    out=$( (ulimit -v 4194304 && timeout 60 "${launcher[@]}" -np 2 "$bench" "$@") 2>&1)
    rc=$?
    after=$(leftovers)
    if [ "$expect" = 0 ] && [ "$rc" -ne 0 ]; then
        echo "FAIL: $name: exit $rc, expected 0"; echo "$out" | tail -5; failures=$((failures + 1))
    elif [ "$expect" != 0 ] && { [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; }; then
        echo "FAIL: $name: exit $rc, expected a failure"; echo "$out" | tail -5
        failures=$((failures + 1))
    fi
    if [[ "$out" != *"$words"* ]]; then
        echo "FAIL: $name: the output does not say \"$words\""; echo "$out" | tail -5
        failures=$((failures + 1))
    fi
    local left
    left=$(comm -13 <(echo "$before") <(echo "$after") | grep . || true)
    if [ -n "$left" ]; then
        echo "FAIL: $name left behind: $left"
        failures=$((failures + 1))
        rm -rf $left
    fi
    echo "$name: exit $rc"
}

check_run "small run" 0 "stage     model bytes" --units 2 --unit-params 1000
# 10^11 fp32 parameters per unit: 400 GB, past the capped address space.
check_run "out of memory" 1 "OUT_OF_MEMORY" --units 2 --unit-params 100000000000

echo "bench_memory_cleanup: $failures failure(s)"
[ "$failures" -eq 0 ]
