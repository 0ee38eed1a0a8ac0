#!/usr/bin/env bash
# The tiny GPT-2's loss from the C model against an independent numpy forward.
#   run_numpy_forward.sh <gpt2_dump_tiny> <gpt2_numpy_forward.py>
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

work=$(mktemp -d "${TMPDIR:-/tmp}/gpt2_numpy_forward.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$dump" "$work"
python3 "$checker" "$work"
