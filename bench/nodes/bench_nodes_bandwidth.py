#!/usr/bin/env python3
"""Step time of each ZeRO++ / hybrid setting against the bandwidth of the
link between nodes (issue 28): speedup over unquantized stage 3.

    python3 bench/nodes/bench_nodes_bandwidth.py BUILD_DIR [--models demo,124M]
        [--gbps 1,3,10,100] [--latency-us 10] [--steps demo:2+8,124M:1+4]

gpt2_train at np 4 on this machine as 2 simulated nodes of 2 ranks
(comm.ranks_per_node = 2), one OpenMP thread per rank, bf16, for each
setting (stage 3 plain, hybrid, qwZ, hpZ, qwZ + hpZ, qgZ int8, qgZ int4,
qwZ + hpZ + qgZ int4) and each bandwidth of the link between nodes. The
network is the comm engine's injected one (docs/env-vars.md): every
collective that sends anything across nodes takes at least
ZS_COMM_DELAY_US_INTER (--latency-us) + its bytes across nodes /
ZS_COMM_DELAY_GBPS_INTER, by sleeping on the comm thread (no CPU); links
inside a node get no injected delay (ZS_COMM_DELAY_US and _GBPS unset: what
shared memory costs here). Models:
  demo  configs/gpt2_demo.cfg (4 layers, width 192, T 128, 1.85M parameters)
        with the demo's global batch, 16 sequences (4 per rank)
  124M  GPT-2 124M (preset), T 64, 1 sequence per rank
First, a check of the injected link itself (--skip-link-check to leave it
out): bench_nodes_bytes (the demo's layout, the trainer's calls, nothing
computed, comm.overlap = false) per setting, without the injected network
and at the first bandwidth: the median step time (the slowest rank's), and
what the delay added against the busiest rank's bytes across nodes (its
counters) / bandwidth. The hook charges each op the bytes this rank sent on
each link (docs/env-vars.md), so the ratio is near 1 where the link time
dominates; the latency (about 16 collectives of --latency-us a step) and
the collectives' own time, which the delay partly hides, move it.

Each point: the median step time (log.metrics_file, time_ms.step) of the
measured steps after the warm-up ones (--steps MODEL:WARMUP+MEASURED; 124M's
few, so that a point takes under about 30 s here); the bandwidths are the outer loop and the settings the
inner one, so a change of the machine's load falls on every setting of a
bandwidth alike. Speedup = stage 3's median / the setting's, within the run.
"""
import argparse
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nodes_common as nc  # noqa: E402

# qwZ + hpZ + qgZ int8 is left out: its bytes lie between the int4 row and
# qwZ + hpZ (bench_nodes_bytes.py).
SETTINGS = [s for s in nc.STAGE3 if s[0] != "qwZ + hpZ + qgZ int8"]


def link(gbps, latency_us):
    """The injected link between nodes (the variables the comm engine reads)."""
    return {"ZS_COMM_DELAY_GBPS_INTER": f"{gbps:g}", "ZS_COMM_DELAY_US_INTER": f"{latency_us:g}"}


def model_args(name, work):
    if name == "demo":
        return nc.DEMO_CFG, ["app.global_batch=16"]
    # The demo's runtime settings with a preset's sizes (a preset and
    # explicit sizes in one app group are refused).
    cfg = os.path.join(work, f"{name}.cfg")
    with open(nc.DEMO_CFG) as f, open(cfg, "w") as out:
        for line in f:
            key = line.strip().split(" ", 1)[0]
            if key in ("n_layer", "n_head", "n_embd", "vocab", "block_size"):
                continue
            out.write(line.replace("app: {", f'app: {{ model = "{name}";', 1))
    return cfg, ["app.seq_len=64", "app.batch_size=1"]


def step_ms(build, cfg, extra, overrides, warmup, steps, delay, work):
    metrics = os.path.join(work, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    total = warmup + steps
    cmd = nc.mpirun(4, env_names=list(delay)) + [
        os.path.join(build, "examples", "gpt2", "gpt2_train"), cfg,
        f'app.train_data="{nc.corpus()}"', f"app.steps={total}",
        f"scheduler.total_steps={total + 1}", "scheduler.warmup_steps=1", "app.log_every=1",
        "app.val_every=0", "app.val_batches=1", "app.sample_tokens=0", 'log.level="warn"',
        "comm.ranks_per_node=2", f'log.metrics_file="{metrics}"', *extra, *overrides]
    nc.run(cmd, extra_env=delay, what="gpt2_train")
    with open(metrics) as f:
        rows = [json.loads(x) for x in f if x.strip()]
    times = [r["time_ms"]["step"] for r in rows if r["step"] > warmup]
    return nc.median(times)


def busiest_across(build, preset, cfg, overrides):
    """zs-estimate's bytes per step across nodes of the rank that sends the
    most (np 4, nodes of 2, stage 3), for a GPT-2 preset's layout."""
    cmd = [os.path.join(build, "tools", "zs-estimate"), "--preset", preset, "--config", cfg,
           "--world", "4", "--set", "zero.stage=3", "--set", "comm.ranks_per_node=2"]
    for o in overrides:
        cmd += ["--set", o]
    out = nc.run(cmd, what="zs-estimate").split("stage 3 on 4 ranks", 1)[1]
    return int(re.search(r"across nodes [^(]*\((\d+)\): the rank sending the most", out).group(1))


def bound_table(build, model, cfg, gbps, ms):
    """How far each setting's step is from max(compute, link): compute is
    stage 3's step at the highest bandwidth, the link the busiest rank's
    bytes across at the lowest; 'helps below' is the bandwidth at which that
    rank's link time equals the compute."""
    compute = ms[("stage 3", max(gbps))] / 1e3
    low = min(gbps)
    print(f"\n{model}: against max(compute, link) at {low:g} Gbit/s; compute = stage 3's step "
          f"at {max(gbps):g} Gbit/s, {compute:.2f} s")
    print(f"{'setting':<24} {'busiest across B':>17} {'link s':>7} {'step s':>7} "
          f"{'step - bound s':>14} {'helps below Gbit/s':>18}")
    for name, ov in SETTINGS:
        across = busiest_across(build, model, cfg, ov)
        link = across * 8 / (low * 1e9)
        step = ms[(name, low)] / 1e3
        print(f"{name:<24} {across:>17,} {link:>7.2f} {step:>7.2f} "
              f"{step - max(compute, link):>14.2f} {across * 8 / compute / 1e9:>18.2f}")


def link_check(build, gbps, latency_us):
    print(f"\ninjected link check: bench_nodes_bytes, demo layout, np 4 (nodes of 2), "
          f"{gbps:g} Gbit/s + {latency_us:g} us across, comm.overlap = false, median of 5 steps")
    print(f"{'setting':<24} {'no delay ms':>11} {'step ms':>8} {'busiest across B':>17} "
          f"{'bytes/bw ms':>11} {'added/(bytes/bw)':>16}")
    delay = link(gbps, latency_us)

    def step(ov, extra_env):
        cmd = nc.mpirun(4, env_names=list(extra_env)) + [
            os.path.join(build, "bench", "nodes", "bench_nodes_bytes"), nc.DEMO_CFG,
            "--steps", "5", 'log.level="warn"', "comm.ranks_per_node=2", "comm.overlap=false", *ov]
        out = nc.run(cmd, extra_env=extra_env, what="bench_nodes_bytes")
        res = json.loads(out[out.index('{"world"'):])
        steps = len(res["ranks"][0]["steps"])
        ms = nc.median([max(r["steps"][s]["us"] for r in res["ranks"]) / 1e3
                        for s in range(steps)])
        return ms, max(sum(r["steps"][0]["inter"]) for r in res["ranks"])

    for name, ov in SETTINGS:
        free, _ = step(ov, {})
        ms, across = step(ov, delay)
        link_ms = across * 8 / (gbps * 1e9) * 1e3
        print(f"{name:<24} {free:>11.1f} {ms:>8.1f} {across:>17,} {link_ms:>11.1f} "
              f"{(ms - free) / link_ms:>16.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build")
    ap.add_argument("--models", default="demo,124M")
    ap.add_argument("--gbps", default="1,3,10,100")
    ap.add_argument("--latency-us", type=float, default=10.0)
    ap.add_argument("--steps", default="demo:2+8,124M:1+4")
    ap.add_argument("--skip-link-check", action="store_true")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    gbps = [float(g) for g in a.gbps.split(",")]
    counts = {}
    for item in a.steps.split(","):
        model, n = item.split(":")
        w, m = n.split("+")
        counts[model] = (int(w), int(m))
    print(f"np 4 = 2 simulated nodes x 2 ranks on this machine ({os.cpu_count()} cores, shared), "
          f"bf16; injected link between nodes: {a.latency_us:g} us + bytes / G Gbit/s per "
          f"collective; inside a node: no injected delay; median of the measured steps "
          f"(warm-up + measured: {a.steps})")
    if not a.skip_link_check:
        link_check(build, gbps[0], a.latency_us)
    with tempfile.TemporaryDirectory() as work:
        for model in [m for m in a.models.split(",") if m]:
            cfg, extra = model_args(model, work)
            warmup, steps = counts.get(model, (2, 4))
            ms = {}
            for g in gbps:
                delay = link(g, a.latency_us)
                for name, ov in SETTINGS:
                    ms[(name, g)] = step_ms(build, cfg, extra, ov, warmup, steps, delay, work)
                    print(f"  {model} {g:g} Gbit/s {name}: {ms[(name, g)]:.1f} ms", flush=True)
            print(f"\n{model}: ms/step (speedup over stage 3 at the same bandwidth)")
            print(f"{'setting':<24}" + "".join(f"{f'{g:g} Gbit/s':>22}" for g in gbps))
            for name, _ in SETTINGS:
                cells = []
                for g in gbps:
                    t = ms[(name, g)]
                    cells.append(f"{t:>10.1f} ({ms[('stage 3', g)] / t:>5.2f}x)")
                print(f"{name:<24}" + "".join(f"{c:>22}" for c in cells))
            if model != "demo":
                bound_table(build, model, cfg, gbps, ms)
            print()


if __name__ == "__main__":
    main()
