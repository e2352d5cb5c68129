"""Server processes still running from a folder a killed run left: found in /proc, stopped with SIGKILL.

A process counts only when it is a server we start (its executable, or the program its loader runs,
is `postgres`, `pgbouncer`, `odyssey` or `pgpool`), it runs as the folder's owner, and its working
directory or one of its arguments lies inside the folder. Anything else, whatever its name, is never
signalled. Odyssey and pgpool-II rewrite their argv as a process title (`odyssey 1.5.2 listening
...`, `pgpool: wait for connection request`): the title's first word names the program then.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import time
from pathlib import Path

from leakcheck.provision.host.owner import start_time

SERVER_PROGRAMS = frozenset({"postgres", "pgbouncer", "odyssey", "pgpool"})
GONE_TIMEOUT = 5.0


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + "/")


def _is_server(pid: int, argv: list[str]) -> bool:
    try:
        exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError:
        return False
    if os.path.basename(exe) in SERVER_PROGRAMS:
        return True
    # A pooler unpacked from Debian packages runs under its own ld.so: then the program is an argument.
    loader = os.path.basename(exe).startswith("ld-linux")
    return loader and any(program_in(arg) in SERVER_PROGRAMS for arg in argv[1:])


def program_in(arg: str) -> str:
    """The program an argument names: a path's last part, or a process title's first word."""
    if os.path.basename(arg) in SERVER_PROGRAMS:
        return os.path.basename(arg)
    title = re.match(r"^([a-z]+)[ :]", arg)
    return title.group(1) if title else ""


def _runs_from(pid: int, folders: set[str], uid: int) -> bool:
    proc = Path(f"/proc/{pid}")
    try:
        if proc.stat().st_uid != uid:
            return False
        argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        cwd = os.readlink(proc / "cwd").removesuffix(" (deleted)")
    except OSError:
        return False
    within = any(_inside(path, folder) for path in [cwd, *argv] for folder in folders)
    return within and _is_server(pid, argv)


def servers_in(folder: Path) -> list[int]:
    """The pids of server processes running from `folder` (as its owner)."""
    try:
        uid = folder.stat().st_uid
    except OSError:
        return []
    folders = {str(folder.absolute()), str(folder.resolve())}  # arguments name it as given, cwd resolved
    pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    return [pid for pid in pids if pid != os.getpid() and _runs_from(pid, folders, uid)]


def stop_servers_in(folder: Path) -> list[int]:
    """SIGKILL every server process running from `folder` and wait until they are gone; their pids."""
    pids = servers_in(folder)
    kill_all(pids)
    return pids


def kill_all(pids: list[int]) -> None:
    """SIGKILL `pids` and wait until they are gone (GONE_TIMEOUT seconds at most: the exit takes a moment)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + GONE_TIMEOUT
    while any(start_time(pid) is not None for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


def remove_folder(folder: Path) -> None:
    """Remove a run's folder whole: a server process still in it is stopped first, and a removal that
    raced with a last write is tried again (a leftover would wait for the next run's sweep)."""
    stop_servers_in(folder)
    for _ in range(3):
        shutil.rmtree(folder, ignore_errors=True)
        if not os.path.lexists(folder):
            return
        time.sleep(0.05)
