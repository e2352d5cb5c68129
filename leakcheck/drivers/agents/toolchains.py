"""The compilers an agent's build needs where Debian's archive has none new enough (Go, Rust).

Debian bookworm's golang-go is Go 1.19 and its cargo Rust 1.65: pgx v5 and sqlx need newer ones.
Each tool is looked for in its usual install places first (`/usr/local/go/bin/go`, rustup's
`~/.cargo/bin/cargo`), then every one on PATH, then Debian's versioned Go packages
(`/usr/lib/go-1.2x/bin/go`); the first whose own version is at least the agent's minimum builds
it. None: a ProvisionError, one line saying what was found and what to install.
"""

from __future__ import annotations

import functools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from leakcheck.model.errors import ProvisionError
from leakcheck.model.versions import Version, version_in_output

#: Seconds a tool may take to say its version.
VERSION_TIMEOUT = 30.0


@dataclass(frozen=True)
class Tool:
    """Where a compiler is looked for and how it says its version."""

    #: its program's name on PATH
    name: str
    #: its usual install places, tried first (`~` is HOME)
    usual: tuple[str, ...]
    #: Debian's versioned packages' places (globs), tried last
    debian: str
    #: the arguments that print its version
    version_args: tuple[str, ...]
    #: what to install when none is new enough ({minimum} is the agent's)
    install: str


TOOLS = {
    "go": Tool("go", ("/usr/local/go/bin/go",), "/usr/lib/go-*/bin/go", ("version",),
               "install Go >= {minimum}: the go.dev/dl archive unpacked into /usr/local/go (Debian bookworm's "
               "golang-go is 1.19)"),
    "cargo": Tool("cargo", ("~/.cargo/bin/cargo",), "", ("--version",),
                  "install Rust >= {minimum} with rustup (rustup.rs; Debian bookworm's cargo is Rust 1.65)"),
}


@dataclass(frozen=True)
class Found:
    """A tool that is new enough: its program and its version."""

    path: Path
    version: Version

    def fingerprint(self) -> str:
        """What makes a build differ: the program, its size and time, its version."""
        stat = self.path.resolve().stat()
        return f"{self.path.resolve()} {stat.st_size} {stat.st_mtime_ns} {self.version}"


def _candidates(tool: Tool) -> list[Path]:
    places = [Path(p).expanduser() for p in tool.usual]
    places += [Path(d) / tool.name for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    places += sorted(Path("/").glob(tool.debian.lstrip("/")), reverse=True) if tool.debian else []
    seen: dict[Path, Path] = {}
    for place in places:
        if place.is_file() and os.access(place, os.X_OK):
            seen.setdefault(place.resolve(), place)
    return list(seen.values())


def _version(tool: Tool, path: Path) -> Version | None:
    try:
        done = subprocess.run([str(path), *tool.version_args], capture_output=True, text=True, check=False,
                              timeout=VERSION_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return version_in_output(done.stdout) if done.returncode == 0 else None


@functools.cache
def find(name: str, minimum: str, agent: str) -> Found:
    """The first `name` whose version is at least `minimum` (ProvisionError naming what was found)."""
    tool = TOOLS[name]
    oldest = Version.parse(minimum)
    said = []
    for path in _candidates(tool):
        version = _version(tool, path)
        if version is not None and version >= oldest:
            return Found(path, version)
        said.append(f"{path} ({version or 'no version'})")
    raise ProvisionError(f"the {agent} agent is built with {name} >= {minimum}, found "
                         f"{', '.join(said) or 'none'}: {tool.install.format(minimum=minimum)}")
