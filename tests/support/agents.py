"""Team agents for tests: small Python programs (real processes speaking the agent protocol) in a folder
their user (leakcheck-agent as root) can read and write, and which of the processes they recorded still run."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from leakcheck.provision.host.owner import start_time

#: The interpreter the agents' #! names: the real one, not the venv's link, which may sit in a folder
#: the servers' user cannot enter (a clone in a 0700 temp folder, as CI's may be).
PYTHON = os.path.realpath(sys.executable)
HELLO = '{"id": 1, "ok": true, "protocol": %s, "driver": "%s", "release": "1.2.0", "runtime": "python"}'
#: Lines an agent body may use: `record(pid)` appends a pid to <its file name>.pids beside it.
PRELUDE = ("import sys, os, json, time, signal, subprocess\n"
           "HERE = os.path.dirname(os.path.abspath(__file__))\n"
           "def record(pid, what='pids'):\n"
           "    with open(os.path.join(HERE, os.path.basename(__file__) + '.' + what), 'a') as f:\n"
           "        f.write(f'{pid}\\n')\n")


def agent_folder() -> Iterator[Path]:
    """A fixture's body: a fresh folder anyone may write (as root a team's agent runs as leakcheck-agent)."""
    made = Path(tempfile.mkdtemp(prefix="leakcheck-team-agent-"))
    made.chmod(0o1777)
    yield made
    shutil.rmtree(made, ignore_errors=True)


def write_agent(folder: Path, body: str, name: str = "agent", mode: int = 0o755) -> Path:
    path = folder / name
    path.write_text(f"#!{PYTHON}\n{PRELUDE}{body}\n")
    path.chmod(mode)
    return path


def hello(protocol: str = "1", driver: str = "myorm", then: str = "") -> str:
    """A body that answers the first line with a hello, runs `then`, and reads its input to its end."""
    return f"line = sys.stdin.readline()\nprint({HELLO % (protocol, driver)!r}, flush=True)\n{then}\nsys.stdin.read()"


def recorded(path: Path, what: str = "pids", at_least: int = 1, within: float = 10.0) -> list[int]:
    """The pids the agent at `path` recorded (waiting, bounded, for `at_least` of them)."""
    until = time.monotonic() + within
    while True:
        try:
            found = [int(line) for line in (path.parent / f"{path.name}.{what}").read_text().split()]
        except FileNotFoundError:
            found = []
        if len(found) >= at_least or time.monotonic() > until:
            return found
        time.sleep(0.05)


def running(pids: list[int]) -> list[int]:
    """Those of `pids` that still run (zombies have ended)."""
    return [pid for pid in pids if start_time(pid) is not None]
