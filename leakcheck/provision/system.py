"""Host facts shared by native provisioning: the cache, locks, ports, the server user."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import pwd
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import StartError, UsageError


def cache_root() -> Path:
    """$LEAKCHECK_CACHE, else a cache the server user can read.

    As root, servers run as another user who cannot enter /root, so the default is
    /var/cache/leakcheck; otherwise $XDG_CACHE_HOME/leakcheck or ~/.cache/leakcheck.
    """
    explicit = os.environ.get("LEAKCHECK_CACHE")
    if explicit:
        root = Path(explicit).expanduser()
    elif os.geteuid() == 0:
        root = Path("/var/cache/leakcheck")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(base) / "leakcheck"
    root.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        root.chmod(0o755)
    return root


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock across processes (two runs or xdist workers filling one cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_world_readable(root: Path) -> None:
    """Let every user read the files and enter the folders under `root` (servers may run as another user)."""
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = Path(dirpath) / name
            if not path.is_symlink():
                mode = path.stat().st_mode
                path.chmod(mode | 0o444 | (0o111 if mode & 0o100 else 0))


class PortClash(StartError):
    """Another process took the port between free_port() and the server's bind."""


def start_retrying_port_clash(start: Callable[[], None], stop: Callable[[], None], attempts: int) -> None:
    """Run `start`; when it raises PortClash, `stop` and try again, `attempts` times in all."""
    for attempt in range(1, attempts + 1):
        try:
            start()
            return
        except PortClash:
            stop()
            if attempt == attempts:
                raise


@dataclass(frozen=True)
class ServerUser:
    """Who runs postgres and pgbouncer: ourselves, or an unprivileged user when we are root."""

    name: str
    uid: int
    gid: int

    @property
    def is_self(self) -> bool:
        return self.uid == os.geteuid()

    def chown(self, path: Path) -> None:
        if not self.is_self:
            os.chown(path, self.uid, self.gid)

    def chown_tree(self, root: Path) -> None:
        """chown -R (links themselves, never their targets) when the server user is not ourselves."""
        if self.is_self:
            return
        os.lchown(root, self.uid, self.gid)
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                os.lchown(os.path.join(dirpath, name), self.uid, self.gid)

    def popen_ids(self) -> tuple[int | None, int | None, list[int] | None]:
        """(user, group, extra_groups) for subprocess: switch to this user, or keep ourselves."""
        if self.is_self:
            return None, None, None
        return self.uid, self.gid, []


def server_user() -> ServerUser:
    """$LEAKCHECK_RUN_AS, else `postgres`, else `nobody` when root; else the current user."""
    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
        return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid)
    wanted = os.environ.get("LEAKCHECK_RUN_AS")
    for name in [wanted] if wanted else ["postgres", "nobody"]:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0:
            return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid)
    tried = wanted or "postgres, nobody"
    raise UsageError(
        f"running as root, leakcheck needs an unprivileged user for postgres/pgbouncer "
        f"but found none of: {tried}; create one or set LEAKCHECK_RUN_AS=<user>"
    )


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL if leakcheck dies without cleaning up (Linux)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
