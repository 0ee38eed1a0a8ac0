#!/usr/bin/env python3
"""Checks a `zs-ckpt export` file with the Python safetensors package, the
reader the export exists for.

    python-check-export.py <export.safetensors> <expected.f32> <manifest.json> [--dtype fp32|fp16]

<expected.f32> is every parameter's fp32 master values concatenated in
manifest order as raw little-endian float32 (tests/tools/make_fixture.c
writes it). The parameter names and shapes come from the step's
manifest.json, read here with the json module, independently of the C code.
The export must hold exactly those tensors with those shapes and, bit for
bit, the expected values (fp16: numpy's round-to-nearest-even conversion of
them). bf16 is not checked here: numpy has no bfloat16 type.
Exit status: 0 on success, 1 on any difference (the first one is printed).
"""
import argparse
import json
import sys

import numpy as np
from safetensors.numpy import load_file
from safetensors import safe_open


def fail(message):
    print(f"python-check-export: FAIL: {message}", file=sys.stderr)
    return 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export")
    parser.add_argument("expected")
    parser.add_argument("manifest")
    parser.add_argument("--dtype", choices=["fp32", "fp16"], default="fp32")
    args = parser.parse_args()

    with open(args.manifest, "r", encoding="utf-8") as f:
        manifest = json.load(f)
    params = manifest["params"]
    expected = np.fromfile(args.expected, dtype="<f4")
    total = sum(int(np.prod(p["shape"], dtype=np.int64)) for p in params)
    if expected.size != total:
        return fail(f"{args.expected} holds {expected.size} values, the manifest {total}")

    tensors = load_file(args.export)
    names = [p["name"] for p in params]
    if sorted(tensors) != sorted(names):
        return fail(f"tensors {sorted(tensors)} != parameters {sorted(names)}")
    with safe_open(args.export, framework="numpy") as f:
        meta = f.metadata() or {}
    # "pt": the format transformers requires (it refuses anything but pt, tf, flax, mlx).
    want_meta = {"format": "pt", "step": str(manifest["step"]), "dtype": args.dtype}
    for key, value in want_meta.items():
        if meta.get(key) != value:
            return fail(f"metadata {key} = {meta.get(key)!r}, expected {value!r}")

    want_dtype = np.float32 if args.dtype == "fp32" else np.float16
    bits = np.uint32 if args.dtype == "fp32" else np.uint16
    at = 0
    for p in params:
        name, shape = p["name"], tuple(p["shape"])
        n = int(np.prod(shape, dtype=np.int64))
        got = tensors[name]
        if got.shape != shape or got.dtype != want_dtype:
            return fail(f"{name}: {got.dtype}{got.shape}, expected {np.dtype(want_dtype)}{shape}")
        with np.errstate(over="ignore"):  # values above fp16's range become inf, as in C
            want = expected[at:at + n].reshape(shape).astype(want_dtype)
        diff = np.flatnonzero(got.view(bits).ravel() != want.view(bits).ravel())
        if diff.size:
            i = int(diff[0])
            return fail(f"{name}: element {i} is {got.ravel()[i]!r}, expected {want.ravel()[i]!r} "
                        f"({diff.size} elements differ)")
        at += n
    print(f"python-check-export: OK: {len(params)} tensors, {total} elements, {args.dtype}, "
          f"safetensors {__import__('safetensors').__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
