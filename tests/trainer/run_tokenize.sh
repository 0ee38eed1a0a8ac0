#!/usr/bin/env bash
# The tokenizing scripts as a user runs them (scripts/tokenize_text.py and
# scripts/decode_tokens.py, Hugging Face's `tokenizers`): a small byte-level
# BPE tokenizer is trained here and saved as a model directory would hold it
# (tokenizer.json, tokenizer_config.json naming the BOS token); two text
# files become uint32 shards (Llama 3's format, with a held-out shard) that
# the trainer's reader opens with the token count the script printed; the
# ids of a prompt decode back to the prompt through the decode filter, as a
# sample's "[id]" tokens do; --format gpt2 writes uint16 shards.
# Skipped (77) without python3's tokenizers package (scripts/install-deps.sh
# installs it).
# Usage: run_tokenize.sh data_info
set -u
INFO=$1
here=$(cd "$(dirname "$0")" && pwd)
scripts=$here/../../scripts
python3 -c "import tokenizers" 2> /dev/null || { echo "SKIP: python3 has no tokenizers package (pip install tokenizers)"; exit 77; }
work=$(mktemp -d /tmp/zs_tokenize.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

python3 - "$work/model" <<'PY' || fail "training the test tokenizer"
import os, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
out = sys.argv[1]
os.makedirs(out)
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<s>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(["To be, or not to be, that is the question. " * 30,
                         "Whether 'tis nobler in the mind to suffer"], trainer)
tok.save(os.path.join(out, "tokenizer.json"))
with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
    f.write('{"bos_token": "<s>"}')
PY
printf 'To be, or not to be: that is the question.\n' > "$work/a.txt"
printf 'Whether tis nobler in the mind to suffer — the slings.\n' > "$work/b.txt"
python3 "$scripts/tokenize_text.py" --tokenizer "$work/model" --out "$work/text" --bos \
    --val-tokens 5 "$work/a.txt" "$work/b.txt" > "$work/tok.log" || { cat "$work/tok.log"; fail "tokenize_text.py"; }
total=$(sed -n "s/.*text_000000.bin: \([0-9,]*\) tokens/\1/p" "$work/tok.log" | tr -d ,)
[ -n "$total" ] && [ "$total" -gt 8 ] || { cat "$work/tok.log"; fail "no training shard written"; }
"$INFO" "$work/text_000000.bin" 4 0 320 > "$work/info.log" 2>&1 || { cat "$work/info.log"; fail "the reader refused the shard"; }
grep -q "tokens *$total," "$work/info.log" || { cat "$work/info.log"; fail "the reader saw another token count than $total"; }
"$INFO" "$work/text_val_000000.bin" 2 0 320 > "$work/val.log" 2>&1 && grep -q "tokens *5," "$work/val.log" ||
  { cat "$work/val.log"; fail "the held-out shard"; }
ids=$(python3 "$scripts/tokenize_text.py" --tokenizer "$work/model" --ids "To be, or not") || fail "--ids"
bracketed=$(echo "$ids" | sed 's/\([0-9][0-9]*\)/[\1]/g; s/ //g')
decoded=$(echo "sample: $bracketed." | python3 "$scripts/decode_tokens.py" --tokenizer "$work/model")
[ "$decoded" = "sample: To be, or not." ] || fail "decoded \"$decoded\""
python3 "$scripts/tokenize_text.py" --tokenizer "$work/model" --out "$work/g2" --format gpt2 \
    "$work/a.txt" > /dev/null || fail "--format gpt2"
"$INFO" "$work/g2_000000.bin" 4 0 320 > /dev/null 2>&1 || fail "the uint16 shard"
echo "tokenize_text.py: $total tokens in Llama 3's format read back; ids decode to their text"
echo "1 passed, 0 failed"
