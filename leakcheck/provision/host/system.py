"""Host facts shared by native provisioning: the cache, locks, ports, the server user."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from leakcheck.model.errors import ProvisionError, StartError, UsageError


def cache_path(env: Mapping[str, str] | None = None) -> Path:
    """Where leakcheck's cache is (not created): $LEAKCHECK_CACHE, else a folder the server user can read.

    As root, servers run as another user who cannot enter /root, so the default is
    /var/cache/leakcheck; otherwise $XDG_CACHE_HOME/leakcheck or ~/.cache/leakcheck.
    """
    env = os.environ if env is None else env
    explicit = env.get("LEAKCHECK_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    if os.geteuid() == 0:
        return Path("/var/cache/leakcheck")
    return Path(env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "leakcheck"


def cache_root() -> Path:
    """The cache (`cache_path`), created when missing.

    A cache that exists but cannot be written is returned as it is (what is in it can be used);
    one that cannot be created, read or entered is a UsageError naming it.
    """
    root = cache_path()
    fix = "or set LEAKCHECK_CACHE to a folder this user can write"
    if os.path.lexists(root) and not root.is_dir():
        raise UsageError(f"the leakcheck cache {root} is not a folder: remove that file {fix}")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocked = blocking_folder(root)
        if blocked is not None:
            raise UsageError(f"cannot create the leakcheck cache {root}: {blocked} {fix}") from None
        raise UsageError(f"cannot create the leakcheck cache {root} ({exc.strerror or exc}): create it {fix}") from None
    if not os.access(root, os.R_OK | os.X_OK):
        blocked = blocking_folder(root) or f"{root} cannot be read by {_me()}"
        raise UsageError(f"cannot read the leakcheck cache {root}: {blocked}: give this user access {fix}")
    keep_private(root)
    return root


def blocking_folder(path: Path) -> str | None:
    """The first folder on the way to `path` that this user cannot enter (e.g. a cache under
    /root for another user), said as `/root (drwx------ root) cannot be entered by postgres`; else None."""
    here = Path(path.anchor or "/")
    for part in path.absolute().parts[1:]:
        if not os.access(here, os.X_OK):
            return f"{here} ({_owner_and_mode(here)}) cannot be entered by {_me()}"
        here = here / part
        if not os.path.lexists(here):
            return None
    if os.path.isdir(here) and not os.access(here, os.R_OK | os.X_OK):
        return f"{here} ({_owner_and_mode(here)}) cannot be read by {_me()}"
    return None


def _owner_and_mode(folder: Path) -> str:
    try:
        st = folder.stat()
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = f"uid {st.st_uid}"
    return f"{stat.filemode(st.st_mode)} {owner}"


def keep_private(root: Path) -> None:
    """Other local users may not enter the cache: 0700 when our servers run as ourselves; as root,
    0750 with the server user's group (it reads the binaries). Left alone when not ours to change."""
    with contextlib.suppress(OSError, UsageError):
        st = root.stat()
        if st.st_uid != os.geteuid():
            return
        if os.geteuid() != 0:
            if st.st_mode & 0o777 != 0o700:
                root.chmod(0o700)
            return
        gid = server_user().gid
        if st.st_gid != gid:
            os.chown(root, 0, gid)
        if st.st_mode & 0o777 != 0o750:
            root.chmod(0o750)


def _me() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def share_folder(folder: Path) -> None:
    """As root, make `folder` 0755 (servers run as another user) when it is not yet and can be changed."""
    if os.geteuid() != 0:
        return
    with contextlib.suppress(OSError):  # a read-only cache: what is in it must already be readable
        if folder.stat().st_mode & 0o7777 != 0o755:
            folder.chmod(0o755)


def unwritable(folder: Path) -> str | None:
    """Why this user cannot create `folder` or files in it (checked at its nearest existing parent), else None."""
    probe = folder
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a folder"
    if os.access(probe, os.W_OK | os.X_OK):
        return None
    with contextlib.suppress(OSError):
        if os.statvfs(probe).f_flag & os.ST_RDONLY:
            return f"{probe} is on a read-only file system"
    return f"{probe} is not writable for {_me()}"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock across processes (two runs or xdist workers filling one cache).

    Only needed to write into the cache; a lock file that cannot be made is a ProvisionError
    naming it (a cache that is read-only for this user cannot be filled).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")  # noqa: SIM115 (closed below, after the lock is released)
    except OSError as exc:
        why = unwritable(path.parent) or exc.strerror or str(exc)
        raise ProvisionError(
            f"cannot create the lock file {path} to write into the cache ({why}): "
            "make that folder writable for this user or set LEAKCHECK_CACHE to a folder it can write"
        ) from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def remove_entry(path: Path) -> None:
    """A cache entry gone, whatever it is: a folder, or a file or link where a folder belongs."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


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

    def write_private(self, path: Path, text: str) -> None:
        """Write a file only the server user may read (it holds passwords), owned by that user."""
        path.touch(0o600)
        path.chmod(0o600)
        path.write_text(text)
        self.chown(path)

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


def unreadable_by(user: ServerUser, paths: list[str], execute: bool = True) -> list[str]:
    """Which of `paths` `user` cannot read (and enter or run, with `execute`), asked of that very
    user, so the kernel answers (modes, ACLs, every folder above); none when it is ourselves."""
    if user.is_self or not paths:
        return []
    script = 'm=$1; shift; for p do [ -r "$p" ] && { [ "$m" = r ] || [ -x "$p" ]; } || printf "%s\\n" "$p"; done'
    uid, gid, groups = user.popen_ids()
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", script, "sh", "rx" if execute else "r", *paths], user=uid, group=gid,
            extra_groups=groups, cwd="/", env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
            timeout=30, check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise UsageError(f"cannot run a check as the server user {user.name} ({exc}); set LEAKCHECK_RUN_AS") from None
    if done.returncode != 0:
        raise UsageError(f"cannot run a check as the server user {user.name} (exit {done.returncode}: "
                         f"{' '.join(done.stderr.split())[:160]}); set LEAKCHECK_RUN_AS")
    return [line for line in done.stdout.splitlines() if line]


#: Seconds the server user's open of a file may take (a FIFO put in a file's place blocks it).
OPEN_TIMEOUT = 10.0


def opened_by(user: ServerUser, path: str) -> tuple[int, int] | None:
    """The (device, inode) of the file `user` gets when it opens `path` for reading itself (the
    kernel decides: modes, ACLs, every folder above), or None when it cannot open it. Compared with
    an open file's fstat, it says whether `user` could read *that* file, with no window between a
    check by name and the read (the caller keeps its file open, so its inode is not reused)."""
    script = 'stat -L -c "%d %i" /dev/stdin < "$1" 2>/dev/null || echo refused'
    uid, gid, groups = user.popen_ids()
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", script, "sh", os.path.abspath(path)], user=uid, group=gid, extra_groups=groups, cwd="/",
            env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=OPEN_TIMEOUT, check=False,
        )
    except subprocess.TimeoutExpired:
        raise UsageError(f"the server user {user.name} could not open {path} within {OPEN_TIMEOUT:g} s (a FIFO "
                         "or a device in its place?); give a regular file") from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise UsageError(f"cannot run a check as the server user {user.name} ({exc}); set LEAKCHECK_RUN_AS") from None
    words = done.stdout.split()
    if words == ["refused"]:
        return None
    if done.returncode != 0 or len(words) != 2 or not all(w.isdigit() for w in words):
        raise UsageError(f"cannot run a check as the server user {user.name} (exit {done.returncode}: "
                         f"{' '.join((done.stdout + done.stderr).split())[:160]}); set LEAKCHECK_RUN_AS")
    return int(words[0]), int(words[1])


def open_files_as(user: ServerUser, pids: list[int]) -> list[str]:
    """What the open files of `pids` (processes of `user`) are, as `user` itself reads /proc/<pid>/fd:
    root without CAP_SYS_PTRACE (a container's default) may not read another user's. [] when it could
    not read them either (the caller's proof then fails)."""
    script = 'for p do for f in /proc/"$p"/fd/*; do readlink "$f"; done; done'
    uid, gid, groups = user.popen_ids()
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", script, "sh", *map(str, pids)], user=uid, group=gid, extra_groups=groups, cwd="/",
            env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return done.stdout.split()


def server_user() -> ServerUser:
    """$LEAKCHECK_RUN_AS, else `postgres`, else `nobody` when root; else the current user.

    $LEAKCHECK_RUN_AS (blank: unset) must name an existing user other than root, whoever runs
    leakcheck: a typo is a one-line UsageError, never a surprise later.
    """
    wanted = os.environ.get("LEAKCHECK_RUN_AS", "").strip()
    chosen = _run_as(wanted) if wanted else None
    if os.geteuid() != 0:
        try:
            entry = pwd.getpwuid(os.geteuid())
        except KeyError:  # an arbitrary uid without a passwd entry (some containers)
            return ServerUser(str(os.geteuid()), os.geteuid(), os.getegid())
        return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid)
    if chosen is not None:
        return chosen
    for name in ["postgres", "nobody"]:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0:
            return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid)
    raise UsageError(
        "running as root, leakcheck needs an unprivileged user for postgres/pgbouncer "
        "but found none of: postgres, nobody; create one or set LEAKCHECK_RUN_AS=<user>"
    )


def _run_as(wanted: str) -> ServerUser:
    """The user $LEAKCHECK_RUN_AS names (a name or a numeric uid), which must exist and not be root."""
    try:
        entry = pwd.getpwuid(int(wanted)) if wanted.isascii() and wanted.isdigit() else pwd.getpwnam(wanted)
    except (KeyError, ValueError, OverflowError):
        raise UsageError(
            f"LEAKCHECK_RUN_AS={wanted!r} is not a user on this machine; create it (useradd --system {wanted}) "
            "or set LEAKCHECK_RUN_AS to an existing unprivileged user such as postgres or nobody"
        ) from None
    if entry.pw_uid == 0:
        raise UsageError(
            f"LEAKCHECK_RUN_AS={wanted!r} is root (uid 0), but postgres and pgbouncer refuse to run as root; "
            "set LEAKCHECK_RUN_AS to an unprivileged user such as postgres or nobody"
        )
    return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


#: The user a team's agent program runs as (drivers/agents/team.py): not the server user, who enters the
#: servers' sockets and data folders and logs in on a socket as their superuser (trust).
AGENT_USER = "leakcheck-agent"
#: How to make AGENT_USER by hand (leakcheck runs the same as root when it is missing).
_USERADD = ("useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent", "--shell",
            "/usr/sbin/nologin", AGENT_USER)
#: Seconds one useradd may take, and how often it is tried (two runs making the user at once: the second
#: finds /etc/passwd locked, or the user made).
_USERADD_TIMEOUT, _USERADD_TRIES = 20.0, 5


def agent_user() -> ServerUser:
    """The unprivileged user a team's agent runs as: AGENT_USER, made the first time it is needed
    (`useradd --system`, a group of its own, no home, no login shell). Never root, never the server
    user nor of its group, so it cannot enter the servers' sockets or data: it reaches them over TCP with
    a role's password like any client. Only root can run a program as another user: otherwise one line
    (the agent would run as the user that runs the servers)."""
    server = server_user()
    if os.geteuid() != 0:
        raise UsageError(
            f"a team's agent runs as the unprivileged user {AGENT_USER}, never as the user that runs the servers "
            f"({server.name}: leakcheck is not root), who could log in to them as their superuser on their Unix "
            "socket; run leakcheck as root (it then makes and uses that user), or use a shipped agent")
    entry = _made_user()
    if entry.pw_uid in (0, server.uid) or entry.pw_gid in (0, server.gid):
        raise UsageError(
            f"the user {AGENT_USER}, who runs team agents, is root or shares the server user {server.name}'s uid or "
            f"group (uid {entry.pw_uid}, gid {entry.pw_gid}); make it an unprivileged user of its own: "
            f"{' '.join(_USERADD)}")
    return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _made_user() -> pwd.struct_passwd:
    """AGENT_USER's entry, after making it when it is missing (bounded: _USERADD_TRIES tries)."""
    said = ""
    for attempt in range(_USERADD_TRIES):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(AGENT_USER)
        if attempt:
            time.sleep(0.5)  # another run holds /etc/passwd's lock while it makes the user
        try:
            done = subprocess.run(list(_USERADD), env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, text=True,
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=_USERADD_TIMEOUT, check=False)
            said = " ".join((done.stdout + done.stderr).split())[:160] or f"exit {done.returncode}"
        except (OSError, subprocess.SubprocessError) as exc:
            said = str(exc)
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(AGENT_USER)
    raise UsageError(f"cannot make the user {AGENT_USER}, who runs team agents ({said}); make it as root: "
                     f"{' '.join(_USERADD)}")


_PR_SET_PDEATHSIG = 1
#: Loaded once, in the parent: a forked child then calls prctl without dlopen (and its loader lock).
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def die_with_parent(sig: signal.Signals = signal.SIGKILL) -> None:
    """preexec_fn: the child gets `sig` (SIGKILL unless a server cleans up better on another, such as
    pgpool-II's fast shutdown on SIGINT) if leakcheck dies without cleaning up (Linux)."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(sig))
