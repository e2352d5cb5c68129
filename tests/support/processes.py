"""The servers a test's own leakcheck started, found among its child processes (to kill or stop them)."""

from __future__ import annotations

import os
from pathlib import Path

from leakcheck.provision.host.proc_sockets import children_of


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def server_on(port: int, parent: int | None = None) -> int:
    """The pid of the PostgreSQL or PgBouncer child of `parent` (default: this process) serving `port`."""
    for pid in children_of(parent or os.getpid()):
        argv = cmdline(pid)
        if str(port) in argv:  # postgres -p PORT
            return pid
        ini = next((Path(a) for a in argv if a.endswith("pgbouncer.ini")), None)
        if ini is not None and f"listen_port = {port}\n" in ini.read_text():
            return pid
    raise AssertionError(f"no server of ours on port {port}")

