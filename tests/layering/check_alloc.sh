#!/usr/bin/env bash
# One door for host memory: every allocation of the library goes through
# src/core/alloc.c (zs__malloc, zs__calloc, ...), whose test hook lets
# test_alloc_fail walk every out-of-memory path. A raw malloc, calloc,
# realloc, aligned_alloc, posix_memalign or strdup anywhere else in src/
# fails this check (comments aside).
#
# Usage: check_alloc.sh <repository root>
set -euo pipefail
root=${1:?usage: check_alloc.sh <repository root>}
found=$(grep -rn --include='*.c' --include='*.h' --include='*.cu' -E \
    '(^|[^[:alnum:]_.>])(malloc|calloc|realloc|aligned_alloc|posix_memalign|strdup|strndup)\(' \
    "$root/src" | grep -v '^[^:]*/src/core/alloc\.c:' |
    grep -Ev '^[^:]+:[0-9]+:[[:space:]]*(/?\*|//)' || true)
if [[ -n $found ]]; then
    echo "$found" >&2
    echo "check_alloc: allocate through src/core/alloc.h (zs__malloc, zs__calloc, zs__realloc, zs__aligned_alloc, zs__strdup)" >&2
    exit 1
fi
echo "check_alloc: every allocation of src/ goes through core/alloc.c"
