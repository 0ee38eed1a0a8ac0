#!/usr/bin/env bash
# The 3-minute confirmation after fixes (issue 26): every CUDA test (np 1-3,
# each under its own limit, a failure rerun with CUDA_LAUNCH_BLOCKING=1) and
# one GPT-2 124M speed line (B 16, T 1024, bf16, stage 3, np 1; llm.c beside
# it when .gpu/llmc/train_gpt2cu is carried), in 160 s of script, all logs
# in $OUT/gpu-confirm.tar.gz. It is scripts/gpu-check.sh's confirm mode: see
# that file for the preparation, the budgets and the archive's layout.
#
#   run(command="bash .gpu/run.sh 'bash scripts/gpu-confirm.sh build-gpu'", carry=[".gpu"], timeout_s=240)
exec bash "$(dirname "$0")/gpu-check.sh" "${1:-build-gpu}" confirm
