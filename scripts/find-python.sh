#!/usr/bin/env bash
# Prints the path of the first Python 3 interpreter that imports every module
# named on the command line, or exits 1 (printing nothing). The one rule
# scripts/install-deps.sh and the tests share for finding the interpreter its
# Python packages went to:
#   1. python3 on PATH (where `python3 -m pip` installs, a pyenv or venv
#      Python included);
#   2. /usr/bin/python3, the interpreter Debian's python3-* packages (which
#      install-deps.sh installs with apt) are built for: with a pyenv or venv
#      python3 first on PATH, apt's matplotlib is found only here.
# Usage: find-python.sh <module>...   e.g. find-python.sh matplotlib
set -u
[ $# -ge 1 ] || { echo "usage: find-python.sh <module>..." >&2; exit 2; }
imports=$(printf 'import %s; ' "$@")
candidates=()
if found=$(command -v python3 2>/dev/null); then candidates+=("$found"); fi
candidates+=(/usr/bin/python3)
for python in "${candidates[@]}"; do
    if [ -x "$python" ] && "$python" -c "$imports" >/dev/null 2>&1; then
        # pyenv's shim resolves to a version that may change; name the
        # interpreter itself.
        "$python" -c 'import sys; print(sys.executable)'
        exit 0
    fi
done
exit 1
