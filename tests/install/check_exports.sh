#!/usr/bin/env bash
# The shared library exports exactly the public API: every function declared
# in the public headers, and nothing else (no zs__* internals, no symbols of
# the libraries linked in or of nvcc's objects). Also checks the SONAME.
#
#   check_exports.sh LIBRARY SONAME CC HEADER...
#
# Declarations are read from the headers with comments stripped by the C
# preprocessor (-fpreprocessed: no include is followed), so a name mentioned
# in a comment does not count.
set -euo pipefail

lib=$1 soname=$2 cc=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0

actual_soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
if [ "$actual_soname" != "$soname" ]; then
  echo "FAIL: $lib has SONAME '$actual_soname', expected '$soname'" >&2
  status=1
fi

for h in "$@"; do
  "$cc" -fpreprocessed -dD -E -P -x c "$h"
done | grep -oE '\bzs_[a-z][a-z0-9_]*[[:space:]]*\(' | sed -E 's/[[:space:]]*\($//' |
  sort -u >"$tmp/declared"
nm -D --defined-only "$lib" | awk 'NF >= 3 {sub(/@.*/, "", $3); print $3}' | sort -u >"$tmp/exported"

if [ ! -s "$tmp/declared" ]; then
  echo "FAIL: no function declarations found in $*" >&2
  exit 1
fi

not_api=$(grep -vE '^zs_[a-z]' "$tmp/exported" || true)
if [ -n "$not_api" ]; then
  echo "FAIL: $lib exports symbols outside the public API (fix cmake/zeroshard.map or make them static / zs__):" >&2
  echo "$not_api" | sed 's/^/  /' >&2
  status=1
fi
undeclared=$(comm -13 "$tmp/declared" "$tmp/exported" | grep -E '^zs_[a-z]' || true)
if [ -n "$undeclared" ]; then
  echo "FAIL: $lib exports zs_ functions no public header declares (rename them zs__* or make them static):" >&2
  echo "$undeclared" | sed 's/^/  /' >&2
  status=1
fi
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
if [ -n "$missing" ]; then
  echo "FAIL: functions declared in the public headers but not exported by $lib:" >&2
  echo "$missing" | sed 's/^/  /' >&2
  status=1
fi

if [ "$status" -eq 0 ]; then
  echo "PASS: $lib (SONAME $soname) exports exactly the $(wc -l <"$tmp/declared") functions of $*"
fi
exit "$status"
