#!/usr/bin/env python3
"""Hugging Face checkpoints for zeroshard's import and export tests, written
and read with the standard library only (json, struct, random), so the tests
never skip for a missing package and nothing here shares code with the C
reader or writer.

    hf_checkpoint.py write <spec.txt> <out dir>
    hf_checkpoint.py compare <original dir> <export dir> [--files N]
                     [--config FILE] [--tokenizer DIR] [--ignore SUFFIX]

write: for the model <spec.txt> describes (lines "param <name> <shard>
<d0> [d1 ...]", written by test_hf_import prepare), and for each dtype F32,
BF16 and F16:
  <out>/single_<dtype>/model.safetensors  every parameter, plus one
      rotary_emb.inv_freq buffer per layer (F32), as older Llama checkpoints
      carry them
  <out>/sharded_<dtype>/model-0000k-of-00003.safetensors and
      model.safetensors.index.json  the parameters in the file their spec
      line names (the inv_freq buffers listed in the first)
  <out>/expected_<dtype>.f32  every parameter's values as little-endian
      float32, in spec order: BF16 and F16 values widen to float32 exactly
Tensors are stored sorted by name (as the safetensors package stores them),
not in the spec's order, with metadata {"format": "pt"}. Values are random
bit patterns of finite numbers (subnormals and -0 included) from a fixed
seed; <out>/config.json is a small Llama config.

compare: the export directory must be what transformers loads: each
safetensors file well formed (header length, data offsets tiling the data
section) with metadata exactly {"format": "pt"}; with several files, an
index whose weight_map lists every tensor once, each in the file that holds
it, and whose metadata.total_size is the sum of the tensor bytes; file names
model.safetensors or model-0000k-of-0000N.safetensors. Its tensors must be
the original's (minus tensors whose name ends with --ignore) with the same
dtype, shape and bytes. --files: the number of safetensors files expected;
--config: config.json must be that file with its dtype set to the one of
the exported tensors: "torch_dtype" (and "dtype", transformers 4.56's name,
where the file has it; torch_dtype added where it has neither) as torch
names it (float32, bfloat16, float16), everything else equal; the very
bytes of the file when it already said so (absent: no config.json);
--tokenizer: the tokenizer files there must be copied
byte for byte, and no other.
Exit status 0 on success, 1 with the first difference on stderr.
"""
import json
import os
import random
import re
import struct
import sys

DTYPES = {"F32": 4, "BF16": 2, "F16": 2}
TORCH_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "tokenizer.model", "generation_config.json"]
INV_FREQ = "model.layers.{}.self_attn.rotary_emb.inv_freq"


class Mismatch(Exception):
    pass


def read_spec(path):
    params = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            words = line.split()
            if not words or words[0] != "param":
                continue
            params.append((words[1], int(words[2]), [int(d) for d in words[3:]]))
    return params


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


# Bits of a value, and the shift and mask of its exponent: values whose
# exponent is all ones (inf, NaN) are left out.
FORMATS = {"F32": (32, 23, 0xFF), "BF16": (16, 7, 0xFF), "F16": (16, 10, 0x1F)}


def random_values(rng, dtype, count):
    """(stored bytes, float32 bytes) of count random finite values."""
    width, shift, mask = FORMATS[dtype]
    stored, wide = bytearray(), bytearray()
    for _ in range(count):
        bits = rng.getrandbits(width)
        while (bits >> shift) & mask == mask:
            bits = rng.getrandbits(width)
        stored += struct.pack("<I" if width == 32 else "<H", bits)
        if dtype == "F32":
            wide += struct.pack("<I", bits)
        elif dtype == "BF16":
            wide += struct.pack("<I", bits << 16)  # bf16 is the top half of a float32
        else:
            half = struct.unpack("<e", struct.pack("<H", bits))[0]
            wide += struct.pack("<f", half)  # every half is a float32
    return bytes(stored), bytes(wide)


def write_safetensors(path, tensors):
    """tensors: {name: (dtype, shape, bytes)}, stored sorted by name."""
    header, data, at = {"__metadata__": {"format": "pt"}}, bytearray(), 0
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(raw)]}
        data += raw
        at += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(data))


def write(spec_path, out):
    params = read_spec(spec_path)
    layers = sorted({int(m.group(1)) for name, _, _ in params
                     for m in [re.match(r"model\.layers\.(\d+)\.", name)] if m})
    shards = max(shard for _, shard, _ in params) + 1
    for dtype in DTYPES:
        rng = random.Random(f"zeroshard-hf-{dtype}")
        tensors, expected = {}, bytearray()
        for name, _, shape in params:
            stored, wide = random_values(rng, dtype, numel(shape))
            tensors[name] = (dtype, shape, stored)
            expected += wide
        buffers = {INV_FREQ.format(layer): ("F32", [4], struct.pack("<4f", 1.0, 0.5, 0.25, 0.125))
                   for layer in layers}
        with open(os.path.join(out, f"expected_{dtype}.f32"), "wb") as f:
            f.write(expected)

        single = os.path.join(out, f"single_{dtype}")
        os.makedirs(single, exist_ok=True)
        write_safetensors(os.path.join(single, "model.safetensors"), {**tensors, **buffers})

        sharded = os.path.join(out, f"sharded_{dtype}")
        os.makedirs(sharded, exist_ok=True)
        names = [f"model-{k + 1:05d}-of-{shards:05d}.safetensors" for k in range(shards)]
        weight_map, total = {}, 0
        for k in range(shards):
            part = {name: tensors[name] for name, shard, _ in params if shard == k}
            if k == 0:
                part.update(buffers)
            write_safetensors(os.path.join(sharded, names[k]), part)
            for name, (_, _, raw) in part.items():
                weight_map[name] = names[k]
                total += len(raw)
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
            f.write("\n")
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 12,
              "num_hidden_layers": len(layers), "torch_dtype": "bfloat16"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    return 0


def read_safetensors(path):
    """{name: (dtype, shape, bytes)} and the metadata of a file, checked."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise Mismatch(f"{path}: shorter than 8 bytes")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise Mismatch(f"{path}: header length {n} beyond the file")
    if (8 + n) % 8:
        raise Mismatch(f"{path}: the data section starts at {8 + n}, not a multiple of 8")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", None)
    tensors, spans = {}, []
    for name, entry in header.items():
        dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in DTYPES or end - begin != numel(shape) * DTYPES[dtype]:
            raise Mismatch(f"{path}: {name}: dtype {dtype}, shape {shape}, {end - begin} bytes")
        tensors[name] = (dtype, shape, data[begin:end])
        spans.append((begin, end))
    at = 0
    for begin, end in sorted(spans):
        if begin != at:
            raise Mismatch(f"{path}: data offsets do not tile the data section at byte {at}")
        at = end
    if at != len(data):
        raise Mismatch(f"{path}: {len(data) - at} bytes after the last tensor")
    return tensors, meta


def read_checkpoint(directory, check_layout):
    """Every tensor of a Hugging Face directory: {name: (dtype, shape, bytes)}."""
    index_path = os.path.join(directory, "model.safetensors.index.json")
    single = os.path.join(directory, "model.safetensors")
    files = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
    if not os.path.exists(index_path):
        if files != ["model.safetensors"]:
            raise Mismatch(f"{directory}: no index, and files {files}")
        tensors, meta = read_safetensors(single)
        if check_layout and meta != {"format": "pt"}:
            raise Mismatch(f"{single}: metadata {meta}, expected exactly {{'format': 'pt'}}")
        return tensors, 1
    with open(index_path, encoding="utf-8") as f:
        index = json.load(f)
    weight_map = index["weight_map"]
    if check_layout:
        pattern = re.compile(r"model-(\d{5})-of-(\d{5})\.safetensors")
        count = len(files)
        for k, name in enumerate(files):
            m = pattern.fullmatch(name)
            if not m or int(m.group(1)) != k + 1 or int(m.group(2)) != count:
                raise Mismatch(f"{directory}: file {name} is not model-{k + 1:05d}-of-"
                               f"{count:05d}.safetensors")
        if os.path.exists(single):
            raise Mismatch(f"{directory}: model.safetensors beside an index")
    tensors = {}
    for name in files:
        part, meta = read_safetensors(os.path.join(directory, name))
        if check_layout and meta != {"format": "pt"}:
            raise Mismatch(f"{name}: metadata {meta}, expected exactly {{'format': 'pt'}}")
        for tensor, value in part.items():
            if weight_map.get(tensor) != name:
                raise Mismatch(f"{name} holds {tensor}, which the index puts in "
                               f"{weight_map.get(tensor)}")
            tensors[tensor] = value
    if set(weight_map) != set(tensors):
        raise Mismatch(f"{index_path}: weight_map lists {sorted(set(weight_map) - set(tensors))} "
                       f"that no file holds")
    total = sum(len(raw) for _, _, raw in tensors.values())
    if check_layout and index.get("metadata", {}).get("total_size") != total:
        raise Mismatch(f"{index_path}: metadata.total_size {index.get('metadata')} is not {total}")
    return tensors, len(files)


def compare_config(original, exported, dtypes):
    """The exported config.json is the original with the exported dtype."""
    if len(dtypes) != 1:
        raise Mismatch(f"the exported tensors have dtypes {sorted(dtypes)}, not one")
    torch_dtype = TORCH_DTYPES[dtypes.pop()]
    with open(original, "rb") as a, open(exported, "rb") as b:
        original_bytes, exported_bytes = a.read(), b.read()
    want = json.loads(original_bytes)
    keys = [k for k in ("torch_dtype", "dtype") if k in want] or ["torch_dtype"]
    said_so = all(want.get(k) == torch_dtype for k in keys)
    for k in keys:
        want[k] = torch_dtype
    got = json.loads(exported_bytes)
    if got != want:
        raise Mismatch(f"{exported} is {got}, expected {want}")
    if said_so and exported_bytes != original_bytes:
        raise Mismatch(f"{exported} was rewritten, though {original} gave the dtype already")


def compare(original, export, want_files, config, tokenizer, ignore):
    want, _ = read_checkpoint(original, False)
    want = {k: v for k, v in want.items() if not (ignore and k.endswith(ignore))}
    got, files = read_checkpoint(export, True)
    if want_files is not None and files != want_files:
        raise Mismatch(f"{export}: {files} safetensors files, expected {want_files}")
    if sorted(got) != sorted(want):
        raise Mismatch(f"tensors {sorted(got)} != {sorted(want)}")
    for name, (dtype, shape, raw) in want.items():
        if got[name][:2] != (dtype, shape):
            raise Mismatch(f"{name}: {got[name][:2]}, expected {(dtype, shape)}")
        if got[name][2] != raw:
            at = next(i for i in range(len(raw)) if got[name][2][i] != raw[i])
            raise Mismatch(f"{name}: bytes differ from byte {at}")
    exported_config = os.path.join(export, "config.json")
    if config is None:
        if os.path.exists(exported_config):
            raise Mismatch(f"{exported_config} exists, though the checkpoint held none")
    else:
        compare_config(config, exported_config, {dtype for dtype, _, _ in got.values()})
    for name in TOKENIZER_FILES:
        source = os.path.join(tokenizer, name) if tokenizer else None
        copied = os.path.join(export, name)
        if source and os.path.exists(source):
            with open(source, "rb") as a, open(copied, "rb") as b:
                if a.read() != b.read():
                    raise Mismatch(f"{copied} differs from {source}")
        elif os.path.exists(copied):
            raise Mismatch(f"{copied} exists without a source")
    print(f"hf_checkpoint: OK: {export}: {len(got)} tensors in {files} file(s)")
    return 0


def main(argv):
    try:
        if len(argv) == 4 and argv[1] == "write":
            return write(argv[2], argv[3])
        if len(argv) >= 4 and argv[1] == "compare":
            options = {"--files": None, "--config": None, "--tokenizer": None, "--ignore": None}
            rest = argv[4:]
            while rest:
                if rest[0] not in options or len(rest) < 2:
                    raise SystemExit(__doc__)
                options[rest[0]] = rest[1]
                rest = rest[2:]
            files = int(options["--files"]) if options["--files"] else None
            return compare(argv[2], argv[3], files, options["--config"], options["--tokenizer"],
                           options["--ignore"])
    except Mismatch as e:
        print(f"hf_checkpoint: FAIL: {e}", file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
