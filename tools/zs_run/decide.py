"""The decision after a job ended: finish, stop, relaunch (on which hosts,
with how many ranks, after how long) or give up, and why.

A pure function of what the launcher knows: the hosts, the failure counts
so far, the exit reports, mpirun's exit status and output, which hosts the
probe reached, the limits and the global batch. Nothing here reads a file,
runs a command or looks at the clock, so every branch is tested on
synthetic inputs (tests/launcher/test_decide.py).

Who is blamed for a failure (one count per host per failure):
  - reports with cause "timeout" are votes for the rank each names as
    silent (`peer`); the rank(s) with the most votes are blamed, with their
    host. A reporting rank on an unreachable host does not vote (cut off,
    it found every other rank silent), and a minority view is the silent
    rank's own (a stopped rank that mpirun's SIGCONT resumed names a peer
    that was already gone);
  - a report with cause "failed" blames the rank's own host;
  - a rank mpirun saw killed by a signal, or exit non-zero with a code that
    is not one of the runtime's own (75 timeout, 76 stopped, 78
    terminated: those ranks ended because of another), blames its host;
  - without reports, the runtime's "look at rank N first" blames N's host;
  - a daemon mpirun lost blames its host; an unreachable host is blamed
    and excluded.
Reports with cause "terminated" blame nobody: mpirun sends SIGTERM to every
rank when one dies, so those ranks are bystanders.

Some ends are settled without asking anything of the hosts (settled(): no
probe): the job finished, it stopped (exit 76, or every report "stopped"),
or it is the program's own error, which fails the same way on any host and
so stops the run at once, with no back-off, no restart and no host blamed:
exit code 64 (ZS_CONFIG_EXIT_CODE), any report with cause "config", or the
same failure (cause and call) reported by every rank before its first step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from . import job_output
from .hosts import Host, find_host

# The runtime's exit codes (include/zeroshard.h).
CONFIG_EXIT_CODE = 64
TIMEOUT_EXIT_CODE = 75
STOPPED_EXIT_CODE = 76
TERMINATED_EXIT_CODE = 78
RUNTIME_CODES = (TIMEOUT_EXIT_CODE, STOPPED_EXIT_CODE, TERMINATED_EXIT_CODE)
# zs-run's own: another launcher took a newer generation of the checkpoint
# root, so this one stopped (not a code any program or launcher uses).
SUPERSEDED_EXIT_CODE = 79

# gradient_accumulation_steps' upper bound in the runtime's schema.
MAX_ACCUMULATION = 65536


@dataclass(frozen=True)
class Limits:
    min_ranks: int = 1
    max_restarts: int = 3
    fail_limit: int = 2          # failures after which a host is excluded
    backoff_s: float = 5.0       # before the first restart; doubles each restart
    backoff_max_s: float = 300.0
    global_batch: int = 0        # sequences per optimizer step (app.global_batch); 0 = not kept
    batch_cap: int = 0           # the per-rank micro-batch cap (app.batch_size); 0 = no cap


@dataclass(frozen=True)
class Outcome:
    """What the launcher knows when a job has ended."""
    pool: Tuple[Host, ...]         # hosts still allowed, with their full slots
    job_hosts: Tuple[Host, ...]    # the ended job's hosts and slots, in rank order
    exit_code: int                 # mpirun's (or srun's)
    output: str = ""               # the tail of its output
    reports: Tuple[dict, ...] = ()
    unreachable: FrozenSet[str] = frozenset()   # Host.ident of hosts the probe did not reach
    failures: Mapping[str, int] = field(default_factory=dict)  # Host.ident -> failures so far
    restarts: int = 0              # restarts made so far
    stop_requested: bool = False   # zs-run itself received SIGTERM or SIGUSR1
    resumed_from: int = -1         # the committed step the job started from (-1: none)


@dataclass
class Decision:
    action: str                    # "finish" | "stop" | "relaunch" | "give_up"
    exit_code: int                 # zs-run's exit code when it does not relaunch
    cause: str                     # timeout | killed | failed | unreachable | terminated |
                                   # config | program | stopped | ...
    reason: str
    culprits: List[dict] = field(default_factory=list)   # {rank, host, addresses, why}
    failures: Dict[str, int] = field(default_factory=dict)
    excluded: List[dict] = field(default_factory=list)   # {name, addresses, why}
    hosts: List[Host] = field(default_factory=list)      # the next job's hosts and slots
    world_size: int = 0
    backoff_s: float = 0.0
    batch: Optional[Tuple[int, int]] = None              # (micro-batch, accumulation) per rank


def batch_split(global_batch: int, world: int, cap: int) -> Optional[Tuple[int, int]]:
    """The trainer's rule (examples/trainer/ex_batch.c, keep them alike):
    the largest per-rank micro-batch B <= cap with world x B x A =
    global_batch for a whole number of accumulation steps A <= 65536; None
    when the world does not divide the global batch or A would be larger."""
    if global_batch <= 0 or world <= 0 or global_batch % world:
        return None
    per_rank = global_batch // world
    top = min(per_rank, cap) if cap > 0 else per_rank
    for b in range(top, 0, -1):
        if per_rank % b == 0:
            a = per_rank // b
            return (b, a) if a <= MAX_ACCUMULATION else None
    return None


def _host_label(hosts: Sequence[Host], i: Optional[int], fallback: str = "?") -> str:
    return hosts[i].name if i is not None else fallback


def _culprits(o: Outcome, facts: job_output.OutputFacts) -> List[Tuple[Optional[int], dict]]:
    """(host index in job_hosts or None, culprit record) for every piece of
    evidence; a host may appear several times."""
    hosts = o.job_hosts
    out: List[Tuple[Optional[int], dict]] = []
    unreachable_idx = {i for i, h in enumerate(hosts) if h.ident in o.unreachable}
    reported = {r["rank"]: r for r in o.reports}

    def add(i: Optional[int], rank: Optional[int], why: str) -> None:
        rec = {"rank": rank, "host": _host_label(hosts, i),
               "addresses": list(hosts[i].addresses) if i is not None else [], "why": why}
        out.append((i, rec))

    # Timeouts are votes: each reporting rank names the rank it found silent.
    # The rank named by the most reporters is the culprit; a minority view
    # comes from the silent rank itself (a stopped rank resumed by mpirun's
    # SIGCONT before SIGTERM finds its peers gone and names one of them).
    votes: Dict[int, List[dict]] = {}
    for r in o.reports:
        own = find_host(hosts, r.get("addresses") or (), r.get("host"), r.get("rank"))
        peer = r.get("peer", -1)
        if r.get("cause") == "timeout" and isinstance(peer, int) and peer >= 0 and \
                own not in unreachable_idx:
            votes.setdefault(peer, []).append(r)
        elif r.get("cause") == "failed":
            add(own, r["rank"], f"rank {r['rank']} failed: {r.get('message', '')}".rstrip(": "))
    most = max((len(v) for v in votes.values()), default=0)
    for peer in sorted(p for p, v in votes.items() if len(v) == most):
        first = votes[peer][0]
        i = find_host(hosts, first.get("peer_addresses") or (), first.get("peer_host"), peer)
        by = sorted(v["rank"] for v in votes[peer])
        add(i, peer, f"rank {peer} was silent past the deadline ({first.get('op') or 'a collective'}; "
                     f"reported by rank{'s' if len(by) > 1 else ''} {', '.join(map(str, by))})")

    for end in facts.rank_ends:
        rep = reported.get(end.rank)
        if rep is not None and rep.get("cause") in ("terminated", "stopped", "timeout", "failed"):
            continue  # its report says why; counted above or a bystander
        if end.how == "abort":
            continue  # the rank that noticed the failure and ended the job
        if end.how == "exit" and end.code in RUNTIME_CODES:
            continue
        if end.how == "srun" and end.code in RUNTIME_CODES:
            continue
        i = find_host(hosts, (), None, end.rank)
        add(i, end.rank, end.describe())

    if not o.reports and facts.silent_rank is not None:
        i = find_host(hosts, (), None, facts.silent_rank)
        add(i, facts.silent_rank, f"rank {facts.silent_rank} was silent past the deadline "
                                  "(the runtime's message; no exit report)")
    for node in facts.lost_nodes:
        i = find_host(hosts, (node,), node, None)
        add(i, None, f"mpirun lost its daemon on {node}")
    for i in sorted(unreachable_idx):
        add(i, None, f"{hosts[i].name} cannot be reached")
    return out


def _cause(o: Outcome, facts: job_output.OutputFacts, culprits: List[dict]) -> str:
    causes = {r.get("cause") for r in o.reports}
    if "timeout" in causes or o.exit_code == TIMEOUT_EXIT_CODE or facts.silent_rank is not None:
        return "timeout"
    if any(e.how == "signal" or (e.how == "srun" and e.signal_name == "Killed")
           for e in facts.rank_ends):
        return "killed"
    if "failed" in causes or any(c["why"].startswith(("rank", "srun")) for c in culprits):
        return "failed"
    if o.unreachable or facts.lost_nodes:
        return "unreachable"
    if "terminated" in causes or o.exit_code == TERMINATED_EXIT_CODE:
        return "terminated"
    return "unknown"


def world_for(pool: Sequence[Host], limits: Limits) -> Tuple[int, Optional[Tuple[int, int]]]:
    """The largest world size the pool holds that keeps the global batch
    (0 when none down to min_ranks does), and its batch split."""
    total = sum(h.slots for h in pool)
    for w in range(total, max(limits.min_ranks, 1) - 1, -1):
        if limits.global_batch <= 0:
            return w, None
        split = batch_split(limits.global_batch, w, limits.batch_cap)
        if split:
            return w, split
    return 0, None


def fill_slots(pool: Sequence[Host], world: int) -> List[Host]:
    """The first `world` slots of the pool, host by host (mpirun's order)."""
    out, left = [], world
    for h in pool:
        if left <= 0:
            break
        take = min(h.slots, left)
        out.append(h.with_slots(take))
        left -= take
    return out


def _said(messages: Sequence[str]) -> str:
    """Distinct messages in their order, joined, at most 300 characters."""
    seen: List[str] = []
    for m in messages:
        m = str(m).strip()
        if m and m not in seen:
            seen.append(m)
    text = "; ".join(seen)
    return text if len(text) <= 300 else text[:297] + "..."


def _program_error(o: Outcome, facts: job_output.OutputFacts) -> Optional[Decision]:
    """A stop for the program's own error, or None. Restarting cannot help:
    the same configuration and data fail the same way on any host, and
    blaming the hosts would exclude healthy ones one by one."""
    failures = dict(o.failures)
    config = [r for r in o.reports if r.get("cause") == "config"]
    if o.exit_code == CONFIG_EXIT_CODE or config:
        said = _said([r.get("message", "") for r in config]) or \
            _said(job_output.program_messages(o.output)) or "no message"
        return Decision("stop", o.exit_code, "config",
                        f"the program refused its configuration ({said}); not restarting: it "
                        "fails the same way on any host", failures=failures)
    world = sum(h.slots for h in o.job_hosts)
    first = max(o.resumed_from, 0)
    ways = {(r.get("cause"), r.get("op")) for r in o.reports}
    if (world > 0 and len({r["rank"] for r in o.reports}) >= world and len(ways) == 1 and
            next(iter(ways))[0] == "failed" and
            all(isinstance(r.get("step"), int) and r["step"] <= first for r in o.reports) and
            (facts.last_step is None or facts.last_step <= first)):
        said = _said([r.get("message", "") for r in o.reports]) or "no message"
        return Decision("stop", o.exit_code, "program",
                        f"every rank failed the same way before its first step ({said}): the "
                        "program's own error, not a host's; not restarting: it fails the same "
                        "way on any host", failures=failures)
    return None


def settled(o: Outcome) -> Optional[Decision]:
    """The decision when it needs nothing from the hosts (no probe): the job
    finished, stopped, or failed by its own error; None otherwise."""
    failures = dict(o.failures)
    if o.exit_code == 0:
        return Decision("finish", 0, "none", "the job finished", failures=failures)

    reported_causes = [r.get("cause") for r in o.reports]
    if (o.stop_requested or o.exit_code == STOPPED_EXIT_CODE or
            (reported_causes and all(c == "stopped" for c in reported_causes))):
        why = ("zs-run was asked to stop" if o.stop_requested
               else "the job stopped on a signal after its checkpoint")
        return Decision("stop", o.exit_code, "stopped", why + "; not restarting", failures=failures)
    return _program_error(o, job_output.parse(o.output))


def decide(o: Outcome, limits: Limits) -> Decision:
    done = settled(o)
    if done is not None:
        return done
    facts = job_output.parse(o.output)
    failures = dict(o.failures)
    reported_causes = [r.get("cause") for r in o.reports]

    evidence = _culprits(o, facts)
    culprits = [rec for _, rec in evidence]
    cause = _cause(o, facts, culprits)
    world_before = sum(h.slots for h in o.job_hosts)

    if (len(o.reports) >= world_before > 0 and all(c == "failed" for c in reported_causes)):
        msgs = sorted({str(r.get("message", "")) for r in o.reports})
        return Decision("give_up", o.exit_code, "failed",
                        f"every rank failed ({'; '.join(msgs)[:300]}): an error of the program "
                        "or its configuration, not of a host; restarting would fail the same way",
                        culprits=culprits, failures=failures)

    # One count per host per failure, however much evidence names it.
    blamed = sorted({i for i, _ in evidence if i is not None})
    for i in blamed:
        ident = o.job_hosts[i].ident
        failures[ident] = failures.get(ident, 0) + 1

    if o.restarts >= limits.max_restarts:
        return Decision("give_up", o.exit_code, cause,
                        f"the job failed ({cause}) after {o.restarts} restart"
                        f"{'' if o.restarts == 1 else 's'}: --max-restarts {limits.max_restarts} "
                        "reached", culprits=culprits, failures=failures)

    excluded, pool = [], []
    for h in o.pool:
        why = None
        if h.ident in o.unreachable:
            why = "cannot be reached"
        elif failures.get(h.ident, 0) >= limits.fail_limit:
            why = (f"failed {failures[h.ident]} time{'' if failures[h.ident] == 1 else 's'} "
                   f"(--fail-limit {limits.fail_limit})")
        if why:
            excluded.append({"name": h.name, "addresses": list(h.addresses), "why": why})
        else:
            pool.append(h)

    world, split = world_for(pool, limits)
    slots = sum(h.slots for h in pool)
    if world == 0:
        if slots < limits.min_ranks:
            reason = (f"{slots} slot{'' if slots == 1 else 's'} left after excluding "
                      f"{', '.join(e['name'] for e in excluded) or 'no host'}: below "
                      f"--min-ranks {limits.min_ranks}")
        else:
            reason = (f"no world size from {slots} down to --min-ranks {limits.min_ranks} keeps "
                      f"the global batch of {limits.global_batch} sequences with at most "
                      f"{limits.batch_cap or 'any'} per rank per micro-step (the world size must "
                      "divide the global batch)")
        return Decision("give_up", o.exit_code, cause, reason, culprits=culprits,
                        failures=failures, excluded=excluded)

    backoff = min(limits.backoff_s * (2 ** o.restarts), limits.backoff_max_s)
    hosts = fill_slots(pool, world)
    if world < slots:
        shape = (f"{world} of the {slots} slots left: the largest world size that divides the "
                 f"global batch of {limits.global_batch}")
    else:
        shape = f"all {world} slots left"
    who = "; ".join(c["why"] + (f" on {c['host']}" if c["host"] not in ("?",) and
                                 c["host"] not in c["why"] else "") for c in culprits)
    reason = (f"{cause}: {who or 'no rank or host to blame'}; relaunching on {shape}"
              + (f" ({', '.join(e['name'] + ' ' + e['why'] for e in excluded)} excluded)"
                 if excluded else "") + f" after {backoff:g} s")
    return Decision("relaunch", o.exit_code, cause, reason, culprits=culprits, failures=failures,
                    excluded=excluded, hosts=hosts, world_size=world, backoff_s=backoff,
                    batch=split)


def with_memory_check(d: Decision, fits: Optional[bool], why: str) -> Decision:
    """A relaunch on fewer ranks becomes a give-up when the memory estimate
    says the model no longer fits per rank; `fits` None (no estimate) keeps
    the decision, and `why` is logged either way."""
    if d.action != "relaunch" or fits is None or fits:
        return d
    return Decision("give_up", d.exit_code, d.cause,
                    f"{d.world_size} ranks would not hold the model: {why}", culprits=d.culprits,
                    failures=d.failures, excluded=d.excluded)
