#!/usr/bin/env bash
# scripts/plot_metrics.py on metrics files written here in the format of
# log.metrics_file: one run (the four panels) and three runs side by side
# (the comparison bench/nodes/bench_nodes_convergence.py draws), each must
# exit 0 and write a PNG; a --label count that does not match the files is
# refused (2) before anything is read, and a missing file is an error (1),
# not a traceback. Runs under the interpreter that has matplotlib
# (scripts/find-python.sh); skipped (77) only where none has it.
set -euo pipefail
script=$1
python3=$("$(dirname "$script")/find-python.sh" matplotlib) ||
  { echo "skipped: no python3 with matplotlib (scripts/install-deps.sh installs it)"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Three runs of 60 steps, a validation every 20, each a little worse.
"$python3" - "$dir" <<'PY'
import json, math, sys
for k, name in enumerate(("a", "b", "c")):
    with open(f"{sys.argv[1]}/{name}.jsonl", "w") as f:
        for s in range(1, 61):
            scalars = {"loss": 3.0 * math.exp(-s / 30) + 0.01 * k}
            if s % 20 == 0:
                scalars["val_loss"] = scalars["loss"] + 0.05
            f.write(json.dumps({"step": s, "lr": 1e-3, "loss_scale": 65536.0,
                                "skipped": s == 7, "scalars": scalars,
                                "time_ms": {"step": 10.0, "compute": 7.0, "exposed_comm": 1.0,
                                            "optimizer": 1.5, "checkpoint": 0.5}}) + "\n")
PY
"$python3" "$script" "$dir/a.jsonl" --out "$dir/one.png"
"$python3" "$script" "$dir/a.jsonl" "$dir/b.jsonl" "$dir/c.jsonl" --label A --label B --label C \
  --smooth 5 --title "three runs" --out "$dir/three.png" | tee "$dir/out.txt"
grep -q "(3 runs)" "$dir/out.txt" || { echo "FAIL: the comparison did not draw 3 runs"; exit 1; }
for f in one three; do
  [ -s "$dir/$f.png" ] || { echo "FAIL: $f.png was not written"; exit 1; }
  head -c 8 "$dir/$f.png" | od -An -c | grep -q "P   N   G" || { echo "FAIL: $f.png is not a PNG"; exit 1; }
done
rc=0
"$python3" "$script" "$dir/a.jsonl" "$dir/b.jsonl" --label A --out "$dir/x.png" 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: 1 --label for 2 files gave exit status $rc, not 2"; exit 1; }
rc=0
"$python3" "$script" "$dir/a.jsonl" "$dir/missing.jsonl" --out "$dir/x.png" 2>/dev/null || rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: a missing file gave exit status $rc, not 1"; exit 1; }
echo "plot_metrics.py: ok"
