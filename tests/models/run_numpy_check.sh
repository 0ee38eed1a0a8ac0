#!/usr/bin/env bash
# A model's C results against an independent numpy implementation: DUMP
# writes the tiny models' inputs and results into a fresh directory (one
# subdirectory per model with `each`), and CHECKER (python3) recomputes and
# compares them (GPT-2: gpt2_dump_tiny and gpt2_numpy_forward.py; the Llama
# family: llama_dump_tiny and llama_numpy_ref.py).
#   run_numpy_check.sh DUMP CHECKER [each]
# Exits 77 (ctest SKIP_RETURN_CODE) when python3 or numpy is missing. The
# files go to a fresh temporary directory that is removed on every exit.
set -euo pipefail
dump=$1 checker=$2 each=${3:-}
source "$(dirname "$0")/needs_numpy.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/model_numpy_check.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$dump" "$work"
if [ "$each" = each ]; then
  python3 "$checker" "$work"/*/
else
  python3 "$checker" "$work"
fi
