#!/usr/bin/env bash
# zs-ckpt export --hf on the checkpoints test_hf_import saved (run ... save,
# np 3) from Hugging Face files, each export compared by hf_checkpoint.py
# with the files it was imported from: the same tensors bit for bit,
# metadata {"format": "pt"}, a valid index when sharded, config.json as given
# with its torch_dtype the exported dtype (kept byte for byte where it said
# so already), and the tokenizer files as given.
#   run_hf_export.sh <zs-ckpt> <hf_checkpoint.py> <work dir>
set -euo pipefail
tool=$1 checker=$2 work=$3
out=$work/export
rm -rf "$out" && mkdir -p "$out/tokenizer"
printf '{"model_max_length": 2048}\n' >"$out/tokenizer/tokenizer_config.json"
printf '{"version": "1.0", "model": {"type": "BPE"}}\n' >"$out/tokenizer/tokenizer.json"
printf '\x00\x01binary\xff' >"$out/tokenizer/tokenizer.model"

fail() { echo "run_hf_export: FAIL: $*" >&2; exit 1; }
compare() { python3 "$checker" compare "$@" || fail "compare $*"; }

# bf16 training, exported in its own dtype by default, sharded by a small
# limit (three files: each shard takes tensors until the next would pass it).
"$tool" export --hf "$out/bf16" --max-shard-bytes 2000 --tokenizer-from "$out/tokenizer" \
  --quiet "$work/saved_bf16" >"$out/bf16.txt"
grep -q "bf16" "$out/bf16.txt" || fail "bf16 export: $(cat "$out/bf16.txt")"
files=$(ls "$out/bf16"/model-*-of-*.safetensors | wc -l)
[ "$files" -gt 1 ] || fail "a 2000-byte shard limit gave $files files"
compare "$work/sharded_BF16" "$out/bf16" --files "$files" --config "$work/config.json" \
  --tokenizer "$out/tokenizer" --ignore rotary_emb.inv_freq
cmp -s "$out/bf16/config.json" "$work/config.json" ||
  fail "the bf16 export rewrote a config.json whose torch_dtype was bfloat16 already"

# fp16 from a checkpoint without config.json: one model.safetensors under
# the default 5GB limit, and a note that no config.json was written.
"$tool" export --hf "$out/f16" --dtype fp16 --quiet "$work/saved_f16" >"$out/f16.txt"
grep -q "no config.json written" "$out/f16.txt" || fail "no note on config.json: $(cat "$out/f16.txt")"
compare "$work/single_F16" "$out/f16" --files 1 --ignore rotary_emb.inv_freq

# fp32 with a 1-byte limit: every tensor in a file of its own.
"$tool" export --hf "$out/f32" --max-shard-bytes 1 --quiet "$work/saved_f32" >/dev/null
compare "$work/sharded_F32" "$out/f32" --files 24 --config "$work/config.json" \
  --ignore rotary_emb.inv_freq
# The checkpoint's config.json said bfloat16; the weights written are fp32.
grep -q '"torch_dtype": "float32"' "$out/f32/config.json" ||
  fail "the fp32 export's config.json: $(cat "$out/f32/config.json")"

# Refusals: an existing non-empty directory (untouched, no temporary
# directory left beside it), options of --hf without it.
mkdir -p "$out/taken" && echo keep >"$out/taken/file"
if "$tool" export --hf "$out/taken" --quiet "$work/saved_f32" 2>"$out/taken.err"; then
  fail "export into a non-empty directory succeeded"
fi
grep -q "exists and is not empty" "$out/taken.err" || fail "$(cat "$out/taken.err")"
[ "$(cat "$out/taken/file")" = keep ] || fail "the existing directory was changed"
if ls -a "$out" | grep -q '\.tmp\.'; then fail "a temporary directory was left: $(ls -a "$out")"; fi
set +e
"$tool" export --max-shard-bytes 1 "$work/saved_f32" "$out/x.safetensors" 2>"$out/usage.err"
status=$?
set -e
[ "$status" = 2 ] && grep -q "is an option of export --hf" "$out/usage.err" ||
  fail "--max-shard-bytes without --hf: status $status, $(cat "$out/usage.err")"
echo "run_hf_export: OK"
