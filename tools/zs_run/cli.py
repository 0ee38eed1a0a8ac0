"""zs-run's command line: options, their defaults, and the plan they make."""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
from typing import List, Optional, Sequence

from . import cfgread, probe, slurm
from .decide import Limits
from .hosts import MAX_SLOTS, HostError, describe, make_hosts, parse_host_list, read_hostfile
from .restart_log import RestartLog
from .supervise import Plan, Supervisor, say

DESCRIPTION = """\
Runs a zeroshard training program under mpirun (or srun inside a Slurm
allocation) and restarts it when it fails: from its last committed
checkpoint (checkpoint.resume=auto), on the hosts that are left, down to
--min-ranks, with back-off, at most --max-restarts times. The global batch
(app.global_batch of the program's configuration) stays the same at every
world size. On SIGTERM, SIGUSR1 or SIGINT it asks the job for a checkpoint
(SIGUSR1, or the config's job.stop_signal), waits for it, and exits without
restarting; a second signal ends the job at once.
"""

EPILOG = """\
exit status:
  0    the job finished
  76   stopped on request (SIGTERM/SIGUSR1 to zs-run, or to the job): the
       checkpoint was committed (ZS_STOPPED_EXIT_CODE); also when the request
       came between two jobs
  64   the program refused its configuration (ZS_CONFIG_EXIT_CODE, or an exit
       report with cause "config"): not restarted, since it fails the same way
       on any host; also any code of a job whose ranks all failed the same way
       before their first step
  79   another zs-run took over the checkpoint directory (a newer generation):
       this one ended its own job and stopped
  N    zs-run gave up: the last job's exit code (75: a collective's deadline;
       78: a signal ended it without a checkpoint; 128+N: the launcher was
       killed by signal N; other codes are the program's); the reason is on
       stderr and in the restart log
  1    zs-run could not launch at all; 2: a usage error (also a host list it
       cannot read)

Inside a Slurm allocation (SLURM_JOB_ID set) the hosts come from the
allocation and srun starts the ranks; --hosts/--hostfile then select a
subset. See docs/UNATTENDED.md for the decisions, the log and job scripts.
"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zs-run", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                usage="zs-run [options] -- PROGRAM [ARGS...]")
    g = p.add_argument_group("hosts")
    g.add_argument("--hosts", help="hosts and slots, h1:2,h2:2 (mpirun -H's form; at most "
                                   f"{MAX_SLOTS} slots a host)")
    g.add_argument("--hostfile", help="an Open MPI hostfile (name slots=N, or name:N, per line)")
    g.add_argument("--no-slurm", action="store_true",
                   help="use mpirun even where SLURM_JOB_ID is set")
    g = p.add_argument_group("launcher")
    g.add_argument("--mpirun", default="mpirun",
                   help="the mpirun command, split like a shell would [mpirun]")
    g.add_argument("--mpirun-args", action="append", default=[], metavar="ARGS",
                   help="more mpirun arguments, one string split like a shell would "
                        "(repeatable), e.g. '--oversubscribe --bind-to none'")
    g.add_argument("--srun", default="srun", help="the srun command inside Slurm [srun]")
    g.add_argument("--srun-args", action="append", default=[], metavar="ARGS",
                   help="more srun arguments, e.g. '--mpi=pmix' (repeatable)")
    g.add_argument("--scontrol", default="scontrol", help="the scontrol command [scontrol]")
    g.add_argument("-x", "--env", action="append", default=[], metavar="NAME",
                   help="one more environment variable for the ranks (mpirun -x; repeatable)")
    g = p.add_argument_group("restarts")
    g.add_argument("--min-ranks", type=int, default=1, help="the smallest world size [1]")
    g.add_argument("--max-restarts", type=int, default=3, help="restarts before giving up [3]")
    g.add_argument("--fail-limit", type=int, default=2,
                   help="failures blamed on a host before it is excluded [2]")
    g.add_argument("--backoff", type=float, default=5.0,
                   help="seconds before the first restart, doubled for each one after [5]")
    g.add_argument("--backoff-max", type=float, default=300.0,
                   help="the longest back-off in seconds [300]")
    g.add_argument("--kill-after", type=float, default=30.0,
                   help="seconds mpirun gets to end a failed job before zs-run ends its "
                        "process group [30]")
    g.add_argument("--stop-signal", choices=("USR1", "USR2", "none"),
                   help="the signal that asks the job for a checkpoint and a stop (default: "
                        "job.stop_signal of the program's config, else USR1); none: SIGTERM")
    g.add_argument("--stop-timeout", type=float, default=600.0,
                   help="seconds the job gets to checkpoint after a stop request [600]")
    g.add_argument("--probe", default="launcher",
                   help="how to tell whether a host can be reached after a failure: launcher "
                        "(mpirun -H host -np 1 true, or srun), tcp:PORT, none [launcher]")
    g.add_argument("--probe-timeout", type=float, default=15.0,
                   help="seconds a host gets to answer the probe [15]")
    g = p.add_argument_group("checkpoints and batch")
    g.add_argument("--checkpoint-dir",
                   help="the checkpoint root (default: checkpoint.dir of the program's config)")
    g.add_argument("--report-dir",
                   help="where ranks write exit reports, one directory per generation "
                        "(default: CHECKPOINT_DIR/reports)")
    g.add_argument("--no-overrides", action="store_true",
                   help="do not append checkpoint.dir=... checkpoint.resume=auto to the "
                        "program's arguments (for programs that take no key=value overrides)")
    g.add_argument("--global-batch", type=int,
                   help="sequences per optimizer step to keep (default: app.global_batch)")
    g.add_argument("--batch-cap", type=int,
                   help="the per-rank micro-batch cap (default: app.batch_size)")
    g = p.add_argument_group("memory check before shrinking")
    g.add_argument("--memory-limit", metavar="SIZE",
                   help="memory per rank, as zs-estimate's --device-memory (e.g. 80GiB); "
                        "without it the check is skipped")
    g.add_argument("--zs-estimate", help="the zs-estimate program (default: next to zs-run, "
                                         "else on PATH)")
    g.add_argument("--estimate-layout", metavar="ARGS",
                   help="zs-estimate's layout arguments, e.g. '--preset 124M' (default: "
                        "--checkpoint CHECKPOINT_DIR once a checkpoint exists)")
    g = p.add_argument_group("logging")
    g.add_argument("--log", help="the restart log, one JSON object per line")
    g.add_argument("--metrics-file",
                   help="the program's log.metrics_file, to read the last step reached from")
    p.add_argument("program", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


def _split(strings: Sequence[str]) -> List[str]:
    out: List[str] = []
    for s in strings:
        out.extend(shlex.split(s))
    return out


def _find_estimate(explicit: Optional[str]) -> str:
    if explicit:
        return explicit
    here = os.path.dirname(os.path.realpath(sys.argv[0]))
    for d in (here, os.path.join(here, "..", "build", "tools")):
        cand = os.path.join(d, "zs-estimate")
        if os.access(cand, os.X_OK):
            return cand
    return shutil.which("zs-estimate") or "zs-estimate"


def plan_from_args(argv: Sequence[str]) -> Plan:
    p = parser()
    a = p.parse_args(argv)
    program = list(a.program)
    if program and program[0] == "--":
        program = program[1:]
    if not program:
        p.error("no program: write zs-run [options] -- PROGRAM [ARGS...]")
    for name in ("min_ranks", "max_restarts", "fail_limit"):
        if getattr(a, name) < (0 if name == "max_restarts" else 1):
            p.error(f"--{name.replace('_', '-')} must be at least "
                    f"{0 if name == 'max_restarts' else 1}")

    cfg_path, overrides = cfgread.split_program(program)
    # Said before anything is launched. Not refused: zs-run may run where
    # the ranks' files are not (a login node), and ranks that cannot open it
    # stop the run at once with their own message (exit code 64).
    if cfg_path and not os.path.isfile(cfg_path):
        say(f"warning: the program's configuration file {cfg_path} (its first .cfg argument"
            f"{'' if os.path.isabs(cfg_path) else ', relative to ' + os.getcwd()}) "
            f"{'is not a file' if os.path.exists(cfg_path) else 'does not exist'} here: the "
            "keys zs-run reads from it are unknown, and ranks that cannot open it either will "
            "stop the run (exit code 64)")
    settings = cfgread.read_settings(cfg_path, overrides)
    ckpt = a.checkpoint_dir or settings.get("checkpoint.dir")
    if not ckpt:
        p.error("no checkpoint root: pass --checkpoint-dir (or set checkpoint.dir in the "
                "program's configuration)")
    ckpt = os.path.abspath(ckpt)
    global_batch = a.global_batch if a.global_batch is not None else \
        cfgread.as_int(settings, "app.global_batch", 0)
    batch_cap = a.batch_cap if a.batch_cap is not None else \
        cfgread.as_int(settings, "app.batch_size", 8 if global_batch > 0 else 0)

    use_srun = slurm.in_allocation(os.environ) and not a.no_slurm
    try:
        if use_srun:
            entries = slurm.allocation_hosts(os.environ, a.scontrol)
            if a.hosts or a.hostfile:
                wanted = {n for n, _ in (parse_host_list(a.hosts) if a.hosts else
                                         read_hostfile(a.hostfile))}
                entries = [e for e in entries if e[0] in wanted]
        elif a.hosts:
            entries = parse_host_list(a.hosts)
        elif a.hostfile:
            entries = read_hostfile(a.hostfile)
        else:
            p.error("no hosts: pass --hosts h1:2,h2:2 or --hostfile FILE (or run inside a "
                    "Slurm allocation)")
        pool = make_hosts(entries)
    except (HostError, slurm.SlurmError, OSError) as e:
        p.error(str(e))

    mpirun = shlex.split(a.mpirun)
    mpirun_args = _split(a.mpirun_args)
    if a.probe == "launcher":
        prober = (probe.srun_probe(a.srun, a.probe_timeout) if use_srun
                  else probe.launcher_probe(mpirun, mpirun_args, a.probe_timeout))
    elif a.probe.startswith("tcp:") and a.probe[4:].isdigit():
        prober = probe.tcp_probe(int(a.probe[4:]), a.probe_timeout)
    elif a.probe == "none":
        prober = None
    else:
        p.error(f"--probe '{a.probe}': use launcher, tcp:PORT or none")

    run_program = program if a.no_overrides else \
        program + [f"checkpoint.dir={ckpt}", "checkpoint.resume=auto"]
    return Plan(
        program=run_program, pool=pool,
        limits=Limits(min_ranks=a.min_ranks, max_restarts=a.max_restarts,
                      fail_limit=a.fail_limit, backoff_s=a.backoff, backoff_max_s=a.backoff_max,
                      global_batch=global_batch, batch_cap=batch_cap),
        checkpoint_dir=ckpt,
        report_root=os.path.abspath(a.report_dir or os.path.join(ckpt, "reports")),
        use_srun=use_srun, mpirun=mpirun, mpirun_args=mpirun_args,
        srun=a.srun, srun_args=_split(a.srun_args), env_names=list(a.env),
        kill_after_s=a.kill_after, stop_timeout_s=a.stop_timeout, probe=prober,
        stop_signal={"USR1": signal.SIGUSR1, "USR2": signal.SIGUSR2}.get(
            a.stop_signal or settings.get("job.stop_signal", "USR1"), signal.SIGTERM),
        log=RestartLog(a.log), metrics_file=a.metrics_file, memory_limit=a.memory_limit,
        zs_estimate=_find_estimate(a.zs_estimate),
        estimate_layout=shlex.split(a.estimate_layout) if a.estimate_layout else None,
        estimate_config=cfg_path, estimate_overrides=overrides,
        stage=cfgread.as_int(settings, "zero.stage", 0),
        offload=settings.get("offload.optimizer", "none"))


def main(argv: Optional[Sequence[str]] = None) -> int:
    plan = plan_from_args(sys.argv[1:] if argv is None else argv)
    sup = Supervisor(plan)
    sup.install_signals()
    say(f"hosts {describe(plan.pool)}; checkpoints in {plan.checkpoint_dir}" +
        (f"; global batch {plan.limits.global_batch}" if plan.limits.global_batch else "") +
        ("; launching with srun (Slurm allocation)" if plan.use_srun else ""))
    try:
        return sup.run()
    except OSError as e:
        say(f"error: {e}")
        return 1
