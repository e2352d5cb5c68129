"""The tier without servers (`pytest tests/pure`) starts no server and
reaches no network; this conftest makes that a checked rule instead of a hope.

Every test of that tier (in tests/pure: no `servers`, `containers`, `browser` or `leakcheck` mark) runs under a Python
audit hook. It refuses, and fails the test for, anything that leaves this machine or starts a
server: a connection or datagram to an address outside the loopback range, a name lookup of
another host, starting a program that fetches (npm, apt-get, curl, wget, debootstrap, docker), or
starting a real server binary (postgres, initdb, pg_ctl, pgbouncer, dockerd: an executable file,
not a test's shell-script stand-in) for anything but `--version`. Unix sockets, 127.0.0.0/8 and ::1
stay allowed. A refusal that the code under test catches (a fetch that "failed" quietly) still
fails the test. Tests that need servers or the network live in tests/servers (or tests/containers).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import sys
import threading
from collections.abc import Sequence
from typing import Any

from leakcheck.provision.host.children import SUPERVISOR

FETCHERS = frozenset({"npm", "apt-get", "apt", "curl", "wget", "debootstrap", "docker"})
SERVERS = frozenset({"postgres", "postmaster", "initdb", "pg_ctl", "pgbouncer", "dockerd"})
_EVENTS = frozenset({"socket.connect", "socket.sendto", "socket.getaddrinfo", "subprocess.Popen",
                     "os.exec", "os.posix_spawn"})
#: Arguments that only ask a server program what it is (banners.ask): that starts no server.
_ONLY_ASKING = (["--version"], ["-V"], ["--help"])
_LOCAL_NAMES = frozenset({None, "", "localhost", "localhost.localdomain", "ip6-localhost"})


class OutsideTheTier(PermissionError):
    """What the refused call raises: this tier may not do that."""


class _Watch:
    """What the hook saw while a test of the tier ran (the hook is process-wide and can never be removed)."""

    def __init__(self) -> None:
        self.on = False
        self.seen: list[str] = []
        self.lock = threading.Lock()

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.on or event not in _EVENTS:
            return
        problem = refusal(event, args)
        if problem is not None:
            with self.lock:
                self.seen.append(problem)
            raise OutsideTheTier(f"not in the tier without servers: {problem}")


def refusal(event: str, args: tuple[Any, ...]) -> str | None:
    """Why the tier may not do what this audit event reports (None: it may)."""
    if event == "socket.getaddrinfo":
        host = args[0].decode() if isinstance(args[0], bytes) else args[0]
        return None if host in _LOCAL_NAMES or _loopback(host) else f"looked up the host {host!r}"
    if event in ("socket.connect", "socket.sendto"):
        address = args[1]
        if not isinstance(address, tuple):  # a Unix socket path (or an abstract name)
            return None
        host = address[0]
        return None if host in _LOCAL_NAMES or _loopback(host) else f"{event} to {address!r}"
    return _program_problem(args[0], args[1])  # Popen, os.exec, os.posix_spawn: (program, argv, ...)


def _loopback(host: object) -> bool:
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _program_problem(executable: object, argv: object) -> str | None:
    words = _words(argv)
    if SUPERVISOR in words:  # leakcheck's set-up supervisor: the real program comes after it and our pid
        words = words[words.index(SUPERVISOR) + 2 :]
    program = words[0] if words else _words(executable)[0] if _words(executable) else ""
    name = os.path.basename(program)
    if name in FETCHERS:
        return f"ran {name} ({program}), which reaches the network"
    if name in SERVERS and words[1:] not in _ONLY_ASKING and _is_binary(program):
        return f"started the server program {' '.join(words)}"
    return None


def _words(value: object) -> list[str]:
    if isinstance(value, str | bytes | os.PathLike):
        return [os.fsdecode(value)]
    if isinstance(value, Sequence):
        return [os.fsdecode(v) for v in value if isinstance(v, str | bytes | os.PathLike)]
    return []


def _is_binary(program: str) -> bool:
    path = program if os.sep in program else shutil.which(program)
    try:
        with open(path or program, "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


WATCH = _Watch()
sys.addaudithook(WATCH.audit)
