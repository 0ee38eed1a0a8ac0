"""The few keys zs-run reads from the program's configuration: the global
batch and its per-rank cap (to choose a world size that keeps it), the ZeRO
stage and optimizer offload (to read the memory estimate's line for them),
and checkpoint.dir.

The runtime parses the file with libconfig; this reads only scalar settings
(`name = value;` inside `group: { ... }`, following `@include`), then the
program's `group.key=value` overrides on top, which is enough for those
keys. Anything it cannot read is simply absent: zs-run then says which key
it lacked and what it did without it.
"""
from __future__ import annotations

import os
import re
from typing import Dict, List, Optional, Sequence

_TOKEN = re.compile(r'''
    (?P<ws>\s+) | (?P<comment>\#[^\n]*|//[^\n]*|/\*.*?\*/) |
    (?P<include>@include\s+"(?:[^"\\]|\\.)*") |
    (?P<string>"(?:[^"\\]|\\.)*") |
    (?P<name>[A-Za-z*][-A-Za-z0-9_*]*) |
    (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)L{0,2}) |
    (?P<punct>[=:;,{}()\[\]])
''', re.VERBOSE | re.DOTALL)


def _unquote(text: str) -> str:
    return bytes(text[1:-1], "utf-8").decode("unicode_escape")


def _tokens(path: str, depth: int = 0) -> List[str]:
    if depth > 10:
        return []
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    out: List[str] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            pos += 1  # something this reader does not need (a list's odd literal)
            continue
        pos = m.end()
        kind = m.lastgroup
        if kind in ("ws", "comment"):
            continue
        if kind == "include":
            name = _unquote(m.group(0)[m.group(0).index('"'):])
            inc = name if os.path.isabs(name) else os.path.join(os.path.dirname(path), name)
            try:
                out.extend(_tokens(inc, depth + 1))
            except OSError:
                pass
            continue
        out.append(m.group(0))
    return out


def read_settings(path: Optional[str], overrides: Sequence[str] = ()) -> Dict[str, str]:
    """Flattened scalar settings (`zero.stage` -> "3"; strings unquoted),
    the overrides (`key=value` arguments) applied last."""
    flat: Dict[str, str] = {}
    if path:
        try:
            toks = _tokens(path)
        except OSError:
            toks = []
        stack: List[str] = []
        i = 0
        while i < len(toks):
            t = toks[i]
            nxt = toks[i + 1] if i + 1 < len(toks) else ""
            after = toks[i + 2] if i + 2 < len(toks) else ""
            if t == "}":
                if stack:
                    stack.pop()
                i += 1
            elif re.match(r"[A-Za-z*]", t) and nxt in ("=", ":") and after == "{":
                stack.append(t)
                i += 3
            elif re.match(r"[A-Za-z*]", t) and nxt in ("=", ":") and after not in ("(", "[", ""):
                key = ".".join(stack + [t])
                flat[key] = _unquote(after) if after.startswith('"') else after
                i += 3
            else:
                i += 1
    for o in overrides:
        key, eq, value = o.partition("=")
        if eq and re.match(r"^[A-Za-z][\w.]*$", key.strip()):
            value = value.strip()
            flat[key.strip()] = _unquote(value) if value.startswith('"') and value.endswith('"') \
                and len(value) > 1 else value
    return flat


def as_int(settings: Dict[str, str], key: str, default: int) -> int:
    text = settings.get(key)
    if text is None:
        return default
    try:
        return int(text.rstrip("L"), 0)
    except ValueError:
        return default


def split_program(program: Sequence[str]):
    """(the config file: the first argument ending in .cfg, and the
    group.key=value overrides) of the program's command line."""
    cfg = next((a for a in program[1:] if a.endswith(".cfg")), None)
    overrides = [a for a in program[1:] if "=" in a and not a.startswith("-")
                 and re.match(r"^[A-Za-z]\w*(\.\w+)*=", a)]
    return cfg, overrides
