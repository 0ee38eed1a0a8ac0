#!/bin/bash
# Every numeric command-line option of the tools and benchmarks refuses what
# it cannot read whole, naming the option (issue 22, item 18: atoll read
# `bench_memory --unit-params 7.5e9` as 7 and the benchmark ran on).
#   bad_numbers.sh <zs-estimate> <zs-ckpt> [<bench_memory> <bench_optimizer> <bench_swap>]
# Each case runs the program with one bad value and expects a nonzero exit
# (before any work: no MPI start, no file read) and the words on stderr.
set -u
estimate=$1 ckpt=$2 memory=${3:-} optimizer=${4:-} swap=${5:-}
failures=0 cases=0

expect_refused() { # expected-words program args...
    local words=$1
    shift
    cases=$((cases + 1))
    local err rc
    err=$(timeout 30 "$@" 2>&1 >/dev/null)
    rc=$?
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [[ "$err" != *"$words"* ]]; then
        echo "FAIL: $* exited $rc; expected a refusal containing: $words"
        echo "  stderr: $err"
        failures=$((failures + 1))
    fi
}

expect_refused '--world "2x" is not an integer' "$estimate" --preset 124M --world 2x
expect_refused '--world "0" is too small; the smallest accepted is 1' \
    "$estimate" --preset 124M --world 0
expect_refused '--world "1.5" is not a whole number' "$estimate" --preset 124M --world 1.5
expect_refused '--device-memory "80GiBs" is not a size' \
    "$estimate" --preset 124M --device-memory 80GiBs
expect_refused '--device-memory "" is empty' "$estimate" --preset 124M --device-memory ''
expect_refused '--buffer-bytes "64Mx" is not a size' "$ckpt" export --buffer-bytes 64Mx a b
expect_refused '--buffer-bytes "8" is too small; the smallest accepted is 16 bytes' \
    "$ckpt" export --buffer-bytes 8 a b
if [ -n "$memory" ]; then
    expect_refused '--unit-params "7.5e9x" is not an integer' "$memory" --unit-params 7.5e9x
    expect_refused '--unit-params "99999999999999999999" is too large' \
        "$memory" --unit-params 99999999999999999999
    expect_refused '--units "1.5" is not a whole number' "$memory" --units 1.5
    expect_refused "--max-live needs a value" "$memory" --max-live
fi
if [ -n "$optimizer" ]; then
    expect_refused '--n "1e6x" is not an integer' "$optimizer" --n 1e6x
    expect_refused '--reps "" is empty' "$optimizer" --reps ''
fi
if [ -n "$swap" ]; then
    expect_refused '--block "1M1" is not a size' "$swap" --block 1M1
    expect_refused '--queue "four" is not an integer' "$swap" --queue four
fi

echo "bad_numbers: $cases cases, $failures failed"
[ "$failures" -eq 0 ]
