"""Which leakcheck process a temp dir belongs to: a marker file, and whether that process still runs.

A pid alone proves nothing once the process is gone (pids are reused), so the marker also holds the
process's start time (field 22 of /proc/<pid>/stat, in clock ticks since boot) and the hostname
(a /tmp shared between machines or containers holds dirs whose processes we cannot see).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path

MARKER = "leakcheck-owner.json"


@dataclass(frozen=True)
class Owner:
    pid: int
    start: int
    host: str

    @classmethod
    def me(cls) -> Owner:
        pid = os.getpid()
        start = start_time(pid)
        assert start is not None  # we are running
        return cls(pid, start, socket.gethostname())

    def is_here(self) -> bool:
        """Whether this is a process of this machine, so `is_running` can tell."""
        return self.host == socket.gethostname()

    def is_running(self) -> bool:
        """Whether the very process that wrote the marker still runs (a reused pid has another start)."""
        return start_time(self.pid) == self.start


def start_time(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot), or None when no such process runs (zombies count as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ..." where comm may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    state, start = fields[0], fields[19]
    return None if state in ("Z", "X") else int(start)


def started_at(start: int) -> float:
    """A start time in clock ticks since boot (start_time) as seconds since the epoch."""
    lines = Path("/proc/stat").read_text().splitlines()
    boot = next(int(line.split()[1]) for line in lines if line.startswith("btime "))
    return boot + start / os.sysconf("SC_CLK_TCK")


def mark(directory: Path) -> None:
    """Record this process as the owner of `directory` (written whole: a marker is complete or absent)."""
    me = Owner.me()
    text = json.dumps({"pid": me.pid, "start": me.start, "host": me.host})
    partial = directory / f".{MARKER}.tmp"
    partial.write_text(text)
    partial.chmod(0o644)
    os.replace(partial, directory / MARKER)


def owner_of(directory: Path) -> Owner | None:
    """The owner recorded in `directory`, or None (no marker, or one we cannot read)."""
    try:
        data = json.loads((directory / MARKER).read_text())
        return Owner(int(data["pid"]), int(data["start"]), str(data["host"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def fresh_name(prefix: str) -> Path:
    """A new temp dir's path, not created yet. Hold it first, then `create` it: a signal between the
    two can then never leave a folder its owner does not know of (mkdtemp returns only after)."""
    return Path(tempfile.gettempdir()) / f"{prefix}{secrets.token_hex(6)}"


def create(directory: Path) -> None:
    """Make `directory` (private to us) and mark it as ours."""
    directory.mkdir(mode=0o700)
    mark(directory)
