#!/usr/bin/env python3
"""Writes a golden fixture's weights (tests/llama/golden/<variant>: made by
Hugging Face's own LlamaForCausalLM, see make_golden.py) as the checkpoint
directory that library saves: config.json and model.safetensors (or, with
--shards N, model-0000k-of-0000N.safetensors and model.safetensors.index.json),
metadata {"format": "pt"}, tensors stored sorted by name in float32, plus
one rotary_emb.inv_freq buffer per layer as older checkpoints carry them.
Standard library only (json, struct), so the import test never skips.

    golden_to_hf.py <golden variant dir> <out dir> [--shards N] [--lm-head-copy VALUE]
                    [--nan NAME] [--extra NAME]

Variations a user's checkpoint may have (tests/llama/run_llama_hf_cases.sh):
  --lm-head-copy VALUE  a tied model's checkpoint that also carries lm_head.weight, as some
                        writers save it: "same" for the embedding's bytes, or a number every
                        element is set to (a copy that differs from the embedding)
  --nan NAME            element 0 of tensor NAME is a NaN
  --extra NAME          one more tensor, NAME of shape [3], that the model does not have
"""
import json
import os
import shutil
import struct
import sys


def write_safetensors(path, tensors):
    """tensors: list of (name, shape, bytes) in the order the file stores them."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, data in tensors:
        header[name] = {"dtype": "F32", "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, data in tensors:
            f.write(data)


def main():
    args = sys.argv[1:]
    shards = 1
    options = {"--shards": None, "--lm-head-copy": None, "--nan": None, "--extra": None}
    for option in options:
        if option in args:
            k = args.index(option)
            options[option] = args[k + 1]
            del args[k:k + 2]
    if options["--shards"]:
        shards = int(options["--shards"])
    if len(args) != 2:
        sys.exit(__doc__)
    src, out = args
    index = json.load(open(os.path.join(src, "index.json")))
    weights = open(os.path.join(src, "weights.bin"), "rb").read()
    config = json.load(open(os.path.join(src, "config.json")))
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(src, "config.json"), os.path.join(out, "config.json"))
    tensors = []
    for t in index["tensors"]:
        data = weights[4 * t["offset"]:4 * (t["offset"] + t["numel"])]
        if t["name"] == options["--nan"]:
            data = struct.pack("<f", float("nan")) + data[4:]
        tensors.append((t["name"], t["shape"], data))
    if options["--nan"] and not any(t[0] == options["--nan"] for t in tensors):
        sys.exit(f"--nan {options['--nan']}: no such tensor")
    copy = options["--lm-head-copy"]
    if copy is not None:
        embed = next(t for t in tensors if t[0] == "model.embed_tokens.weight")
        data = embed[2] if copy == "same" else struct.pack("<f", float(copy)) * (len(embed[2]) // 4)
        tensors.append(("lm_head.weight", embed[1], data))
    if options["--extra"]:
        tensors.append((options["--extra"], [3], struct.pack("<3f", 1.0, 2.0, 3.0)))
    hd = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    for layer in range(config["num_hidden_layers"]):
        inv = struct.pack(f"<{hd // 2}f", *[10000.0 ** (-2 * i / hd) for i in range(hd // 2)])
        tensors.append((f"model.layers.{layer}.self_attn.rotary_emb.inv_freq", [hd // 2], inv))
    tensors.sort(key=lambda t: t[0])
    if shards == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), tensors)
        return
    weight_map, total = {}, 0
    for k in range(shards):
        part = tensors[k::shards]
        name = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(out, name), part)
        for t in part:
            weight_map[t[0]] = name
            total += len(t[2])
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


if __name__ == "__main__":
    main()
