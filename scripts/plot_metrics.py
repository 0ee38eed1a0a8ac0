#!/usr/bin/env python3
"""Plots a zeroshard metrics file (log.metrics_file: one JSON line per
optimizer step) to a PNG: the program's loss (and val_loss when logged), the
learning rate, the loss scale, and the step time split into compute, exposed
communication, optimizer and checkpoint.

    python3 scripts/plot_metrics.py metrics.jsonl --out metrics.png [--title T]

Needs matplotlib (python3 -m pip install matplotlib, or Debian's
python3-matplotlib); exits 2 with that advice without it."""
import argparse
import json
import math
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics")
    ap.add_argument("--out", default="metrics.png")
    ap.add_argument("--title", default=None)
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_metrics.py: matplotlib is missing; install it with "
              "'python3 -m pip install matplotlib' or 'apt-get install python3-matplotlib'",
              file=sys.stderr)
        return 2
    rows = []
    try:
        with open(a.metrics) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    rows.append(json.loads(line))
    except (OSError, ValueError) as e:
        print(f"plot_metrics.py: {a.metrics}: {e}", file=sys.stderr)
        return 1
    if not rows:
        print(f"plot_metrics.py: {a.metrics} holds no steps", file=sys.stderr)
        return 1
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
    fig.suptitle(a.title or a.metrics)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"plot_metrics.py: wrote {a.out} ({len(rows)} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
