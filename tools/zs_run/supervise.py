"""The restart loop: launch a generation, watch it, gather the facts when it
ends, let decide.py choose, log, back off, launch the next.

Times: a failure is *detected* at the first of: an exit report appearing,
a line of output saying the job is failing, or the launcher's exit. A
recovery ends at the first line of the new job that reports a step after
the one it resumed from. Both are read on the monotonic clock.

Several launchers may share a checkpoint root (a requeued batch job next to
one that was not ended, a second zs-run started by mistake). Generations
are taken from the root (reports.take_generation), never counted here, and
each launcher's reports go to directories of its own
(gen-NNNNNN-<launcher id>). The newest generation owns the root: a launcher
that finds a newer one there, while its job runs or before it relaunches,
ends its own job (the fence keeps it from committing anyway) and stops,
with a "superseded" record and exit code 79.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from . import decide as decide_mod
from . import estimate, launch, reports, slurm
from .hosts import Host, describe, host_arg
from .restart_log import RestartLog

POLL_S = 0.1
# How often a running job's launcher reads the root's generation: a few
# bytes, so often enough that a superseded job ends within a second.
FENCE_POLL_S = 0.5


@dataclass
class Plan:
    """Everything the loop needs, resolved from the command line."""
    program: List[str]
    pool: List[Host]
    limits: decide_mod.Limits
    checkpoint_dir: str
    report_root: str
    use_srun: bool = False
    mpirun: List[str] = field(default_factory=lambda: ["mpirun"])
    mpirun_args: List[str] = field(default_factory=list)
    srun: str = "srun"
    srun_args: List[str] = field(default_factory=list)
    env_names: List[str] = field(default_factory=list)
    kill_after_s: float = 30.0
    stop_timeout_s: float = 600.0
    stop_signal: int = signal.SIGUSR1   # what the runtime takes as a stop (job.stop_signal)
    probe: Optional[Callable[[Host], bool]] = None
    log: RestartLog = field(default_factory=lambda: RestartLog(None))
    metrics_file: Optional[str] = None
    memory_limit: Optional[str] = None
    zs_estimate: str = "zs-estimate"
    estimate_layout: Optional[List[str]] = None
    estimate_config: Optional[str] = None
    estimate_overrides: List[str] = field(default_factory=list)
    stage: int = 0
    offload: str = "none"


def say(msg: str) -> None:
    print(f"zs-run: {msg}", file=sys.stderr, flush=True)


def wall(mono: Optional[float]) -> Optional[str]:
    """A monotonic stamp as UTC wall-clock text, for the log."""
    if mono is None:
        return None
    t = time.time() - (time.monotonic() - mono)
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(
        timespec="milliseconds")


class Supervisor:
    def __init__(self, plan: Plan):
        self.p = plan
        self.signals: List[int] = []
        self.failures: Dict[str, int] = {}
        self.restarts = 0
        # The generation this launcher took last (0: none yet).
        self.generation = 0
        self.launcher = reports.launcher_id()

    # ---------------------------------------------------------- signals
    def _on_signal(self, signum, _frame) -> None:
        self.signals.append(signum)

    def install_signals(self) -> None:
        for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
            signal.signal(s, self._on_signal)

    # ----------------------------------------------------------- launch
    def _command(self, hosts: Sequence[Host], rdir: str) -> List[str]:
        world = sum(h.slots for h in hosts)
        if self.p.use_srun:
            return slurm.srun_command(self.p.srun, hosts, self.p.srun_args, self.p.program,
                                      os.path.join(rdir, "hostfile"))
        names = ["ZS_REPORT_DIR", "ZS_JOB_GENERATION"] + self.p.env_names
        return launch.mpirun_command(self.p.mpirun, self.p.mpirun_args, host_arg(hosts), world,
                                     names, self.p.program)

    def _env(self, rdir: str) -> dict:
        env = dict(os.environ)
        env["ZS_REPORT_DIR"] = rdir
        env["ZS_JOB_GENERATION"] = str(self.generation)
        if self.p.use_srun:
            env = slurm.srun_env(env, os.path.join(rdir, "hostfile"))
        return env

    # ------------------------------------------------------------- loop
    def run(self) -> int:
        limits = self.p.limits
        world, _ = decide_mod.world_for(self.p.pool, limits)
        if world == 0:
            say(f"the hosts ({describe(self.p.pool)}) hold no world size from "
                f"{sum(h.slots for h in self.p.pool)} down to --min-ranks {limits.min_ranks} "
                f"that keeps the global batch of {limits.global_batch}")
            return 2
        hosts = decide_mod.fill_slots(self.p.pool, world)
        # The restart waiting for the new job's first step (its record).
        self.pending: Optional[dict] = None
        while True:
            if self.signals:
                self.p.log.write("stop", generation=self.generation,
                                 exit_code=decide_mod.STOPPED_EXIT_CODE,
                                 reason="zs-run was asked to stop between two jobs; the newest "
                                        "committed checkpoint stands")
                say("asked to stop between two jobs: not relaunching")
                return decide_mod.STOPPED_EXIT_CODE
            taken = reports.take_generation(self.p.checkpoint_dir, self.generation)
            if taken is None:
                return self._superseded("before relaunching", None, False)
            self.generation = taken
            rdir = os.path.join(self.p.report_root,
                                f"gen-{self.generation:06d}-{self.launcher}")
            os.makedirs(rdir, exist_ok=True)
            resumed_from = reports.latest_step(self.p.checkpoint_dir)
            world = sum(h.slots for h in hosts)
            cmd = self._command(hosts, rdir)
            say(f"generation {self.generation}: {world} rank{'' if world == 1 else 's'} on "
                f"{describe(hosts)}" + (f", resuming from step {resumed_from}"
                                       if resumed_from >= 0 else ""))
            if self.pending is None:
                self.p.log.write("start", generation=self.generation,
                                 hosts=[h.to_json() for h in hosts], world_size=world,
                                 global_batch=limits.global_batch or None,
                                 step_resumed_from=resumed_from if resumed_from >= 0 else None,
                                 command=cmd, launcher=self.launcher, report_dir=rdir)
            else:
                last = self.pending["last_step_reached"]
                self.pending["failed_generation"] = self.pending["generation"]
                self.pending["generation"] = self.generation
                self.pending["step_resumed_from"] = resumed_from if resumed_from >= 0 else None
                self.pending["steps_lost"] = (max(last - max(resumed_from, 0), 0)
                                              if isinstance(last, int) else None)
                self.pending["report_dir"] = rdir
            job = launch.Job(cmd, self._env(rdir), resumed_from)
            job.start()
            code, detected_at, ended_group, superseded = self._watch(job, rdir)
            if self.pending is not None:
                self._write_restart(None, None, "the relaunched job ended before its first "
                                    "new step")
            if superseded:
                return self._superseded("while its job ran", code, ended_group)
            report_list, notes = reports.read_reports(rdir)
            for n in notes:
                say(n)
            outcome = decide_mod.Outcome(pool=tuple(self.p.pool), job_hosts=tuple(hosts),
                                         exit_code=code, output=job.output(),
                                         reports=tuple(report_list),
                                         failures=dict(self.failures), restarts=self.restarts,
                                         stop_requested=bool(self.signals),
                                         resumed_from=resumed_from)
            # A job that finished, stopped or failed by its own error needs
            # nothing from the hosts: no probe (a stop is not a failure).
            d = decide_mod.settled(outcome)
            if d is None:
                if reports.read_generation(self.p.checkpoint_dir) > self.generation:
                    return self._superseded("after its job failed", code, ended_group)
                if self.p.probe is not None:
                    outcome = dataclasses.replace(outcome, unreachable=self._unreachable())
                d = decide_mod.decide(outcome, limits)
            memory_note = None
            if d.action == "relaunch" and d.world_size < world:
                fits, memory_note = self._memory(d.world_size)
                d = decide_mod.with_memory_check(d, fits, memory_note)
            committed = reports.latest_step(self.p.checkpoint_dir)
            _, _, last_printed, _ = job.snapshot()
            reached = [s for s in [r.get("step") for r in report_list] +
                       [last_printed, reports.metrics_last_step(self.p.metrics_file)]
                       if isinstance(s, int)]
            common = dict(generation=self.generation, exit_code=code, cause=d.cause,
                          culprits=d.culprits, reports=len(report_list),
                          last_step_reached=max(reached) if reached else None,
                          last_committed_step=committed if committed >= 0 else None,
                          detected_at=wall(detected_at), ended_process_group=ended_group,
                          reason=d.reason)
            if d.action == "finish":
                self.p.log.write("finish", generation=self.generation, restarts=self.restarts,
                                 last_committed_step=common["last_committed_step"])
                say(f"the job finished (generation {self.generation}, "
                    f"{self.restarts} restart{'' if self.restarts == 1 else 's'})")
                return 0
            if d.action == "stop":
                self.p.log.write("stop", **common)
                say(f"stopped: {d.reason} (exit code {code})")
                return code
            if d.action == "give_up":
                self.p.log.write("give_up", restarts=self.restarts, excluded=d.excluded,
                                 memory_check=memory_note, **common)
                say(f"giving up: {d.reason} (exit code {code})")
                return code if code != 0 else 1
            # Probed and decided: a launcher that took over in the meantime
            # makes take_generation refuse at the top of the loop.
            self.failures = d.failures
            gone = {e["name"] for e in d.excluded}
            self.p.pool = [h for h in self.p.pool if h.name not in gone]
            self.restarts += 1
            say(f"restart {self.restarts}: {d.reason}")
            self.pending = dict(common, restart=self.restarts, previous_world_size=world,
                                world_size=d.world_size, hosts=[h.to_json() for h in d.hosts],
                                excluded=d.excluded, backoff_s=d.backoff_s,
                                global_batch=limits.global_batch or None,
                                batch_per_rank=(list(d.batch) if d.batch else None),
                                memory_check=memory_note, detected_mono=detected_at)
            hosts = d.hosts
            self._sleep(d.backoff_s)  # a signal cuts it short; the loop's top stops

    def _superseded(self, when: str, code: Optional[int], ended_group: bool) -> int:
        """Stops this launcher: the root names a generation newer than its
        own, so another launcher owns it (and the runtime's fence refuses
        this launcher's commits). A restart decided but not made is said in
        the record instead of its own."""
        newer = reports.read_generation(self.p.checkpoint_dir)
        reason = (f"the checkpoint root {self.p.checkpoint_dir} names generation {newer}, newer "
                  f"than this launcher's {self.generation}: another zs-run took it over "
                  f"({when}); this one stops and leaves the root to it")
        undone = self.pending
        self.pending = None
        self.p.log.write("superseded", generation=self.generation, newer_generation=newer,
                         exit_code=code, restarts=self.restarts,
                         last_committed_step=reports.latest_step(self.p.checkpoint_dir),
                         ended_process_group=ended_group,
                         restart_not_made=(undone or {}).get("reason"), reason=reason)
        say(f"superseded: {reason} (exit code {decide_mod.SUPERSEDED_EXIT_CODE})")
        return decide_mod.SUPERSEDED_EXIT_CODE

    def _write_restart(self, first_step: Optional[int], first_at: Optional[float],
                       note: Optional[str] = None) -> None:
        """Writes the pending restart's record, with the seconds from the
        failure's detection to the new job's first new step."""
        rec = dict(self.pending or {})
        self.pending = None
        det = rec.pop("detected_mono", None)
        rec["first_new_step"] = first_step
        rec["recover_s"] = (round(first_at - det, 3) if first_at is not None and det is not None
                            else None)
        if note:
            rec["note"] = note
        self.p.log.write("restart", **rec)
        if rec["recover_s"] is not None:
            say(f"recovered: step {first_step} {rec['recover_s']:.1f} s after the failure was "
                f"detected ({rec.get('steps_lost')} step(s) lost)")

    def _watch(self, job: launch.Job, rdir: str):
        """Until the launcher exits: stop signals forwarded, the deadline
        after a failure enforced, the recovery's end noticed, the root's
        generation watched. Returns (exit code, when the failure was
        detected or None, whether zs-run had to end the process group,
        whether a newer generation took the root over, ending the job)."""
        detected = None
        forwarded = 0
        stop_deadline = None
        ended_group = False
        superseded = False
        next_fence_check = time.monotonic() + FENCE_POLL_S
        while True:
            code = job.poll()
            now = time.monotonic()
            while forwarded < len(self.signals):
                forwarded += 1
                if forwarded == 1:
                    name = signal.Signals(self.p.stop_signal).name
                    say(f"stop requested: forwarding {name} to the job (checkpoint at the next "
                        f"step, then exit {decide_mod.STOPPED_EXIT_CODE})")
                    job.send(self.p.stop_signal)
                    stop_deadline = now + self.p.stop_timeout_s
                elif forwarded == 2:
                    say("a second stop request: SIGTERM to the job (it ends at once)")
                    job.send(signal.SIGTERM)
                else:
                    job.end_group(2.0)
            first_step, first_at, _, seen = job.snapshot()
            if self.pending is not None and first_at is not None:
                self._write_restart(first_step, first_at)
            if code is not None:
                break
            if now >= next_fence_check and not superseded:
                next_fence_check = now + FENCE_POLL_S
                newer = reports.read_generation(self.p.checkpoint_dir)
                if newer > self.generation:
                    say(f"the checkpoint root names generation {newer}, newer than this job's "
                        f"{self.generation}: another zs-run took it over; ending this job "
                        "(fenced out: it can commit nothing)")
                    job.end_group(5.0)
                    ended_group = superseded = True
                    continue
            # A stop has its own deadline (--stop-timeout); its reports are
            # not a failure.
            if detected is None and not self.signals:
                if reports.count_reports(rdir) > 0:
                    detected = now
                elif seen is not None:
                    detected = seen
            if detected is not None and now - detected > self.p.kill_after_s and not ended_group:
                say(f"the job has not ended {self.p.kill_after_s:g} s after its failure was "
                    "detected: ending mpirun's process group")
                job.end_group(5.0)
                ended_group = True
            if stop_deadline is not None and now > stop_deadline:
                say(f"no checkpoint within --stop-timeout {self.p.stop_timeout_s:g} s: ending "
                    "the job")
                job.end_group(5.0)
                ended_group = True
                stop_deadline = None
            time.sleep(POLL_S)
        if detected is None and code != 0:
            detected = time.monotonic()
        # mpirun has ended: anything left in its group (an agent, a daemon
        # that lost mpirun) belongs to a job that is over.
        if job.group_alive():
            job.end_group(2.0)
        strays = launch.sweep(rdir, self.generation)
        if strays:
            say(f"ended {len(strays)} process{'' if len(strays) == 1 else 'es'} of generation "
                f"{self.generation} that outlived mpirun (pids {', '.join(map(str, strays))})")
        job.finish_output()
        first_step, first_at, _, _ = job.snapshot()
        if self.pending is not None and first_at is not None:
            self._write_restart(first_step, first_at)
        return code, detected, ended_group, superseded

    def _unreachable(self) -> frozenset:
        """The hosts of the pool the probe could not reach (Host.ident)."""
        from .probe import probe_all
        assert self.p.probe is not None
        t0 = time.monotonic()
        reach = probe_all(self.p.pool, self.p.probe)
        say(f"probed {len(reach)} host{'' if len(reach) == 1 else 's'} in "
            f"{time.monotonic() - t0:.1f} s: " +
            ", ".join(f"{h.name} {'reachable' if reach.get(h.ident) else 'UNREACHABLE'}"
                      for h in self.p.pool))
        return frozenset(k for k, ok in reach.items() if not ok)

    def _memory(self, world: int):
        if not self.p.memory_limit:
            return None, "not checked: no --memory-limit"
        layout = self.p.estimate_layout
        if layout is None:
            if reports.latest_step(self.p.checkpoint_dir) < 0:
                return None, ("not checked: the model is unknown to zs-estimate (no committed "
                              "checkpoint yet and no --estimate-layout)")
            layout = ["--checkpoint", self.p.checkpoint_dir]
        fits, why, cmd = estimate.check(self.p.zs_estimate, layout, self.p.estimate_config,
                                        self.p.estimate_overrides, world, self.p.memory_limit,
                                        self.p.stage, self.p.offload)
        say(f"memory check on {world} ranks: {why}")
        return fits, why

    def _sleep(self, seconds: float) -> bool:
        """Sleeps, and returns False at once when a stop signal arrives."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.signals:
                return False
            time.sleep(min(POLL_S, max(end - time.monotonic(), 0)))
        return not self.signals
