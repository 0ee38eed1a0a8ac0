#!/usr/bin/env python3
"""Plots a zeroshard metrics file (log.metrics_file: one JSON line per
optimizer step) to a PNG: the program's loss (and val_loss when logged), the
learning rate, the loss scale, and the step time split into compute, exposed
communication, optimizer and checkpoint.

    python3 scripts/plot_metrics.py metrics.jsonl --out metrics.png [--title T]

With several files, the runs' losses side by side instead: the training
loss (a moving average of --smooth steps), the validation loss at each
evaluation, and each run's validation loss relative to the first file's:

    python3 scripts/plot_metrics.py a.jsonl b.jsonl --label A --label B \
        --out compare.png [--smooth 50] [--title T]

Needs matplotlib (python3 -m pip install matplotlib, or Debian's
python3-matplotlib); exits 2 with that advice without it."""
import argparse
import json
import math
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics", nargs="+")
    ap.add_argument("--out", default="metrics.png")
    ap.add_argument("--title", default=None)
    ap.add_argument("--label", action="append", default=[],
                    help="a run's name in the legend, once per file (default: the file name)")
    ap.add_argument("--smooth", type=int, default=1,
                    help="several files: the training loss's moving average, in steps")
    a = ap.parse_args()
    if a.label and len(a.label) != len(a.metrics):
        print(f"plot_metrics.py: {len(a.label)} --label for {len(a.metrics)} files",
              file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_metrics.py: matplotlib is missing; install it with "
              "'python3 -m pip install matplotlib' or 'apt-get install python3-matplotlib'",
              file=sys.stderr)
        return 2
    runs = []
    for path in a.metrics:
        rows = read(path)
        if rows is None:
            return 1
        runs.append(rows)
    if len(runs) > 1:
        return compare(plt, a, runs)
    rows = runs[0]
    step = list(range(1, len(rows) + 1))  # attempted steps, skipped ones included
    fig, ax = plt.subplots(2, 2, figsize=(12, 7))
    loss = [r["scalars"].get("loss", math.nan) for r in rows]
    ax[0][0].plot(step, loss, label="loss (train)", color="tab:blue")
    val = [(s, r["scalars"]["val_loss"]) for s, r in zip(step, rows) if "val_loss" in r["scalars"]]
    if val:
        ax[0][0].plot([s for s, _ in val], [v for _, v in val], "o-", label="val_loss", color="tab:orange")
    ax[0][0].set_title("loss")
    ax[0][0].legend()
    ax[0][1].plot(step, [r["lr"] for r in rows], color="tab:green")
    ax[0][1].set_title("learning rate")
    ax[1][0].semilogy(step, [r["loss_scale"] for r in rows], color="tab:red")
    skipped = [s for s, r in zip(step, rows) if r["skipped"]]
    if skipped:
        ax[1][0].plot(skipped, [rows[s - 1]["loss_scale"] for s in skipped], "x", color="black",
                      label="skipped")
        ax[1][0].legend()
    ax[1][0].set_title("loss scale")
    parts = ["compute", "exposed_comm", "optimizer", "checkpoint"]
    bottom = [0.0] * len(rows)
    for p in parts:
        values = [r["time_ms"][p] for r in rows]
        ax[1][1].bar(step, values, bottom=bottom, width=1.0, label=p)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax[1][1].set_title("step time (ms)")
    ax[1][1].legend(fontsize=8)
    for axis in ax.flat:
        axis.set_xlabel("step")
    fig.suptitle(a.title or a.metrics[0])
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"plot_metrics.py: wrote {a.out} ({len(rows)} steps)")
    return 0


def read(path):
    """The file's lines, or None after saying why not."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    rows.append(json.loads(line))
    except (OSError, ValueError) as e:
        print(f"plot_metrics.py: {path}: {e}", file=sys.stderr)
        return None
    if not rows:
        print(f"plot_metrics.py: {path} holds no steps", file=sys.stderr)
        return None
    return rows


def moving_average(values, n):
    out, total, window = [], 0.0, []
    for v in values:
        window.append(v)
        total += v
        if len(window) > n:
            total -= window.pop(0)
        out.append(total / len(window))
    return out


def compare(plt, a, runs):
    """Several runs' losses side by side; the first run is the reference."""
    labels = a.label or a.metrics
    fig, ax = plt.subplots(1, 3, figsize=(16, 5))
    vals, tails = [], []
    for i, (rows, label) in enumerate(zip(runs, labels)):
        step = list(range(1, len(rows) + 1))
        loss = moving_average([r["scalars"].get("loss", math.nan) for r in rows], max(1, a.smooth))
        ax[0].plot(step, loss, label=label, linewidth=1, color=f"C{i}")
        tails += [v for v in loss[len(loss) // 10:] if math.isfinite(v)]
        val = {s: r["scalars"]["val_loss"] for s, r in zip(step, rows) if "val_loss" in r["scalars"]}
        vals.append(val)
        ax[1].plot(list(val), list(val.values()), "o-", label=label, markersize=4, color=f"C{i}")
    # The first tenth of a run (the fall from the initial loss) would flatten
    # the rest, where runs differ.
    if tails:
        ax[0].set_ylim(min(tails) - 0.02 * (max(tails) - min(tails)), max(tails))
    for i, (val, label) in enumerate(zip(vals[1:], labels[1:]), start=1):
        common = [s for s in val if s in vals[0]]
        ax[2].plot(common, [100.0 * (val[s] - vals[0][s]) / vals[0][s] for s in common], "o-",
                   label=label, markersize=4, color=f"C{i}")
    ax[2].axhline(0.0, color="black", linewidth=0.8)
    smooth = f", moving average of {a.smooth} steps" if a.smooth > 1 else ""
    ax[0].set_title(f"training loss{smooth}")
    ax[1].set_title("validation loss")
    ax[2].set_title(f"validation loss vs {labels[0]} (%)")
    for axis in ax:
        axis.set_xlabel("step")
        axis.legend(fontsize=8)
    fig.suptitle(a.title or "validation and training loss")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"plot_metrics.py: wrote {a.out} ({len(runs)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
