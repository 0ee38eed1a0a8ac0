"""zs-run's restart loop (tools/zs_run/supervise.py) and the checkpoint
root's generations (reports.take_generation), with a stand-in for mpirun (a
shell command that ignores its arguments) instead of MPI:

  - a job that exited 76 (a stop) or 64 (a configuration error) is not
    followed by a probe of the hosts, and is not relaunched; the restart
    log's "stop" record names the cause;
  - generations are taken from the root under a lock: two processes taking
    200 between them get 200 distinct numbers;
  - a launcher whose root names a newer generation stops: while its job
    runs (the job is ended) and before it relaunches (nothing launched), with
    a "superseded" record and exit code 79;
  - the sweep after a job ends only ever touches processes of this
    launcher's own generation and report directory.

Run with test_decide.py (ctest launcher_decide).
"""
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

TOOLS = os.environ.get("ZS_RUN_DIR") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")
sys.path.insert(0, TOOLS)

from zs_run import launch, reports  # noqa: E402
from zs_run.decide import Limits  # noqa: E402
from zs_run.hosts import Host  # noqa: E402
from zs_run.restart_log import RestartLog  # noqa: E402
from zs_run.supervise import Plan, Supervisor  # noqa: E402


class Loop(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = os.path.join(self.dir.name, "ckpt")
        self.log = os.path.join(self.dir.name, "restarts.jsonl")
        self.launches = os.path.join(self.dir.name, "launches")
        self.probed = []

    def tearDown(self):
        self.dir.cleanup()

    def run_zs(self, script, probe=None, max_restarts=3):
        """Supervisor.run with `script` as mpirun (each launch appends its
        generation to self.launches first); (exit code, log records)."""
        sh = f'echo "$ZS_JOB_GENERATION" >> {self.launches}; {script}'

        def default_probe(host):
            self.probed.append(host.name)
            return True
        plan = Plan(program=["prog"], pool=[Host("localhost", 1, ("127.0.0.1",))],
                    limits=Limits(min_ranks=1, max_restarts=max_restarts, backoff_s=0.01),
                    checkpoint_dir=self.root, report_root=os.path.join(self.root, "reports"),
                    mpirun=["sh", "-c", sh, "fake-mpirun"], probe=probe or default_probe,
                    log=RestartLog(self.log), kill_after_s=5.0)
        out = io.StringIO()
        with contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
            code = Supervisor(plan).run()
        with open(self.log) as f:
            records = [json.loads(line) for line in f]
        return code, records, out.getvalue()

    def generations_launched(self):
        with open(self.launches) as f:
            return [int(line) for line in f]

    def test_no_probe_after_a_stop(self):
        code, records, said = self.run_zs("exit 76")
        self.assertEqual(code, 76, said)
        self.assertEqual(self.probed, [], f"a stop (exit 76) was followed by a probe: {said}")
        self.assertEqual([r["event"] for r in records], ["start", "stop"])
        self.assertEqual(records[-1]["cause"], "stopped")
        self.assertEqual(self.generations_launched(), [1])

    def test_config_error_stops_at_once(self):
        code, records, said = self.run_zs(
            "echo \"prog: unknown key 'app.bogus'\" >&2; exit 64")
        self.assertEqual(code, 64, said)
        self.assertEqual(self.probed, [], f"a configuration error was followed by a probe: {said}")
        self.assertEqual(self.generations_launched(), [1], "relaunched after a config error")
        stop = records[-1]
        self.assertEqual((stop["event"], stop["cause"], stop["exit_code"]), ("stop", "config", 64),
                         stop)
        self.assertIn("unknown key 'app.bogus'", stop["reason"])
        self.assertIn("the program refused its configuration", said)

    def test_a_failure_is_probed_and_relaunched(self):
        # The other side of the two above: an ordinary failure still probes.
        code, records, said = self.run_zs(
            '[ "$ZS_JOB_GENERATION" -ge 2 ] || exit 3', max_restarts=3)
        self.assertEqual(code, 0, said)
        self.assertEqual(self.probed, ["localhost"])
        self.assertEqual(self.generations_launched(), [1, 2])
        self.assertEqual([r["event"] for r in records], ["start", "restart", "finish"])

    def test_superseded_while_the_job_runs(self):
        # Another launcher takes generation 2 while this one's job (1) runs.
        def take_over():
            deadline = time.monotonic() + 10
            while not os.path.exists(self.launches) and time.monotonic() < deadline:
                time.sleep(0.02)
            reports.take_generation(self.root)
        t = threading.Thread(target=take_over)
        t.start()
        t0 = time.monotonic()
        code, records, said = self.run_zs("exec sleep 30")
        t.join()
        self.assertEqual(code, 79, said)
        self.assertLess(time.monotonic() - t0, 10, "the job was not ended when superseded")
        rec = records[-1]
        self.assertEqual((rec["event"], rec["generation"], rec["newer_generation"]),
                         ("superseded", 1, 2), rec)
        self.assertTrue(rec["ended_process_group"], rec)
        self.assertEqual(self.generations_launched(), [1])
        self.assertEqual(reports.read_generation(self.root), 2, "the newer generation stays")

    def test_superseded_before_relaunching(self):
        # The job fails; another launcher takes generation 2 during the
        # probe; the relaunch is refused at the lock, nothing is launched.
        def probe(host):
            self.probed.append(host.name)
            reports.take_generation(self.root)
            return True
        code, records, said = self.run_zs("exit 3", probe=probe)
        self.assertEqual(code, 79, said)
        self.assertEqual(self.generations_launched(), [1], "launched after being superseded")
        rec = records[-1]
        self.assertEqual((rec["event"], rec["newer_generation"]), ("superseded", 2), rec)
        self.assertIn("before relaunching", rec["reason"])
        self.assertIn("relaunching", rec["restart_not_made"])
        self.assertEqual(reports.read_generation(self.root), 2)


TAKE = """
import sys
sys.path.insert(0, sys.argv[1])
from zs_run import reports
print(" ".join(str(reports.take_generation(sys.argv[2])) for _ in range(100)))
"""


class Generations(unittest.TestCase):
    def test_two_processes_never_take_the_same_number(self):
        with tempfile.TemporaryDirectory() as root:
            procs = [subprocess.Popen([sys.executable, "-c", TAKE, TOOLS, root],
                                      stdout=subprocess.PIPE, text=True) for _ in range(2)]
            taken = [int(g) for p in procs for g in p.communicate(timeout=60)[0].split()]
            self.assertEqual(sorted(taken), list(range(1, 201)),
                             f"duplicates: {sorted(g for g in set(taken) if taken.count(g) > 1)}")
            with open(os.path.join(root, "generation"), encoding="ascii") as f:
                self.assertEqual(f.read(), "200\n", "the runtime reads decimal and a newline")

    def test_a_newer_generation_is_not_overtaken(self):
        with tempfile.TemporaryDirectory() as root:
            self.assertEqual(reports.take_generation(root), 1)
            self.assertEqual(reports.take_generation(root, mine=1), 2)
            self.assertEqual(reports.take_generation(root), 3)  # another launcher
            self.assertIsNone(reports.take_generation(root, mine=2))
            self.assertEqual(reports.read_generation(root), 3, "nothing written when refused")


class Sweep(unittest.TestCase):
    def test_only_this_launchers_generation(self):
        with tempfile.TemporaryDirectory() as d:
            mine, other = os.path.join(d, "gen-000002-a-1"), os.path.join(d, "gen-000002-b-2")
            env = dict(os.environ, ZS_REPORT_DIR=mine, ZS_JOB_GENERATION="2")
            p = subprocess.Popen(["sleep", "30"], env=env)
            try:
                self.assertEqual(launch.sweep(other, 2), [], "another launcher's directory")
                self.assertEqual(launch.sweep(mine, 1), [], "another generation")
                self.assertIsNone(p.poll())
                self.assertEqual(launch.sweep(mine, 2), [p.pid])
                self.assertEqual(p.wait(timeout=10), -signal.SIGKILL)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()


if __name__ == "__main__":
    unittest.main()
