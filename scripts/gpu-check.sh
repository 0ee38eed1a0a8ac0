#!/usr/bin/env bash
# The prepared device check for a session that is lent a GPU (15 minutes of
# device time in all, at most 10 per call): the CUDA tests and the GPU
# benchmarks of issues 19-21, in two calls of under 10 minutes each, most
# important first. Each part runs under its own limit, so a hang in one
# still leaves the others' results; each part's whole output goes to
# $OUT/gpu-check-<part>.log and its last lines and exit status to stdout.
#
# Here (no GPU needed):
#   cmake -S . -B build-gpu -DZS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-gpu -j
#   bash ../shared/gpu/bundle.sh build-gpu
# Then one device call per half:
#   run(command="bash .gpu/run.sh 'bash scripts/gpu-check.sh build-gpu 1'", carry=[".gpu"], timeout_s=600)
#   run(command="bash .gpu/run.sh 'bash scripts/gpu-check.sh build-gpu 2'", carry=[".gpu"], timeout_s=600)
# and write what it printed, with the GPU's name, into docs/BENCHMARKS.md and docs/GPU.md.
set -u
build=${1:-build-gpu}
half=${2:-1}
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
cd "$(dirname "$0")/.." || exit 1

part() {
    local name=$1 limit=$2
    shift 2
    local start rc
    start=$(date +%s)
    timeout -k 5 "$limit" bash -c "$*" >"$out/gpu-check-$name.log" 2>&1
    rc=$?
    echo "=== gpu-check $name: exit $rc after $(($(date +%s) - start)) s (limit $limit s)"
    tail -n 25 "$out/gpu-check-$name.log"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
case $half in
1)
    # Correctness first: every CUDA test (np 1-3, ranks sharing the GPU).
    part cuda-tests 300 "cd '$build' && ctest -L cuda --output-on-failure --timeout 240"
    # The runtime's kernels against a device copy (issue 20, item 5).
    part optimizer 60 "'$build/bench/optimizer/bench_optimizer' --backend cuda"
    # GPT-2 124M tokens/s, TFLOP/s, MFU (issue 20's goal).
    part gpt2 200 "bash bench/gpt2/bench_gpt2_cuda.sh '$build' 10"
    ;;
2)
    # Pinned allocation rate against cudaHostAlloc (issue 21, the fast start).
    part host-alloc 90 "'$build/bench/offload/bench_host_alloc' --gb 8 --reps 2 --cuda"
    # The offload pipeline: 774M and 1558M, B 4 and 8 (issue 21's goal).
    part offload 330 "BACKEND=cuda bash bench/offload/bench_offload_pipeline.sh '$build' 6"
    # Memory errors in the runtime's kernels.
    part sanitizer 150 "compute-sanitizer --tool memcheck --leak-check full '$build/tests/cuda/test_cuda_kernels'"
    ;;
*)
    echo "usage: gpu-check.sh BUILD_DIR 1|2" >&2
    exit 2
    ;;
esac
