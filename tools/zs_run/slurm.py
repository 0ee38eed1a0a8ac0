"""Inside a Slurm allocation: the hosts come from the allocation and srun
starts the ranks (no hostfile, no ssh).

Hosts: `scontrol show hostnames $SLURM_JOB_NODELIST` expands the node list
(node[01-04] -> node01 ... node04); the slots per node come from
SLURM_TASKS_PER_NODE ("2(x3),1": three nodes with 2, one with 1), else
SLURM_NTASKS_PER_NODE, else 1.

Launch: srun with --distribution=arbitrary and SLURM_HOSTFILE naming each
rank's node, one line per rank, so the layout is exactly the one zs-run
decided (the same rank-to-host order as mpirun's --map-by slot), without
--nodelist: a real srun takes an explicit node list as the layout under
--distribution=arbitrary, one name per task, and refuses node1,node2 for 4
tasks ("You asked for 4 tasks but hostlist specified 2 nodes"); and
--kill-on-bad-exit=1 so one failed rank ends the step instead of leaving
the others waiting for their deadline. srun passes the whole environment
to the ranks, so ZS_REPORT_DIR and ZS_JOB_GENERATION need no -x.
"""
from __future__ import annotations

import os
import re
import subprocess
from typing import List, Mapping, Sequence, Tuple

from .hosts import Host


class SlurmError(RuntimeError):
    pass


def in_allocation(env: Mapping[str, str]) -> bool:
    return bool(env.get("SLURM_JOB_ID"))


def tasks_per_node(text: str, nodes: int) -> List[int]:
    """SLURM_TASKS_PER_NODE's "2(x3),1" as [2, 2, 2, 1]."""
    out: List[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part)
        if not m:
            raise SlurmError(f"SLURM_TASKS_PER_NODE='{text}': cannot read '{part}'")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    if out and len(out) != nodes:
        raise SlurmError(f"SLURM_TASKS_PER_NODE='{text}' lists {len(out)} nodes, the node list "
                         f"{nodes}")
    return out


def allocation_hosts(env: Mapping[str, str], scontrol: str = "scontrol") -> List[Tuple[str, int]]:
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise SlurmError("SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not: run zs-run inside "
                         "the allocation (sbatch or salloc), or pass --no-slurm with --hosts")
    try:
        out = subprocess.run([scontrol, "show", "hostnames", nodelist], check=True,
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise SlurmError(f"'{scontrol} show hostnames {nodelist}' failed: {e}") from None
    names = [n for n in out.split() if n]
    if not names:
        raise SlurmError(f"'{scontrol} show hostnames {nodelist}' printed no host")
    per = env.get("SLURM_TASKS_PER_NODE", "")
    slots = tasks_per_node(per, len(names)) if per else []
    if not slots:
        n = env.get("SLURM_NTASKS_PER_NODE", "")
        slots = [int(n) if n.isdigit() and int(n) > 0 else 1] * len(names)
    return list(zip(names, slots))


def srun_command(srun: str, hosts: Sequence[Host], srun_args: Sequence[str],
                 program: Sequence[str], hostfile: str) -> List[str]:
    """srun's command line for `hosts` (their slots in rank order); writes
    `hostfile` (one node per rank) for SLURM_HOSTFILE."""
    lines = [h.name for h in hosts for _ in range(h.slots)]
    with open(hostfile, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return ([srun, f"--nodes={len(hosts)}", f"--ntasks={len(lines)}", "--distribution=arbitrary",
             "--kill-on-bad-exit=1"] + list(srun_args) + list(program))


def srun_env(env: Mapping[str, str], hostfile: str) -> dict:
    out = dict(env)
    out["SLURM_HOSTFILE"] = os.path.abspath(hostfile)
    return out
