"""A pooler program at a given path, in the cache, or installed: each one checked by running it.

Shared by every pooler (`programs.Program`): a binary counts only when its own `--version` banner
names the program and the version its cache folder (or the user) says.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from leakcheck.model.errors import LeakcheckError, ProvisionError, UsageError
from leakcheck.model.versions import Spec, Version
from leakcheck.provision.base import Binary
from leakcheck.provision.host.system import file_lock, remove_entry, share_folder, unwritable
from leakcheck.provision.sources.program_folder import check_program, stored_argv, stored_origin
from leakcheck.provision.sources.programs import Program

log = logging.getLogger(__name__)


def given_program(program: Program, path: Path, option: str) -> Binary:
    """The program at a path the user gave; UsageError (one line) when it is not that program."""
    what = (
        f"give the path of {program.a_binary} (e.g. {program.example_path}) "
        f"or a version such as {program.example_spec}"
    )
    binary = path.expanduser().absolute()  # never looked up on PATH
    if not os.path.lexists(binary):
        raise UsageError(f"{option}: there is no file {binary}; {what}")
    if binary.is_dir():
        raise UsageError(f"{option}: {binary} is a folder, not a program; {what}")
    reply = check_program([str(binary)], program)
    if reply.version is None:
        raise UsageError(
            f"{option} is not {program.title}: {reply} ({program.title} prints e.g. '{program.example_banner}'); {what}"
        )
    return Binary(reply.version, (str(binary),), f"given path {binary}")


def cached_binary(folder: Path, version: Version, program: Program) -> tuple[Binary | None, str]:
    """The program in a cache folder if it runs and reports that folder's version, else why not."""
    if not folder.is_dir():
        return None, "is a file, not a folder"
    try:
        argv = stored_argv(folder, program)
    except LeakcheckError as exc:
        return None, f"cannot be run: {exc}"
    if argv is None:
        return None, f"holds no {program.name}"
    reply = check_program(argv, program)
    if reply.version is None:
        return None, f"does not run ({reply})"
    if reply.version != version:
        return None, f"reports {reply.version}, not {version}"
    return Binary(version, argv, f"cache: {stored_origin(folder)}"), ""


def in_cache(
    wanted: Version, store: Path, program: Program, attempts: list[str], broken: list[tuple[Path, str]]
) -> Binary | None:
    """The newest cached program matching `wanted` that works; the ones that do not go to `broken`."""
    versions = []
    with contextlib.suppress(OSError):
        for entry in store.iterdir():
            try:
                versions.append(Version.parse(entry.name))
            except UsageError:
                continue
    for version in sorted((v for v in versions if wanted.matches(v)), reverse=True):
        folder = store / str(version)
        binary, why = cached_binary(folder, version, program)
        if binary is not None:
            return binary
        broken.append((folder, why))
        attempts.append(f"cached {program.title} {version} in {folder} ({why})")
    attempts.append(f"cache {store} (no working {wanted})")
    return None


def on_path(wanted: Version, program: Program, attempts: list[str]) -> Binary | None:
    """An installed program of that version: on PATH, or where its Debian package puts it."""
    places = (shutil.which(program.name), *("/" + place for place in program.installed))
    candidates = [p for p in places if p and os.access(p, os.X_OK)]
    for path in dict.fromkeys(candidates):
        reply = check_program([path], program)
        if reply.version is not None and wanted.matches(reply.version):
            return Binary(reply.version, (path,), f"installed ({path})")
        attempts.append(f"PATH and the package's place: {path} (is {reply})")
    if not candidates:
        attempts.append(f"PATH and the package's place (no {program.name})")
    return None


def checked(folder: Path, wanted: Version, what: str, program: Program) -> Binary:
    """The program a source just put in the cache, if it works and is the version asked for."""
    binary, why = cached_binary(folder, Version.parse(folder.name), program)
    if binary is None:
        raise ProvisionError(f"{what} gave a {program.name} that {why}")
    if not wanted.matches(binary.version):
        raise ProvisionError(f"{what} gave {program.title} {folder.name}, not {wanted} (kept in the cache)")
    return Binary(binary.version, binary.argv, stored_origin(folder))


def clear_leftovers(store: Path, broken_again: list[tuple[Path, str]]) -> None:
    """Under the store's lock: temp folders of a run that died, and cached folders found broken."""
    for leftover in store.glob(".*-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    for folder, _why in broken_again:
        remove_entry(folder)



#: A way to put `wanted` into the store: (wanted, store, attempts) -> the binary, or None (why in attempts).
Source = Callable[[Version, Path, list[str]], Binary | None]

UNWRITABLE_HINT = ("Set LEAKCHECK_CACHE to a folder this user can write (or have the cache's owner run "
                   "`leakcheck prepare`)")


def resolve_in_store(program: Program, spec: Spec, cache: Path, option: str, sources: Sequence[Source], hint: str,
                     *, making: str = "fetching", again: str = "fetching it again") -> Binary:
    """`program` at spec's path, else of spec's version from the cache or the machine, else from the
    first of `sources` that gives one (under the store's lock); ProvisionError listing every attempt.
    Every binary is checked by running it (`--version`); a cached one that fails is made `again`."""
    if spec.path is not None:
        return given_program(program, spec.path, f"{option}={spec.raw or spec.path}")
    assert spec.version is not None
    wanted = spec.version
    store = cache / program.store
    attempts: list[str] = []
    broken: list[tuple[Path, str]] = []
    found = in_cache(wanted, store, program, attempts, broken) or on_path(wanted, program, attempts)
    if found:
        return found
    problem = unwritable(store)
    if problem:
        attempts.append(f"{making} into {store} (cannot write there: {problem})")
        raise ProvisionError.nothing_worked(f"{program.title} {spec}", attempts, UNWRITABLE_HINT)
    for folder, why in broken:
        log.info(f"cached {program.title} {folder.name} in {folder} {why}; {again}")
    store.mkdir(parents=True, exist_ok=True)
    share_folder(store)
    with file_lock(store / ".lock"):
        still_broken: list[tuple[Path, str]] = []
        found = in_cache(wanted, store, program, [], still_broken)  # another process may have just made it
        clear_leftovers(store, still_broken)  # we hold the lock: nobody uses them; a new one replaces them
        for source in sources:
            found = found or source(wanted, store, attempts)
    if found:
        return found
    raise ProvisionError.nothing_worked(f"{program.title} {spec}", attempts, hint)
