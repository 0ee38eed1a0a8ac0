#!/usr/bin/env python3
"""Draws zeroshard trace files (trace.file = "trace-%r.json") as one PNG timeline.

    python3 scripts/plot_trace.py trace-0.json trace-1.json --out timeline.png
    python3 scripts/plot_trace.py trace-*.json --start-ms 120 --end-ms 180 --title "steps 3-4"

One row per (rank, track), spans as bars coloured by track (compute, comm,
optimizer, checkpoint); collective spans are labelled with their op and unit
when the bar is wide enough, and the time a collective waited in the queue
before it started is drawn as a faint bar in front of it. Ranks are lined up
by the wall-clock time each trace started (origin_unix_ns), so the same
moment is at the same x on every row. Works headless (the Agg backend).

Needs matplotlib: `python3 -m pip install matplotlib` or, on Debian/Ubuntu,
`apt-get install python3-matplotlib`. Exits 2 when it is missing, 1 when a
file cannot be read.
"""
import argparse
import json
import sys

TRACKS = ["compute", "comm", "optimizer", "checkpoint"]
COLORS = {"compute": "#4c72b0", "comm": "#dd8452", "optimizer": "#55a868", "checkpoint": "#c44e52"}
OTHER_COLOR = "#8c8c8c"


class Trace:
    """The spans and names of one trace file."""

    def __init__(self, path):
        self.path = path
        self.rank_names = {}  # pid -> "rank N"
        self.track_names = {}  # (pid, tid) -> "comm"
        self.spans = []  # (pid, tid, ts_ms, dur_ms, name, args)
        self.origin_unix_ns = {}  # pid -> ns
        self.dropped = {}  # pid -> events overwritten before the last flush
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        events = data["traceEvents"] if isinstance(data, dict) else data
        for e in events:
            ph, pid, tid = e.get("ph"), e.get("pid", 0), e.get("tid", 0)
            args = e.get("args") or {}
            if ph == "M":
                if e.get("name") == "process_name":
                    self.rank_names[pid] = args.get("name", "rank %s" % pid)
                elif e.get("name") == "thread_name":
                    self.track_names[(pid, tid)] = args.get("name", str(tid))
                elif e.get("name") == "zeroshard_trace":
                    if "origin_unix_ns" in args:
                        self.origin_unix_ns[pid] = int(args["origin_unix_ns"])
                    self.dropped[pid] = int(args.get("dropped_events", 0))
            elif ph == "X":
                self.spans.append((pid, tid, float(e["ts"]) / 1000.0, float(e.get("dur", 0)) / 1000.0,
                                   e.get("name", "?"), args))


def parse_args(argv):
    p = argparse.ArgumentParser(description="Draw zeroshard trace files as a PNG timeline.")
    p.add_argument("traces", nargs="+", help="trace files written by trace.file (one per rank)")
    p.add_argument("--out", default="timeline.png", help="PNG to write (default timeline.png)")
    p.add_argument("--start-ms", type=float, default=None, help="left edge of the window, in ms")
    p.add_argument("--end-ms", type=float, default=None, help="right edge of the window, in ms")
    p.add_argument("--title", default=None, help="title of the figure")
    p.add_argument("--width", type=float, default=14.0, help="figure width in inches (default 14)")
    p.add_argument("--dpi", type=int, default=120, help="resolution (default 120)")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        sys.stderr.write("plot_trace.py needs matplotlib: install it with\n"
                         "  python3 -m pip install matplotlib\n"
                         "or, on Debian/Ubuntu,\n"
                         "  apt-get install python3-matplotlib\n")
        return 2

    traces = []
    for path in args.traces:
        try:
            traces.append(Trace(path))
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.stderr.write("plot_trace.py: cannot read the trace file %s: %s\n" % (path, e))
            return 1

    # Line ranks up by wall-clock start: shift each rank by its origin's
    # distance from the earliest one (0 when a file has no origin).
    origins = [o for t in traces for o in t.origin_unix_ns.values()]
    base = min(origins) if origins else 0
    spans = []  # (rank_key, track_name, start_ms, dur_ms, name, args)
    rank_label = {}
    dropped = {}
    for t in traces:
        for pid, tid, ts, dur, name, a in t.spans:
            shift = (t.origin_unix_ns.get(pid, base) - base) / 1e6
            track = t.track_names.get((pid, tid), str(tid))
            spans.append((pid, track, ts + shift, dur, name, a))
            rank_label[pid] = t.rank_names.get(pid, "rank %s" % pid)
        for pid, n in t.dropped.items():
            if n:
                dropped[pid] = dropped.get(pid, 0) + n
    if not spans:
        sys.stderr.write("plot_trace.py: the files hold no spans\n")
        return 1

    lo = args.start_ms if args.start_ms is not None else min(s[2] for s in spans)
    hi = args.end_ms if args.end_ms is not None else max(s[2] + s[3] for s in spans)
    if hi <= lo:
        sys.stderr.write("plot_trace.py: the window is empty (--end-ms must exceed --start-ms)\n")
        return 1
    shown = [s for s in spans if s[2] + s[3] >= lo and s[2] <= hi]

    # Rows: every rank, and for each the tracks used anywhere, in track order.
    used = {s[1] for s in spans}
    tracks = [t for t in TRACKS if t in used] + sorted(used - set(TRACKS))
    ranks = sorted(rank_label)
    rows = [(r, t) for r in ranks for t in tracks]
    row_of = {key: i for i, key in enumerate(rows)}

    height = 1.2 + 0.42 * len(rows)
    fig, ax = plt.subplots(figsize=(args.width, height), dpi=args.dpi)
    bar_h = 0.7
    for (rank, track), i in row_of.items():
        mine = [s for s in shown if s[0] == rank and s[1] == track]
        color = COLORS.get(track, OTHER_COLOR)
        waits = [(s[2] - s[5]["queue_wait_us"] / 1000.0, s[5]["queue_wait_us"] / 1000.0)
                 for s in mine if s[5].get("queue_wait_us")]
        if waits:
            ax.broken_barh(waits, (i - bar_h / 6, bar_h / 3), facecolors=color, alpha=0.3)
        ax.broken_barh([(s[2], max(s[3], 1e-6)) for s in mine], (i - bar_h / 2, bar_h),
                       facecolors=color, edgecolors="white", linewidth=0.4)

    # Labels on collectives wide enough to hold them.
    fig.canvas.draw()
    axis_px = ax.get_window_extent().width
    px_per_ms = axis_px / (hi - lo)
    char_px = 6.5 * args.dpi / 100.0
    for rank, track, start, dur, name, a in shown:
        if not a.get("op"):
            continue
        text = a["op"] + (" " + a["unit"] if a.get("unit") else "")
        left, right = max(start, lo), min(start + dur, hi)
        if (right - left) * px_per_ms < len(text) * char_px + 4:
            text = a.get("unit") or ""
            if not text or (right - left) * px_per_ms < len(text) * char_px + 4:
                continue
        ax.text((left + right) / 2, row_of[(rank, track)], text, ha="center", va="center",
                fontsize=7, color="black", clip_on=True)

    ax.set_xlim(lo, hi)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(["%s  %s" % (rank_label[r], t) for r, t in rows])
    for i in range(1, len(ranks)):
        ax.axhline(i * len(tracks) - 0.5, color="#444444", linewidth=0.8)
    ax.set_xlabel("time (ms)")
    ax.grid(axis="x", color="#dddddd", linewidth=0.5)
    ax.set_axisbelow(True)
    title = args.title or "zeroshard timeline: " + ", ".join(args.traces)
    if dropped:
        title += "\n(oldest events overwritten: " + ", ".join(
            "%s lost %d" % (rank_label.get(p, p), n) for p, n in sorted(dropped.items())) + ")"
    ax.set_title(title, fontsize=10)
    handles = [Patch(color=COLORS.get(t, OTHER_COLOR), label=t) for t in tracks]
    if any(s[5].get("queue_wait_us") for s in shown):
        handles.append(Patch(color=COLORS["comm"], alpha=0.3, label="queue wait"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(args.out)
    print("plot_trace.py: wrote %s (%d spans, %d rows, %.3f to %.3f ms)" % (args.out, len(shown), len(rows), lo, hi))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
