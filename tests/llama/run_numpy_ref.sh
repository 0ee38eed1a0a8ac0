#!/usr/bin/env bash
# Tiny Llama-family models' loss, logits and every gradient from the C CPU
# backend against an independent numpy implementation (float64).
#   run_numpy_ref.sh <llama_dump_tiny> <llama_numpy_ref.py>
# Exits 77 (ctest SKIP_RETURN_CODE) when python3 or numpy is missing. The
# files go to a fresh temporary directory that is removed on every exit.
set -euo pipefail
dump=$1 checker=$2

if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP: python3 is not installed"
  exit 77
fi
if ! reason=$(python3 -c "import numpy" 2>&1); then
  echo "SKIP: python3 cannot import numpy (${reason##*$'\n'});" \
       "install it with: python3 -m pip install numpy"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/llama_numpy_ref.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$dump" "$work"
python3 "$checker" "$work"/*/
