#!/usr/bin/env bash
# The demo's model learns: a short run of configs/gpt2_demo.cfg (np 2,
# stage 3, bf16) on the Shakespeare corpus ends with a held-out loss below
# the byte unigram baseline (gpt2_train exits 1 otherwise: app.beat_unigram).
# Skipped (77) when the corpus has not been fetched (make's set-up step does).
# Usage: run_gpt2_learns.sh MPIEXEC gpt2_train SOURCE_DIR
set -u
mpiexec=$1 train=$2 src=$3
corpus=$src/data/shakespeare/shakespeare.txt
if [ ! -f "$corpus" ]; then
  echo "SKIP: $corpus is absent (make demo / make test fetch it with scripts/fetch-shakespeare.sh)"
  exit 77
fi
log=$(mktemp /tmp/zs_gpt2_learns.XXXXXX)
trap 'rm -f "$log"' EXIT
"$mpiexec" --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 \
  "$train" "$src/configs/gpt2_demo.cfg" "app.train_data=$corpus" app.steps=150 \
  scheduler.total_steps=150 scheduler.warmup_steps=20 app.val_every=0 app.log_every=50 \
  app.sample_tokens=64 app.beat_unigram=true > "$log" 2>&1
rc=$?
cat "$log"
[ $rc -eq 0 ] || { echo "FAIL: gpt2_train exited $rc"; exit 1; }
grep -q "(below the unigram baseline)" "$log" || { echo "FAIL: no validation below the baseline"; exit 1; }
echo "1 passed, 0 failed"
