"""Which processes a process forked, their process titles, which TCP peers a process is connected
to, and what a process tree listens on (Linux /proc).

For pgpool-II: its reset ends the idle connection children (their title says so); the tests check
that no child holds a connection to our PostgreSQL afterwards. For every pooler leakcheck starts:
what its processes listen on, checked after each start (host/pooler_process.py). Parsing is pure
(unit-tested); reading /proc tolerates processes that end meanwhile.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
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
    return {inode: (far, far_port) for inode, (_, _, far, far_port) in parse_tcp_ends(text, inodes).items()}


#: A TCP connection's two ends: its own address and port, then its peer's.
Ends = tuple[str, int, str, int]


def parse_tcp_ends(text: str, inodes: set[int] | None = None) -> dict[int, Ends]:
    """/proc/net/tcp or tcp6 as {socket inode: its Ends}; only `inodes` when given (see parse_tcp_table)."""
    if inodes is None:
        lines = text.splitlines()[1:]
    else:
        lines = [_line_at(text, at) for inode in inodes for at in _all(text, f" {inode} ")]
    ends: dict[int, Ends] = {}
    for line in lines:
        fields = line.split()
        if len(fields) < 10 or not fields[9].isdigit() or (inodes is not None and int(fields[9]) not in inodes):
            continue
        (near, _, near_port), (far, _, far_port) = fields[1].partition(":"), fields[2].partition(":")
        ends[int(fields[9])] = (_address(near), int(near_port, 16), _address(far), int(far_port, 16))
    return ends


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


def tcp_connections(pid: int) -> set[Ends]:
    """The TCP connections `pid` and every process it forked hold now, each as its Ends (empty when it ended)."""
    inodes = set().union(*(socket_inodes(each) for each in process_tree(pid)))
    found: set[Ends] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            found.update(parse_tcp_ends(Path(table).read_text(), inodes).values())
    return found


def connected_to(pids: list[int], address: str, port: int) -> list[int]:
    """Those of `pids` that hold a TCP connection to address:port."""
    held = {pid: socket_inodes(pid) for pid in pids}
    peers = tcp_peers(set().union(*held.values()))
    return [pid for pid, inodes in held.items() if any(peers.get(inode) == (address, port) for inode in inodes)]


def process_tree(pid: int) -> list[int]:
    """`pid` and every process it forked, and they forked, right now (one pass over /proc)."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                parents.setdefault(parent_of(Path(f"/proc/{name}/stat").read_text()), []).append(int(name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += parents.get(current, [])
    return found


@dataclass(frozen=True)
class Listening:
    """A socket that accepts connections or datagrams from others: a listening TCP or Unix stream
    socket, or a bound unconnected UDP or Unix datagram socket."""

    proto: str  #: tcp, udp or unix
    host: str  #: the address (IPv4-mapped IPv6 as IPv4), or the Unix socket's path ('@name': abstract)
    port: int = 0

    def __str__(self) -> str:
        if self.proto == "unix":
            return f"unix:{self.host}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.proto}:{host}:{self.port}"


#: /proc/net/tcp's state of a listening socket; /proc/net/udp's of an unconnected one (TCP_CLOSE).
_TCP_LISTEN, _UDP_UNCONNECTED = "0A", "07"
_UNIX_ACCEPTING = 0x10000  #: __SO_ACCEPTCON in /proc/net/unix's Flags
_UNIX_DGRAM, _UNIX_UNCONNECTED = "0002", "01"


def parse_inet_listening(text: str, proto: str, inodes: set[int]) -> list[Listening]:
    """/proc/net/{tcp,tcp6,udp,udp6}'s sockets among `inodes` that others can reach (see Listening)."""
    wanted = _TCP_LISTEN if proto == "tcp" else _UDP_UNCONNECTED
    found = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or not fields[9].isdigit() or int(fields[9]) not in inodes or fields[3] != wanted:
            continue
        address, _, port = fields[1].partition(":")
        if int(port, 16):  # (UDP) bound to no port: receives nothing
            found.append(Listening(proto, _address(address), int(port, 16)))
    return found


def parse_unix_listening(text: str, inodes: set[int]) -> list[Listening]:
    """/proc/net/unix's sockets among `inodes` that others can reach: accepting, or bound and unconnected
    datagram ones (their path, '@...' when abstract)."""
    found = []
    for line in text.splitlines()[1:]:
        fields = line.split(maxsplit=7)
        if len(fields) < 7 or not fields[6].isdigit() or int(fields[6]) not in inodes:
            continue
        path = fields[7].rstrip("\n") if len(fields) > 7 else ""
        accepting = int(fields[3], 16) & _UNIX_ACCEPTING
        receiving = fields[4] == _UNIX_DGRAM and fields[5] == _UNIX_UNCONNECTED and path
        if accepting or receiving:
            found.append(Listening("unix", path or "(unnamed)"))
    return found


#: sock_diag (linux/inet_diag.h): a dump of TCP sockets in LISTEN only. The kernel then walks its
#: listening hash alone; reading /proc/net/tcp walks every connection's (1-5 ms on this machine).
_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _NLM_F_DUMP_REQUEST, _NLMSG_ERROR, _NLMSG_DONE = 4, 20, 0x301, 2, 3
_TCPF_LISTEN = 1 << 10


def parse_diag(data: bytes) -> tuple[list[tuple[str, int, int]], bool]:
    """sock_diag's answer (netlink messages of inet_diag_msg) as (address, port, inode) each, and whether
    it ended (NLMSG_DONE). An NLMSG_ERROR is an OSError."""
    found: list[tuple[str, int, int]] = []
    at = 0
    while at + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, at)
        if kind == _NLMSG_DONE:
            return found, True
        if kind == _NLMSG_ERROR:
            raise OSError(-struct.unpack_from("=i", data, at + 16)[0], "sock_diag refused the dump")
        family, port = data[at + 16], struct.unpack_from("!H", data, at + 20)[0]
        raw = data[at + 24 : at + (28 if family == socket.AF_INET else 40)]
        address = ipaddress.ip_address(raw)
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        found.append((str(address), port, struct.unpack_from("=I", data, at + 84)[0]))
        at += (length + 3) & ~3
    return found, False


def tcp_listeners() -> list[tuple[str, int, int]]:
    """Every TCP socket in LISTEN in this network namespace, as (address, port, inode), by sock_diag."""
    found: list[tuple[str, int, int]] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as diag:
        diag.settimeout(2.0)
        for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), start=1):
            request = struct.pack("=BBBBI48x", family, socket.IPPROTO_TCP, 0, 0, _TCPF_LISTEN)
            diag.send(struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_DUMP_REQUEST, seq, 0)
                      + request)
            done = False
            while not done:
                part, done = parse_diag(diag.recv(65536))
                found += part
    return found


def _same_network(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
    except OSError:
        return False


def _fd_targets(pid: int) -> list[str] | None:
    """What `pid`'s open files are (`socket:[N]`, paths...), [] when it ended, None when we may not read
    them (root without CAP_SYS_PTRACE, as in a container by default, may not read another user's)."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except PermissionError:
        return None
    except OSError:
        return []
    targets = []
    for name in names:
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{name}"))
        except PermissionError:
            return None
        except OSError:
            continue  # closed meanwhile
    return targets


def listening(pid: int, tree: bool = True,
              read_as_owner: Callable[[list[int]], list[str]] | None = None) -> list[Listening]:
    """What `pid` and (`tree`) every process it forked listen on, in its own network namespace: its
    Unix and UDP sockets from /proc/<pid>/net, its TCP listeners from sock_diag (from /proc/<pid>/net
    too when that cannot answer, or for another namespace). Open files we may not read are read by
    `read_as_owner` (their owner's own reading), else a PermissionError."""
    targets: list[str] = []
    denied = []
    for each in process_tree(pid) if tree else [pid]:
        found_here = _fd_targets(each)
        if found_here is None:
            denied.append(each)
        else:
            targets += found_here
    if denied:
        if read_as_owner is None:
            raise PermissionError(f"cannot read the open files of process {denied[0]} (/proc/{denied[0]}/fd)")
        targets += read_as_owner(denied)
    inodes = {int(t[8:-1]) for t in targets if t.startswith("socket:[") and t[8:-1].isdigit()}
    if not inodes:
        return []
    tables = [("unix", "unix"), ("udp", "udp"), ("udp6", "udp")]
    found: list[Listening] = []
    try:
        if not _same_network(pid):
            raise OSError("another network namespace")
        found += [Listening("tcp", host, port) for host, port, inode in tcp_listeners() if inode in inodes]
    except OSError:
        tables += [("tcp", "tcp"), ("tcp6", "tcp")]
    for table, proto in tables:
        with contextlib.suppress(OSError):
            text = Path(f"/proc/{pid}/net/{table}").read_text()
            found += (parse_unix_listening(text, inodes) if proto == "unix" else
                      parse_inet_listening(text, proto, inodes))
    return list(dict.fromkeys(found))


#: The one address a pooler leakcheck starts may listen on (besides Unix sockets in its own folder).
LOOPBACK = "127.0.0.1"


def beyond(found: list[Listening], folders: list[str]) -> list[Listening]:
    """Those of `found` that others could reach beyond 127.0.0.1 and Unix sockets inside `folders`."""
    inside = [os.path.join(os.path.abspath(f), "") for f in folders]
    return [s for s in found if (s.host != LOOPBACK if s.proto != "unix" else
                                 not any(os.path.normpath(s.host).startswith(f) for f in inside))]
