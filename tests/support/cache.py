"""The suite's own cache: tests never read or change the user's leakcheck cache.

At the start of a session (tests/conftest.py, before any xdist worker starts) LEAKCHECK_CACHE is
pointed at the test cache, `<the user's cache>-tests` (or $LEAKCHECK_TEST_CACHE), which every
test, child process and worker inherits. The test cache is seeded from the user's cache by hard
links, so servers are not fetched or built again: a folder the test cache lacks is linked in whole
under a temporary name and renamed into place (another session never sees half of it); what the
test cache already has is kept. The cache's own writes replace files (a new inode, by rename), so a
test that rebuilds or discards something in the test cache leaves the user's copy as it was.
Locks and build folders are not linked: a lock shared by inode would couple the two caches.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from leakcheck.provision.host.system import cache_path

#: Set once the session has pointed LEAKCHECK_CACHE at the test cache (xdist workers inherit both).
SEEDED = "LEAKCHECK_TEST_CACHE_SEEDED"


def _skipped(name: str) -> bool:
    """Locks and half-built folders stay with their own cache."""
    if name == "lock":
        return True
    return name.startswith(".") and (name.endswith(".lock") or name.startswith((".build-", ".seed-")))


def _link_tree(source: Path, target: Path) -> None:
    """`target` made as a copy of `source` of hard links (symlinks as symlinks; a copy across file systems)."""
    target.mkdir()
    _same_owner_and_mode(source, target)
    for entry in os.scandir(source):
        if _skipped(entry.name):
            continue
        to = target / entry.name
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), to)
        elif entry.is_dir():
            _link_tree(Path(entry.path), to)
        else:
            try:
                os.link(entry.path, to)
            except OSError:
                shutil.copy2(entry.path, to)


def _same_owner_and_mode(source: Path, target: Path) -> None:
    st = source.stat()
    with contextlib.suppress(OSError):
        os.chown(target, st.st_uid, st.st_gid)
    target.chmod(st.st_mode & 0o7777)


def seed(source: Path, target: Path) -> None:
    """Link into `target` what `source` has and `target` lacks; each missing entry appears by rename."""
    target.mkdir(parents=True, exist_ok=True)
    if not source.is_dir():
        return
    for entry in os.scandir(source):
        if _skipped(entry.name):
            continue
        to = target / entry.name
        if os.path.lexists(to):
            if entry.is_dir(follow_symlinks=False) and to.is_dir() and not to.is_symlink():
                seed(Path(entry.path), to)
            continue
        staging = target / f".seed-{entry.name}-{os.getpid()}"
        try:
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), staging)
            elif entry.is_dir():
                _link_tree(Path(entry.path), staging)
            else:
                os.link(entry.path, staging)
            os.rename(staging, to)
        except OSError:  # another session linked it first, or the user's cache changed under us
            if staging.is_dir() and not staging.is_symlink():
                shutil.rmtree(staging, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    staging.unlink()


def use_test_cache(env: os._Environ[str]) -> Path:
    """Point LEAKCHECK_CACHE at the seeded test cache (once per session; workers inherit it)."""
    if env.get(SEEDED):
        return Path(env["LEAKCHECK_CACHE"])
    users = cache_path(env)  # the cache leakcheck would use for this user
    test_cache = Path(env.get("LEAKCHECK_TEST_CACHE") or f"{users}-tests").expanduser()
    if test_cache.resolve() == users.resolve():
        raise RuntimeError(f"LEAKCHECK_TEST_CACHE is the user's cache {users}: give the tests a folder of their own")
    seed(users, test_cache)
    env["LEAKCHECK_CACHE"] = str(test_cache)
    env[SEEDED] = "1"
    return test_cache
