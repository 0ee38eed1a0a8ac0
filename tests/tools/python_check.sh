#!/usr/bin/env bash
# The export read back by the Python safetensors package (the reader it is
# made for), compared with numpy against the fixture's raw fp32 dump.
#   python_check.sh <zs-ckpt> <make_fixture> <python-check-export.py> <work dir>
# Exits 77 (ctest SKIP_RETURN_CODE) when python3, safetensors or numpy is
# missing; scripts/install-deps.sh tries to install the two packages.
set -euo pipefail
tool=$1 fixture=$2 checker=$3 work=$4/python

if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP: python3 is not installed"
  exit 77
fi
if ! reason=$(python3 -c "import safetensors, numpy" 2>&1); then
  echo "SKIP: python3 cannot import safetensors and numpy (${reason##*$'\n'});" \
       "install them with: python3 -m pip install safetensors numpy"
  exit 77
fi

rm -rf "$work" && mkdir -p "$work"
"$fixture" "$work/ckpt" "$work/expected.f32"
for dtype in fp32 fp16; do
  "$tool" export --dtype "$dtype" --buffer-bytes 4096 "$work/ckpt" "$work/export.$dtype.safetensors"
  python3 "$checker" "$work/export.$dtype.safetensors" "$work/expected.f32" \
    "$work/ckpt/step_00000010/manifest.json" --dtype "$dtype"
done
