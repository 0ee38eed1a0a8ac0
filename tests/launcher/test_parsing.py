"""zs-run's readers (tools/zs_run): host lists and hostfiles (host:slots,
the slot bound, bytes that are not UTF-8), one machine listed twice, the
rank layout and address matching; Open MPI's and srun's output and the
program's own messages in it; the configuration keys it reads and the
configuration file it checks before launching; Slurm's task counts; the
memory estimate's verdict. Run with test_decide.py (ctest launcher_decide)."""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.environ.get("ZS_RUN_DIR") or
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))

from zs_run import cfgread, cli, estimate, job_output, slurm  # noqa: E402
from zs_run.hosts import (MAX_SLOTS, Host, HostError, find_host, make_hosts,  # noqa: E402
                          parse_host_list, parse_hostfile, rank_hosts, read_hostfile)


def fake_resolver(table):
    return lambda name: table.get(name, ())


class Hosts(unittest.TestCase):
    def test_host_list(self):
        self.assertEqual(parse_host_list("h1:2, h2:3,h3"), [("h1", 2), ("h2", 3), ("h3", 1)])
        self.assertEqual(parse_host_list("fe80::1"), [("fe80::1", 1)])
        for bad, why in (("h1:0", "at least 1 slot"), ("h1:x", "not an integer"),
                         (",", "names no host"), (":2", "no host name")):
            with self.assertRaises(HostError) as e:
                parse_host_list(bad)
            self.assertIn(why, str(e.exception))

    def test_hostfile(self):
        text = "# cluster\nnode1 slots=4\nnode2 slots=2 max_slots=8  # comment\nnode3\n"
        self.assertEqual(parse_hostfile(text, "hosts"), [("node1", 4), ("node2", 2), ("node3", 1)])
        with self.assertRaises(HostError) as e:
            parse_hostfile("node1 gpus=2\n", "hosts")
        self.assertIn("hosts:1: unknown hostfile field 'gpus=2'", str(e.exception))

    def test_hostfile_host_colon_slots(self):
        # Open MPI users write -H's form in hostfiles too: "node1:4" is node1
        # with 4 slots, not a host named "node1:4".
        text = "node1:4\nnode2:2 max_slots=8\nfe80::1\n"
        self.assertEqual(parse_hostfile(text, "hosts"), [("node1", 4), ("node2", 2),
                                                         ("fe80::1", 1)])
        with self.assertRaises(HostError) as e:
            parse_hostfile("node1:2 slots=3\n", "hosts")
        self.assertIn("hosts:1: 'node1:2' and 'slots=3' both give the slots", str(e.exception))
        with self.assertRaises(HostError) as e:
            parse_hostfile("node1:x\n", "hosts")
        self.assertIn("the slot count 'x' is not an integer", str(e.exception))

    def test_slot_counts_beyond_the_bound_are_refused(self):
        self.assertEqual(parse_host_list(f"h:{MAX_SLOTS}"), [("h", MAX_SLOTS)])
        for bad, where in ((lambda: parse_host_list("h:100000"), "'h:100000'"),
                           (lambda: parse_hostfile("a\nh slots=99999999\n", "hf"), "'hf:2'"),
                           (lambda: parse_hostfile("h:4097\n", "hf"), "'hf:1'")):
            with self.assertRaises(HostError) as e:
                bad()
            self.assertIn(where, str(e.exception))
            self.assertIn(f"is more than {MAX_SLOTS}", str(e.exception))

    def test_hostfile_that_is_not_utf8(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "hosts")
            with open(path, "wb") as f:
                f.write(b"# hosts\nnode1 slots=2\nno\xffde2 slots=2\n")
            with self.assertRaises(HostError) as e:
                read_hostfile(path)
            self.assertEqual(str(e.exception),
                             f"{path}:3: byte 0xff at column 3 is not UTF-8 text; a hostfile "
                             "holds host names (name slots=N per line)")
            with open(path, "wb") as f:
                f.write(b"node1 slots=2\nnode\x01 slots=2\n")
            with self.assertRaises(HostError) as e:
                read_hostfile(path)
            self.assertIn(":2: the host name 'node\\x01' holds control characters",
                          str(e.exception))
            with self.assertRaises(HostError) as e:
                read_hostfile(os.path.join(d, "missing"))
            self.assertIn("No such file", str(e.exception))

    def test_one_machine_listed_twice_is_refused(self):
        res = fake_resolver({"a": ("10.0.0.1",), "a.example": ("10.0.0.1",), "b": ("10.0.0.2",)})
        self.assertEqual([h.ident for h in make_hosts([("a", 1), ("b", 1)], res)],
                         ["10.0.0.1", "10.0.0.2"])
        with self.assertRaises(HostError) as e:
            make_hosts([("a", 1), ("a.example", 2)], res)
        self.assertIn("'a' and 'a.example' are one machine (both resolve to 10.0.0.1)",
                      str(e.exception))
        self.assertEqual(make_hosts([("x", 1)], res)[0].ident, "name:x", "unresolved: by name")

    def test_layout_and_matching(self):
        hosts = [Host("a", 2, ("10.0.0.1",)), Host("b", 3, ("10.0.0.2",))]
        self.assertEqual(rank_hosts(hosts), [0, 0, 1, 1, 1])
        self.assertEqual(find_host(hosts, ["127.0.0.1", "10.0.0.2"]), 1, "loopback ignored")
        self.assertEqual(find_host(hosts, [], "a"), 0)
        self.assertEqual(find_host(hosts, [], None, 4), 1)
        self.assertIsNone(find_host(hosts, ["10.9.9.9"], None, 7))


class Output(unittest.TestCase):
    def test_trainer_lines(self):
        f = job_output.parse("resumed at step 12, data position 96\n"
                             "step    13/60 | loss 3.1\nstep    14/60 | loss 3.0\n")
        self.assertEqual((f.resumed_step, f.last_step), (12, 14))
        self.assertEqual(job_output.step_of_line("step     7/9 | loss"), 7)
        self.assertIsNone(job_output.step_of_line("steps 7"))

    def test_failure_markers(self):
        self.assertTrue(job_output.failure_marker("MPI_ABORT was invoked on rank 0 in communicator"))
        self.assertTrue(job_output.failure_marker(
            "mpirun noticed that process rank 2 with PID 5 on node x exited on signal 9 (Killed)."))
        self.assertFalse(job_output.failure_marker("step 3/9 | loss 2.0"))

    def test_srun_task_ranges(self):
        f = job_output.parse("srun: error: n2: tasks 4-5,7: Exited with exit code 78\n")
        self.assertEqual([(e.rank, e.code, e.node) for e in f.rank_ends],
                         [(4, 78, "n2"), (5, 78, "n2"), (7, 78, "n2")])

    def test_daemon_failed_to_start(self):
        text = ("ORTE was unable to reliably start one or more daemons.\n"
                "  Local host:    vm\n  Remote host:   10.0.0.2\n")
        self.assertIn("10.0.0.2", job_output.parse(text).lost_nodes)


class Config(unittest.TestCase):
    def test_keys_and_overrides(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "inc.cfg"), "w") as f:
                f.write('offload: { optimizer = "host"; };\n')
            path = os.path.join(d, "run.cfg")
            with open(path, "w") as f:
                f.write('# a comment\nzero: { stage = 3; /* c */ };\n@include "inc.cfg"\n'
                        'app = { batch_size = 4; global_batch = 32; name = "x;y"; '
                        'list = [1, 2]; };\ncheckpoint: { dir = "ck"; };\n')
            prog = ["train", path, "app.global_batch=64", "zero.stage=2", "--flag=1"]
            cfg, overrides = cfgread.split_program(prog)
            self.assertEqual((cfg, overrides), (path, ["app.global_batch=64", "zero.stage=2"]))
            s = cfgread.read_settings(cfg, overrides)
        self.assertEqual(cfgread.as_int(s, "app.global_batch", 0), 64)
        self.assertEqual(cfgread.as_int(s, "app.batch_size", 0), 4)
        self.assertEqual(cfgread.as_int(s, "zero.stage", 0), 2)
        self.assertEqual(s["offload.optimizer"], "host")
        self.assertEqual(s["app.name"], "x;y")
        self.assertEqual(s["checkpoint.dir"], "ck")
        self.assertNotIn("app.list", s)
        self.assertEqual(cfgread.as_int(s, "app.missing", 7), 7)
        self.assertEqual(cfgread.read_settings("/nonexistent.cfg", ["a.b=1"]), {"a.b": "1"})


class Cli(unittest.TestCase):
    def refused(self, argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as e:
            cli.plan_from_args(argv)
        self.assertEqual(e.exception.code, 2, err.getvalue())
        return err.getvalue()

    def warned(self, argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            plan = cli.plan_from_args(argv)
        return plan, err.getvalue()

    def test_missing_config_file_is_said_before_launching(self):
        with tempfile.TemporaryDirectory() as d:
            plan, said = self.warned(["--hosts", "localhost:1", "--checkpoint-dir", d, "--",
                                      "train", os.path.join(d, "none.cfg"), "app.steps=3"])
            self.assertIn(f"zs-run: warning: the program's configuration file {d}/none.cfg (its "
                          "first .cfg argument) does not exist here", said)
            self.assertEqual(plan.program[:3], ["train", os.path.join(d, "none.cfg"),
                                                "app.steps=3"])
            os.mkdir(os.path.join(d, "dir.cfg"))
            rel = os.path.relpath(os.path.join(d, "dir.cfg"))
            _, said = self.warned(["--hosts", "localhost:1", "--checkpoint-dir", d, "--",
                                   "train", rel])
            self.assertIn(f"{rel} (its first .cfg argument, relative to {os.getcwd()}) is "
                          "not a file here", said)
            with open(os.path.join(d, "run.cfg"), "w") as f:
                f.write("app: { steps = 3; };\n")
            _, said = self.warned(["--hosts", "localhost:1", "--checkpoint-dir", d, "--",
                                   "train", os.path.join(d, "run.cfg")])
            self.assertEqual(said, "", "an existing file: nothing to say")

    def test_hostfile_errors_are_usage_errors(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "hosts")
            with open(path, "wb") as f:
                f.write(b"n\xe9ud slots=2\n")
            said = self.refused(["--hostfile", path, "--checkpoint-dir", d, "--", "train"])
            self.assertIn(f"{path}:1: byte 0xe9 at column 2 is not UTF-8 text", said)
            self.assertNotIn("Traceback", said)
            said = self.refused(["--hosts", "h:50000", "--checkpoint-dir", d, "--", "train"])
            self.assertIn(f"50000 slots on one host is more than {MAX_SLOTS}", said)


class ProgramMessages(unittest.TestCase):
    def test_the_program_not_the_launcher(self):
        text = ("zeroshard: rank 0: INFO loaded\n"
                "mlp_train: cannot open 'x.cfg': No such file or directory\n"
                "mlp_train: cannot open 'x.cfg': No such file or directory\n"
                "--------------------------------------------------------------------------\n"
                "Primary job  terminated normally, but 1 process returned\n"
                "  Process name: [[787,1],1]\n  Exit code:    64\n"
                "--------------------------------------------------------------------------\n"
                "zs-run: generation 1: 2 ranks\n")
        self.assertEqual(job_output.program_messages(text),
                         ["mlp_train: cannot open 'x.cfg': No such file or directory"])
        self.assertEqual(job_output.program_messages("step 3/9 | loss\n"), [])


class Slurm(unittest.TestCase):
    def test_tasks_per_node(self):
        self.assertEqual(slurm.tasks_per_node("2(x3),1", 4), [2, 2, 2, 1])
        with self.assertRaises(slurm.SlurmError):
            slurm.tasks_per_node("2(x3)", 2)
        with self.assertRaises(slurm.SlurmError):
            slurm.tasks_per_node("two", 1)


class Estimate(unittest.TestCase):
    TEXT = ("device memory 1.00 GiB (1073741824 bytes) per rank, offload none:\n"
            "  stage 0 does not fit on 2 ranks: 1.85 GiB per rank\n"
            "  stage 3 fits on 2 ranks: 838.3 MiB per rank\n"
            "device memory 1.00 GiB (1073741824 bytes) per rank, offload host:\n"
            "  stage 0 fits on 2 ranks: 949.4 MiB per rank\n")

    def test_verdict_per_stage_and_offload(self):
        self.assertEqual(estimate.verdict(self.TEXT, 3, "none")[0], True)
        self.assertEqual(estimate.verdict(self.TEXT, 0, "none"),
                         (False, "stage 0 does not fit on 2 ranks: 1.85 GiB per rank"))
        self.assertEqual(estimate.verdict(self.TEXT, 0, "host")[0], True)
        self.assertIsNone(estimate.verdict(self.TEXT, 2, "nvme")[0])


if __name__ == "__main__":
    unittest.main()
