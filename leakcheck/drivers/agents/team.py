"""A team's own agent (`--drivers=cmd:PATH`, `discover --driver=cmd:PATH`): a program the team wrote
against the agent protocol (docs/agent-protocol.md) around their ORM, pool or framework.

PATH is one executable, started with no arguments and no shell (an interpreted agent starts with a
`#!` line), in its own folder. It is checked before any server starts: it exists, is an executable
file (not a folder, not a symlink loop), its `#!` interpreter exists, and it answers `hello` with
protocol 1 and a driver name within HELLO_TIMEOUT; otherwise one line says which. Its id in cells
is `cmd-` and the name its hello gives, so it never collides with a shipped id (`cmd-myorm`, shown
with its release as `cmd-myorm1.2.0`).

It is data, not authority: an agent is a client application and needs no privilege, so the team's
program runs as an unprivileged user of its own (provision/host/system.py `agent_user`:
leakcheck-agent, made by leakcheck as root), never as root and never as the user that runs the
servers, who enters their sockets and data folders and logs in on a socket as their superuser: the
agent reaches the pooler and PostgreSQL over TCP with a role's password, like any client. Only root
can run a program as another user, so without root a team's agent is refused in one line. That user
must be able to read and run PATH, and it gets a small environment (process.py `environment`: PATH,
locale, TZ, TMPDIR and its own HOME), not root's.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from leakcheck.drivers.agents.catalogue import Shipped
from leakcheck.drivers.agents.process import HELLO_TIMEOUT, AgentFault, AgentProcess, environment
from leakcheck.drivers.agents.spec import AgentSpec
from leakcheck.model.errors import UsageError, one_line
from leakcheck.model.target import Driver
from leakcheck.model.versions import Version, version_in_output
from leakcheck.provision.host.system import ServerUser, agent_user, unreadable_by

#: How --drivers names a team's agent, and the prefix of its id in cells.
SCHEME, PREFIX = "cmd:", "cmd-"
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,39}")
_SETTING = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,62}")
#: Without a `statement_names` LIKE pattern in its hello: every named statement but PgBouncer's.
ANY_NAME = "name NOT LIKE 'PGBOUNCER\\_%'"


@dataclass(frozen=True)
class TeamAgent:
    """A checked team agent: where it is, who runs it, what its hello said."""

    driver: Driver  # cmd-<name>
    path: Path
    user: ServerUser
    release: Version | None
    statement_names: str  # a SQL condition on pg_prepared_statements.name
    #: the driver settings its hello lists (name, default as text): what --driver-set may give it
    settings: tuple[tuple[str, str], ...] = ()

    def shipped(self) -> Shipped:
        """Its catalogue-style entry: its id, statement names and settings; no build (it is the team's
        program), no startup setting and no known refusals."""
        return Shipped(AgentSpec(self.driver.value, "team", (), settings=self.settings), self.statement_names)

    def start(self, hello_timeout: float = HELLO_TIMEOUT) -> AgentProcess:
        return AgentProcess(self.driver.value.removeprefix(PREFIX), [str(self.path)], self.path.parent,
                            user=self.user, hello_timeout=hello_timeout,
                            about=f"the {self.driver.value} agent ({self.path})")


_lock = threading.Lock()
_checked: dict[Path, TeamAgent] = {}  # by path: checked once per process


def is_team(text: str) -> bool:
    return text.startswith(SCHEME)


def registered(driver_id: str) -> TeamAgent | None:
    """The team agent this process checked under that id, or None."""
    with _lock:
        return next((a for a in _checked.values() if a.driver.value == driver_id), None)


def spelled(driver: Driver) -> str:
    """How --drivers names `driver`: a team agent's `cmd:PATH`, any other its id."""
    team = registered(driver.value)
    return f"{SCHEME}{team.path}" if team is not None else driver.value


def team_driver(text: str, option: str = "--drivers", timeout: float = HELLO_TIMEOUT) -> Driver:
    """`cmd:PATH` checked (see the module's docstring) and registered; its driver id."""
    raw = text.removeprefix(SCHEME).strip()
    if not raw:
        raise UsageError.bad_value(option, text, "cmd:PATH, the path of an agent program")
    path = Path(raw).expanduser().absolute()
    with _lock:
        if path in _checked:
            return _checked[path].driver
    user = agent_user()  # its own unprivileged user, not the servers' (a UsageError without root)
    problem = _not_a_program(path, user)
    if problem is not None:
        raise UsageError(f"{option}: {text}: {problem}")
    if unreadable_by(user, [str(path.parent), str(path)]):
        raise UsageError(f"{option}: {text}: the user {user.name}, who runs team agents, cannot read and run it")
    try:
        agent = AgentProcess(path.name, [str(path)], path.parent, user=user, hello_timeout=timeout, named=False,
                             about="the agent")
    except AgentFault as exc:
        raise UsageError(f"{option}: {text}: no protocol 1 hello: {one_line(exc)}") from None
    hello = agent.hello
    agent.stop()
    name = str(hello.get("driver", ""))
    if not _NAME.fullmatch(name):
        raise UsageError(f"{option}: {text}: its hello names the driver {name!r}; a name is lower-case letters, "
                         "digits, '.', '_' or '-' (at most 40)")
    pattern = hello.get("statement_names")
    names = ANY_NAME if not isinstance(pattern, str) or not pattern else "name LIKE " + _literal(pattern)
    found = TeamAgent(Driver(PREFIX + name), path, user, version_in_output(str(hello.get("release", ""))), names,
                      _settings(hello.get("settings"), f"{option}: {text}"))
    with _lock:
        other = next((a for a in _checked.values() if a.driver == found.driver), None)
        if other is not None:
            raise UsageError(f"{option}: {text} and cmd:{other.path} both call themselves {name!r} in their hello")
        _checked[path] = found
    return found.driver


def _not_a_program(path: Path, user: ServerUser) -> str | None:
    """Why PATH cannot be started as an agent program (None: it can), in words that say what to fix."""
    try:
        found = path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop (a link that leads back to itself): give the agent program's own path"
        if path.is_symlink():
            return f"a symlink to {os.readlink(path)}, which does not exist (the agent program to run)"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return "no such file (the agent program to run)"
        return f"cannot be looked at ({exc.strerror or exc})"
    if stat.S_ISDIR(found.st_mode):
        return "a folder, not a program: give the agent's executable file (cmd:FOLDER/agent)"
    if not stat.S_ISREG(found.st_mode):
        return "not a regular file: give the agent's executable file"
    if not os.access(path, os.X_OK):
        return "not executable (chmod +x it, with a #! line for a script)"
    return _interpreter_problem(path, user)


def _interpreter_problem(path: Path, user: ServerUser) -> str | None:
    """A script's `#!` interpreter that does not exist, or `#!/usr/bin/env NAME` with no NAME on the PATH
    the agent gets (the kernel's error would name the script itself)."""
    try:
        with path.open("rb") as program:
            first = program.read(256).split(b"\n", 1)[0]
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    if not words:
        return "its #! line names no interpreter"
    interpreter = Path(words[0])
    if not interpreter.is_file() or not os.access(interpreter, os.X_OK):
        return f"its #! interpreter {interpreter} does not exist" + (
            "" if not interpreter.exists() else " as an executable file")
    if interpreter.name == "env" and len(words) > 1 and not words[1].startswith("-"):
        search = environment(user, "")["PATH"]
        if shutil.which(words[1], path=search) is None:
            return f"its #! line runs env {words[1]}, and no {words[1]} is on the PATH it gets ({search})"
    return None


def _settings(given: object, where: str) -> tuple[tuple[str, str], ...]:
    """The hello's `settings`, `{"NAME": "DEFAULT", ...}` (texts; none: the agent takes no setting)."""
    if given is None:
        return ()
    if not isinstance(given, dict) or not all(isinstance(k, str) and _SETTING.fullmatch(k) and isinstance(v, str)
                                              for k, v in given.items()):
        raise UsageError(f"{where}: its hello's settings must be an object of setting names (letters, digits, "
                         f"'_' and '.') to their defaults as text, e.g. {{\"prepare\": \"true\"}}: {given!r:.120}")
    return tuple(given.items())


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
