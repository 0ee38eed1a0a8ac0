#!/usr/bin/env bash
# Resume is exact: 6 steps straight give the same losses and parameters, bit
# for bit, as 3 steps + checkpoint + a new job resuming (checkpoint.resume =
# "auto") + 3 more steps; the data position travels in the checkpoint (a
# wrong position would feed other batches and change the losses). np 2,
# stage 3, bf16 (master weights, moments and the loss scaler all restored).
# Usage: run_gpt2_resume.sh MPIEXEC gpt2_train zs-ckpt
MPIEXEC=$1 TRAIN=$2 ZSCKPT=$3
source "$(dirname "$0")/e2e_common.sh"

tiny_config "$work/c.cfg" 3 bf16
check_resume "$work/c.cfg"
echo "6 steps straight = 3 + resume + 3, bit for bit (losses, gradient norms, parameters)"
echo "1 passed, 0 failed"
