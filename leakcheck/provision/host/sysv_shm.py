"""The System V shared memory segment a postmaster keeps (line 7 of postmaster.pid), removed once unused.

PostgreSQL removes it on a clean shutdown. A postmaster killed with SIGKILL (PDEATHSIG, when
leakcheck itself was killed, or killed during a run) leaves it behind with no process attached.
"""

from __future__ import annotations

import ctypes
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_IPC_RMID = 0
_TABLE = Path("/proc/sysvipc/shm")


@dataclass(frozen=True)
class Segment:
    key: int
    shmid: int


def recorded_segment(pidfile: Path) -> Segment | None:
    """The segment a postmaster.pid records ("  <key> <shmid>" on line 7), if any."""
    try:
        lines = pidfile.read_text().splitlines()
        key, shmid = lines[6].split()
        return Segment(int(key), int(shmid))
    except (OSError, IndexError, ValueError):
        return None


def attached(segment: Segment) -> int | None:
    """How many processes have `segment` attached; None when it no longer exists (or is another key's now)."""
    try:
        rows = _TABLE.read_text().splitlines()[1:]
    except OSError:
        return None
    for row in rows:
        fields = row.split()
        if len(fields) > 6 and int(fields[1]) == segment.shmid:
            return int(fields[6]) if int(fields[0]) == segment.key else None
    return None


def remove_if_unused(segment: Segment) -> bool:
    """Remove `segment` when it still exists with its key and nothing is attached; whether it was removed."""
    if attached(segment) != 0 or not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.shmctl(ctypes.c_int(segment.shmid), ctypes.c_int(_IPC_RMID), None)) == 0


def remove_when_unused(segment: Segment, timeout: float = 5.0) -> bool:
    """Remove `segment` once nothing is attached (processes that are exiting detach in a moment), waiting
    at most `timeout` seconds; whether it was removed (False also when it was already gone)."""
    deadline = time.monotonic() + timeout
    while (count := attached(segment)) is not None and count > 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    return remove_if_unused(segment)
