"""Finding Odyssey and pgpool-II: a given path, the cache, an installed one, then Debian's binary packages.

A Debian package is fetched with leakcheck's private apt set-up (debian.py) together with the
library packages it needs, extracted into cache/<program>/<exact version>/root and run through that
tree's own loader (bouncer_build.unpack_debs/loader_argv), so a sid build runs on bookworm. The
exact version is always the one the binary itself reports. Reachable here (Debian's archive):
Odyssey 1.5.2 (sid), pgpool-II 4.3.5 (bookworm), 4.6.1 (trixie), 4.7.3 (sid).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from ..errors import LeakcheckError, ProvisionError
from ..versions import Spec, Version
from .base import Binary
from .bouncer_binaries import choose_debian, debian_upstream
from .bouncer_build import unpack_debs
from .debian import SUITES, DebianArchive
from .program_cache import checked, clear_leftovers, given_program, in_cache, on_path
from .programs import ODYSSEY, PGPOOL, Program
from .system import file_lock, share_folder, unwritable

log = logging.getLogger(__name__)


def resolve_odyssey(spec: Spec, cache: Path, option: str = "--odyssey") -> Binary:
    """An odyssey of the version `spec` asks for (1.5 -> 1.5.2), or at its path."""
    return resolve_packaged(ODYSSEY, spec, cache, option)


def resolve_pgpool(spec: Spec, cache: Path, option: str = "--pgpool") -> Binary:
    """A pgpool of the version `spec` asks for (4.3 -> 4.3.5), or at its path."""
    return resolve_packaged(PGPOOL, spec, cache, option)


def resolve_packaged(program: Program, spec: Spec, cache: Path, option: str) -> Binary:
    """`program` at spec's path, else of spec's version from the cache, the machine or Debian;
    ProvisionError listing every attempt. Every binary is checked by running it (`--version`)."""
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
        attempts.append(f"fetching into {store} (cannot write there: {problem})")
        hint = "Set LEAKCHECK_CACHE to a folder this user can write (or have the cache's owner run `leakcheck prepare`)"
        raise ProvisionError.nothing_worked(f"{program.title} {spec}", attempts, hint)
    for folder, why in broken:
        log.info(f"cached {program.title} {folder.name} in {folder} {why}; fetching it again")
    store.mkdir(parents=True, exist_ok=True)
    share_folder(store)
    with file_lock(store / ".lock"):
        still_broken: list[tuple[Path, str]] = []
        found = in_cache(wanted, store, program, [], still_broken)  # another process may have just made it
        clear_leftovers(store, still_broken)
        found = found or _from_debian(program, wanted, store, attempts)
    if found:
        return found
    hint = (
        f"{program.title} comes from Debian's {program.package} package here; "
        f"or give the path of {program.a_binary} (e.g. {program.example_path})"
    )
    raise ProvisionError.nothing_worked(f"{program.title} {spec}", attempts, hint)


def _from_debian(program: Program, wanted: Version, store: Path, attempts: list[str]) -> Binary | None:
    """The newest matching binary package (older suites first among equals), with its libraries."""
    suites = ", ".join(SUITES)
    try:
        archive = DebianArchive(store.parent / "apt")
        available = [a for a in archive.available(program.package) if not a.source]
    except LeakcheckError as exc:
        attempts.append(f"Debian {suites} ({exc})")
        return None
    entries = choose_debian(wanted, available)
    if not entries:
        have = sorted({v for a in available if (v := debian_upstream(a.version)) is not None})
        attempts.append(f"Debian {suites} (has {', '.join(map(str, have)) or f'no {program.package}'})")
    for entry in entries:
        what = f"Debian {entry.suite} package {program.package} {entry.version}"
        work = Path(tempfile.mkdtemp(prefix=".debian-", dir=store))
        try:
            debs = archive.download_with_libraries(program.package, entry.version, entry.suite, work)
            folder = unpack_debs(debs, store, f"{what} with its libraries, run by its own ld.so", program)
            return checked(folder, wanted, what, program)
        except LeakcheckError as exc:
            attempts.append(f"{what} ({exc})")
            log.info(f"the {what} did not give a {program.name}: {exc}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return None
