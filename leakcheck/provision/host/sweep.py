"""What killed runs left behind, removed by the next run: only theirs, never a live run's.

A run killed with SIGKILL cannot clean up. Its servers die with it (PDEATHSIG), but their temp
dirs (a PostgreSQL data folder is 46 MB), the postmaster's System V shared memory segment and a
half-built template stay. At backend start we remove:

- `leakcheck-pg<version>-*`, `leakcheck-pgbouncer<version>-*`, `leakcheck-odyssey<version>-*` and
  `leakcheck-pgpool<version>-*` dirs in the temp dir whose marker
  (owner.py) names a process of this machine that no longer runs (a reused pid has another start
  time). Dirs without a marker, of another machine, or of a running process are never touched.
- `.build-<version>-*` dirs in the cache's templates folder when no build holds that version's lock.

Servers still running from such a dir are stopped (strays.py), the segment their postmaster.pid
records is removed once nothing is attached to it (sysv_shm.py), then the dir. Driver agents (and
what they started) that outlived their run are stopped too (tagged.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from leakcheck.provision.host.owner import MARKER, owner_of
from leakcheck.provision.host.strays import stop_servers_in
from leakcheck.provision.host.sysv_shm import recorded_segment, remove_if_unused
from leakcheck.provision.host.tagged import sweep_tagged

log = logging.getLogger(__name__)

_RUN_DIR = re.compile(r"leakcheck-(pg|pgbouncer|odyssey|pgpool)\d[\w.]*-\w+")
_BUILD_DIR = re.compile(r"\.build-(?P<version>\d[\w.]*)-\w+")


def sweep(cache: Path | None = None, tmp: Path | None = None) -> int:
    """Remove what killed runs left in `tmp` (default: the temp dir) and `cache`; how many folders. Their
    driver agents are stopped first (tagged.py)."""
    agents = ", ".join(map(str, sweep_tagged()))
    if agents:
        log.info(f"stopped what driver agents of a killed run left running (pids {agents})")
    swept = 0
    for folder in sorted((tmp or Path(tempfile.gettempdir())).glob("leakcheck-*")):
        swept += _sweep_run_dir(folder)
    if cache is not None:
        for folder in sorted((cache / "templates").glob(".build-*")):
            swept += _sweep_build_dir(folder)
    return swept


def _sweep_run_dir(folder: Path) -> int:
    if not _RUN_DIR.fullmatch(folder.name) or folder.is_symlink() or not folder.is_dir():
        return 0
    owner = owner_of(folder)
    if owner is None or not owner.is_here() or owner.is_running():
        return 0
    with _claimed(folder / MARKER, create=False) as claimed:
        if not claimed:
            return 0  # another run is sweeping it right now
        done = _clear(folder)
        _remove_marker_last(folder)
    log.info(f"removed what a killed run (pid {owner.pid}) left: {folder}{done}")
    return 1


def _sweep_build_dir(folder: Path) -> int:
    match = _BUILD_DIR.fullmatch(folder.name)
    if match is None or folder.is_symlink() or not folder.is_dir():
        return 0
    with _claimed(folder.parent / f".{match['version']}.lock", create=True) as claimed:
        if not claimed:
            return 0  # a template build is running (ensure_template holds this lock)
        done = _clear(folder)
        shutil.rmtree(folder, ignore_errors=True)
    log.info(f"removed an unfinished PostgreSQL template build: {folder}{done}")
    return 1


def _clear(folder: Path) -> str:
    """Stop its servers and remove their shared memory; what was done, for the progress line."""
    segments = [s for s in map(recorded_segment, folder.glob("*/postmaster.pid")) if s is not None]
    stopped = stop_servers_in(folder)
    removed = [s.shmid for s in segments if remove_if_unused(s)]
    done = [f"stopped {stopped} server process{'es' if stopped != 1 else ''}"] if stopped else []
    done += [f"removed shared memory segment {shmid}" for shmid in removed]
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
