#!/usr/bin/env bash
# The Llama family's trainer (llama_train) as a user runs it, on a tiny
# model read from a Hugging Face config.json (grouped-query attention with
# two query heads per K/V head, sizes that do not divide evenly), trained on
# the project's own documentation as bytes:
#   - stages 0-3 give bit-identical losses, gradient norms and parameters
#     (exported) at np 1, 2 and 3, untied (the embedding's gradient opened
#     without a gather) and tied with Qwen2's q/k/v biases (the embedding
#     fetched again for the head), in fp32 and, at np 2, bf16;
#   - recomputed activations give the same bits;
#   - 6 steps straight = 3 + checkpoint + resume + 3, bit for bit;
#   - the checkpoint carries the model's config.json, which zs-ckpt export
#     --hf writes beside the weights with torch_dtype the dtype written.
# Usage: run_llama_train.sh MPIEXEC llama_train zs-ckpt
set -u
MPIEXEC=$1 TRAIN=$2 ZSCKPT=$3
SRC=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/zs_llama_e2e.XXXXXX)
trap 'rm -rf "$work"' EXIT
cat "$SRC"/README.md "$SRC"/docs/*.md > "$work/corpus.txt"
fail() { echo "FAIL: $*"; exit 1; }

run() {
  local np=$1 log=$2
  shift 2
  "$MPIEXEC" --oversubscribe --bind-to none -np "$np" -x OMP_NUM_THREADS=1 \
      -x OPENBLAS_NUM_THREADS=1 "$TRAIN" "$@" > "$log" 2>&1 || { cat "$log"; fail "llama_train $*"; }
}

# Two models: untied Llama, and a tied Qwen2 (q/k/v biases, no o_proj bias).
cp "$SRC/tests/llama/shapes/untied.json" "$work/untied.json"
cp "$SRC/tests/llama/shapes/qwen2_tied.json" "$work/tied.json"
config() { # FILE STAGE DTYPE MODEL
  cat > "$1" <<CFG
zero: { stage = $2; align = 16; };
precision: { dtype = "$3"; };
optimizer: { type = "adamw"; lr = 3e-3; weight_decay = 0.1; };
gradient_clipping = 1.0;
log: { level = "warn"; };
app: {
  config = "$work/$4.json"; seq_len = 16;
  train_data = "$work/corpus.txt"; val_fraction = 0.1; val_every = 0; val_batches = 1;
  sample_tokens = 0; log_every = 1;
};
CFG
}
export_ckpt() { "$ZSCKPT" export "$1" "$2" > /dev/null || fail "zs-ckpt export $1"; }

for model in untied tied; do
  for np in 1 2 3; do
    dtypes="fp32"
    [ "$np" -eq 2 ] && dtypes="fp32 bf16"
    for dtype in $dtypes; do
      tag=$model.np$np.$dtype
      for stage in 0 1 2 3; do
        config "$work/c.cfg" "$stage" "$dtype" "$model"
        run "$np" "$work/$tag.s$stage.log" "$work/c.cfg" app.steps=3 app.batch_size=2 \
            "checkpoint.dir=$work/ckpt.$tag.s$stage" checkpoint.every=3 \
            "app.loss_log=$work/$tag.s$stage.loss"
        export_ckpt "$work/ckpt.$tag.s$stage" "$work/$tag.s$stage.safetensors"
        [ "$(wc -l < "$work/$tag.s$stage.loss")" -eq 3 ] || fail "$tag stage $stage: expected 3 loss lines"
      done
      for stage in 1 2 3; do
        cmp -s "$work/$tag.s0.loss" "$work/$tag.s$stage.loss" ||
          { paste "$work/$tag.s0.loss" "$work/$tag.s$stage.loss"; fail "$tag: stage $stage losses differ from stage 0"; }
        cmp -s "$work/$tag.s0.safetensors" "$work/$tag.s$stage.safetensors" ||
          fail "$tag: stage $stage parameters are not bit-identical to stage 0"
      done
      echo "$tag: stages 0-3 bit-identical (losses, norms, parameters)"
    done
  done
done

# Recomputation changes memory, not results.
config "$work/r.cfg" 3 bf16 untied
run 2 "$work/recompute.log" "$work/r.cfg" app.steps=3 app.batch_size=2 app.recompute=true \
    "checkpoint.dir=$work/ckpt.recompute" checkpoint.every=3 "app.loss_log=$work/recompute.loss"
export_ckpt "$work/ckpt.recompute" "$work/recompute.safetensors"
cmp -s "$work/untied.np2.bf16.s3.loss" "$work/recompute.loss" &&
  cmp -s "$work/untied.np2.bf16.s3.safetensors" "$work/recompute.safetensors" ||
  fail "app.recompute = true changed the results"
echo "recompute: bit-identical to stored activations"

# Resume: np 2, stage 3, bf16, the tied model.
config "$work/res.cfg" 3 bf16 tied
common=(app.batch_size=2 checkpoint.every=3)
run 2 "$work/straight.log" "$work/res.cfg" "${common[@]}" app.steps=6 \
    "checkpoint.dir=$work/straight" "app.loss_log=$work/straight.loss"
run 2 "$work/first.log" "$work/res.cfg" "${common[@]}" app.steps=3 \
    "checkpoint.dir=$work/split" "app.loss_log=$work/first.loss"
run 2 "$work/second.log" "$work/res.cfg" "${common[@]}" app.steps=6 checkpoint.resume=auto \
    "checkpoint.dir=$work/split" "app.loss_log=$work/second.loss"
grep -q "resumed at step 3, data position 12" "$work/second.log" ||
  { cat "$work/second.log"; fail "the second job did not resume at step 3, data position 12"; }
cat "$work/first.loss" "$work/second.loss" > "$work/split.loss"
cmp -s "$work/straight.loss" "$work/split.loss" ||
  { paste "$work/straight.loss" "$work/split.loss"; fail "losses differ after resuming"; }
export_ckpt "$work/straight" "$work/straight.safetensors"
export_ckpt "$work/split" "$work/split.safetensors"
cmp -s "$work/straight.safetensors" "$work/split.safetensors" ||
  fail "parameters after 6 steps differ between the straight and the resumed run"
echo "6 steps straight = 3 + resume + 3, bit for bit"

# The model's config travels with the checkpoint and comes out with the export.
"$ZSCKPT" export --hf "$work/hf" "$work/split" > "$work/hf.log" 2>&1 || { cat "$work/hf.log"; fail "export --hf"; }
# The same keys and values, with the dtype of the weights written (bf16
# training exports bf16) added as torch_dtype, which the trained file lacks.
python3 - "$work/tied.json" "$work/hf/config.json" <<'PY' || fail "the exported config.json is not the one trained"
import json, sys
want = dict(json.load(open(sys.argv[1])), torch_dtype="bfloat16")
got = json.load(open(sys.argv[2]))
if got != want:
    sys.exit(f"exported {got}\nexpected {want}")
PY
[ -f "$work/hf/model.safetensors" ] || fail "export --hf wrote no model.safetensors"
echo "export --hf: weights and the model's own config.json"
echo "4 passed, 0 failed"
