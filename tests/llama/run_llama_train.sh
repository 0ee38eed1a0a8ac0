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
MPIEXEC=$1 TRAIN=$2 ZSCKPT=$3
source "$(dirname "$0")/../models/model_runs.sh"

# Two models: untied Llama, and a tied Qwen2 (q/k/v biases, no o_proj bias).
cp "$SRC/tests/llama/shapes/untied.json" "$work/untied.json"
cp "$SRC/tests/llama/shapes/qwen2_tied.json" "$work/tied.json"
config() { # FILE STAGE DTYPE MODEL: the model read from $work/MODEL.json
  model_config "$1" "$2" "$3" "config = \"$work/$4.json\";"
}

for model in untied tied; do
  for np in 1 2 3; do
    dtypes="fp32"
    [ "$np" -eq 2 ] && dtypes="fp32 bf16"
    for dtype in $dtypes; do
      tag=$model.np$np.$dtype
      check_stages "$tag" "$np" "$dtype" "config = \"$work/$model.json\";"
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
check_resume "$work/res.cfg"
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
