"""Which processes a process forked, their process titles, and which TCP peers a process is connected
to (Linux /proc).

For pgpool-II: its reset ends the idle connection children (their title says so); the tests check
that no child holds a connection to our PostgreSQL afterwards. Parsing is pure (unit-tested);
reading /proc tolerates processes that end meanwhile.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from pathlib import Path


def parent_of(stat: str) -> int:
    """The ppid in a /proc/<pid>/stat line ("pid (comm) state ppid ...", comm may hold ') ')."""
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def children_of(pid: int) -> list[int]:
    """The pids whose parent is `pid` right now (zombies included: they end when it reaps them)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                if parent_of(Path(f"/proc/{name}/stat").read_text()) == pid:
                    found.append(int(name))
    return sorted(found)


#: pgpool-II's process title for a connection child waiting for its next client (4.3.5, 4.6.1, 4.7.3).
PGPOOL_IDLE = "pgpool: wait for connection request"


def title_of(cmdline: bytes) -> str:
    """A process title written over argv (`pgpool: ...`), or "" when the command line holds none."""
    parts = [part.decode(errors="replace").strip() for part in cmdline.split(b"\0")]
    return next((part for part in parts if part.startswith("pgpool: ")), "")


def idle_children(pid: int) -> list[int]:
    """pgpool-II's connection children (of main process `pid`) that wait for a client right now."""
    idle = []
    for child in children_of(pid):
        with contextlib.suppress(OSError):
            if title_of(Path(f"/proc/{child}/cmdline").read_bytes()) == PGPOOL_IDLE:
                idle.append(child)
    return idle


def parse_tcp_table(text: str, inodes: set[int] | None = None) -> dict[int, tuple[str, int]]:
    """/proc/net/tcp or tcp6 as {socket inode: (remote address, remote port)}; only `inodes` when given
    (found by text search first: a busy machine lists thousands of sockets, most in TIME_WAIT)."""
    if inodes is None:
        lines = text.splitlines()[1:]
    else:
        lines = [_line_at(text, at) for inode in inodes for at in _all(text, f" {inode} ")]
    peers: dict[int, tuple[str, int]] = {}
    for line in lines:
        fields = line.split()
        if len(fields) < 10 or not fields[9].isdigit() or (inodes is not None and int(fields[9]) not in inodes):
            continue
        address, _, port = fields[2].partition(":")
        peers[int(fields[9])] = (_address(address), int(port, 16))
    return peers


def _line_at(text: str, at: int) -> str:
    end = text.find("\n", at)
    return text[text.rfind("\n", 0, at) + 1 : end if end != -1 else len(text)]


def _all(text: str, needle: str) -> list[int]:
    found, at = [], text.find(needle)
    while at != -1:
        found.append(at)
        at = text.find(needle, at + 1)
    return found


def _address(hex_text: str) -> str:
    """The kernel's hex address (32-bit words in host order, little-endian here) as text."""
    raw = bytes.fromhex(hex_text)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(words)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets `pid` holds open (empty when it ended or cannot be read)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    return inodes


def tcp_peers(inodes: set[int]) -> dict[int, tuple[str, int]]:
    """The remote ends of those of `inodes` that are TCP sockets: {inode: (remote address, remote port)}."""
    peers: dict[int, tuple[str, int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            peers.update(parse_tcp_table(Path(table).read_text(), inodes))
    return peers


def connected_to(pids: list[int], address: str, port: int) -> list[int]:
    """Those of `pids` that hold a TCP connection to address:port."""
    held = {pid: socket_inodes(pid) for pid in pids}
    peers = tcp_peers(set().union(*held.values()))
    return [pid for pid, inodes in held.items() if any(peers.get(inode) == (address, port) for inode in inodes)]
