#!/usr/bin/env python3
"""Memory per rank for the Llama 3.x shapes: zeroshard's zs-estimate beside
DeepSpeed's own estimator formulas (issue 27, item 5).

    python3 bench/estimate/llama_memory.py build/tools/zs-estimate [--gpus-per-node 8] [--bytes]

Runs zs-estimate for Llama 3.2 1B, Llama 3.1 8B and Llama 3.1 70B at 1, 8
and 64 ranks (the defaults plus --dtype bf16: bf16 parameters and gradients,
fp32 master weights, AdamW), once as it is and once more for stage 3 with
offload.params = "host", parses the bytes per memory tag it prints, and
writes markdown tables to stdout:

  1. optimizer on the device: zeroshard's device bytes per rank, the ZeRO
     paper's formula (which zs-estimate prints), DeepSpeed's GPU and CPU
     estimates, and DeepSpeed / zeroshard;
  2. optimizer on the host (offload.optimizer = "host", DeepSpeed's
     offload_optimizer = cpu): device and host bytes of both;
  3. stage 3 with the parameters on the host as well (offload.params = "host",
     DeepSpeed's offload_param = cpu);
  4. optimizer on NVMe (zeroshard only: DeepSpeed's estimators have no NVMe
     case).

zeroshard's device bytes are the tags zs-estimate's --device-memory counts as
what must fit the device (params, grads, master, optim and the live budget);
host bytes are host_state, host_params and offload_staging. comm (MPI's ring
staging on the CPU backend; none with NCCL) and scratch are in neither; the
script checks that every tag is classified and that the classes add up to
zs-estimate's "total per rank".

DeepSpeed's numbers are computed here from the formulas of
estimate_zero2_model_states_mem_needs (deepspeed/runtime/zero/
stage_1_and_2.py) and estimate_zero3_model_states_mem_needs
(deepspeed/runtime/zero/stage3.py), with their defaults
(additional_buffer_factor 1.5, zero_init True), total_params = zs-estimate's
Psi and largest_layer_params = zs-estimate's largest unit. DeepSpeed has no
estimator for stages 0 and 1; those cells are "-". Ranks are laid out as one
node of N GPUs up to --gpus-per-node, then nodes of --gpus-per-node GPUs
(64 ranks = 8 nodes x 8). DeepSpeed's GPU number is per GPU, its CPU number
per node; zeroshard's host bytes are per rank and are multiplied by the ranks
per node for the CPU ratio.

Python 3 standard library only. Exit status 0, or 1 when zs-estimate fails
or prints something this script cannot account for.
"""
import argparse
import re
import subprocess
import sys

SHAPES = ("llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b")
WORLDS = (1, 8, 64)
STAGES = (0, 1, 2, 3)

# zs-estimate's memory tags by where they live.
DEVICE_TAGS = ("params", "grads", "master", "optim", "live_params", "live_grads", "live_free",
               "secondary",  # secondary: hpZ's node slices (issue 28), 0 here
               "frozen")  # frozen: ZS_PARAM_FROZEN parameters (issue 42), 0 here
HOST_TAGS = ("host_state", "host_params", "offload_staging")
OTHER_TAGS = ("comm", "scratch")  # in the total, in neither class above
DISK_TAGS = ("nvme_state",)  # not in the total
SUMMARY_ROWS = ("model state", "total per rank")
ALL_ROWS = DEVICE_TAGS + HOST_TAGS + OTHER_TAGS + DISK_TAGS + SUMMARY_ROWS

GIB = float(1 << 30)


class EstimateError(Exception):
    pass


# ---------------------------------------------------------------- zs-estimate

CELL = r"(?:n/a|[0-9.]+ (?:B|KiB|MiB|GiB|TiB|PiB)\s+[0-9]+)"
ROW_RE = re.compile(r"^  (\S.*?)\s{2,}((?:" + CELL + r"\s*)+)$")
CELL_RE = re.compile(r"n/a|[0-9.]+ (?:B|KiB|MiB|GiB|TiB|PiB)\s+([0-9]+)")
STAGE_RE = re.compile(r"^stage (\d+) on (\d+) ranks?\s+(.*)$")
UNPLANNED_RE = re.compile(r"^stage (\d+): cannot be planned: (.*)$")
PSI_RE = re.compile(r"Psi = (\d+) parameters")
LARGEST_RE = re.compile(r"largest unit (\S+): (\d+) elements")
PAPER_RE = re.compile(r"^  ZeRO paper\s+\S+ = (\d+) bytes")


def parse_estimate(text):
    """zs-estimate's output -> {'psi', 'largest_name', 'largest',
    'stages': {stage: {mode: {row: bytes}}}, 'paper': {stage: bytes},
    'unplanned': {stage: message}}. A column printed as n/a is left out."""
    out = {"stages": {}, "paper": {}, "unplanned": {}}
    m = PSI_RE.search(text)
    if not m:
        raise EstimateError("no 'Psi = N parameters' line")
    out["psi"] = int(m.group(1))
    m = LARGEST_RE.search(text)
    if not m:
        raise EstimateError("no 'largest unit NAME: N elements' line")
    out["largest_name"], out["largest"] = m.group(1), int(m.group(2))
    stage, columns = None, None
    for line in text.splitlines():
        m = STAGE_RE.match(line)
        if m:
            stage = int(m.group(1))
            columns = re.findall(r"offload: (\w+)", m.group(3))
            if not columns:
                raise EstimateError(f"no offload columns in: {line}")
            out["stages"][stage] = {c: {} for c in columns}
            continue
        m = UNPLANNED_RE.match(line)
        if m:
            out["unplanned"][int(m.group(1))] = m.group(2)
            stage = None
            continue
        if stage is None:
            continue
        m = PAPER_RE.match(line)
        if m:
            out["paper"][stage] = int(m.group(1))
            continue
        m = ROW_RE.match(line)
        if not m:
            continue
        name = m.group(1).strip()
        cells = [c.group(1) for c in CELL_RE.finditer(m.group(2))]
        if len(cells) != len(columns):
            raise EstimateError(f"stage {stage}: {len(cells)} cells for {len(columns)} columns: {line}")
        if name not in ALL_ROWS:
            raise EstimateError(f"stage {stage}: unknown memory tag '{name}' (classify it in this script)")
        for column, cell in zip(columns, cells):
            if cell is not None:
                out["stages"][stage][column][name] = int(cell)
    for s, modes in out["stages"].items():
        for mode, rows in list(modes.items()):
            if not rows:  # n/a: the mode does not exist in this stage
                del modes[mode]
                continue
            missing = [r for r in ALL_ROWS if r not in rows]
            if missing:
                raise EstimateError(f"stage {s}, offload {mode}: rows missing: {', '.join(missing)}")
            parts = sum(rows[t] for t in DEVICE_TAGS + HOST_TAGS + OTHER_TAGS)
            if parts != rows["total per rank"]:
                raise EstimateError(f"stage {s}, offload {mode}: the tags add up to {parts}, "
                                    f"the total per rank is {rows['total per rank']}")
    return out


def run_estimate(exe, shape, world, extra=()):
    command = [exe, "--llama", shape, "--world", str(world), "--dtype", "bf16", *extra]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True)
    if result.returncode != 0:
        first = (result.stderr.strip().splitlines() or [""])[0]
        raise EstimateError(f"{' '.join(command)} exited with {result.returncode}: {first}")
    try:
        return parse_estimate(result.stdout)
    except EstimateError as e:
        raise EstimateError(f"{' '.join(command)}: {e}") from None


def device_bytes(rows):
    return sum(rows[t] for t in DEVICE_TAGS)


def host_bytes(rows):
    return sum(rows[t] for t in HOST_TAGS)


# ---------------------------------------------------------------- DeepSpeed
# DeepSpeed's estimator arithmetic, restated (see docs/LLAMA.md for the
# formulas in words). Each returns (gpu bytes per GPU, cpu bytes per node),
# rounded down to whole bytes where DeepSpeed rounds.

def topology(world, gpus_per_node):
    """Ranks as DeepSpeed's (num_gpus_per_node, num_nodes)."""
    if world <= gpus_per_node:
        return world, 1
    if world % gpus_per_node:
        raise EstimateError(f"{world} ranks are not whole nodes of {gpus_per_node} GPUs")
    return gpus_per_node, world // gpus_per_node


def deepspeed_zero2(total, per_node, nodes, offload_optimizer, factor=1.5):
    """estimate_zero2_model_states_mem_needs (stage_1_and_2.py)."""
    gpus = per_node * nodes
    if offload_optimizer:
        # 16-bit parameters on the GPU; the CPU term scales with all GPUs.
        return int(2 * total), int(total * max(4 * gpus, 16) * factor)
    # 16-bit parameters whole, plus 18 bytes per parameter partitioned.
    return int(2 * total + int(18 * total / gpus)), int(total * 4 * per_node * factor)


def deepspeed_zero3(total, largest, per_node, nodes, offload_optimizer, offload_params,
                    zero_init=True, factor=1.5):
    """estimate_zero3_model_states_mem_needs (stage3.py)."""
    gpus = per_node * nodes
    layer = 4 * largest  # DeepSpeed's largest_layer_memory
    if offload_optimizer and offload_params:
        k = 18 / nodes
        cpu = total * (k if zero_init else max(4 * per_node, k)) * factor
        return int(layer), int(cpu)
    if offload_optimizer:
        k = 16 / nodes
        cpu = total * (k if zero_init else max(4 * per_node, k)) * factor
        return int(layer + int(2 * total / gpus)), int(cpu)
    if offload_params:
        raise EstimateError("DeepSpeed's estimator has no parameter offload without the optimizer's")
    cpu = (largest if zero_init else total) * 4 * per_node * factor
    return int(layer + int(18 * total / gpus)), int(cpu)


def deepspeed(stage, total, largest, world, gpus_per_node, offload_optimizer, offload_params=False):
    """(gpu, cpu per node) or None where DeepSpeed has no estimator."""
    per_node, nodes = topology(world, gpus_per_node)
    if stage == 2 and not offload_params:
        return deepspeed_zero2(total, per_node, nodes, offload_optimizer)
    if stage == 3:
        return deepspeed_zero3(total, largest, per_node, nodes, offload_optimizer, offload_params)
    return None


# ---------------------------------------------------------------- tables

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("zs_estimate", help="path of the zs-estimate binary")
    parser.add_argument("--gpus-per-node", type=int, default=8,
                        help="GPUs per node for DeepSpeed's num_gpus_per_node/num_nodes (default 8)")
    parser.add_argument("--bytes", action="store_true",
                        help="print exact bytes instead of GiB (2^30 bytes) with two decimals")
    args = parser.parse_args()
    if args.gpus_per_node < 1:
        parser.error("--gpus-per-node must be at least 1")

    def size(b):
        if b is None:
            return "-"
        return str(b) if args.bytes else f"{b / GIB:.2f}"

    def ratio(a, b):
        return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"

    unit = "bytes" if args.bytes else "GiB"
    try:
        plain, params_host = {}, {}
        for shape in SHAPES:
            for world in WORLDS:
                plain[shape, world] = run_estimate(args.zs_estimate, shape, world)
                params_host[shape, world] = run_estimate(
                    args.zs_estimate, shape, world,
                    ("--set", "zero.stage=3", "--set", 'offload.params="host"'))
        w = sys.stdout.write
        w(f"zs-estimate: {args.zs_estimate} --llama SHAPE --world N --dtype bf16 "
          f"(stage 3 with parameters on the host: plus --set zero.stage=3 "
          f"--set 'offload.params=\"host\"')\n")
        w(f"DeepSpeed ranks: one node of N GPUs up to {args.gpus_per_node}, then nodes of "
          f"{args.gpus_per_node}; additional_buffer_factor 1.5, zero_init True. "
          f"Sizes in {unit}.\n\n")

        w("| shape | Psi (parameters) | largest unit (elements) |\n|---|---|---|\n")
        for shape in SHAPES:
            e = plain[shape, WORLDS[0]]
            w(f"| {shape} | {e['psi']} | {e['largest_name']}: {e['largest']} |\n")

        w(f"\n**Optimizer on the device** (offload none; {unit}; zeroshard per rank, "
          f"DeepSpeed GPU per GPU, CPU per node)\n\n")
        w("| shape | ranks | stage | zeroshard device | ZeRO paper | DeepSpeed GPU "
          "| DeepSpeed / zeroshard | DeepSpeed CPU per node |\n|---|---|---|---|---|---|---|---|\n")
        for shape in SHAPES:
            for world in WORLDS:
                e = plain[shape, world]
                for stage in STAGES:
                    dev = device_bytes(e["stages"][stage]["none"])
                    ds = deepspeed(stage, e["psi"], e["largest"], world, args.gpus_per_node, False)
                    w(f"| {shape} | {world} | {stage} | {size(dev)} | {size(e['paper'][stage])} "
                      f"| {size(ds and ds[0])} | {ratio(ds and ds[0], dev)} | {size(ds and ds[1])} |\n")

        def offload_table(title, source, stages, mode_key, offload_params):
            w(f"\n**{title}** ({unit}; zeroshard per rank, DeepSpeed GPU per GPU, CPU per node)\n\n")
            w("| shape | ranks | stage | zeroshard device | zeroshard host per rank "
              "| zeroshard host per node | DeepSpeed GPU | DeepSpeed CPU per node "
              "| GPU: DeepSpeed / zeroshard | CPU: DeepSpeed / zeroshard |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n")
            for shape in SHAPES:
                for world in WORLDS:
                    e = source[shape, world]
                    per_node, _ = topology(world, args.gpus_per_node)
                    for stage in stages:
                        rows = e["stages"][stage][mode_key]
                        dev, host = device_bytes(rows), host_bytes(rows)
                        node = host * per_node
                        ds = deepspeed(stage, e["psi"], e["largest"], world, args.gpus_per_node,
                                       True, offload_params)
                        w(f"| {shape} | {world} | {stage} | {size(dev)} | {size(host)} "
                          f"| {size(node)} | {size(ds and ds[0])} | {size(ds and ds[1])} "
                          f"| {ratio(ds and ds[0], dev)} | {ratio(ds and ds[1], node)} |\n")

        offload_table('Optimizer on the host (offload.optimizer = "host"; DeepSpeed '
                      'offload_optimizer = cpu)', plain, STAGES, "host", False)
        offload_table('Stage 3, optimizer and parameters on the host (plus offload.params = '
                      '"host"; DeepSpeed offload_param = cpu)', params_host, (3,), "host", True)

        w(f"\n**Optimizer on NVMe** (offload.optimizer = \"nvme\", zeroshard only; {unit} per rank; "
          f"disk = the swap file, nvme_state)\n\n")
        w("| shape | ranks | stage | device | host | disk |\n|---|---|---|---|---|---|\n")
        for shape in SHAPES:
            for world in WORLDS:
                e = plain[shape, world]
                for stage in STAGES:
                    rows = e["stages"][stage].get("nvme")
                    if rows is None:
                        continue  # not printed (stage 0)
                    w(f"| {shape} | {world} | {stage} | {size(device_bytes(rows))} "
                      f"| {size(host_bytes(rows))} | {size(rows['nvme_state'])} |\n")
    except EstimateError as e:
        print(f"llama_memory.py: {e}", file=sys.stderr)
        return 1
    except (KeyError, OSError) as e:
        print(f"llama_memory.py: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
