#!/usr/bin/env python3
"""Recovery under zs-run: seconds from a failure to the first new step, and
steps lost, for each kind of failure; and the GPT-2 demo with a failure
injected every N steps against an uninterrupted run.

    python3 bench/recovery/bench_recovery.py BUILD_DIR [--demo-steps 300]
        [--every 60] [--checkpoint-every 25] [--skip-cases] [--skip-demo]

Part 1 (needs root for scripts/netns-hosts.sh; skipped otherwise): the
launcher tests' setting, 4 ranks of GPT-2's tiny model on two simulated
hosts (2 each), comm.timeout_s = 3, a checkpoint every 4 steps, zs-run
twice: with --backoff 0.2 --kill-after 2 --probe-timeout 4 (the tests'
options) and with its defaults (--backoff 5 --kill-after 30
--probe-timeout 15). A failure is injected at step 40 of 120: a rank
killed with SIGKILL, host 1's link taken down, a rank stopped with
SIGSTOP. comm.timeout_s is the runtime's key, not the launcher's: its
default, 600 s, would find a stopped rank after 10 minutes. For each: failure -> first new step (from the
injection to the restart record, which zs-run writes when the new job
prints its first new step), detected -> first new step (zs-run's own
recover_s), and steps lost (the failed job's last step minus the step
resumed from).

Part 2: configs/gpt2_demo.cfg (the model of `make demo`) at 2 ranks on this
host for --demo-steps steps (sampling off, a progress line every step, a
checkpoint every --checkpoint-every steps), once uninterrupted and once with
a rank killed (SIGKILL) each time the run passes a multiple of --every
steps, both under zs-run (--backoff 1 --backoff-max 2 --fail-limit 1000: the
failures are injected, not the host's). Printed: total
seconds of each and their ratio, from one run of each.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
ZS_RUN = os.path.join(SRC, "tools", "zs-run")
NETNS = os.path.join(SRC, "scripts", "netns-hosts.sh")
sys.path.insert(0, os.path.join(SRC, "tools"))
from zs_run.launch import generation_processes  # noqa: E402

TINY = """zero: {{ stage = 3; align = 16; }};
precision: {{ dtype = "bf16"; }};
optimizer: {{ type = "adamw"; lr = 3e-3; weight_decay = 0.1; }};
gradient_clipping = 1.0;
log: {{ level = "warn"; }};
comm: {{ timeout_s = 3; }};
checkpoint: {{ every = 4; dir = "{work}/unused"; }};
app: {{
  n_layer = 2; n_head = 4; n_embd = 32; vocab = 256; block_size = 16; seq_len = 16;
  batch_size = 2; global_batch = 8;
  train_data = "{work}/corpus.txt"; val_fraction = 0.1; val_every = 0; val_batches = 1;
  sample_tokens = 0; log_every = 1;
}};
"""


def env_base():
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_mpi_yield_when_idle="1",
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", ZS_LOG_LEVEL="warn")
    return env


def last_step(log_path):
    step = -1
    try:
        with open(log_path, errors="replace") as f:
            for line in f:
                if line.startswith("step "):
                    try:
                        step = max(step, int(line.split()[1].split("/")[0]))
                    except ValueError:
                        pass
    except OSError:
        pass
    return step


def ranks_of(report_dir):
    """pid by rank of the generation with this report dir (zs-run's own scan)."""
    return {int(env["OMPI_COMM_WORLD_RANK"]): pid
            for pid, env in generation_processes(report_dir).items()
            if "OMPI_COMM_WORLD_RANK" in env}


def records(path, event):
    try:
        with open(path) as f:
            return [r for r in map(json.loads, filter(str.strip, f)) if r["event"] == event]
    except OSError:
        return []


def iso_to_epoch(text):
    import datetime
    return datetime.datetime.fromisoformat(text).timestamp()


def wait_for(pred, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


# ------------------------------------------------------------ part 1: cases

CASES = {"kill9": "kill -9 of a rank", "link": "host 1's link down",
         "sigstop": "SIGSTOP of a rank"}


# zs-run's options per part-1 run: the launcher tests', and none (its defaults).
LAUNCHER_OPTIONS = {"tests": ["--backoff", "0.2", "--kill-after", "2", "--probe-timeout", "4"],
                    "defaults": []}


def run_case(build, case, work, options):
    state = subprocess.run(["bash", NETNS, "up", "--owner", str(os.getpid())], check=True,
                           capture_output=True, text=True).stdout.strip()
    try:
        envf = dict(l.split("=", 1) for l in open(f"{state}/env").read().split())
        ns0, ns1, if1 = envf["ZS_NETNS_NS0"], envf["ZS_NETNS_NS1"], envf["ZS_NETNS_IF1"]
        ip0, ip1, subnet = envf["ZS_NETNS_IP0"], envf["ZS_NETNS_IP1"], envf["ZS_NETNS_SUBNET"]
        mpirun = os.path.join(work, f"mpirun-{case}")
        with open(mpirun, "w") as f:
            f.write(f"#!/bin/sh\nexec ip netns exec {ns0} mpirun --mca plm_rsh_agent "
                    f"{state}/agent --mca btl tcp,self --mca btl_tcp_if_include {subnet} "
                    f"--mca oob_tcp_if_include {subnet} \"$@\"\n")
        os.chmod(mpirun, 0o755)
        ckpt = os.path.join(work, f"{case}-{options}")
        log = os.path.join(work, f"{case}-{options}.log")
        jl = os.path.join(work, f"{case}-{options}.jsonl")
        cmd = [sys.executable, ZS_RUN, "--hosts", f"{ip0}:2,{ip1}:2", "--mpirun", mpirun,
               "--mpirun-args", "--oversubscribe --bind-to none", "-x", "OMP_NUM_THREADS",
               "-x", "OPENBLAS_NUM_THREADS", "--checkpoint-dir", ckpt, "--log", jl,
               *LAUNCHER_OPTIONS[options], "--min-ranks", "2",
               "--", os.path.join(build, "examples", "gpt2", "gpt2_train"),
               os.path.join(work, "tiny.cfg"), "app.steps=120"]
        with open(log, "w") as out:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env_base())
        # The first generation's report directory, as zs-run's log names it
        # (one per generation and launcher).
        wait_for(lambda: records(jl, "start"), 60, f"{case}: zs-run's start record")
        rdir = records(jl, "start")[0]["report_dir"]
        wait_for(lambda: last_step(log) >= 40, 60, f"{case}: step 40")
        t_fail = time.time()
        if case == "kill9":
            os.kill(ranks_of(rdir)[2], signal.SIGKILL)
        elif case == "sigstop":
            victim = ranks_of(rdir)[2]
            os.kill(victim, signal.SIGSTOP)
        else:
            subprocess.run(["ip", "netns", "exec", ns1, "ip", "link", "set", if1, "down"],
                           check=True)
        rc = p.wait(timeout=300)
        rec = records(jl, "restart")
        if rc != 0 or not rec:
            raise RuntimeError(f"{case}: zs-run exited {rc}; see {log}")
        r = rec[0]
        return dict(case=CASES[case], fail_to_step=iso_to_epoch(r["time"]) - t_fail,
                    recover_s=r["recover_s"], steps_lost=r["steps_lost"],
                    world=f"{r['previous_world_size']} -> {r['world_size']}", cause=r["cause"])
    finally:
        for key in ("ZS_NETNS_NS0", "ZS_NETNS_NS1"):
            try:
                ns = dict(l.split("=", 1) for l in open(f"{state}/env").read().split())[key]
                pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                      text=True).stdout.split()
                for pid in pids:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass
            except (OSError, KeyError):
                pass
        subprocess.run(["bash", NETNS, "down", state])


# ------------------------------------------------------------- part 2: demo

def run_demo(build, work, steps, every, ckpt_every, inject):
    name = "demo-injected" if inject else "demo-straight"
    ckpt = os.path.join(work, name)
    log = os.path.join(work, f"{name}.log")
    jl = os.path.join(work, f"{name}.jsonl")
    cmd = [sys.executable, ZS_RUN, "--hosts", "localhost:2", "--mpirun-args",
           "--oversubscribe --bind-to none", "--checkpoint-dir", ckpt, "--log", jl,
           "--backoff", "1", "--backoff-max", "2", "--max-restarts", "100", "--fail-limit", "1000",
           "--probe", "none",
           "--", os.path.join(build, "examples", "gpt2", "gpt2_train"),
           os.path.join(SRC, "configs", "gpt2_demo.cfg"), f"app.steps={steps}",
           f"checkpoint.every={ckpt_every}", "app.sample_tokens=0", "app.log_every=1",
           f"app.train_data={os.path.join(SRC, 'data', 'shakespeare', 'shakespeare.txt')}"]
    t0 = time.time()
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env_base(),
                             cwd=SRC)
    injected = []  # the wall-clock time of each failure
    next_at = every
    while p.poll() is None:
        if inject and next_at < steps and last_step(log) >= next_at:
            gens = sorted(os.listdir(os.path.join(ckpt, "reports")))
            victims = ranks_of(os.path.join(ckpt, "reports", gens[-1])) if gens else {}
            if 1 in victims:
                os.kill(victims[1], signal.SIGKILL)
                injected.append(time.time())
                next_at += every
        time.sleep(0.05)
    total = time.time() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{name}: zs-run exited {p.returncode}; see {log}")
    rec = records(jl, "restart")
    gaps = [iso_to_epoch(r["time"]) - t for r, t in zip(rec, injected)]
    return dict(total=total, injected=len(injected), restarts=len(rec), gaps=gaps,
                lost=sum(r.get("steps_lost") or 0 for r in rec),
                recover=[r["recover_s"] for r in rec if r.get("recover_s") is not None])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--demo-steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=60)
    ap.add_argument("--checkpoint-every", type=int, default=25)
    ap.add_argument("--skip-cases", action="store_true")
    ap.add_argument("--skip-demo", action="store_true")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    work = tempfile.mkdtemp(prefix="zs_bench_recovery.")
    print(f"work directory {work} (logs and restart logs of every run)")
    with open(os.path.join(work, "corpus.txt"), "w") as f:
        for name in ["README.md"] + sorted(os.listdir(os.path.join(SRC, "docs"))):
            path = os.path.join(SRC, name) if name == "README.md" else os.path.join(SRC, "docs", name)
            if path.endswith(".md"):
                f.write(open(path).read())
    with open(os.path.join(work, "tiny.cfg"), "w") as f:
        f.write(TINY.format(work=work))

    if not a.skip_cases:
        check = subprocess.run(["bash", NETNS, "check"], capture_output=True, text=True)
        if check.returncode != 0:
            print(f"cases skipped: {check.stdout.strip() or check.stderr.strip()}")
        else:
            subprocess.run(["bash", NETNS, "gc"])
            print("\nfailure at step 40 of 120; tiny GPT-2, np 4 on two simulated hosts, "
                  "checkpoint every 4 steps, comm.timeout_s 3")
            print("| failure | zs-run's options | cause | ranks | failure -> first new step (s) "
                  "| detected -> first new step (s) | steps lost |")
            print("|---|---|---|---|---|---|---|")
            for options in LAUNCHER_OPTIONS:
                shown = " ".join(LAUNCHER_OPTIONS[options]) or "its defaults"
                for case in CASES:
                    r = run_case(build, case, work, options)
                    print(f"| {r['case']} | {shown} | {r['cause']} | {r['world']} | "
                          f"{r['fail_to_step']:.1f} | {r['recover_s']:.1f} | {r['steps_lost']} |",
                          flush=True)

    if not a.skip_demo:
        print(f"\nGPT-2 demo model (configs/gpt2_demo.cfg), np 2, {a.demo_steps} steps, "
              f"checkpoint every {a.checkpoint_every}, a rank killed every {a.every} steps")
        s = run_demo(build, work, a.demo_steps, a.every, a.checkpoint_every, False)
        i = run_demo(build, work, a.demo_steps, a.every, a.checkpoint_every, True)
        rec = i["recover"]
        gaps = i["gaps"]
        mean = lambda v: sum(v) / len(v) if v else float("nan")  # noqa: E731
        print("| run | total (s) | failures | steps lost | failure -> first new step, mean (s) | "
              "detected -> first new step, mean (s) | total / uninterrupted |")
        print("|---|---|---|---|---|---|---|")
        print(f"| uninterrupted | {s['total']:.1f} | 0 | 0 | - | - | 1.00 |")
        print(f"| failure every {a.every} steps | {i['total']:.1f} | {i['injected']} | {i['lost']} | "
              f"{mean(gaps):.1f} | {mean(rec):.1f} | {i['total'] / s['total']:.2f} |")
        print(f"uninterrupted: {s['total'] / a.demo_steps:.3f} s per step")


if __name__ == "__main__":
    main()
