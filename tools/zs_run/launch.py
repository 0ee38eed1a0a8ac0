"""One job: mpirun (or srun) in a process group of its own, its output
echoed and watched, and its end.

The process group is what zs-run can end when mpirun does not end by
itself: mpirun, the agents it spawned (ssh, or the netns agent of the
tests) and the ranks it forked locally. Ranks on a remote host that the
network cut off cannot be reached from here at all; the job generation
fences them out of the checkpoint root instead.

The output is copied to zs-run's stdout line by line as it comes and the
last lines are kept for the decision. Lines are stamped as they arrive:
the first line that reports a step after the one resumed from marks the
end of a recovery, and the first line that says the job is failing marks
when the failure was detected (if no exit report came first).
"""
from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Deque, Dict, List, Mapping, Optional, Sequence

from . import job_output


class Job:
    def __init__(self, cmd: Sequence[str], env: Mapping[str, str], resumed_from: int,
                 tail_lines: int = 400, echo=None):
        self.cmd = list(cmd)
        self.env = dict(env)
        self.resumed_from = resumed_from
        self.echo = echo if echo is not None else sys.stdout
        self.tail: Deque[str] = collections.deque(maxlen=tail_lines)
        self.lock = threading.Lock()
        self.started_at = 0.0
        self.first_new_step: Optional[int] = None
        self.first_new_step_at: Optional[float] = None
        self.last_step: Optional[int] = None
        self.failure_seen_at: Optional[float] = None
        self.proc: Optional[subprocess.Popen] = None
        self.reader: Optional[threading.Thread] = None

    def start(self) -> None:
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc and self.proc.stdout
        for raw in iter(self.proc.stdout.readline, b""):
            now = time.monotonic()
            line = raw.decode("utf-8", errors="replace")
            try:
                self.echo.write(line)
                self.echo.flush()
            except (OSError, ValueError):
                pass  # a closed stdout must not stop the watching
            text = line.rstrip("\n")
            with self.lock:
                self.tail.append(text)
                step = job_output.step_of_line(text)
                if step is not None:
                    self.last_step = step if self.last_step is None else max(self.last_step, step)
                    if step > self.resumed_from and self.first_new_step is None:
                        self.first_new_step, self.first_new_step_at = step, now
                if self.failure_seen_at is None and job_output.failure_marker(text):
                    self.failure_seen_at = now

    @property
    def pid(self) -> int:
        assert self.proc
        return self.proc.pid

    def poll(self) -> Optional[int]:
        assert self.proc
        return self.exit_code(self.proc.poll())

    @staticmethod
    def exit_code(rc: Optional[int]) -> Optional[int]:
        """The shell's convention: 128 + N for a launcher killed by signal N."""
        if rc is None:
            return None
        return 128 - rc if rc < 0 else rc

    def send(self, sig: int) -> None:
        """A signal to mpirun (or srun) alone: it forwards SIGUSR1 and SIGUSR2
        to every rank, and on SIGTERM ends the job its own way (SIGTERM to
        the ranks, SIGKILL after odls_base_sigkill_timeout)."""
        if self.proc and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def end_group(self, grace_s: float) -> None:
        """SIGTERM to the whole process group, SIGKILL after grace_s."""
        if not self.proc:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline:
                if self.proc.poll() is not None and not self.group_alive():
                    return
                time.sleep(0.05)

    def group_alive(self) -> bool:
        assert self.proc
        try:
            os.killpg(self.proc.pid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def finish_output(self, timeout_s: float = 5.0) -> None:
        """Waits for the output to drain: a rank still alive elsewhere may
        hold the pipe open, so not forever."""
        if self.reader:
            self.reader.join(timeout_s)

    def output(self) -> str:
        with self.lock:
            return "\n".join(self.tail)

    def snapshot(self):
        with self.lock:
            return self.first_new_step, self.first_new_step_at, self.last_step, self.failure_seen_at


def mpirun_command(mpirun: Sequence[str], mpirun_args: Sequence[str], host_arg: str, world: int,
                   env_names: Sequence[str], program: Sequence[str]) -> List[str]:
    """mpirun with the hosts zs-run chose (filled slot by slot: ranks 0..s1-1
    on the first host) and the variables the ranks need, forwarded with -x
    (ranks on other hosts start with an ssh session's environment)."""
    cmd = list(mpirun) + list(mpirun_args) + ["-H", host_arg, "-np", str(world),
                                              "--map-by", "slot"]
    for name in env_names:
        cmd += ["-x", name]
    return cmd + list(program)


def generation_processes(report_dir: str,
                         generation: Optional[int] = None) -> Dict[int, Dict[str, str]]:
    """The processes on this machine that belong to the generation whose
    report directory is `report_dir` (ZS_REPORT_DIR in their environment:
    each launcher gives each of its generations its own) and, when given,
    whose ZS_JOB_GENERATION is `generation`, with their environments, by
    pid. Only /proc entries this user may read are seen."""
    want = f"ZS_REPORT_DIR={report_dir}".encode()
    want_generation = None if generation is None else f"ZS_JOB_GENERATION={generation}".encode()
    me = os.getpid()
    found: Dict[int, Dict[str, str]] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return found
    for pid in pids:
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if want in env and (want_generation is None or want_generation in env):
            found[pid] = dict(e.decode("utf-8", "replace").partition("=")[::2] for e in env if e)
    return found


def sweep(report_dir: str, generation: int) -> List[int]:
    """Ends (SIGKILL) every process of this launcher's generation on this
    machine (generation_processes: both its report directory and its
    generation must match, so another launcher's job on the same checkpoint
    root is never touched) and returns their ids. After mpirun has ended,
    such a process is a rank it left behind: mpirun killed with SIGKILL
    leaves its local ranks running, and a rank that lost its daemon may take
    seconds to notice. Ranks on other machines are fenced by the generation
    instead."""
    killed = []
    for pid in generation_processes(report_dir, generation):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            pass
    return killed
