#!/usr/bin/env python3
"""Checks gpt2_train's memory file (app.memory_file) against the ZeRO
formula, computed here from GPT-2's shapes and zeroshard's documented layout
rules, not from the runtime's code:

  - a unit's parameters start at multiples of zero.align (16) elements and
    the unit is padded to a multiple of world * 16; every rank owns 1/world;
  - stage 3, bf16, one micro-step: parameters 2, gradients 2, fp32 master 4
    and two fp32 Adam moments 8 bytes per owned element (K = 12: 16/N per
    element in all);
  - the live budget (zero.live_bytes = 0, max_live_units = 2): two 256-byte
    rounded carves of the largest unit for parameters and two for gradients;
    the trainer's loop carves at most the embedding unit's parameters and
    gradient at once (2E), and E's open gradient plus a block's gradient.
Exits 1 naming the first difference."""
import argparse
import json
import sys

PRESETS = {"124M": (12, 768, 50257, 1024), "350M": (24, 1024, 50257, 1024)}
ALIGN = 16


def unit_sizes(layers, C, vocab, block):
    embed = [vocab * C, block * C, C, C]
    blk = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
    return [embed] + [blk] * layers


def padded(sizes, world):
    end = 0
    for n in sizes:
        end = (end + ALIGN - 1) // ALIGN * ALIGN + n
    g = world * ALIGN
    return (end + g - 1) // g * g


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("memory_json")
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    a = ap.parse_args()
    report = json.load(open(a.memory_json))
    world, stage, dtype = report["world"], report["stage"], report["dtype"]
    assert stage == 3 and dtype == "bf16", (stage, dtype)
    units = [padded(u, world) for u in unit_sizes(*PRESETS[a.preset])]
    psi = sum(units)
    shard = psi // world
    want = {"params": 2 * shard, "grads": 2 * shard, "master": 4 * shard, "optim": 8 * shard}
    span = lambda b: (b + 255) // 256 * 256
    E, B = units[0] * 2, max(units[1:]) * 2
    budget = 2 * span(max(units) * 2) * 2
    errors = 0
    for r in report["ranks"]:
        for tag, value in want.items():
            if r["current"][tag] != value:
                print(f"rank {r['rank']}: {tag} = {r['current'][tag]} bytes, formula {value}")
                errors += 1
        checks = [("live_bytes_budget", r["live_bytes_budget"], budget),
                  ("live_free", r["current"]["live_free"], budget),
                  ("live_params peak", r["peak"]["live_params"], E),
                  ("live_grads peak", r["peak"]["live_grads"], E + B),
                  ("live_bytes_peak", r["live_bytes_peak"], max(2 * E, E + 2 * B))]
        for what, got, value in checks:
            if got != value:
                print(f"rank {r['rank']}: {what} = {got} bytes, expected {value}")
                errors += 1
    model = sum(want.values())
    print(f"{a.preset}: {sum(sum(u) for u in unit_sizes(*PRESETS[a.preset])):,} parameters, "
          f"{psi:,} padded; per rank at np {world}: model state {model:,} bytes = 16 x {shard:,} "
          f"(K = 12), live budget {budget:,}: {'matches' if errors == 0 else 'DIFFERS'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
