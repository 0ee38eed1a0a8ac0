"""zs-run's decision (tools/zs_run/decide.py) on synthetic reports and
output: every branch of decide(), of the blame, of the cause, of the world
size and batch split, and of the memory check.

Run: python3 -m unittest discover -s tests/launcher -p 'test_*.py'
(ZS_RUN_DIR names the directory holding the zs_run package; tools/ by default).
"""
import os
import sys
import unittest

sys.path.insert(0, os.environ.get("ZS_RUN_DIR") or
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))

from zs_run.decide import (Limits, Outcome, batch_split, decide,  # noqa: E402
                           settled, with_memory_check)
from zs_run.hosts import Host  # noqa: E402

H0 = Host("h0", 2, ("10.0.0.1",))
H1 = Host("h1", 2, ("10.0.0.2",))
H2 = Host("h2", 2, ("10.0.0.3",))
POOL = (H0, H1)

# Open MPI 4.1's own words (seen in this repository's runs).
KILLED = """--------------------------------------------------------------------------
mpirun noticed that process rank 2 with PID 4242 on node box exited on signal 9 (Killed).
--------------------------------------------------------------------------"""
NONZERO = """--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[52371,1],3]
  Exit code:    %d
--------------------------------------------------------------------------"""
ABORT = """MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD
with errorcode 75."""
LOST = """ORTE has lost communication with a remote daemon.

  HNP daemon   : [[5791,0],0] on node 10.0.0.1
  Remote daemon: [[5791,0],1] on node 10.0.0.2

This is usually due to either a failure of the TCP network"""
SILENT = ("zeroshard: rank 0: ERROR all_gather #12 of 'unit 3' (4096 bytes) on rank 0 timed out: "
          "no progress for 3.0 s; no report from rank 3 within 2.0 s: it is stopped, dead, or "
          "not in this collective; look at rank 3 first; aborting the job")


def report(rank, cause, host=None, peer=-1, peer_host=None, **kw):
    addr = {"h0": "10.0.0.1", "h1": "10.0.0.2", "h2": "10.0.0.3"}
    r = {"version": 1, "rank": rank, "cause": cause, "host": "box",
         "addresses": ["127.0.0.1", addr[host]] if host else [], "peer": peer,
         "peer_host": "box", "peer_addresses": [addr[peer_host]] if peer_host else [],
         "op": "all_gather", "message": kw.pop("message", ""), "step": 7,
         "last_committed_step": 5}
    r.update(kw)
    return r


def outcome(**kw):
    base = dict(pool=POOL, job_hosts=POOL, exit_code=1)
    base.update(kw)
    return Outcome(**base)


LIMITS = Limits(min_ranks=2, max_restarts=3, fail_limit=2, backoff_s=1.0, backoff_max_s=3.0)


class Finish(unittest.TestCase):
    def test_exit_zero_finishes(self):
        d = decide(outcome(exit_code=0), LIMITS)
        self.assertEqual((d.action, d.exit_code), ("finish", 0), d.reason)


class Stop(unittest.TestCase):
    def test_zs_run_was_asked(self):
        d = decide(outcome(exit_code=75, stop_requested=True), LIMITS)
        self.assertEqual(d.action, "stop", d.reason)
        self.assertEqual(d.exit_code, 75)

    def test_job_exit_76(self):
        d = decide(outcome(exit_code=76), LIMITS)
        self.assertEqual((d.action, d.exit_code), ("stop", 76), d.reason)

    def test_every_report_stopped(self):
        d = decide(outcome(exit_code=1, reports=(report(0, "stopped", "h0"),
                                                 report(1, "stopped", "h0"))), LIMITS)
        self.assertEqual(d.action, "stop", d.reason)


class GiveUp(unittest.TestCase):
    def test_every_rank_failed_is_the_program(self):
        reps = tuple(report(r, "failed", "h0" if r < 2 else "h1", message="bad key")
                     for r in range(4))
        d = decide(outcome(exit_code=1, reports=reps), LIMITS)
        self.assertEqual(d.action, "give_up", d.reason)
        self.assertIn("not of a host", d.reason)
        self.assertIn("bad key", d.reason)

    def test_max_restarts(self):
        d = decide(outcome(exit_code=137, output=KILLED, restarts=3), LIMITS)
        self.assertEqual((d.action, d.exit_code), ("give_up", 137), d.reason)
        self.assertIn("--max-restarts 3 reached", d.reason)
        self.assertEqual(d.failures, {H1.ident: 1}, "the failure is still counted")

    def test_below_min_ranks(self):
        lim = Limits(min_ranks=3, max_restarts=5)
        d = decide(outcome(exit_code=75, unreachable=frozenset({H1.ident})), lim)
        self.assertEqual(d.action, "give_up", d.reason)
        self.assertIn("2 slots left after excluding h1: below --min-ranks 3", d.reason)
        self.assertEqual(d.excluded, [{"name": "h1", "addresses": ["10.0.0.2"],
                                       "why": "cannot be reached"}])

    def test_no_world_keeps_the_global_batch(self):
        pool = (Host("a", 3, ("10.0.0.1",)),)
        lim = Limits(min_ranks=3, global_batch=8, batch_cap=4)
        d = decide(outcome(pool=pool, job_hosts=pool, exit_code=1), lim)
        self.assertEqual(d.action, "give_up", d.reason)
        self.assertIn("keeps the global batch of 8", d.reason)

    def test_memory_check_refuses(self):
        d = decide(outcome(exit_code=75, unreachable=frozenset({H1.ident})),
                   Limits(min_ranks=1))
        self.assertEqual(d.action, "relaunch", d.reason)
        g = with_memory_check(d, False, "stage 3 does not fit on 2 ranks: 9 GiB per rank")
        self.assertEqual((g.action, g.exit_code), ("give_up", 75))
        self.assertIn("would not hold the model: stage 3 does not fit", g.reason)


class ProgramError(unittest.TestCase):
    """The program's own error stops the run: no restart, no back-off, no
    host blamed or excluded, the program's message in the reason."""

    def assert_stopped(self, d, cause, said):
        self.assertEqual((d.action, d.cause), ("stop", cause), d.reason)
        self.assertIn(said, d.reason)
        self.assertEqual(d.excluded, [], "no host is excluded for the program's error")
        self.assertEqual(d.backoff_s, 0.0)

    def test_exit_64_without_reports(self):
        out = "gpt2_train: unknown key 'app.bogus'\n" + NONZERO % 64
        o = outcome(exit_code=64, output=out, failures={H1.ident: 1})
        d = decide(o, Limits(min_ranks=1, fail_limit=1))
        self.assert_stopped(d, "config", "unknown key 'app.bogus'")
        self.assertEqual(d.exit_code, 64)
        self.assertEqual(d.failures, {H1.ident: 1}, "no failure is counted against a host")
        self.assertNotIn("Process name", d.reason, "mpirun's own text is not the message")

    def test_a_config_report(self):
        reps = (report(0, "config", "h0", message="mlp_train: cannot open 'x.cfg'"),
                report(1, "config", "h0", message="mlp_train: cannot open 'x.cfg'"))
        d = decide(outcome(exit_code=1, reports=reps), LIMITS)
        self.assert_stopped(d, "config", "mlp_train: cannot open 'x.cfg'")
        self.assertEqual(d.reason.count("cannot open"), 1, "one copy of the message")

    def test_config_on_a_pool_excludes_nobody(self):
        # The bug: each launch blamed a healthy host until none was left.
        pool = (H0, H1, H2)
        reps = (report(2, "config", "h1", message="trainer: app.train_data: cannot open x"),)
        d = decide(outcome(pool=pool, job_hosts=pool, exit_code=64, reports=reps,
                           output=NONZERO % 64),
                   Limits(min_ranks=1, fail_limit=1))
        self.assert_stopped(d, "config", "app.train_data: cannot open x")
        self.assertEqual(d.failures, {})

    def test_the_same_failure_on_every_rank_before_the_first_step(self):
        reps = tuple(report(r, "failed", "h0" if r < 2 else "h1", op="zs_build", step=0,
                            message=f"rank {r}: out of memory") for r in range(4))
        d = decide(outcome(exit_code=1, reports=reps), LIMITS)
        self.assert_stopped(d, "program", "before its first step")
        self.assertIn("rank 3: out of memory", d.reason)
        self.assertEqual(d.failures, {})
        # Resumed from step 12: failing at step 12 is before its first step.
        resumed = tuple(dict(r, step=12) for r in reps)
        self.assertEqual(decide(outcome(exit_code=1, reports=resumed, resumed_from=12),
                                LIMITS).cause, "program")

    def test_not_the_same_or_not_before_the_first_step(self):
        reps = tuple(report(r, "failed", "h0" if r < 2 else "h1", op="zs_build", step=0)
                     for r in range(4))
        after = tuple(dict(r, step=3) for r in reps)
        self.assertEqual(decide(outcome(exit_code=1, reports=after), LIMITS).action, "give_up",
                         "after steps: the existing every-rank-failed give-up")
        mixed = reps[:3] + (dict(reps[3], op="zs_step"),)
        self.assertNotEqual(decide(outcome(exit_code=1, reports=mixed), LIMITS).action, "stop")
        some = reps[:3]
        self.assertNotEqual(decide(outcome(exit_code=1, reports=some), LIMITS).action, "stop",
                            "one rank sent no report: it may be its host")
        stepped = outcome(exit_code=1, reports=reps, output="step    1/9 | loss 3.0\n")
        self.assertNotEqual(decide(stepped, LIMITS).action, "stop", "it printed a step")


class NoProbe(unittest.TestCase):
    """settled() decides without the hosts: zs-run probes only when it is
    None (a stop is not a failure)."""

    def test_settled_ends(self):
        self.assertEqual(settled(outcome(exit_code=0)).action, "finish")
        self.assertEqual(settled(outcome(exit_code=76)).action, "stop")
        self.assertEqual(settled(outcome(exit_code=1, stop_requested=True)).action, "stop")
        self.assertEqual(settled(outcome(exit_code=64)).cause, "config")

    def test_a_failure_needs_the_probe(self):
        self.assertIsNone(settled(outcome(exit_code=137, output=KILLED)))
        self.assertIsNone(settled(outcome(exit_code=75)))


class MemoryCheckKeeps(unittest.TestCase):
    def test_fits_or_unknown_or_not_a_relaunch(self):
        d = decide(outcome(exit_code=137, output=KILLED), LIMITS)
        self.assertIs(with_memory_check(d, True, "fits"), d)
        self.assertIs(with_memory_check(d, None, "unknown"), d)
        f = decide(outcome(exit_code=0), LIMITS)
        self.assertIs(with_memory_check(f, False, "x"), f)


class Relaunch(unittest.TestCase):
    def test_killed_rank_relaunches_on_both_hosts(self):
        d = decide(outcome(exit_code=137, output=KILLED,
                           reports=(report(0, "terminated", "h0"), report(1, "terminated", "h0"),
                                    report(3, "terminated", "h1"))), LIMITS)
        self.assertEqual(d.action, "relaunch", d.reason)
        self.assertEqual(d.cause, "killed")
        self.assertEqual([(h.name, h.slots) for h in d.hosts], [("h0", 2), ("h1", 2)])
        self.assertEqual(d.world_size, 4)
        self.assertEqual(d.failures, {H1.ident: 1})
        self.assertEqual(d.culprits[0]["rank"], 2)
        self.assertEqual(d.culprits[0]["host"], "h1")
        self.assertIn("killed by signal 9 (Killed)", d.culprits[0]["why"])
        self.assertEqual(d.backoff_s, 1.0)

    def test_unreachable_host_excluded_and_its_reports_ignored(self):
        reps = (report(0, "timeout", "h0", peer=2, peer_host="h1"),
                report(2, "timeout", "h1", peer=0, peer_host="h0"),
                report(3, "timeout", "h1", peer=1, peer_host="h0"))
        d = decide(outcome(exit_code=75, reports=reps, output=ABORT + "\n" + LOST,
                           unreachable=frozenset({H1.ident})), Limits(min_ranks=1))
        self.assertEqual(d.action, "relaunch", d.reason)
        self.assertEqual(d.cause, "timeout")
        self.assertEqual([(h.name, h.slots) for h in d.hosts], [("h0", 2)])
        self.assertEqual(d.excluded[0]["name"], "h1")
        # h0 is not blamed: only the cut-off ranks called it silent.
        self.assertNotIn(H0.ident, d.failures)
        self.assertEqual(d.failures[H1.ident], 1)

    def test_fail_limit_excludes(self):
        d = decide(outcome(exit_code=137, output=KILLED, failures={H1.ident: 1}, restarts=1),
                   Limits(min_ranks=1, fail_limit=2, backoff_s=1, backoff_max_s=10))
        self.assertEqual(d.action, "relaunch", d.reason)
        self.assertEqual(d.excluded, [{"name": "h1", "addresses": ["10.0.0.2"],
                                       "why": "failed 2 times (--fail-limit 2)"}])
        self.assertEqual(d.world_size, 2)
        self.assertEqual(d.backoff_s, 2.0, "the back-off doubles")

    def test_backoff_is_capped(self):
        d = decide(outcome(exit_code=137, output=KILLED, restarts=2),
                   Limits(min_ranks=1, max_restarts=5, fail_limit=9, backoff_s=1.0,
                          backoff_max_s=3.0))
        self.assertEqual(d.backoff_s, 3.0)

    def test_global_batch_shrinks_to_a_divisor(self):
        pool = (H0, Host("h1", 3, ("10.0.0.2",)), H2)
        lim = Limits(min_ranks=1, global_batch=8, batch_cap=2)
        d = decide(outcome(pool=pool, job_hosts=pool, exit_code=137, output=KILLED,
                           unreachable=frozenset({H2.ident})), lim)
        self.assertEqual(d.action, "relaunch", d.reason)
        self.assertEqual(d.world_size, 4, "5 slots left; 4 is the largest divisor of 8")
        self.assertEqual([(h.name, h.slots) for h in d.hosts], [("h0", 2), ("h1", 2)])
        self.assertEqual(d.batch, (2, 1))
        self.assertIn("largest world size that divides the global batch of 8", d.reason)


class Blame(unittest.TestCase):
    def culprits(self, **kw):
        return decide(outcome(**kw), Limits(min_ranks=1, max_restarts=9, fail_limit=9)).culprits

    def test_timeout_peer_by_address_beats_rank(self):
        # The peer's addresses say h0 although rank 3 would be on h1.
        c = self.culprits(exit_code=75, reports=(report(1, "timeout", "h0", peer=3,
                                                        peer_host="h0"),))
        self.assertEqual([(x["rank"], x["host"]) for x in c], [(3, "h0")])

    def test_timeout_peer_by_rank_without_addresses(self):
        c = self.culprits(exit_code=75, reports=(report(0, "timeout", "h0", peer=3),))
        self.assertEqual([(x["rank"], x["host"]) for x in c], [(3, "h1")])

    def test_the_most_named_silent_rank_is_blamed(self):
        # Rank 2 was stopped; resumed by mpirun's SIGCONT it names rank 0.
        reps = (report(0, "timeout", "h0", peer=2, peer_host="h1"),
                report(1, "timeout", "h0", peer=2, peer_host="h1"),
                report(2, "timeout", "h1", peer=0, peer_host="h0"),
                report(3, "timeout", "h1", peer=2, peer_host="h1"))
        d = decide(outcome(exit_code=75, reports=reps), Limits(min_ranks=1))
        self.assertEqual([(x["rank"], x["host"]) for x in d.culprits], [(2, "h1")])
        self.assertIn("reported by ranks 0, 1, 3", d.culprits[0]["why"])
        self.assertEqual(d.failures, {H1.ident: 1})

    def test_a_tie_blames_both(self):
        reps = (report(0, "timeout", "h0", peer=2, peer_host="h1"),
                report(2, "timeout", "h1", peer=0, peer_host="h0"))
        d = decide(outcome(exit_code=75, reports=reps), Limits(min_ranks=1, fail_limit=9))
        self.assertEqual(sorted(x["rank"] for x in d.culprits), [0, 2])
        self.assertEqual(d.failures, {H0.ident: 1, H1.ident: 1})

    def test_timeout_without_peer_blames_nobody(self):
        d = decide(outcome(exit_code=75, reports=(report(0, "timeout", "h0", peer=-1),)),
                   Limits(min_ranks=1))
        self.assertEqual(d.culprits, [])
        self.assertEqual(d.cause, "timeout")
        self.assertIn("no rank or host to blame", d.reason)

    def test_failed_report_blames_own_host(self):
        c = self.culprits(exit_code=1, reports=(report(2, "failed", "h1", message="disk full"),
                                                report(0, "terminated", "h0")))
        self.assertEqual([(x["rank"], x["host"]) for x in c], [(2, "h1")])
        self.assertIn("disk full", c[0]["why"])

    def test_nonzero_exit_blames_unless_runtime_code(self):
        c = self.culprits(exit_code=3, output=NONZERO % 3)
        self.assertEqual([(x["rank"], x["host"]) for x in c], [(3, "h1")])
        for code in (75, 76, 78):
            self.assertEqual(self.culprits(exit_code=code + 100, output=NONZERO % code), [],
                             f"exit code {code} is the runtime's: a bystander")

    def test_abort_is_not_blamed(self):
        self.assertEqual(self.culprits(exit_code=75, output=ABORT), [])

    def test_signal_with_terminated_report_is_a_bystander(self):
        self.assertEqual(self.culprits(exit_code=137, output=KILLED,
                                       reports=(report(2, "terminated", "h1"),)), [])

    def test_silent_rank_from_the_runtime_message(self):
        d = decide(outcome(exit_code=75, output=SILENT + "\n" + ABORT), Limits(min_ranks=1))
        self.assertEqual([(x["rank"], x["host"]) for x in d.culprits], [(3, "h1")])
        self.assertEqual(d.cause, "timeout")

    def test_silent_message_ignored_when_reports_exist(self):
        c = self.culprits(exit_code=75, output=SILENT,
                          reports=(report(0, "timeout", "h0", peer=1, peer_host="h0"),))
        self.assertEqual([(x["rank"], x["host"]) for x in c], [(1, "h0")])

    def test_lost_daemon(self):
        d = decide(outcome(exit_code=1, output=LOST), Limits(min_ranks=1, max_restarts=9))
        self.assertEqual([x["host"] for x in d.culprits], ["h1"])
        self.assertEqual(d.cause, "unreachable")

    def test_srun_task_lines(self):
        out = ("srun: error: h1: task 3: Killed\n"
               "srun: error: h0: tasks 0-1: Exited with exit code 78\n")
        d = decide(outcome(exit_code=137, output=out), Limits(min_ranks=1, max_restarts=9))
        self.assertEqual([(x["rank"], x["host"]) for x in d.culprits], [(3, "h1")])
        self.assertEqual(d.cause, "killed")

    def test_one_count_per_host_per_failure(self):
        reps = (report(0, "timeout", "h0", peer=2, peer_host="h1"),
                report(1, "timeout", "h0", peer=3, peer_host="h1"))
        d = decide(outcome(exit_code=75, reports=reps, output=KILLED), Limits(min_ranks=1))
        self.assertEqual(d.failures, {H1.ident: 1})


class Cause(unittest.TestCase):
    def cause(self, **kw):
        return decide(outcome(**kw), Limits(min_ranks=1, max_restarts=9, fail_limit=9)).cause

    def test_each(self):
        self.assertEqual(self.cause(exit_code=75), "timeout")
        self.assertEqual(self.cause(exit_code=137, output=KILLED), "killed")
        self.assertEqual(self.cause(exit_code=3, output=NONZERO % 3), "failed")
        self.assertEqual(self.cause(exit_code=1, reports=(report(1, "failed", "h0"),)), "failed")
        self.assertEqual(self.cause(exit_code=1, unreachable=frozenset({H1.ident})),
                         "unreachable")
        self.assertEqual(self.cause(exit_code=78, reports=(report(0, "terminated", "h0"),)),
                         "terminated")
        self.assertEqual(self.cause(exit_code=1), "unknown")


class BatchSplit(unittest.TestCase):
    def test_rule(self):
        self.assertEqual(batch_split(8, 4, 2), (2, 1))
        self.assertEqual(batch_split(8, 2, 2), (2, 2))
        self.assertEqual(batch_split(12, 2, 4), (3, 2), "the largest divisor under the cap")
        self.assertEqual(batch_split(8, 3, 4), None, "3 ranks do not divide 8")
        self.assertEqual(batch_split(8, 1, 0), (8, 1), "no cap")
        self.assertEqual(batch_split(7, 1, 1), (1, 7), "a prime: micro-batch 1")
        self.assertEqual(batch_split(2 * 65537, 2, 1), None, "accumulation above 65536")
        self.assertEqual(batch_split(0, 2, 2), None)


if __name__ == "__main__":
    unittest.main()
