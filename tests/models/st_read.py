"""A safetensors file read with the standard library, for the model tests'
shell scripts (no numpy, no safetensors package on CI machines):
tensors(path) -> ({name: Tensor}, metadata), a Tensor holding the shape,
the dtype string, the raw bytes and, for F32, the values."""
import json
import struct
from collections import namedtuple

Tensor = namedtuple("Tensor", "shape dtype raw")


def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    meta = head.pop("__metadata__", {})
    body = data[8 + n:]
    return {k: Tensor(v["shape"], v["dtype"], body[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in head.items()}, meta


def floats(t):
    """An F32 tensor's values."""
    assert t.dtype == "F32", t.dtype
    return list(struct.unpack(f"<{len(t.raw) // 4}f", t.raw))
