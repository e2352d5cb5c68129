"""A program's cache folder (PgBouncer, Odyssey, pgpool-II: `programs.Program`): how it is run (a build's
bin/, or Debian packages extracted with their libraries and run through that tree's own loader), where it
came from, and moving a finished folder into place.

Each result is assembled in a temp folder beside its final place, named after the version its
binary reports (`--version`), made world-readable and renamed into place, so a cache folder
either is complete or does not exist. Callers hold the cache lock.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from leakcheck.model.errors import ProvisionError
from leakcheck.model.versions import Version
from leakcheck.provision.host import children
from leakcheck.provision.host.system import make_world_readable, remove_entry
from leakcheck.provision.sources import banners
from leakcheck.provision.sources.programs import PGBOUNCER, Program

ORIGIN_FILE = "leakcheck-origin.txt"


def program_version(argv: Sequence[str], program: Program = PGBOUNCER) -> Version | None:
    """The version in the program's own `--version` banner, or None if it does not run or is another program."""
    return check_program(argv, program).version


def check_program(argv: Sequence[str], program: Program = PGBOUNCER) -> banners.Reply:
    """What `argv --version` says: the program's banner and version, or what it did instead (asked once per run)."""
    return banners.ask(argv, program.banner)


def stored_argv(folder: Path, program: Program = PGBOUNCER) -> tuple[str, ...] | None:
    """How to run the program in a cache folder: a source build, or an extracted Debian tree."""
    built = folder / "bin" / program.name
    if built.is_file():
        return (str(built),)
    for place in program.installed:
        extracted = folder / "root" / place
        if extracted.is_file():
            return loader_argv(folder / "root", extracted)
    return None


def stored_origin(folder: Path) -> str:
    try:
        return (folder / ORIGIN_FILE).read_text().strip()
    except OSError:
        return "unknown origin"


def unpack_debs(debs: Iterable[Path], store: Path, origin: str, program: Program = PGBOUNCER) -> Path:
    """Extract a program's .deb and its library .debs into one tree run by that tree's own loader."""
    work = Path(tempfile.mkdtemp(prefix=".debs-", dir=store))
    try:
        root = work / "out" / "root"
        root.mkdir(parents=True)
        for deb in debs:
            try:
                done = children.run(["dpkg-deb", "-x", str(deb), str(root)], timeout=300)
            except (OSError, subprocess.SubprocessError) as exc:
                raise ProvisionError(f"dpkg-deb -x {deb.name} failed: {exc}") from exc
            if done.returncode != 0:
                raise ProvisionError(f"dpkg-deb -x {deb.name} failed: {' '.join(done.stderr.split())}")
        argv = stored_argv(work / "out", program)
        if argv is None:
            raise ProvisionError(f"the packages hold no {' or '.join(program.installed)}")
        outside = outside_libraries(argv, root)
        if outside:
            found = ", ".join(outside[:4])
            raise ProvisionError(f"the extracted {program.name} would load from this machine: {found}")
        return install(work / "out", store, origin, program)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def loader_argv(root: Path, program: Path) -> tuple[str, ...]:
    """Run `program` with the dynamic loader and libraries extracted under `root`, not the machine's."""
    patterns = ("usr/lib/*-linux-gnu*", "lib/*-linux-gnu*")
    libdirs = [d for p in patterns for d in sorted(root.glob(p)) if d.is_dir() and not d.is_symlink()]
    inside = root.resolve()
    loaders = [
        f for d in libdirs for f in sorted(d.glob("ld-linux*.so.*")) if f.resolve().is_relative_to(inside)
    ]
    if not loaders:
        raise ProvisionError(f"no ld-linux*.so loader under {root} (was libc6 extracted?)")
    return (str(loaders[0]), "--inhibit-cache", "--library-path", ":".join(map(str, libdirs)), str(program))


def outside_libraries(argv: Sequence[str], root: Path) -> list[str]:
    """Libraries the extracted program would load from outside `root`, or not find at all."""
    try:
        done = children.run([*argv[:-1], "--list", argv[-1]], timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return [f"(ld.so --list failed: {exc})"]
    if done.returncode != 0:
        return [f"(ld.so --list failed: {(done.stderr.strip().splitlines() or ['no message'])[-1]})"]
    outside: list[str] = []
    inside = root.resolve()
    for line in done.stdout.splitlines():
        name, arrow, target = line.strip().partition(" => ")
        path = target.split(" (")[0]
        is_loader = os.path.basename(name) == os.path.basename(argv[0])  # listed again as PT_INTERP
        missing = path == "not found" or not Path(path).resolve().is_relative_to(inside)
        if arrow and not is_loader and missing:
            outside.append(f"{name} ({path})")
    return outside


def install(folder: Path, store: Path, origin: str, program: Program = PGBOUNCER) -> Path:
    """Move a finished `folder` to store/<the version its program reports>; that cache folder."""
    argv = stored_argv(folder, program)
    if argv is None:
        raise ProvisionError(f"no {program.name} was made in {folder}")
    reply = check_program(argv, program)
    version = reply.version
    if version is None:
        raise ProvisionError(f"the new {program.name} does not work: {reply}")
    (folder / ORIGIN_FILE).write_text(origin + "\n")
    make_world_readable(folder)
    target = store / str(version)
    if target.exists() or target.is_symlink():
        target_argv = stored_argv(target, program) if target.is_dir() else None
        if target_argv is not None and program_version(target_argv, program) == version:
            return target  # already there (same version from another source): keep the first
        remove_entry(target)  # a broken leftover (or a file where it belongs); we hold the cache lock
    os.rename(folder, target)
    return target
