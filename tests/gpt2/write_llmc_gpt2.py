#!/usr/bin/env python3
"""Writes an llm.c GPT-2 model file (version 3: fp32, padded vocabulary) with
random parameters, and the same parameters under nanoGPT's names and shapes.

    write_llmc_gpt2.py --model M.bin [--npz E.npz] [--raw-dir DIR]
                       [--layers 2] [--heads 2] [--channels 8] [--vocab 11]
                       [--padded-vocab 16] [--max-seq-len 12] [--seed 0]

The parameters are drawn per tensor under OUR names (nanoGPT's: Linear
weights [out, in]) and then laid out the way llm.c does, independently of the
C reader (examples/gpt2/gpt2_llmc.c) that the tests check against it:
a header of 256 little-endian int32 (magic 20240326, version 3, max_seq_len,
vocab_size, num_layers, num_heads, channels, padded_vocab_size, zeros), then
16 fp32 tensors stacked over layers: wte [Vp, C], wpe [maxT, C], ln1w, ln1b,
qkvw [L, 3C, C], qkvb, attprojw [L, C, C], attprojb, ln2w, ln2b,
fcw [L, 4C, C], fcb, fcprojw [L, C, 4C], fcprojb, lnfw [C], lnfb [C].
wte's padding rows (vocab..padded_vocab-1) get random values too, so that a
reader that does not skip them is caught.

Outputs:
  --model    the llm.c file
  --npz      numpy .npz of the expected tensors, keyed by our names, with our
             shapes (float32), for Python-side checks (e.g. an import test)
  --raw-dir  the same tensors as raw little-endian float32 files
             DIR/<name>.f32, and DIR/index.txt: a first line
             "config <layers> <heads> <channels> <vocab> <padded_vocab> <max_seq_len>"
             then one line per tensor, in our canonical order:
             "<name> <ndim> <dim0> [<dim1>]"
Exit status 0, or 2 on bad arguments.
"""
import argparse
import os
import sys

import numpy as np

MAGIC = 20240326
VERSION = 3

# Per-layer tensors: (our suffix, llm.c name, shape as a function of C).
LAYER_TENSORS = [
    ("ln_1.weight", "ln1w", lambda C: (C,)),
    ("ln_1.bias", "ln1b", lambda C: (C,)),
    ("attn.c_attn.weight", "qkvw", lambda C: (3 * C, C)),
    ("attn.c_attn.bias", "qkvb", lambda C: (3 * C,)),
    ("attn.c_proj.weight", "attprojw", lambda C: (C, C)),
    ("attn.c_proj.bias", "attprojb", lambda C: (C,)),
    ("ln_2.weight", "ln2w", lambda C: (C,)),
    ("ln_2.bias", "ln2b", lambda C: (C,)),
    ("mlp.c_fc.weight", "fcw", lambda C: (4 * C, C)),
    ("mlp.c_fc.bias", "fcb", lambda C: (4 * C,)),
    ("mlp.c_proj.weight", "fcprojw", lambda C: (C, 4 * C)),
    ("mlp.c_proj.bias", "fcprojb", lambda C: (C,)),
]


def our_tensors(a, rng):
    """Our parameters in canonical order: wte, wpe, ln_f.weight, ln_f.bias,
    then each layer's twelve tensors in LAYER_TENSORS order."""
    C, L = a.channels, a.layers

    def draw(shape):
        return rng.standard_normal(shape).astype("<f4")

    out = [
        ("transformer.wte.weight", draw((a.vocab, C))),
        ("transformer.wpe.weight", draw((a.max_seq_len, C))),
        ("transformer.ln_f.weight", draw((C,))),
        ("transformer.ln_f.bias", draw((C,))),
    ]
    for l in range(L):
        for suffix, _, shape in LAYER_TENSORS:
            out.append((f"transformer.h.{l}.{suffix}", draw(shape(C))))
    return out


def llmc_blob(a, tensors, rng):
    """The parameters in llm.c's order as one float32 array."""
    t = dict(tensors)
    C, L = a.channels, a.layers
    padding = rng.standard_normal((a.padded_vocab - a.vocab, C)).astype("<f4")
    parts = [
        np.concatenate([t["transformer.wte.weight"], padding], axis=0),  # [Vp, C]
        t["transformer.wpe.weight"],  # [maxT, C]
    ]
    for suffix, _, _ in LAYER_TENSORS:
        parts.append(np.stack([t[f"transformer.h.{l}.{suffix}"] for l in range(L)]))
    parts.append(t["transformer.ln_f.weight"])
    parts.append(t["transformer.ln_f.bias"])
    return np.concatenate([p.reshape(-1) for p in parts]).astype("<f4")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the llm.c model file to write")
    parser.add_argument("--npz", help="expected tensors as .npz (our names and shapes)")
    parser.add_argument("--raw-dir", help="expected tensors as raw float32 files + index.txt")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--channels", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=11)
    parser.add_argument("--padded-vocab", type=int, default=16)
    parser.add_argument("--max-seq-len", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args()
    for name in ("layers", "heads", "channels", "vocab", "padded_vocab", "max_seq_len"):
        if getattr(a, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if a.channels % a.heads:
        parser.error("--channels must be a multiple of --heads")
    if a.padded_vocab < a.vocab:
        parser.error("--padded-vocab must be >= --vocab")

    rng = np.random.default_rng(a.seed)
    tensors = our_tensors(a, rng)
    blob = llmc_blob(a, tensors, rng)

    header = np.zeros(256, dtype="<i4")
    header[:8] = [MAGIC, VERSION, a.max_seq_len, a.vocab, a.layers, a.heads, a.channels,
                  a.padded_vocab]
    with open(a.model, "wb") as f:
        f.write(header.tobytes())
        f.write(blob.tobytes())

    if a.npz:
        np.savez(a.npz, **dict(tensors))
    if a.raw_dir:
        os.makedirs(a.raw_dir, exist_ok=True)
        lines = [f"config {a.layers} {a.heads} {a.channels} {a.vocab} {a.padded_vocab} "
                 f"{a.max_seq_len}"]
        for name, arr in tensors:
            arr.astype("<f4").tofile(os.path.join(a.raw_dir, name + ".f32"))
            lines.append(" ".join([name, str(arr.ndim)] + [str(d) for d in arr.shape]))
        with open(os.path.join(a.raw_dir, "index.txt"), "w", encoding="ascii") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
