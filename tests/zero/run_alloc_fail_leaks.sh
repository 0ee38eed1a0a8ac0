#!/usr/bin/env bash
# test_alloc_fail under AddressSanitizer's leak check: the walk's every
# failure path, then every zs_destroy, must leave no block that zeroshard
# allocated. MPI keeps (and, unloading its plugins at MPI_Finalize, cannot
# even name) blocks of its own until exit, so the check reads the leak
# report and fails on any leak allocated from a function of the runtime
# (every one is named zs_... or zs__...; every allocation of src/ goes through
# core/alloc.c, tests/layering/check_alloc.sh).
#
# Usage: run_alloc_fail_leaks.sh <test_alloc_fail_sanitized> <stage> <offload> <mpirun and its options...>
set -uo pipefail
exe=$1 stage=$2 offload=$3
shift 3
log=$(mktemp /tmp/zs_alloc_leaks_XXXXXX.log)
trap 'rm -f "$log"' EXIT
ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:malloc_context_size=30 \
LSAN_OPTIONS=exitcode=0 \
  "$@" -np 1 "$exe" "$stage" "$offload" >"$log" 2>&1
rc=$?
grep -v "WARN" "$log" | tail -n 20
if [ "$rc" -ne 0 ]; then
    echo "FAIL: the walk itself failed (exit $rc)"
    exit 1
fi
grep -q "test_alloc_fail: stage" "$log" || { echo "FAIL: the walk did not report"; exit 1; }
# Leak records are blank-line separated; keep those through our allocator.
ours=$(awk 'BEGIN{RS=""} /(Direct|Indirect) leak/ && / in zs_[a-z0-9_]+ /' "$log")
if [ -n "$ours" ]; then
    echo "$ours"
    echo "FAIL: blocks allocated by zeroshard were never freed (above)"
    exit 1
fi
others=$(grep -c "leak of" "$log" || true)
echo "PASS: no leak from zeroshard ($others leak record(s) of MPI and its plugins ignored)"
