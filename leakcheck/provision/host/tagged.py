"""Programs leakcheck starts that must not outlive their run, found again by a tag in their environment.

A driver agent is a program of its own (a team's: docs/agent-protocol.md) and may start children that
leave its process group (a daemon's `setsid`) or ignore every signal but SIGKILL. Each agent starts with
`LEAKCHECK_AGENT=<pid>.<start>/<n>` in its environment: <pid>.<start> names the leakcheck process (its
start time too, since pids are reused: owner.py), <n> the agent. Its children inherit it, so:

- stopping an agent SIGKILLs every process still carrying its tag (`kill_tagged(run, n)`);
- the end of a run, every process carrying the run's (`kill_tagged(run)`);
- a run killed with SIGKILL cleans nothing up: the next run SIGKILLs every process whose tag names a
  leakcheck process that no longer runs (`sweep_tagged`, from sweep.py), never a live run's.

/proc/PID/environ (the environment a process started with) is readable by its own user and by root,
and leakcheck runs shipped agents as itself and a team's as leakcheck-agent (as root). A descendant
that replaces its whole environment (`env -i`) and leaves the group is beyond this.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from leakcheck.provision.host.owner import start_time
from leakcheck.provision.host.strays import kill_all

VARIABLE = "LEAKCHECK_AGENT"
_PREFIX = VARIABLE.encode() + b"="


def run_tag() -> str:
    """This leakcheck process, as tags name it: `<pid>.<start time>`."""
    pid = os.getpid()
    return f"{pid}.{start_time(pid)}"


def tag(serial: int) -> str:
    """The value of VARIABLE for this process's agent number `serial`."""
    return f"{run_tag()}/{serial}"


def _tagged() -> Iterator[tuple[int, str]]:
    """(pid, tag) of every process that started with VARIABLE in its environment and that we may read."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:  # gone, a kernel thread, or another user's
            continue
        if _PREFIX not in environ:
            continue
        for entry in environ.split(b"\0"):
            if entry.startswith(_PREFIX):
                yield int(name), entry[len(_PREFIX):].decode(errors="replace")


def _kill(pids: list[int]) -> list[int]:
    kill_all(pids)
    return pids


def kill_tagged(run: str, serial: int | None = None) -> list[int]:
    """SIGKILL every process tagged with agent `serial` of `run` (None: with any agent of `run`); their pids."""
    wanted = f"{run}/{serial}"
    return _kill([pid for pid, value in _tagged() if pid != os.getpid()
                  and (value == wanted if serial is not None else value.split("/")[0] == run)])


def sweep_tagged() -> list[int]:
    """SIGKILL every process whose tag names a leakcheck process that no longer runs (a killed run's); their pids."""
    dead = []
    for pid, value in _tagged():
        try:
            owner, started = (int(part) for part in value.split("/")[0].split("."))
        except ValueError:
            continue  # not a tag of ours
        if pid != os.getpid() and start_time(owner) != started:
            dead.append(pid)
    return _kill(dead)
