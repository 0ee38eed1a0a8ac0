#!/usr/bin/env bash
# Every ZS_ environment variable is read through the registry of
# src/core/env.c (name, type, default, docs/env-vars.md): a getenv of a ZS_
# name anywhere else in the library or the tools fails this check.
#
# Usage: check_env.sh <repository root>
set -euo pipefail
root=${1:?usage: check_env.sh <repository root>}
found=$(grep -rn --include='*.c' --include='*.h' --include='*.cu' -E 'getenv\("ZS_' \
    "$root/src" "$root/tools" "$root/kernels" || true)
if [[ -n $found ]]; then
    echo "$found" >&2
    echo "check_env: read these through src/core/env.h (zs__env_text and its typed readers) and register them there" >&2
    exit 1
fi
echo "check_env: no ZS_ variable is read around the registry"
