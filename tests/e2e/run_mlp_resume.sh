#!/usr/bin/env bash
# The MLP example survives a crash: a run saving every 150 steps is killed
# (ZS_FAULT, rank 0) right after committing step 150; the same command again
# resumes from step 150 (checkpoint.resume = "auto") and still reaches its
# target loss. Usage: run_mlp_resume.sh MPIRUN TRAINER CONFIG
set -u
mpirun=("$1" --oversubscribe --bind-to none -np 2)
trainer=$2 config=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
args=("$config" "checkpoint.dir=$dir" checkpoint.every=150 checkpoint.resume=auto app.log_every=100)
ZS_FAULT=latest:0:150 "${mpirun[@]}" -x ZS_FAULT "$trainer" "${args[@]}" > "$dir/first.log" 2>&1
if [ $? -eq 0 ]; then echo "FAIL: the first run was not killed"; cat "$dir/first.log"; exit 1; fi
if [ ! -d "$dir/step_00000150" ]; then echo "FAIL: step 150 was not committed"; ls -A "$dir"; exit 1; fi
"${mpirun[@]}" "$trainer" "${args[@]}" > "$dir/second.log" 2>&1
rc=$?
cat "$dir/second.log"
if [ $rc -ne 0 ]; then echo "FAIL: the resumed run exited $rc"; exit 1; fi
grep -q "resumed from a checkpoint at step 150" "$dir/second.log" || { echo "FAIL: it did not resume from step 150"; exit 1; }
echo "1 passed, 0 failed"
