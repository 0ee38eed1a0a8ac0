#!/usr/bin/env python3
"""Compares two safetensors files tensor by tensor with numpy (no other
package): the same names, shapes and dtypes, and per tensor
max |a - b| <= rtol * max |b|. Exits 1 with the worst tensor otherwise."""
import argparse
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16}


def load(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = np.frombuffer(data[begin:end], dtype=DTYPES[info["dtype"]])
        out[name] = raw.reshape(info["shape"]).astype(np.float64)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rtol", type=float, required=True)
    args = ap.parse_args()
    a, b = load(args.a), load(args.b)
    if sorted(a) != sorted(b):
        print(f"names differ: {sorted(set(a) ^ set(b))}")
        return 1
    worst, worst_name = 0.0, ""
    for name in a:
        if a[name].shape != b[name].shape:
            print(f"{name}: shape {a[name].shape} vs {b[name].shape}")
            return 1
        scale = np.max(np.abs(b[name])) or 1.0
        rel = float(np.max(np.abs(a[name] - b[name])) / scale)
        if rel > worst:
            worst, worst_name = rel, name
    ok = worst <= args.rtol
    print(f"{len(a)} tensors; worst relative difference {worst:.3g} ({worst_name}); "
          f"tolerance {args.rtol:g}: {'ok' if ok else 'EXCEEDED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
