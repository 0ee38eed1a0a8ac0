#!/usr/bin/env python3
"""Every parameter's gradient through the Llama family's trainer code,
against LlamaForCausalLM's (tests/llama/golden): test_llama_import took one
SGD step of learning rate LR on the fixture's batch; the two exports
(before, after: fp32 safetensors in Hugging Face names) give the gradient as
(before - after) / LR. Standard library only.

    check_grads.py GOLDEN_VARIANT_DIR BEFORE.safetensors AFTER.safetensors LR

Tolerance: max |ours - theirs| / max |theirs| per tensor <= 1e-4. The
subtraction loses the bits of `before` below the step's size (the step is
LR times the gradient, LR = 8, the largest the runtime takes), about 1e-6 of the
tensor's scale here; a gradient that goes to the wrong tensor, or never
arrives, is off by its whole size.
"""
import json
import struct
import sys


def read_f32(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {t['dtype']}, expected F32")
        a, b = t["data_offsets"]
        out[name] = struct.unpack(f"<{(b - a) // 4}f", data[a:b])
    return out


def main():
    golden, before_path, after_path, lr = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    index = json.load(open(f"{golden}/index.json"))
    raw = open(f"{golden}/grads.bin", "rb").read()
    before, after = read_f32(before_path), read_f32(after_path)
    worst = 0.0
    for t in index["tensors"]:
        name, off, n = t["name"], t["offset"], t["numel"]
        want = struct.unpack(f"<{n}f", raw[4 * off:4 * (off + n)])
        got = [(b - a) / lr for b, a in zip(before[name], after[name])]
        scale = max(abs(x) for x in want) or 1.0
        err = max(abs(g - w) for g, w in zip(got, want)) / scale
        worst = max(worst, err)
        if err > 1e-4:
            sys.exit(f"FAIL: {name}: gradient differs from LlamaForCausalLM's by {err:.3g} of "
                     f"its scale {scale:.3g} (limit 1e-4)")
    print(f"every gradient within {worst:.2g} of LlamaForCausalLM's")


if __name__ == "__main__":
    main()
