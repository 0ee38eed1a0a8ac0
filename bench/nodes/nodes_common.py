"""Shared by the issue-28 benchmarks in bench/nodes/: the settings compared,
how ranks are launched (one OpenMP thread each, Open MPI as root, more ranks
than cores), and the simulated hosts of scripts/netns-hosts.sh. Standard
library only."""
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
DEMO_CFG = os.path.join(SRC, "configs", "gpt2_demo.cfg")
CORPUS = os.path.join(SRC, "data", "shakespeare", "shakespeare.txt")
NETNS = os.path.join(SRC, "scripts", "netns-hosts.sh")

QW = 'comm.quantize_weights="int8"'
HP = 'zero.secondary_partition="node"'
QG8 = 'comm.quantize_grads="int8"'
QG4 = 'comm.quantize_grads="int4"'
HYBRID = 'zero.shard_group="node"'

# (name, overrides), all in stage 3 unless an override says otherwise; the
# first is the unquantized baseline every ratio is taken against.
STAGE3 = [
    ("stage 3", []),
    ("hybrid", [HYBRID]),
    ("qwZ", [QW]),
    ("hpZ", [HP]),
    ("qwZ + hpZ", [QW, HP]),
    ("qgZ int8", [QG8]),
    ("qgZ int4", [QG4]),
    ("qwZ + hpZ + qgZ int8", [QW, HP, QG8]),
    ("qwZ + hpZ + qgZ int4", [QW, HP, QG4]),
]
# Stages 1-2, where only qgZ (and hybrid sharding) apply.
STAGES12 = [
    ("stage 1", ["zero.stage=1"]),
    ("stage 1 + qgZ int8", ["zero.stage=1", QG8]),
    ("stage 1 + qgZ int4", ["zero.stage=1", QG4]),
    ("stage 2", ["zero.stage=2"]),
    ("stage 2 + qgZ int8", ["zero.stage=2", QG8]),
    ("stage 2 + qgZ int4", ["zero.stage=2", QG4]),
]


def stage_of(overrides):
    for o in overrides:
        if o.startswith("zero.stage="):
            return int(o.split("=", 1)[1])
    return 3


def env(extra=None):
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    for k in [k for k in e if k.startswith("ZS_COMM_DELAY")]:
        del e[k]  # only what a benchmark sets
    if extra:
        e.update(extra)
    return e


def mpirun(np_, env_names=()):
    """mpirun on this machine: np_ ranks over 2 cores, one thread each;
    env_names travel with -x (the local ranks inherit them anyway)."""
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np_),
           "-x", "OMP_NUM_THREADS", "-x", "OPENBLAS_NUM_THREADS"]
    for n in env_names:
        cmd += ["-x", n]
    return cmd


def run(cmd, extra_env=None, timeout=600, what=None):
    """Runs cmd; returns its stdout, or exits with its output on failure."""
    p = subprocess.run(cmd, env=env(extra_env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout)
    if p.returncode != 0:
        sys.stdout.write(p.stdout[-6000:])
        sys.exit(f"{what or cmd[0]}: exited {p.returncode}: {' '.join(cmd)}")
    return p.stdout


def corpus():
    if not os.path.exists(CORPUS):
        subprocess.run(["bash", os.path.join(SRC, "scripts", "fetch-shakespeare.sh")], check=True)
    return CORPUS


def median(values):
    return statistics.median(values) if values else float("nan")


class Hosts:
    """The two simulated hosts of scripts/netns-hosts.sh (root only):
    `up` in the constructor, `down` in close(). launcher(np_) is the mpirun
    that starts np_ ranks across them, 2 per host (by slot)."""

    @staticmethod
    def check():
        p = subprocess.run(["bash", NETNS, "check"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        return p.returncode == 0, p.stdout.strip()

    def __init__(self, *up_args):
        self.state = subprocess.run(["bash", NETNS, "up", *up_args], check=True,
                                    stdout=subprocess.PIPE, text=True).stdout.strip()
        self.vars = {}
        with open(os.path.join(self.state, "env")) as f:
            for line in f:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    self.vars[k] = v

    def launcher(self, np_):
        return [os.path.join(self.state, "mpirun"), "--oversubscribe", "--bind-to", "none",
                "-np", str(np_), "-x", "OMP_NUM_THREADS", "-x", "OPENBLAS_NUM_THREADS",
                "-x", "OMPI_ALLOW_RUN_AS_ROOT", "-x", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"]

    def close(self):
        subprocess.run(["bash", NETNS, "down", self.state], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
