#!/usr/bin/env python3
"""Bytes per optimizer step across nodes for each ZeRO++ / hybrid setting
(issue 28), from the runtime's counters, against the formula, and once
against the bytes the simulated link itself carried.

    python3 bench/nodes/bench_nodes_bytes.py BUILD_DIR [--np 4,6] [--steps 3]
        [--skip-veth] [--veth-steps 10]

Part 1. For each setting (stage 3 plain, hybrid, qwZ, hpZ, qwZ + hpZ, qgZ
int8 / int4, qwZ + hpZ + qgZ int8 / int4; stages 1-2 with and without qgZ)
at np 4 (2 nodes x 2 ranks: comm.ranks_per_node = 2) and np 6 (2 x 3):
BUILD_DIR/bench/nodes/bench_nodes_bytes runs the GPT-2 demo's layout
(configs/gpt2_demo.cfg, bf16) with the trainer's calls, and reads every
rank's counters (zs_comm_report) after each of --steps steps following 2
warm-up steps. Printed: the bytes sent across nodes per step, every rank
together and the rank that sends the most (checked equal in every measured
step), the same two numbers from zs-estimate (src/zero/comm_plan.c's formula,
on the layout of a checkpoint the program wrote), whether they are equal
(inside-node bytes too), and the ratio to unquantized stage 3.
gpt2_train itself adds its loss's all-reduce to each step (12 bytes per
rank at np 4); its rank 0's metrics file is compared with the program's
rank 0 for stage 3 and qwZ + hpZ + qgZ int4, op by op.

Part 2 (root: scripts/netns-hosts.sh). The same settings at np 4 across the
two simulated hosts (2 ranks each, no comm.ranks_per_node: the nodes are the
network namespaces), comm.all_gather = "ring" (so that what the counters
count is what MPI sends). Each rank reads its namespace's end of the veth
(/sys/class/net/<veth>/statistics) right before and right after
--veth-steps steps; the link's bytes in each direction are set against the
counters' bytes sent across nodes by the ranks of that host. TCP/IP and
Open MPI's framing are estimated from the unquantized stage-3 run as bytes
per packet, and each setting's link bytes are compared with counters +
packets x that overhead: a quantized value sent at full width would show
as a link/estimate ratio near 2 (int8 for bf16) or 4 (int4).
"""
import argparse
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nodes_common as nc  # noqa: E402

NET = ("tx_bytes", "tx_packets", "rx_bytes", "rx_packets")


def measure(build, launcher, overrides, steps, netdev=None, save=None, extra=()):
    prog = os.path.join(build, "bench", "nodes", "bench_nodes_bytes")
    cmd = launcher + [prog, nc.DEMO_CFG, "--steps", str(steps)]
    if netdev:
        cmd += ["--netdev", netdev]
    if save:
        cmd += ["--save", save]
    cmd += ['log.level="warn"', *extra, *overrides]
    out = nc.run(cmd, what="bench_nodes_bytes")
    start = out.index('{"world"')
    return json.loads(out[start:])


def per_step(result):
    """Per rank: (intra, inter) bytes of one step, after checking that every
    measured step sent the same."""
    rows = []
    for r in result["ranks"]:
        first = r["steps"][0]
        for s in r["steps"][1:]:
            if (s["intra"], s["inter"]) != (first["intra"], first["inter"]):
                sys.exit(f"rank {r['rank']}: the measured steps differ: {r['steps']}")
        rows.append((first["intra"], first["inter"]))
    return rows


def estimate(build, layout_dir, np_, per_node, overrides):
    cmd = [os.path.join(build, "tools", "zs-estimate"), "--checkpoint", layout_dir, "--config",
           nc.DEMO_CFG, "--world", str(np_), "--set", f"comm.ranks_per_node={per_node}"]
    if nc.stage_of(overrides) == 3:
        cmd += ["--set", "zero.stage=3"]
    for o in overrides:
        cmd += ["--set", o]
    out = nc.run(cmd, what="zs-estimate")
    stage = nc.stage_of(overrides)
    section = out.split(f"stage {stage} on {np_} ranks", 1)[1]
    nums = re.findall(r"inside nodes [^(]*\((\d+)\), across nodes [^(]*\((\d+)\)", section)
    (job_in, job_x), (busy_in, busy_x) = nums[0], nums[1]
    return int(job_in), int(job_x), int(busy_in), int(busy_x)


def ratio(x, base):
    return f"{x / base:.3f}" if base else "-"


def part1(a, layout_dir):
    settings = nc.STAGE3 + ([] if a.skip_stages12 else nc.STAGES12)
    results = {}
    for np_ in a.np:
        per_node = np_ // 2
        print(f"\nnp {np_}: 2 nodes x {per_node} ranks (comm.ranks_per_node = {per_node}), "
              f"GPT-2 demo layout (1.85M parameters, 5 units), bf16; bytes per optimizer step")
        print(f"{'setting':<24} {'across, all ranks':>18} {'formula':>12} {'eq':>3} "
              f"{'busiest rank':>13} {'formula':>10} {'eq':>3} {'inside':>12} {'eq':>3} "
              f"{'vs plain':>10} {'busiest':>8} {'gathers':>8} {'grads':>8}")
        bases = {}
        for name, ov in settings:
            extra = [f"comm.ranks_per_node={per_node}"]
            res = measure(a.build, nc.mpirun(np_), ov, a.steps, extra=extra)
            rows = per_step(res)
            inter = [sum(x) for _, x in rows]
            intra = [sum(i) for i, _ in rows]
            job_x, job_in = sum(inter), sum(intra)
            busiest = max(range(np_), key=lambda r: (inter[r], -r))
            f_in, f_x, fb_in, fb_x = estimate(a.build, layout_dir, np_, per_node, ov)
            # Across nodes by kind: parameter gathers, and everything that
            # moves gradients (reduce-scatter, qgZ's all-to-all, hybrid's
            # all-reduce of slices; the step's scalar agreements included).
            ops = res["ops"]
            gather = sum(x[ops.index("all_gather")] for _, x in rows)
            grads = job_x - gather
            st = nc.stage_of(ov)
            if st not in bases:  # each stage's first row: its unquantized run
                bases[st] = (job_x, inter[busiest], gather, grads)
            base, base_busiest, base_ops = bases[st][0], bases[st][1], bases[st][2:]
            eq = [job_x == f_x, inter[busiest] == fb_x and intra[busiest] == fb_in, job_in == f_in]
            print(f"{name:<24} {job_x:>18,} {f_x:>12,} {'yes' if eq[0] else 'NO':>3} "
                  f"{inter[busiest]:>13,} {fb_x:>10,} {'yes' if eq[1] else 'NO':>3} "
                  f"{job_in:>12,} {'yes' if eq[2] else 'NO':>3} {job_x / base:>10.3f} "
                  f"{inter[busiest] / base_busiest:>8.3f} {ratio(gather, base_ops[0]):>8} {ratio(grads, base_ops[1]):>8}")
            results[(np_, name)] = dict(across=job_x, formula=f_x, busiest=inter[busiest],
                                        formula_busiest=fb_x, inside=job_in,
                                        formula_inside=f_in, equal=all(eq),
                                        ratio=job_x / base, rank0=rows[0], gather=gather,
                                        grads=grads)
    return results


def trainer_rank0(a, overrides, steps=4):
    """gpt2_train at np 4 (nodes of 2): rank 0's metrics line of step 3."""
    with tempfile.TemporaryDirectory() as d:
        metrics = os.path.join(d, "m.jsonl")
        cmd = nc.mpirun(4) + [os.path.join(a.build, "examples", "gpt2", "gpt2_train"),
                              nc.DEMO_CFG, f"app.train_data=\"{nc.corpus()}\"",
                              f"app.steps={steps}", f"scheduler.total_steps={steps + 1}",
                              "scheduler.warmup_steps=1", "app.val_every=0", "app.val_batches=1",
                              "app.sample_tokens=0", 'log.level="warn"', "comm.ranks_per_node=2",
                              f'log.metrics_file="{metrics}"', *overrides]
        nc.run(cmd, what="gpt2_train")
        with open(metrics) as f:
            lines = [json.loads(x) for x in f if x.strip()]
        line = next(x for x in lines if x["step"] == 3)
        return line["comm_bytes_intra"], line["comm_bytes_inter"]


def compare_trainer(a, results):
    print("\ngpt2_train's rank 0 (metrics file, step 3) against the program's rank 0, np 4:")
    for name, ov in [nc.STAGE3[0], nc.STAGE3[-1]]:
        intra, inter = trainer_rank0(a, ov)
        p_intra, p_inter = results[(4, name)]["rank0"]
        ops = list(intra)
        diff = {op: (intra[op] - p_intra[i], inter[op] - p_inter[i]) for i, op in enumerate(ops)
                if (intra[op], inter[op]) != (p_intra[i], p_inter[i])}
        print(f"  {name}: trainer - program (intra, inter) per op where they differ: "
              f"{diff or 'none'}")


def part2(a):
    ok, why = nc.Hosts.check()
    if not ok:
        print(f"\nveth check: skipped ({why})")
        return
    nc.run(["bash", nc.NETNS, "gc"], what="netns-hosts.sh gc")  # leftovers of a killed run
    hosts = nc.Hosts()
    try:
        if0, if1 = hosts.vars["ZS_NETNS_IF0"], hosts.vars["ZS_NETNS_IF1"]
        print(f"\nveth check: np 4 across the two namespaces of scripts/netns-hosts.sh (ranks 0-1 "
              f"on host 0, 2-3 on host 1; nodes detected), comm.all_gather = \"ring\", "
              f"{a.veth_steps} steps after 2 warm-up; host 1's end of the veth ({if1}):")
        print("  tx = host 1 -> host 0 (sent across by ranks 2-3), rx = host 0 -> host 1 (ranks 0-1)")
        print(f"{'setting':<24} {'dir':>3} {'counters':>12} {'link bytes':>12} {'packets':>8} "
              f"{'link-counters':>13} {'per packet':>10} {'link/estimate':>13}")
        per_packet = None
        for name, ov in nc.STAGE3:
            res = measure(a.build, hosts.launcher(4), ov, a.veth_steps, netdev=f"{if0},{if1}",
                          extra=['comm.all_gather="ring"'])
            rows = per_step(res)
            ranks = res["ranks"]
            for r in ranks:
                want = 0 if r["rank"] < 2 else 1
                if r["netdev"]["index"] != want:
                    sys.exit(f"rank {r['rank']} read interface #{r['netdev']['index']}, "
                             f"expected #{want}: it did not run in host {want}'s namespace")
            # Host 1's end: the earliest reading before and the latest after.
            h1 = [r["netdev"] for r in ranks if r["rank"] >= 2]
            before = [min(n["before"][i] for n in h1) for i in range(4)]
            after = [max(n["after"][i] for n in h1) for i in range(4)]
            link = {k: after[i] - before[i] for i, k in enumerate(NET)}
            steps = a.veth_steps
            sent1 = steps * sum(sum(rows[r][1]) for r in (2, 3))  # host 1 -> host 0
            sent0 = steps * sum(sum(rows[r][1]) for r in (0, 1))  # host 0 -> host 1
            if per_packet is None:  # the unquantized run sets the overhead
                per_packet = {"tx": (link["tx_bytes"] - sent1) / link["tx_packets"],
                              "rx": (link["rx_bytes"] - sent0) / link["rx_packets"]}
            for way, sent, b, p in (("tx", sent1, link["tx_bytes"], link["tx_packets"]),
                                    ("rx", sent0, link["rx_bytes"], link["rx_packets"])):
                est = sent + p * per_packet[way]
                print(f"{name if way == 'tx' else '':<24} {way:>3} {sent:>12,} {b:>12,} {p:>8,} "
                      f"{b - sent:>13,} {(b - sent) / p:>10.1f} {b / est:>13.4f}")
        print(f"  overhead per packet from stage 3: tx {per_packet['tx']:.1f} B, rx "
              f"{per_packet['rx']:.1f} B (headers of TCP/IP and Open MPI, pure ACKs)")
    finally:
        hosts.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build")
    ap.add_argument("--np", default="4,6")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--veth-steps", type=int, default=10)
    ap.add_argument("--skip-veth", action="store_true")
    ap.add_argument("--skip-stages12", action="store_true")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    a.np = [int(x) for x in a.np.split(",")]
    with tempfile.TemporaryDirectory() as d:
        layout_dir = os.path.join(d, "layout")
        # The layout zs-estimate reads: a checkpoint of the same model.
        measure(a.build, nc.mpirun(2), [], 1, save=layout_dir)
        results = part1(a, layout_dir)
        if 4 in a.np:
            compare_trainer(a, results)
        if not a.skip_veth:
            part2(a)
    bad = [k for k, v in results.items() if not v["equal"]]
    if bad:
        sys.exit(f"counters differ from the formula: {bad}")


if __name__ == "__main__":
    main()
