"""A program (PgBouncer, Odyssey, pgpool-II) from Debian's archive: which entries match a version,
and the first of them that gives a working binary in the cache (a source package is built, a binary
package is extracted with its libraries and run through its own loader)."""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from leakcheck.model.errors import LeakcheckError
from leakcheck.model.versions import Version
from leakcheck.provision.base import Binary
from leakcheck.provision.sources.debian import SUITES, Available, DebianArchive, upstream_of
from leakcheck.provision.sources.program_cache import checked
from leakcheck.provision.sources.program_folder import unpack_debs
from leakcheck.provision.sources.programs import Program

log = logging.getLogger(__name__)

#: Builds a source entry into the store: (archive, entry, work dir, what it is) -> the cache folder.
BuildSource = Callable[[DebianArchive, Available, Path, str], Path]


def debian_upstream(debian_version: str) -> Version | None:
    """The upstream release of a Debian version ('1.24.1-1+deb13u2' -> 1.24.1); None for pre-releases."""
    found = re.match(r"^(\d+(?:\.\d+){1,3})(\+[A-Za-z0-9.]*)?$", upstream_of(debian_version))
    return Version.parse(found.group(1)) if found else None


def choose_debian(wanted: Version, available: Iterable[Available]) -> list[Available]:
    """The entries of the newest upstream release matching `wanted`: source packages first, then binaries.

    Among equals, the older suite comes first (its binaries need the oldest libraries).
    """
    upstream = [(debian_upstream(a.version), a) for a in available]
    matching = [(v, a) for v, a in upstream if v is not None and wanted.matches(v)]
    if not matching:
        return []
    best = max(v for v, _ in matching)
    entries = [a for v, a in matching if v == best]
    rank = {suite: i for i, suite in enumerate(SUITES)}
    return sorted(entries, key=lambda a: (not a.source, rank.get(a.suite, len(rank)), a.version))


def from_debian(program: Program, wanted: Version, store: Path, attempts: list[str],
                build_source: BuildSource | None = None) -> Binary | None:
    """The newest matching entry that works; source packages only with `build_source`. What failed
    goes to `attempts`."""
    suites = ", ".join(SUITES)
    try:
        archive = DebianArchive(store.parent / "apt")
        available = [a for a in archive.available(program.package) if build_source is not None or not a.source]
    except LeakcheckError as exc:
        attempts.append(f"Debian {suites} ({exc})")
        return None
    entries = choose_debian(wanted, available)
    if not entries:
        have = sorted({v for a in available if (v := debian_upstream(a.version)) is not None})
        attempts.append(f"Debian {suites} (has {', '.join(map(str, have)) or f'no {program.package}'})")
    for entry in entries:
        what = f"Debian {entry.suite} {'source' if entry.source else 'package'} {program.package} {entry.version}"
        work = Path(tempfile.mkdtemp(prefix=".debian-", dir=store))
        try:
            if entry.source and build_source is not None:
                folder = build_source(archive, entry, work, what)
            else:
                debs = archive.download_with_libraries(program.package, entry.version, entry.suite, work)
                folder = unpack_debs(debs, store, f"{what} with its libraries, run by its own ld.so", program)
            return checked(folder, wanted, what, program)
        except LeakcheckError as exc:
            attempts.append(f"{what} ({exc})")
            log.info(f"the {what} did not give a {program.name}: {exc}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return None
