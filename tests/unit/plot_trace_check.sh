#!/usr/bin/env bash
# scripts/plot_trace.py on the two sample traces test_trace writes: the
# script must exit 0 and write a non-empty PNG, whole and zoomed. It runs
# under the interpreter that has matplotlib, found by scripts/find-python.sh,
# the rule scripts/install-deps.sh reports with: python3 on PATH, else
# /usr/bin/python3, where apt's python3-matplotlib goes (a pyenv or venv
# python3 first on PATH lacks it). Skipped (77) only where no interpreter has
# matplotlib, which only this script needs.
set -euo pipefail
test_trace=$1
script=$2
python3=$("$(dirname "$script")/find-python.sh" matplotlib) ||
  { echo "skipped: no python3 with matplotlib (scripts/install-deps.sh installs it)"; exit 77; }
echo "plot_trace.py under $python3"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
TRACE_TEST_KEEP="$dir" "$test_trace" >/dev/null 2>&1
"$python3" "$script" "$dir/trace-0.json" "$dir/trace-1.json" --out "$dir/all.png"
"$python3" "$script" "$dir/trace-0.json" "$dir/trace-1.json" --start-ms 0 --end-ms 20 \
  --title "zoom" --out "$dir/zoom.png"
for f in all zoom; do
  [ -s "$dir/$f.png" ] || { echo "FAIL: $f.png was not written"; exit 1; }
  head -c 8 "$dir/$f.png" | od -An -c | grep -q "P   N   G" || { echo "FAIL: $f.png is not a PNG"; exit 1; }
done
# A file that does not exist is an error (1), not a traceback.
rc=0
"$python3" "$script" "$dir/missing.json" --out "$dir/x.png" 2>/dev/null || rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: a missing file gave exit status $rc, not 1"; exit 1; }
echo "plot_trace.py: ok"
