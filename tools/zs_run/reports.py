"""The runtime's exit reports and the checkpoint root, as files.

Exit reports: on an abnormal end every rank that can writes
<report_dir>/rank-NNNNN.json (version 1: cause, exit_code, rank,
world_size, host, addresses, pid, generation, step, last_committed_step,
checkpoint_dir, peer, peer_host, peer_addresses, op, message, time). A rank
killed with SIGKILL writes nothing, so a missing report is evidence too.

The checkpoint root: `latest` names the newest committed step directory
(step_00000012); the step directories themselves are the fallback. The
generation file <root>/generation holds the job generation as ASCII decimal
and a newline: the runtime refuses to commit when it names a generation
larger than its own, which fences out ranks of an older job.
"""
from __future__ import annotations

import json
import os
import re
from typing import List, Optional, Tuple

_STEP_DIR = re.compile(r"^step_(\d{8,})$")
GENERATION_FILE = "generation"


def read_reports(report_dir: str) -> Tuple[List[dict], List[str]]:
    """Every readable report of the directory, by rank, and a note per file
    that could not be read (a rank may die while writing)."""
    reports, notes = [], []
    try:
        names = sorted(os.listdir(report_dir))
    except OSError:
        return [], []
    for name in names:
        if not (name.startswith("rank-") and name.endswith(".json")):
            continue
        path = os.path.join(report_dir, name)
        try:
            with open(path, encoding="utf-8") as f:
                r = json.load(f)
        except (OSError, ValueError) as e:
            notes.append(f"{path}: unreadable ({e})")
            continue
        if not isinstance(r, dict) or not isinstance(r.get("rank"), int):
            notes.append(f"{path}: not an exit report (no integer 'rank')")
            continue
        reports.append(r)
    reports.sort(key=lambda r: r["rank"])
    return reports, notes


def count_reports(report_dir: str) -> int:
    try:
        return sum(1 for n in os.listdir(report_dir) if n.startswith("rank-") and n.endswith(".json"))
    except OSError:
        return 0


def latest_step(root: str) -> int:
    """The newest committed step of the checkpoint root, or -1 when none.
    `latest` first (the commit writes it last); step directories when it is
    missing or names nothing that exists."""
    try:
        with open(os.path.join(root, "latest"), encoding="ascii") as f:
            m = _STEP_DIR.match(f.read().strip())
        if m and os.path.isdir(os.path.join(root, m.group(0))):
            return int(m.group(1))
    except (OSError, UnicodeDecodeError):
        pass
    best = -1
    try:
        for name in os.listdir(root):
            m = _STEP_DIR.match(name)
            if m and os.path.isdir(os.path.join(root, name)):
                best = max(best, int(m.group(1)))
    except OSError:
        pass
    return best


def read_generation(root: str) -> int:
    """The generation recorded in the root, 0 when there is none."""
    try:
        with open(os.path.join(root, GENERATION_FILE), encoding="ascii") as f:
            text = f.read().strip()
        return int(text) if text.isdigit() else 0
    except (OSError, UnicodeDecodeError):
        return 0


def write_generation(root: str, generation: int) -> None:
    """Records the generation atomically (a temporary file renamed over the
    old one, both fsynced): a rank that reads it sees the old or the new
    number, never a torn one."""
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, GENERATION_FILE)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{generation}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def metrics_last_step(path: Optional[str]) -> Optional[int]:
    """The last step of a log.metrics_file (JSON lines with "step"), or None."""
    if not path:
        return None
    last = None
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    step = json.loads(line).get("step")
                except ValueError:
                    continue  # a line being written
                if isinstance(step, int):
                    last = step
    except OSError:
        return None
    return last
