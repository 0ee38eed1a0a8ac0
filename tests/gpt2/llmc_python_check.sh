#!/usr/bin/env bash
# The llm.c model reader (gpt2_llmc) against model files written by numpy
# (write_llmc_gpt2.py) for several tiny shapes: every tensor of ours is read
# in odd-sized ranges and compared bit for bit with the writer's raw export.
#   llmc_python_check.sh <test_gpt2_llmc> <write_llmc_gpt2.py>
# Exits 77 (ctest SKIP_RETURN_CODE) when python3 or numpy is missing.
set -euo pipefail
test_exe=$1 writer=$2

source "$(dirname "$0")/../models/needs_numpy.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/gpt2_llmc_python.XXXXXX")
trap 'rm -rf "$work"' EXIT

# layers heads channels vocab padded_vocab max_seq_len: the brief's shape,
# no padding with a single layer, and a wider one with odd sizes.
for shape in "2 2 8 11 16 12" "1 1 4 5 5 3" "3 4 12 50 64 7"; do
  read -r L H C V VP T <<<"$shape"
  rm -rf "$work/raw"
  python3 "$writer" --layers "$L" --heads "$H" --channels "$C" --vocab "$V" \
    --padded-vocab "$VP" --max-seq-len "$T" --seed "$((L * 1000 + C))" \
    --model "$work/model.bin" --npz "$work/expected.npz" --raw-dir "$work/raw"
  echo "shape L=$L heads=$H C=$C V=$V Vp=$VP maxT=$T"
  "$test_exe" "$work/model.bin" "$work/raw"
done
