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
larger than its own, which fences out ranks of an older job. Launchers take
generations from it one at a time (take_generation: read, add one, write,
under an exclusive lock of <root>/generation.lock), so two launchers on one
root never take the same number, and a launcher whose generation is no
longer the newest knows that another one took over.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import socket
from typing import List, Optional, Tuple

_STEP_DIR = re.compile(r"^step_(\d{8,})$")
GENERATION_FILE = "generation"
GENERATION_LOCK = "generation.lock"


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


def take_generation(root: str, mine: int = 0) -> Optional[int]:
    """The next generation of the root, taken atomically: under an exclusive
    lock (flock) of <root>/generation.lock, the generation file is read, one
    is added, and the result written before the lock is released, so
    launchers sharing the root take distinct numbers. `mine` is the
    generation this launcher took last (0: none yet); when the root names a
    larger one, another launcher took over: nothing is written and None is
    returned."""
    os.makedirs(root, exist_ok=True)
    fd = os.open(os.path.join(root, GENERATION_LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        current = read_generation(root)
        if mine > 0 and current > mine:
            return None
        write_generation(root, current + 1)
        return current + 1
    finally:
        os.close(fd)  # closing releases the lock


def launcher_id() -> str:
    """This launcher among others on the same root: host name and process id
    (file-name characters only), for its report directories."""
    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname().split(".")[0]) or "host"
    return f"{host}-{os.getpid()}"


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
