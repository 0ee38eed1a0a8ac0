"""Hosts with slots and addresses.

A host is told apart by its addresses, not its name: one machine may be
listed under two names, the simulated hosts of scripts/netns-hosts.sh share
one host name, and an exit report names the addresses the rank saw. Two
entries whose addresses meet are the same machine, and the host list is
refused (the launcher would start ranks twice on it).
"""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Callable, Iterable, List, Optional, Sequence, Tuple


class HostError(ValueError):
    """A host list that cannot be used; the message says which entry and why."""


# The most slots one host may have. A slot is one rank (a core, or a GPU);
# the largest machines have a few hundred cores, so a larger count is a
# typo (an extra digit, a memory size), and mpirun would only fail to start
# it, again at every restart.
MAX_SLOTS = 4096


@dataclass(frozen=True)
class Host:
    name: str
    slots: int
    addresses: Tuple[str, ...] = ()

    @property
    def ident(self) -> str:
        """The identity used for failure counts: the addresses, or the name
        when the name did not resolve."""
        return ",".join(self.addresses) if self.addresses else "name:" + self.name

    def to_json(self) -> dict:
        return {"name": self.name, "slots": self.slots, "addresses": list(self.addresses)}

    def with_slots(self, slots: int) -> "Host":
        return Host(self.name, slots, self.addresses)


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def routable(addresses: Iterable[str]) -> Tuple[str, ...]:
    """The addresses that can tell hosts apart: every machine has 127.0.0.1."""
    return tuple(sorted({a for a in addresses if a and not _is_loopback(a)}))


def resolve(name: str) -> Tuple[str, ...]:
    """The addresses of `name` (an address resolves to itself). Loopback
    addresses are dropped unless they are all the name has (localhost)."""
    try:
        ipaddress.ip_address(name)
        return (name,)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return ()
    found = {info[4][0] for info in infos}
    return routable(found) or tuple(sorted(found))


def _name_and_count(item: str) -> Tuple[str, Optional[str]]:
    """`name:N` as (name, "N"); a name without a count, or an IPv6 literal
    (whose colons are its own), as (item, None)."""
    if ":" in item and not _is_ipv6(item):
        name, _, count = item.rpartition(":")
        return name, count
    return item, None


def _check_name(name: str, where: str) -> str:
    if not name:
        raise HostError(f"{where} has no host name")
    if not name.isprintable():
        raise HostError(f"{where}: the host name {name!r} holds control characters")
    return name


def parse_host_list(text: str) -> List[Tuple[str, int]]:
    """`h1:2,h2:2` (Open MPI's -H form; a missing count means 1 slot)."""
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, count = _name_and_count(item)
        _check_name(name, f"--hosts: '{item}'")
        out.append((name, _slots(count or "1", item)))
    if not out:
        raise HostError(f"--hosts '{text}' names no host (write h1:2,h2:2)")
    return out


def _is_ipv6(item: str) -> bool:
    # An IPv6 literal without a count ("fe80::1") has colons of its own.
    try:
        ipaddress.IPv6Address(item)
        return True
    except ValueError:
        return False


def _slots(count: str, where: str) -> int:
    try:
        n = int(count)
    except ValueError:
        raise HostError(f"'{where}': the slot count '{count}' is not an integer") from None
    if n < 1:
        raise HostError(f"'{where}': a host needs at least 1 slot, not {n}")
    if n > MAX_SLOTS:
        raise HostError(f"'{where}': {n} slots on one host is more than {MAX_SLOTS}; a slot is "
                        "one rank (a core or a GPU): give the number of ranks to start there")
    return n


def parse_hostfile(text: str, path: str) -> List[Tuple[str, int]]:
    """Open MPI's hostfile: `name [slots=N] [max_slots=M]` per line, #
    comments; `name:N` (the -H form, which users write in hostfiles too)
    means slots=N."""
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        where = f"{path}:{lineno}"
        name, count = _name_and_count(words[0])
        _check_name(name, where)
        slots = _slots(count, where) if count is not None else 1
        for w in words[1:]:
            key, _, value = w.partition("=")
            if key in ("slots", "count", "cpu"):
                if count is not None:
                    raise HostError(f"{where}: '{words[0]}' and '{w}' both give the slots; "
                                    "write one of them")
                slots = _slots(value, where)
            elif key != "max_slots":
                raise HostError(f"{where}: unknown hostfile field '{w}' (use slots=N)")
        out.append((name, slots))
    if not out:
        raise HostError(f"{path}: the hostfile names no host")
    return out


def read_hostfile(path: str) -> List[Tuple[str, int]]:
    """parse_hostfile of the file at `path`, which must be UTF-8 text: a
    byte that is not names the line and column instead of a traceback."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise HostError(f"--hostfile {path}: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise HostError(f"{path}:{line}: byte 0x{data[e.start]:02x} at column {column} is not "
                        "UTF-8 text; a hostfile holds host names (name slots=N per line)") from None
    return parse_hostfile(text, path)


def make_hosts(entries: Sequence[Tuple[str, int]],
               resolver: Callable[[str], Tuple[str, ...]] = resolve) -> List[Host]:
    """Hosts from (name, slots) entries, resolved; refuses one machine listed twice."""
    hosts: List[Host] = []
    for name, slots in entries:
        h = Host(name, slots, resolver(name))
        for other in hosts:
            same = set(h.addresses) & set(other.addresses)
            if same or h.name == other.name:
                why = f"both resolve to {', '.join(sorted(same))}" if same else "the same name"
                raise HostError(f"hosts '{other.name}' and '{h.name}' are one machine ({why}); "
                                "list it once with the sum of the slots you want on it")
        hosts.append(h)
    return hosts


def rank_hosts(hosts: Sequence[Host]) -> List[int]:
    """For each rank, the index of its host: ranks fill each host's slots in
    order (mpirun's --map-by slot, and srun's block distribution)."""
    out: List[int] = []
    for i, h in enumerate(hosts):
        out.extend([i] * h.slots)
    return out


def find_host(hosts: Sequence[Host], addresses: Iterable[str] = (), name: Optional[str] = None,
              rank: Optional[int] = None) -> Optional[int]:
    """The index of the host that `addresses` (first), `name` or the rank's
    place in the layout (last) points to; None when nothing matches."""
    addrs = set(routable(addresses))
    if addrs:
        for i, h in enumerate(hosts):
            if addrs & set(h.addresses):
                return i
    if name:
        matches = [i for i, h in enumerate(hosts) if h.name == name]
        if len(matches) == 1:
            return matches[0]
    if rank is not None and rank >= 0:
        layout = rank_hosts(hosts)
        if rank < len(layout):
            return layout[rank]
    return None


def host_arg(hosts: Sequence[Host]) -> str:
    """mpirun -H's value: name:slots,..."""
    return ",".join(f"{h.name}:{h.slots}" for h in hosts)


def describe(hosts: Sequence[Host]) -> str:
    return ", ".join(f"{h.name}:{h.slots}" + (f" ({', '.join(h.addresses)})"
                                             if h.addresses and h.addresses != (h.name,) else "")
                     for h in hosts)

