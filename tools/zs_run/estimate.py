"""Before relaunching on fewer ranks: does the model still fit per rank?

Asked of zs-estimate (tools/zs_estimate.c), which runs the memory plan
zs_build allocates from. The layout is the one the user names
(--estimate-layout, e.g. "--preset 124M"), or the checkpoint root's
(`--checkpoint DIR`: units and parameters of the newest manifest, so any
program is known once it committed a checkpoint). The run's configuration
file and overrides go along, and the verdict is read for the configured
ZeRO stage and optimizer offload from zs-estimate's lines

    device memory 1.00 GiB (1073741824 bytes) per rank, offload none:
      stage 3 fits on 2 ranks: 838.3 MiB per rank
      stage 0 does not fit on 2 ranks: 1.85 GiB per rank

Without a memory limit, or with no layout known (no checkpoint yet and no
--estimate-layout), the check is skipped and the reason logged.
"""
from __future__ import annotations

import re
import subprocess
from typing import List, Optional, Sequence, Tuple


def verdict(text: str, stage: int, offload: str) -> Tuple[Optional[bool], str]:
    """(fits, the line that says so) from zs-estimate's output; (None, why)
    when the output has no line for the stage and offload."""
    block = None
    for line in text.splitlines():
        m = re.match(r"device memory .* per rank, offload (\w+):", line)
        if m:
            block = m.group(1)
            continue
        if block != offload:
            continue
        m = re.match(rf"\s*stage {stage} (fits|does not fit|cannot be planned) on (\d+) ranks?:?(.*)",
                     line)
        if m:
            if m.group(1) == "fits":
                return True, line.strip()
            return False, line.strip()
    return None, f"zs-estimate printed no verdict for stage {stage}, offload {offload}"


def check(zs_estimate: str, layout: Sequence[str], config: Optional[str], overrides: Sequence[str],
          world: int, memory_limit: str, stage: int, offload: str,
          timeout_s: float = 120.0) -> Tuple[Optional[bool], str, List[str]]:
    """(fits, why, the command) for `world` ranks."""
    cmd = [zs_estimate] + list(layout) + ["--world", str(world), "--device-memory", memory_limit]
    if config:
        cmd += ["--config", config]
    for o in overrides:
        cmd += ["--set", o]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"zs-estimate could not run ({e}); the check was skipped", cmd
    if p.returncode != 0:
        msg = (p.stderr.strip() or p.stdout.strip()).splitlines()
        return None, (f"zs-estimate exited {p.returncode} ({msg[-1] if msg else 'no message'}); "
                      "the check was skipped"), cmd
    fits, line = verdict(p.stdout, stage, offload)
    return fits, line, cmd
