"""Files a run writes (the baseline, results, reports, JUnit, timings): each path checked before anything
starts, each file written in one step, read-merge-writes under a lock.

- `check_writable`: a file can be written at the path (its folders created), or a one-line UsageError
  naming the option; nothing is created;
- `write_atomic`: the new file replaces the old one in one step (temp file in the same folder, fsync, rename),
  gzip-compressed for a `.gz` path (config/inputs.py's `read_text` reads it back);
- `locked`: an exclusive lock across processes while a file is read, merged and replaced.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gzip
import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path

from leakcheck.model.errors import UsageError


def check_writable(path: Path, option: str, example: str) -> bool:
    """Before the run: a file can be written at `path` (its folders created); whether one is there now.

    A folder, anything but a regular file, or a folder that cannot be created or written in is a
    one-line UsageError naming `option`. Creates nothing.
    """
    _check_no_symlink_loop(path, option)
    if path.is_dir():
        raise UsageError(f"{option}: {path} is a folder; give a file path such as {example}")
    exists = path.exists() or path.is_symlink()
    if exists:
        if not path.resolve().is_file():
            raise UsageError(f"{option}: {path} is not a regular file; move it away, or give {option} another path")
        folder = path.resolve().parent
    else:
        folder = path.absolute().parent
    existing = folder
    while not existing.exists():
        if existing.is_symlink():  # a link to nothing: the folder could not be created there
            raise UsageError(f"{option}: cannot create {folder}: {existing} is a symlink to a missing path; "
                             f"remove it, or give {option} another path")
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{option}: cannot create {folder}: {existing} is a file; give {option} another path")
    problem = _cannot_write(existing, create_folder=existing != folder)
    if problem is not None:
        where = f"create {folder}" if existing != folder else f"write in {folder}"
        raise UsageError(f"{option}: cannot {where} ({problem}); give {option} a path in a writable folder")
    return exists


def _check_no_symlink_loop(path: Path, option: str) -> None:
    """A symlink loop at `path` or in a folder above it is one line (pathlib's resolve raises then)."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            return  # missing or unreadable: the checks after this one say which
        raise UsageError(f"{option}: {path} is a symlink loop (a link that leads back to itself); remove it, "
                         f"or give {option} another path") from None


def _cannot_write(folder: Path, create_folder: bool) -> str | None:
    """Why a file (or, with `create_folder`, a folder) cannot be created in `folder`, tried for real
    and removed at once (permission bits do not tell for root, read-only mounts or /proc)."""
    try:
        if create_folder:
            os.rmdir(tempfile.mkdtemp(prefix=".leakcheck-check-", dir=folder))
        else:
            with tempfile.TemporaryFile(prefix=".leakcheck-check-", dir=folder):
                pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` (its target, when it is a symlink) with `text` in one step.

    A temp file in the same folder is written and fsynced, given the old file's mode (else the
    umask's), then renamed over `path`; readers see the old or the new file, never a part. A name
    ending in `.gz` gets the text gzip-compressed, the same bytes for the same text (no time, no name).
    """
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    data = text.encode("utf-8")
    if target.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=9, mtime=0)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_folder(target.parent)


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (best effort: some file systems refuse)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock, across processes, while the file at `path` is read, merged and replaced.

    Two processes writing one file (two runs, a run and `leakcheck merge`) take turns, so neither
    loses the other's entries. The lock is taken on the file's folder itself (flock): no lock file
    is left beside a committed matrix, and the kernel releases it however the process ends.
    """
    folder = Path(os.path.realpath(path)).parent
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
