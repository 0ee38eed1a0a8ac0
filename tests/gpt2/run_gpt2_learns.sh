#!/usr/bin/env bash
# The demo's model learns: a short run of configs/gpt2_demo.cfg (np 2,
# stage 3, bf16) on the Shakespeare corpus ends with a held-out loss below
# the byte unigram baseline (gpt2_train exits 1 otherwise: app.beat_unigram),
# and its log.metrics_file has a line per step, the last one carrying the
# final validation loss the program printed.
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
metrics=$(mktemp /tmp/zs_gpt2_learns_metrics.XXXXXX)
trap 'rm -f "$log" "$metrics"' EXIT
"$mpiexec" --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 \
  "$train" "$src/configs/gpt2_demo.cfg" "app.train_data=$corpus" app.steps=150 \
  scheduler.total_steps=150 scheduler.warmup_steps=20 app.val_every=0 app.log_every=50 \
  app.sample_tokens=64 app.beat_unigram=true "log.metrics_file=\"$metrics\"" > "$log" 2>&1
rc=$?
cat "$log"
[ $rc -eq 0 ] || { echo "FAIL: gpt2_train exited $rc"; exit 1; }
grep -q "(below the unigram baseline)" "$log" || { echo "FAIL: no validation below the baseline"; exit 1; }
lines=$(grep -c . "$metrics")
[ "$lines" -eq 150 ] || { echo "FAIL: the metrics file has $lines lines, not 150"; exit 1; }
printed=$(sed -n 's/^validation after 150 steps: loss \([0-9.]*\).*/\1/p' "$log")
logged=$(tail -n 1 "$metrics" | sed -n 's/.*"val_loss":\([-0-9.e]*\).*/\1/p')
[ -n "$printed" ] && [ -n "$logged" ] &&
  [ "$(LC_ALL=C printf '%.6f' "$logged")" = "$printed" ] ||
  { echo "FAIL: the last metrics line's val_loss '$logged' is not the printed '$printed'"; exit 1; }
echo "1 passed, 0 failed"
