#!/usr/bin/env python3
"""Turns text into llm.c token shards with a model's own tokenizer, for the
examples' trainers (app.train_data / app.val_data).

    python3 scripts/tokenize_text.py --tokenizer ~/models/SmolLM2-135M --out data/mytext \
        notes/*.txt
    python3 scripts/tokenize_text.py --tokenizer ~/models/SmolLM2-135M --ids "ROMEO:"

--tokenizer is a Hugging Face model directory (its tokenizer.json) or the
tokenizer.json itself, read with Hugging Face's `tokenizers` package
(pip install tokenizers). Each input file is one document: its tokens, after
the tokenizer's beginning-of-sequence token with --bos, follow the previous
document's. The stream is written as shards of at most --shard-tokens tokens:
PREFIX_000000.bin, PREFIX_000001.bin, ...; with --val-tokens N the first N
tokens go to PREFIX_val_000000.bin instead (hold them out with app.val_data).

The shard format is llm.c's (examples/trainer/ex_data.h): 256 little-endian
int32 of header (magic, version, token count), then the tokens: uint32 with
magic 20240801 and version 7 (the Llama 3 format, any vocabulary), or, with
--format gpt2, uint16 with magic 20240520 and version 1 (vocabularies up to
65536).

--ids TEXT prints TEXT's token ids on one line (for app.prompt_tokens) and
writes nothing.
"""
import argparse
import json
import os
import struct
import sys

FORMATS = {"llama3": (20240801, 7, "<u4", 1 << 32), "gpt2": (20240520, 1, "<u2", 1 << 16)}


def load_tokenizer(path):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        sys.exit("tokenize_text.py: the `tokenizers` package is missing: pip install tokenizers")
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        sys.exit(f"tokenize_text.py: {file}: no such file (a Hugging Face model directory holds "
                 "tokenizer.json)")
    return Tokenizer.from_file(file), os.path.dirname(os.path.abspath(file))


def bos_id(tokenizer, directory):
    """The beginning-of-sequence token as tokenizer_config.json names it."""
    config = os.path.join(directory, "tokenizer_config.json")
    name = None
    if os.path.isfile(config):
        with open(config, encoding="utf-8") as f:
            value = json.load(f).get("bos_token")
        name = value.get("content") if isinstance(value, dict) else value
    if not name:
        sys.exit(f"tokenize_text.py: --bos: {config} names no bos_token")
    token = tokenizer.token_to_id(name)
    if token is None:
        sys.exit(f"tokenize_text.py: --bos: the tokenizer has no token {name!r}")
    return token


def write_shard(path, tokens, fmt):
    magic, version, dtype, limit = FORMATS[fmt]
    if tokens and max(tokens) >= limit:
        sys.exit(f"tokenize_text.py: token {max(tokens)} does not fit the {fmt} format "
                 f"(ids below {limit}); use --format llama3")
    header = struct.pack("<256i", magic, version, len(tokens), *([0] * 253))
    code = "I" if dtype == "<u4" else "H"
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header)
        f.write(struct.pack(f"<{len(tokens)}{code}", *tokens))
    os.replace(tmp, path)
    print(f"tokenize_text.py: {path}: {len(tokens):,} tokens")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer", required=True, help="a model directory or its tokenizer.json")
    p.add_argument("--out", help="the shards' path prefix")
    p.add_argument("--format", choices=sorted(FORMATS), default="llama3")
    p.add_argument("--bos", action="store_true", help="start every document with the BOS token")
    p.add_argument("--shard-tokens", type=int, default=100_000_000)
    p.add_argument("--val-tokens", type=int, default=0)
    p.add_argument("--ids", metavar="TEXT", help="print TEXT's ids and exit")
    p.add_argument("files", nargs="*")
    a = p.parse_args()
    tokenizer, directory = load_tokenizer(a.tokenizer)
    if a.ids is not None:
        print(" ".join(str(t) for t in tokenizer.encode(a.ids, add_special_tokens=False).ids))
        return
    if not a.out or not a.files:
        p.error("give --out PREFIX and the text files (or --ids TEXT)")
    if a.shard_tokens < 1 or a.val_tokens < 0:
        p.error("--shard-tokens must be >= 1 and --val-tokens >= 0")
    stream = []
    bos = bos_id(tokenizer, directory) if a.bos else None
    for name in a.files:
        with open(name, encoding="utf-8") as f:
            text = f.read()
        if bos is not None:
            stream.append(bos)
        stream.extend(tokenizer.encode(text, add_special_tokens=False).ids)
    if a.val_tokens:
        write_shard(f"{a.out}_val_000000.bin", stream[:a.val_tokens], a.format)
        stream = stream[a.val_tokens:]
    for k, first in enumerate(range(0, max(len(stream), 1), a.shard_tokens)):
        write_shard(f"{a.out}_{k:06d}.bin", stream[first:first + a.shard_tokens], a.format)


if __name__ == "__main__":
    main()
