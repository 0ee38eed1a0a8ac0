"""Whether a host can still be reached, asked after a failure.

The default probe starts a trivial program on the host through the
launcher itself (`mpirun -H host:1 -np 1 true`, or `srun -N1 -n1 -w host
true` inside Slurm) with a deadline. It checks what a relaunch needs and
nothing less: that the launcher's agent (ssh, or Slurm's daemons) reaches
the host AND that the daemon started there can call back over the network
the job uses (Open MPI's out-of-band channel on the interfaces the job was
told to use). A TCP connect from zs-run to the host's sshd (`--probe
tcp:22`) is cheaper but proves less: zs-run may run on a machine that
routes to the hosts differently from where mpirun runs (a login node, or
scripts/netns-hosts.sh, where only host 0 reaches host 1), and an open port
says nothing about the job's network. `--probe none` trusts every host.
All hosts are probed at once, so a probe costs one deadline at most.
"""
from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import threading
from typing import Callable, Dict, List, Sequence

from .hosts import Host


def _run(cmd: List[str], timeout: float, env=None) -> bool:
    """True when the command exits 0 within the deadline; its whole process
    group is ended otherwise (mpirun leaves daemons behind when killed alone)."""
    try:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    except OSError:
        return False
    try:
        return p.wait(timeout=timeout) == 0
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.wait(timeout=2)
                break
            except subprocess.TimeoutExpired:
                continue
        return False


def launcher_probe(mpirun: Sequence[str], mpirun_args: Sequence[str], timeout: float):
    def probe(h: Host) -> bool:
        return _run(list(mpirun) + list(mpirun_args) + ["-H", f"{h.name}:1", "-np", "1", "true"],
                    timeout)
    return probe


def srun_probe(srun: str, timeout: float):
    def probe(h: Host) -> bool:
        return _run([srun, "--nodes=1", "--ntasks=1", f"--nodelist={h.name}", "true"], timeout)
    return probe


def tcp_probe(port: int, timeout: float):
    def probe(h: Host) -> bool:
        for addr in h.addresses or (h.name,):
            try:
                with socket.create_connection((addr, port), timeout=timeout):
                    return True
            except ConnectionRefusedError:
                return True  # the host answered: its kernel sent the refusal
            except OSError as e:
                if e.errno == errno.ECONNREFUSED:
                    return True
        return False
    return probe


def probe_all(hosts: Sequence[Host], probe: Callable[[Host], bool]) -> Dict[str, bool]:
    """Host.ident -> reachable, every host probed in parallel."""
    result: Dict[str, bool] = {}
    lock = threading.Lock()

    def one(h: Host) -> None:
        ok = probe(h)
        with lock:
            result[h.ident] = ok

    threads = [threading.Thread(target=one, args=(h,), daemon=True) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return result
