"""What a job's output says: mpirun's (or srun's) account of how ranks ended,
the runtime's deadline messages, and the example trainer's step lines.

These are pure functions on text, so the decision can be tested on
synthetic output. The patterns are Open MPI 4.1's and Slurm's wording; a
line that matches nothing is simply not evidence.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional

# Open MPI 4.1, orte/mca/errmgr and orterun's help texts.
_SIGNALED = re.compile(r"process rank (\d+) with PID (\d+) on node (\S+) exited on signal "
                       r"(\d+)(?: \(([^)]*)\))?")
_NONZERO = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(-?\d+)")
_ABORTED = re.compile(r"MPI_ABORT was invoked on rank (\d+) in communicator \S+\s*\n?\s*"
                      r"with errorcode (-?\d+)")
_LOST_DAEMON = re.compile(r"Remote daemon:\s*\[\[\d+,\d+\],\d+\] on node (\S+)")
_DAEMON_FAILED = re.compile(r"(?:ORTE (?:was unable to reliably start|daemon has unexpectedly "
                            r"failed)[^\n]*)", re.IGNORECASE)
_DAEMON_NODE = re.compile(r"^\s*(?:Local host|Remote host|node):\s*(\S+)", re.MULTILINE)
# Slurm's srun: "srun: error: node2: task 3: Killed" / "... task 1: Exited with exit code 7".
_SRUN_TASK = re.compile(r"srun: error: (\S+): tasks? ([\d,-]+): (Killed|Exited with exit code "
                        r"(\d+)|Terminated|[A-Za-z ]+)")
# The runtime's deadline (src/comm/wait.c): which rank to look at first.
_SILENT = re.compile(r"look at rank (\d+) first")
# The example trainer (examples/trainer/ex_trainer.c).
_STEP = re.compile(r"^step\s+(\d+)/(\d+)\b", re.MULTILINE)
_RESUMED = re.compile(r"^resumed at step (\d+)", re.MULTILINE)


@dataclass
class RankEnd:
    """How one rank ended, as the launcher saw it."""
    rank: int
    how: str            # "signal" | "exit" | "abort" | "srun"
    code: Optional[int] = None
    signal_name: str = ""
    node: str = ""

    def describe(self) -> str:
        if self.how == "signal":
            return f"rank {self.rank} was killed by signal {self.code}" + (
                f" ({self.signal_name})" if self.signal_name else "")
        if self.how == "abort":
            return f"rank {self.rank} called MPI_Abort with code {self.code}"
        if self.how == "exit":
            return f"rank {self.rank} exited with code {self.code}"
        return f"rank {self.rank}: {self.signal_name}"


@dataclass
class OutputFacts:
    rank_ends: List[RankEnd] = field(default_factory=list)
    lost_nodes: List[str] = field(default_factory=list)   # daemons mpirun lost or never heard
    silent_rank: Optional[int] = None                      # the runtime's "look at rank N first"
    last_step: Optional[int] = None
    resumed_step: Optional[int] = None


def _expand(ranks: str) -> List[int]:
    out: List[int] = []
    for part in ranks.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def parse(text: str) -> OutputFacts:
    f = OutputFacts()
    for m in _SIGNALED.finditer(text):
        f.rank_ends.append(RankEnd(int(m.group(1)), "signal", int(m.group(4)), m.group(5) or "",
                                   m.group(3)))
    for m in _ABORTED.finditer(text):
        f.rank_ends.append(RankEnd(int(m.group(1)), "abort", int(m.group(2))))
    for m in _NONZERO.finditer(text):
        f.rank_ends.append(RankEnd(int(m.group(1)), "exit", int(m.group(2))))
    for m in _SRUN_TASK.finditer(text):
        code = int(m.group(4)) if m.group(4) else None
        for r in _expand(m.group(2)):
            f.rank_ends.append(RankEnd(r, "srun", code, m.group(3), m.group(1)))
    f.lost_nodes = [m.group(1) for m in _LOST_DAEMON.finditer(text)]
    if _DAEMON_FAILED.search(text):
        f.lost_nodes += [m.group(1) for m in _DAEMON_NODE.finditer(text)]
    silent = _SILENT.findall(text)
    if silent:
        f.silent_rank = int(silent[0])
    steps = _STEP.findall(text)
    if steps:
        f.last_step = max(int(s) for s, _ in steps)
    resumed = _RESUMED.findall(text)
    if resumed:
        f.resumed_step = int(resumed[-1])
    return f


# A program's own message: "program: text" (zs_report_config_error's form,
# and the examples'). Not the launchers' and the runtime's log lines.
_PROGRAM_LINE = re.compile(r"^[A-Za-z0-9_.+-]+: \S")
_NOT_PROGRAM = ("zs-run:", "mpirun", "srun:", "zeroshard:", "numerics:")


def program_messages(text: str, limit: int = 3) -> List[str]:
    """The last `limit` distinct lines in which the program said something
    ("name: message"), outside mpirun's framed help texts: what to show
    when a job ends by its own error without an exit report."""
    out: List[str] = []
    framed = False
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("-----"):
            framed = not framed  # mpirun frames its messages in dashed lines
            continue
        if framed or not _PROGRAM_LINE.match(line) or line.startswith(_NOT_PROGRAM):
            continue
        if line in out:
            out.remove(line)
        out.append(line)
    return out[-limit:]


def step_of_line(line: str) -> Optional[int]:
    """The optimizer step a progress line reports (the example trainer's
    'step N/M | ...'), or None."""
    m = _STEP.match(line)
    return int(m.group(1)) if m else None


def failure_marker(line: str) -> bool:
    """Whether a line says the job is failing, before mpirun exits: the
    moment a failure is detected when no exit report was written."""
    return bool(re.search(r"MPI_ABORT was invoked|exited on signal|exited with non-zero status|"
                          r"ORTE has lost communication|timed out: no progress|srun: error:|"
                          r"peer process has unexpectedly disconnected|timed out after .* "
                          r"waiting", line))
