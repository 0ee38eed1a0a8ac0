#!/usr/bin/env python3
"""Convergence of the GPT-2 demo with each ZeRO++ / hybrid setting (issue
28): final validation loss against unquantized stage 3, and the loss curves
side by side. A benchmark, not a test: each run is the demo's full length.

    python3 bench/nodes/bench_nodes_convergence.py BUILD_DIR [--out DIR]
        [--png docs/images/nodes_convergence.png] [--steps 1600]
        [--settings "stage 3,qgZ int4,..."] [--val-batches 30] [--val-every 100]

configs/gpt2_demo.cfg (what `make demo` trains: 4 blocks of width 192, T
128, 16 sequences per optimizer step, 1600 steps of warm-up + cosine, bf16,
stage 3) at np 4 as 2 simulated nodes of 2 ranks (comm.ranks_per_node = 2),
with the demo's global batch (app.global_batch = 16: 4 sequences per rank),
sampling off, one OpenMP thread per rank, for each setting: stage 3 plain,
hybrid sharding, qwZ, qwZ + hpZ, qgZ int8, qgZ int4, qwZ + hpZ + qgZ int4.
The validation loss every --val-every steps (the demo's is 400; evaluation
changes no bit of the training) and after the last step is the mean over
app.val_batches = --val-batches global batches of held-out text (the same
sequences in every run); the demo's default of 4 batches (64 sequences) is
raised so that the comparison rests on more text.
Printed: each setting's final validation loss, its difference to stage 3
relative to stage 3's, and the issue's bar (int8 settings within 1%, int4
within 2%; hybrid sharding, unquantized, has none: its difference is what a
change of summation order alone does). Every run's metrics file
(log.metrics_file) is kept in --out; the plot is scripts/plot_metrics.py's
comparison of them (needs matplotlib, found with scripts/find-python.sh;
skipped with a message without it).
"""
import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nodes_common as nc  # noqa: E402

# The unquantized baseline first; then the settings by the bar they face.
SETTINGS = [
    ("stage 3", [], None),
    ("hybrid", [nc.HYBRID], None),
    ("qwZ", [nc.QW], 0.01),
    ("qwZ + hpZ", [nc.QW, nc.HP], 0.01),
    ("qgZ int8", [nc.QG8], 0.01),
    ("qgZ int4", [nc.QG4], 0.02),
    ("qwZ + hpZ + qgZ int4", [nc.QW, nc.HP, nc.QG4], 0.02),
]


def slug(name):
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build")
    ap.add_argument("--out", default="nodes_convergence")
    ap.add_argument("--png", default=os.path.join(nc.SRC, "docs", "images",
                                                   "nodes_convergence.png"))
    ap.add_argument("--steps", type=int, default=1600)
    ap.add_argument("--val-batches", type=int, default=30)
    ap.add_argument("--val-every", type=int, default=100)
    ap.add_argument("--settings", default=",".join(s[0] for s in SETTINGS))
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    os.makedirs(a.out, exist_ok=True)
    wanted = [s.strip() for s in a.settings.split(",")]
    unknown = [w for w in wanted if w not in [s[0] for s in SETTINGS]]
    if unknown:
        sys.exit(f"unknown settings {unknown}; known: {[s[0] for s in SETTINGS]}")
    train = os.path.join(build, "examples", "gpt2", "gpt2_train")
    finals = {}
    known = {s[0]: s for s in SETTINGS}
    for name in wanted:  # in the order given (the longest runs can go last)
        _, ov, bar = known[name]
        metrics = os.path.join(os.path.abspath(a.out), f"{slug(name)}.jsonl")
        log = os.path.join(os.path.abspath(a.out), f"{slug(name)}.log")
        if os.path.exists(metrics):
            os.remove(metrics)
        cmd = nc.mpirun(4) + [
            train, nc.DEMO_CFG, f'app.train_data="{nc.corpus()}"', "app.global_batch=16",
            "comm.ranks_per_node=2", "app.sample_tokens=0", f"app.val_batches={a.val_batches}",
            f"app.val_every={a.val_every}",
            f'log.metrics_file="{metrics}"', 'log.level="warn"', *ov]
        if a.steps != 1600:  # a shorter run keeps the demo's schedule shape
            cmd += [f"app.steps={a.steps}", f"scheduler.total_steps={a.steps}",
                    f"scheduler.warmup_steps={max(1, a.steps // 16)}"]
        t0 = time.time()
        out = nc.run(cmd, what=f"gpt2_train ({name})", timeout=3600)
        with open(log, "w") as f:
            f.write("# " + " ".join(cmd) + "\n" + out)
        m = re.search(r"validation after (\d+) steps: loss ([0-9.]+)", out)
        if not m:
            sys.exit(f"{name}: no final validation loss in {log}")
        finals[name] = float(m.group(2))
        print(f"{name}: validation after {m.group(1)} steps {finals[name]:.4f} "
              f"({time.time() - t0:.0f} s)", flush=True)

    base = finals.get("stage 3")
    print(f"\nGPT-2 demo, np 4 (2 nodes x 2), {a.steps} steps, bf16; final validation loss "
          f"({a.val_batches} x 16 held-out sequences)")
    print(f"{'setting':<24} {'val loss':>9} {'vs stage 3':>11} {'bar':>6} {'met':>4}")
    for name, _, bar in SETTINGS:
        if name not in finals:
            continue
        rel = (finals[name] - base) / base if base else float("nan")
        met = "-" if bar is None else ("yes" if abs(rel) <= bar else "NO")
        print(f"{name:<24} {finals[name]:>9.4f} {rel * 100:>+10.2f}% "
              f"{'-' if bar is None else f'{bar * 100:.0f}%':>6} {met:>4}")

    py = subprocess.run(["bash", os.path.join(nc.SRC, "scripts", "find-python.sh"), "matplotlib"],
                        stdout=subprocess.PIPE, text=True).stdout.strip()
    if not py:
        print("plot: skipped (no Python 3 with matplotlib; scripts/find-python.sh matplotlib)")
        return
    files, labels = [], []
    for name, _, _ in SETTINGS:
        if name in finals:
            files.append(os.path.join(os.path.abspath(a.out), f"{slug(name)}.jsonl"))
            labels += ["--label", name]
    subprocess.run([py, os.path.join(nc.SRC, "scripts", "plot_metrics.py"), *files, *labels,
                    "--out", a.png, "--smooth", "50", "--title",
                    f"GPT-2 demo at np 4 (2 simulated nodes x 2 ranks), bf16, {a.steps} steps"],
                   check=True)


if __name__ == "__main__":
    main()
