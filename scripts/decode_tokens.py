#!/usr/bin/env python3
"""Turns the token ids a trainer prints into text with the model's tokenizer.

    mpirun -np 2 build/examples/llama/llama_train my.cfg | \
        python3 scripts/decode_tokens.py --tokenizer ~/models/SmolLM2-135M

A model whose tokens are not bytes prints a sample's tokens as "[id]" (the C
programs have no tokenizer of their own); this filter copies its input and
replaces every run of such tokens with their decoded text, decoding a run at
once so that characters split across tokens come out whole. Input: files
given, or standard input. Needs Hugging Face's `tokenizers` package.
"""
import argparse
import re
import sys

RUN = re.compile(r"(?:\[\d+\])+")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer", required=True, help="a model directory or its tokenizer.json")
    p.add_argument("files", nargs="*")
    a = p.parse_args()
    sys.path.insert(0, __file__.rsplit("/", 1)[0] if "/" in __file__ else ".")
    from tokenize_text import load_tokenizer  # noqa: E402 (the shared loader)
    tokenizer, _ = load_tokenizer(a.tokenizer)

    def decode(match):
        ids = [int(t) for t in re.findall(r"\d+", match.group(0))]
        return tokenizer.decode(ids, skip_special_tokens=False)

    streams = [open(f, encoding="utf-8", errors="replace") for f in a.files] or [sys.stdin]
    for s in streams:
        for line in s:
            sys.stdout.write(RUN.sub(decode, line))


if __name__ == "__main__":
    main()
