#!/usr/bin/env bash
# A Hugging Face checkpoint in and out through the Llama family's trainer
# code, against Hugging Face's own outputs (tests/llama/golden, made by
# LlamaForCausalLM):
#   - the golden weights written as that library saves them (one file, and
#     three shards with an index; an inv_freq buffer per layer, ignored), in
#     the untied and the tied-with-biases variants, imported at np 1-3 in
#     stages 0-3: every position's logits within 1e-5 of LlamaForCausalLM's;
#   - the import saved and exported (zs-ckpt export --hf): the same tensors,
#     bit for bit, metadata format pt, the config.json that came in;
#   - one micro-step and an SGD step through the trainer's code: every
#     parameter's gradient as LlamaForCausalLM's (check_grads.py), at np 1-3
#     in stages 0-3.
# Usage: run_llama_import.sh MPIEXEC test_llama_import zs-ckpt
set -u
MPIEXEC=$1 TEST=$2 ZSCKPT=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/zs_llama_import.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v python3 > /dev/null || { echo "SKIP: python3 is missing"; exit 77; }

for variant in untied tied_biases; do
  python3 "$here/golden_to_hf.py" "$here/golden/$variant" "$work/$variant.single" ||
    fail "writing $variant as one file"
  python3 "$here/golden_to_hf.py" "$here/golden/$variant" "$work/$variant.sharded" --shards 3 ||
    fail "writing $variant as shards"
  for np in 1 2 3; do
    for stage in 0 1 2 3; do
      # One file at np 1 and 3, the shards at np 2 (each rank opens only the
      # shards holding its ranges).
      src=$work/$variant.single
      [ "$np" -eq 2 ] && src=$work/$variant.sharded
      ckpt=$work/ckpt.$variant.np$np.s$stage
      mkdir -p "$ckpt"
      log=$work/$variant.np$np.s$stage.log
      "$MPIEXEC" --oversubscribe --bind-to none -np "$np" -x OMP_NUM_THREADS=1 \
          -x OPENBLAS_NUM_THREADS=1 "$TEST" "$src" "$here/golden/$variant" "$stage" "$ckpt" \
          > "$log" 2>&1 || { cat "$log"; fail "$variant at np $np, stage $stage"; }
    done
  done
  grep -h "logits within" "$work/$variant".np*.s*.log | head -1 | sed "s/^/$variant: /"
  for np in 1 2 3; do
    for stage in 0 1 2 3; do
      ckpt=$work/ckpt.$variant.np$np.s$stage
      for when in before after; do
        "$ZSCKPT" export --dtype fp32 "$ckpt/$when" "$ckpt/$when.safetensors" > /dev/null ||
          fail "zs-ckpt export $ckpt/$when"
      done
      python3 "$here/check_grads.py" "$here/golden/$variant" "$ckpt/before.safetensors" \
          "$ckpt/after.safetensors" 8 > "$work/grads.log" ||
        { cat "$work/grads.log"; fail "$variant at np $np, stage $stage: gradients"; }
    done
  done
  sed "s/^/$variant: /" "$work/grads.log"
  # The stage-3 checkpoint at np 3 exported in fp32 must give back the input.
  "$ZSCKPT" export --hf "$work/$variant.export" --dtype fp32 "$work/ckpt.$variant.np3.s3/before" \
      > "$work/export.log" 2>&1 || { cat "$work/export.log"; fail "zs-ckpt export --hf"; }
  python3 "$here/../checkpoint/hf_checkpoint.py" compare "$work/$variant.single" \
      "$work/$variant.export" --files 1 --config "$here/golden/$variant/config.json" \
      --ignore rotary_emb.inv_freq || fail "$variant: the export differs from the import"
  echo "$variant: imported at np 1-3, stages 0-3, logits and gradients as LlamaForCausalLM's; exported bit for bit"
done
echo "2 passed, 0 failed"
