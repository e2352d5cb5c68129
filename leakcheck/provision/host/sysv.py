"""System V objects (shared memory segments, semaphore sets) a server's processes created: found by their
creator, removed once the server is gone.

PostgreSQL keeps one small segment (its postmaster.pid names it too: sysv_shm.py). pgpool-II's main
process creates a 128 MiB segment and a set of semaphores, its PCP child a 1-byte segment, and only its
own shutdown removes them: its main process killed, or stopped and then killed, or leakcheck killed while
it starts, leaves them behind. /proc/sysvipc/shm names each segment's creator (cpid). A semaphore set
names nobody, but each of its semaphores keeps the pid of the last process that set or changed it
(semctl GETPID): pgpool-II's main sets every one as it creates them (SETVAL) and its children change
some, so a set one of whose semaphores was last touched by the server's processes is theirs. Both tables
give the creating user (cuid) and the time of creation (ctime; for a semaphore set, of its last SETVAL),
which tell an object of ours from one of another user, or of a process that had the same pid before.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

SHM_TABLE = Path("/proc/sysvipc/shm")
SEM_TABLE = Path("/proc/sysvipc/sem")
_IPC_RMID = 0
_GETPID = 11
NAMES = {"shm": "shared memory segment", "sem": "semaphore set"}


@dataclass(frozen=True)
class SysvObject:
    """One object, as its id, key and creating user say (another object may take the id once it is gone)."""

    kind: str  # "shm" or "sem"
    id: int
    key: int
    uid: int

    def __str__(self) -> str:
        return f"{NAMES[self.kind]} {self.id}"


@dataclass(frozen=True)
class Row:
    """A row of /proc/sysvipc/shm or /proc/sysvipc/sem."""

    obj: SysvObject
    ctime: int
    attached: int  # a segment's nattch; 0 for a semaphore set
    creator: int  # a segment's cpid; 0 for a semaphore set (see last_pids)
    size: int  # a segment's bytes, a set's semaphores


def parse_shm(text: str) -> list[Row]:
    """/proc/sysvipc/shm: key shmid perms size cpid lpid nattch uid gid cuid cgid atime dtime ctime ..."""
    rows = []
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) >= 14 and all(x.lstrip("-").isdigit() for x in f[:14]):
            obj = SysvObject("shm", int(f[1]), int(f[0]), int(f[9]))
            rows.append(Row(obj, int(f[13]), int(f[6]), int(f[4]), int(f[3])))
    return rows


def parse_sem(text: str) -> list[Row]:
    """/proc/sysvipc/sem: key semid perms nsems uid gid cuid cgid otime ctime"""
    rows = []
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) >= 10 and all(x.lstrip("-").isdigit() for x in f[:10]):
            rows.append(Row(SysvObject("sem", int(f[1]), int(f[0]), int(f[6])), int(f[9]), 0, 0, int(f[3])))
    return rows


def rows() -> list[Row]:
    """Every segment and semaphore set of this machine's IPC namespace (none where /proc has no tables)."""
    found = []
    for table, parse in ((SHM_TABLE, parse_shm), (SEM_TABLE, parse_sem)):
        with contextlib.suppress(OSError):
            found += parse(table.read_text())
    return found


def _libc() -> ctypes.CDLL | None:
    return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def last_pids(row: Row) -> set[int]:
    """A semaphore set's semaphores' last pids (semctl GETPID; none when it cannot be read)."""
    libc = _libc()
    if libc is None:
        return set()
    pids = {int(libc.semctl(ctypes.c_int(row.obj.id), ctypes.c_int(n), ctypes.c_int(_GETPID))) for n in range(row.size)}
    return {pid for pid in pids if pid > 0}


def created_by(pids: Collection[int], uid: int, since: float) -> list[SysvObject]:
    """The objects of user `uid` that one of `pids` created (a segment) or last set (a semaphore), not before
    `since` (seconds since the epoch; ctime has whole seconds)."""
    if not pids:
        return []
    found = []
    for row in rows():
        if row.obj.uid != uid or row.ctime < int(since):
            continue
        if (row.creator in pids) if row.obj.kind == "shm" else bool(last_pids(row) & set(pids)):
            found.append(row.obj)
    return found


def remove(objects: Iterable[SysvObject], timeout: float = 5.0) -> list[SysvObject]:
    """Remove those of `objects` that still exist (same id, key and user); a segment once nothing is attached
    (processes that are exiting detach in a moment), waiting `timeout` seconds at most. The ones removed."""
    wanted = set(objects)
    libc = _libc()
    if not wanted or libc is None:
        return []
    removed: list[SysvObject] = []
    deadline = time.monotonic() + timeout
    while True:
        present = {row.obj: row for row in rows() if row.obj in wanted}
        for obj, row in present.items():
            if obj.kind == "sem":
                done = libc.semctl(ctypes.c_int(obj.id), ctypes.c_int(0), ctypes.c_int(_IPC_RMID))
            elif row.attached == 0:
                done = libc.shmctl(ctypes.c_int(obj.id), ctypes.c_int(_IPC_RMID), None)
            else:
                continue
            wanted.discard(obj)
            if int(done) == 0:
                removed.append(obj)
        wanted &= set(present)  # gone by themselves meanwhile
        if not wanted or time.monotonic() > deadline:
            return removed
        time.sleep(0.02)
