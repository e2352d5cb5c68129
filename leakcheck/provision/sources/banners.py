"""Is this program really the server it claims to be? Its own `--version` banner says so, or it is not.

Seen on the real binaries: `pgbouncer --version` prints `PgBouncer 1.18.0` (also 1.24.1 and
1.26.1) as its first line, then lines for libevent, c-ares and TLS; `postgres --version` prints
`postgres (PostgreSQL) 16.14` (Debian's adds ` (Debian 15.18-0+deb12u1)`); Debian sid's
`odyssey --version` prints `odyssey 1.5.2 release +pam -ldap +systemd -prom`, then the compiler;
`pgpool --version` prints `pgpool-II version 4.3.5 (tamahomeboshi)` (4.6.1 `(chirikoboshi)`, 4.7.3
`(tasukiboshi)`), on stderr, which counts when stdout is empty. Any other first line
(`true (GNU coreutils) 9.1`, `GNU bash, version 5.2.15...`) is another program, whatever version
numbers it prints. Each program is asked once per run (again if its file changes).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from leakcheck.model.versions import Version
from leakcheck.provision.host import children

#: First line of `pgbouncer --version`.
PGBOUNCER = re.compile(r"^PgBouncer (\d+\.\d+(?:\.\d+)?)(?:\s|$)")
#: First line of `odyssey --version`.
ODYSSEY = re.compile(r"^odyssey (\d+\.\d+(?:\.\d+)?)(?:\s|$)")
#: First line of `pgpool --version`.
PGPOOL = re.compile(r"^pgpool-II version (\d+\.\d+(?:\.\d+)?)(?:\s|$)")
#: First line of `postgres --version` / `initdb --version`.
POSTGRES = re.compile(r"^(?:postgres|initdb|pg_ctl) \(PostgreSQL\) (\d+\.\d+(?:\.\d+)?)(?:\s|$)")
TIMEOUT = 20.0

_asked: dict[tuple[tuple[str, ...], tuple[int, ...]], Reply] = {}


@dataclass(frozen=True)
class Reply:
    """What `argv --version` did: the version in its banner, or why there is none."""

    command: str  # e.g. "/bin/true --version", for messages
    version: Version | None
    problem: str = ""  # e.g. "printed 'true (GNU coreutils) 9.1'", "exited with code 127: ..."

    def __str__(self) -> str:
        return f"`{self.command}` {self.problem}" if self.version is None else f"{self.version}"


def banner_version(first_line: str, banner: re.Pattern[str]) -> Version | None:
    """The version in a banner line that `banner` matches, else None."""
    found = banner.match(first_line.strip())
    return Version.parse(found.group(1)) if found else None


def shorten(text: str, limit: int = 80) -> str:
    """The first non-empty line of `text`, cut to `limit` characters, quoted; '(nothing)' if empty."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "nothing"
    line = lines[0] if len(lines[0]) <= limit else lines[0][: limit - 3] + "..."
    return repr(line) + (" ..." if len(lines) > 1 else "")


def ask(argv: Sequence[str], banner: re.Pattern[str], timeout: float = TIMEOUT) -> Reply:
    """Run `argv --version` (no stdin, a timeout, dies with us) and read its banner; cached per file state."""
    key = (tuple(argv), _file_state(argv))
    if key not in _asked:
        _asked[key] = _ask(argv, banner, timeout)
    return _asked[key]


def _file_state(argv: Sequence[str]) -> tuple[int, ...]:
    """Identity and contents stamp of the program files: a file changed since is asked again."""
    state: list[int] = []
    for part in argv:
        if part.startswith("/"):
            try:
                info = os.stat(part)
            except OSError:
                state.append(-1)
                continue
            state += [info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]
    return tuple(state)


def elf_problem(path: str) -> str:
    """Why an ELF file is incomplete (its section headers end past its end), else "" (also for non-ELF files).

    A half-written or half-downloaded binary can still print its banner; this catches it cheaply.
    """
    try:
        with open(path, "rb") as handle:
            head = handle.read(64)
            size = os.fstat(handle.fileno()).st_size
    except OSError:
        return ""
    if len(head) < 52 or head[:4] != b"\x7fELF" or head[5] not in (1, 2):
        return ""
    order: Literal["little", "big"] = "little" if head[5] == 1 else "big"
    if head[4] == 2 and len(head) == 64:  # ELF64
        offset, entry, count = (int.from_bytes(head[a:b], order) for a, b in ((40, 48), (58, 60), (60, 62)))
    elif head[4] == 1:  # ELF32
        offset, entry, count = (int.from_bytes(head[a:b], order) for a, b in ((32, 36), (46, 48), (48, 50)))
    else:
        return ""
    needed = offset + entry * count
    return f"{path} is truncated ({size} bytes, its ELF headers end at {needed})" if needed > size else ""


def _ask(argv: Sequence[str], banner: re.Pattern[str], timeout: float) -> Reply:
    via = f" (run by {os.path.basename(argv[0])})" if len(argv) > 1 else ""
    command = f"{argv[-1]} --version{via}"
    for part in argv:
        damage = elf_problem(part) if part.startswith("/") else ""
        if damage:
            return Reply(command, None, f"was not run: {damage}")
    try:
        done = children.run(
            [*argv, "--version"], timeout=timeout, env=dict(os.environ, LC_ALL="C"), supervised=False
        )
    except subprocess.TimeoutExpired:
        return Reply(command, None, f"did not finish within {timeout:g} s")
    except OSError as exc:
        return Reply(command, None, f"cannot run ({exc.strerror or exc})")
    if done.returncode != 0:
        said = shorten(done.stderr or done.stdout or "")
        return Reply(command, None, f"exited with code {done.returncode} and printed {said}")
    output = done.stdout or done.stderr or ""
    first = next((line for line in output.splitlines() if line.strip()), "")
    version = banner_version(first, banner)
    if version is None:
        return Reply(command, None, f"printed {shorten(output)}")
    return Reply(command, version)
