"""What killed runs left behind, removed by the next run: only theirs, never a live run's.

A run killed with SIGKILL cannot clean up. Its servers die with it (PDEATHSIG), but their temp
dirs (a PostgreSQL data folder is 46 MB), the postmaster's System V shared memory segment and a
half-built template stay. At backend start we remove:

- `leakcheck-pg<version>-*`, `leakcheck-pgbouncer<version>-*`, `leakcheck-odyssey<version>-*` and
  `leakcheck-pgpool<version>-*` dirs in the temp dir whose marker
  (owner.py) names a process of this machine that no longer runs (a reused pid has another start
  time). Dirs without a marker, of another machine, or of a running process are never touched.
- `.build-<version>-*` dirs in the cache's templates folder when no build holds that version's lock.

Servers still running from such a dir are stopped (strays.py); then the System V objects of the dead
run's servers are removed: those the dir's ledger names (ledger.py), those created by a main process it
names or by a process just stopped (sysv.py; not before the dead run started, of the dir's owner only),
and the segment a postmaster.pid records, each once nothing is attached to it (sysv_shm.py); then the dir.
Driver agents (and what they started) that outlived their run are stopped too (tagged.py). Each removal
is one line, which `leakcheck sweep` prints and a run logs.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from leakcheck.provision.host import ledger, sysv
from leakcheck.provision.host.owner import MARKER, owner_of, start_time, started_at
from leakcheck.provision.host.strays import stop_servers_in
from leakcheck.provision.host.sysv_shm import recorded_segment, remove_if_unused
from leakcheck.provision.host.tagged import sweep_tagged

log = logging.getLogger(__name__)

_RUN_DIR = re.compile(r"leakcheck-(pg|pgbouncer|odyssey|pgpool)\d[\w.]*-\w+")
_BUILD_DIR = re.compile(r"\.build-(?P<version>\d[\w.]*)-\w+")


def sweep(cache: Path | None = None, tmp: Path | None = None, say: Callable[[str], None] = log.info) -> list[str]:
    """Remove what killed runs left in `tmp` (default: the temp dir) and `cache`: one line per folder, and one
    for their driver agents (stopped first: tagged.py), each given to `say` (progress, by default) once done."""
    swept: list[str] = []
    agents = ", ".join(map(str, sweep_tagged()))
    if agents:
        swept.append(f"stopped what driver agents of a killed run left running (pids {agents})")
        say(swept[-1])
    folders = [(_sweep_run_dir, f) for f in sorted((tmp or Path(tempfile.gettempdir())).glob("leakcheck-*"))]
    if cache is not None:
        folders += [(_sweep_build_dir, f) for f in sorted((cache / "templates").glob(".build-*"))]
    for clear, folder in folders:
        for line in clear(folder):
            say(line)
            swept.append(line)
    return swept


def _sweep_run_dir(folder: Path) -> list[str]:
    if not _RUN_DIR.fullmatch(folder.name) or folder.is_symlink() or not folder.is_dir():
        return []
    owner = owner_of(folder)
    if owner is None or not owner.is_here() or owner.is_running():
        return []
    with _claimed(folder / MARKER, create=False) as claimed:
        if not claimed:
            return []  # another run is sweeping it right now
        done = _clear(folder, started_at(owner.start))
        _remove_marker_last(folder)
    return [f"removed what a killed run (pid {owner.pid}) left: {folder}{done}"]


def _sweep_build_dir(folder: Path) -> list[str]:
    match = _BUILD_DIR.fullmatch(folder.name)
    if match is None or folder.is_symlink() or not folder.is_dir():
        return []
    with _claimed(folder.parent / f".{match['version']}.lock", create=True) as claimed:
        if not claimed:
            return []  # a template build is running (ensure_template holds this lock)
        done = _clear(folder, None)
        shutil.rmtree(folder, ignore_errors=True)
    return [f"removed an unfinished PostgreSQL template build: {folder}{done}"]


def _clear(folder: Path, since: float | None) -> str:
    """Stop its servers and remove their System V objects (`since`: when the dead run started, None when not
    known: then only the objects named in the folder); what was done, for the progress line."""
    try:
        uid = folder.stat().st_uid
    except OSError:
        return ""
    segments = [s for s in map(recorded_segment, folder.glob("*/postmaster.pid")) if s is not None]
    started, recorded = ledger.read(folder)
    stopped = stop_servers_in(folder)
    # A main process the ledger names that no longer runs, or a process just stopped, created what names it;
    # a pid another process has taken since is left out (what it creates is not the dead run's).
    pids = {s.pid for s in started if start_time(s.pid) is None} | set(stopped)
    mine = sysv.created_by(pids, uid, since) if since is not None else []
    objects = [o for o in dict.fromkeys([*recorded, *mine]) if o.uid == uid]
    removed = [str(o) for o in sysv.remove(objects)]
    removed += [f"shared memory segment {s.shmid}" for s in segments if remove_if_unused(s)]
    done = [f"stopped {len(stopped)} server process{'es' if len(stopped) != 1 else ''}"] if stopped else []
    done += [f"removed {', '.join(dict.fromkeys(removed))}"] if removed else []
    return f" ({', '.join(done)})" if done else ""


def _remove_marker_last(folder: Path) -> None:
    """Remove the dir's content, then its marker, then the dir: killed half-way, it is swept again."""
    for entry in folder.iterdir():
        if entry.name == MARKER:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    (folder / MARKER).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        folder.rmdir()


@contextlib.contextmanager
def _claimed(path: Path, create: bool) -> Iterator[bool]:
    """An exclusive lock on `path` if nobody holds one (yields False then, without waiting)."""
    try:
        fd = os.open(path, os.O_RDONLY | (os.O_CREAT if create else 0), 0o644)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield path.exists()
    finally:
        os.close(fd)
