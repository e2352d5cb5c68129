"""Finding PgBouncer: a given path, the cache, PATH, local tarballs, a download, then Debian packages.

What is already here comes first (no network, and a version asked for as 1.24 keeps meaning the
1.24.x this machine has, as for PostgreSQL); then the upstream tarball of the release the table
in bouncer_releases picks (verified by bouncer_download), which serves every version; Debian's
packages last (three versions only, and 1.26.1 only as sid's binary run by its own loader).
Everything fetched or built lands in cache/pgbouncer/<exact version> (see bouncer_build); the
exact version is always the one the binary itself reports.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ..errors import LeakcheckError, ProvisionError
from ..versions import Spec, Version
from . import program_cache
from .base import Binary
from .bouncer_build import build_tarball, unpack_debs
from .bouncer_download import DownloadError, fetch_release, release_url
from .bouncer_releases import UnknownRelease, pick_release
from .debian import SUITES, Available, DebianArchive, upstream_of
from .program_cache import checked, clear_leftovers, given_program, in_cache, on_path
from .programs import PGBOUNCER
from .system import file_lock, share_folder, unwritable
from .tarballs import TARBALLS_ENV, UPSTREAM_TARBALL_URL, local_tarballs

log = logging.getLogger(__name__)

URL_ENV = "LEAKCHECK_PGBOUNCER_URL"

_HINT = (
    "Releases are downloaded from upstream (needs internet; a mirror: "
    f"{URL_ENV}, a URL template with {{version}}); offline, set {TARBALLS_ENV} to a pgbouncer-X.Y.Z.tar.gz "
    "or a folder of them (several joined with ':'), or give a path to a pgbouncer binary"
)


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


def resolve_bouncer(spec: Spec, cache: Path) -> Binary:
    """A pgbouncer of the version `spec` asks for (or at its path); ProvisionError listing what was tried.

    Every binary is checked by running it (`--version` must print PgBouncer's banner with the
    right version). A cached one that fails the check is rebuilt, saying so.
    """
    if spec.path is not None:
        return given_bouncer(spec.path, spec.raw)
    assert spec.version is not None
    wanted = spec.version
    store = cache / "pgbouncer"
    attempts: list[str] = []
    broken: list[tuple[Path, str]] = []
    found = _in_cache(wanted, store, attempts, broken) or _on_path(wanted, attempts)
    if found:
        _note_newer_release(wanted, found)
        return found
    problem = unwritable(store)
    if problem:
        attempts.append(f"building or fetching into {store} (cannot write there: {problem})")
        hint = "Set LEAKCHECK_CACHE to a folder this user can write (or have the cache's owner run `leakcheck prepare`)"
        raise ProvisionError.nothing_worked(f"PgBouncer {spec}", attempts, hint)
    for folder, why in broken:
        log.info(f"cached PgBouncer {folder.name} in {folder} {why}; rebuilding it")
    store.mkdir(parents=True, exist_ok=True)
    share_folder(store)
    with file_lock(store / ".lock"):
        still_broken: list[tuple[Path, str]] = []
        found = _in_cache(wanted, store, [], still_broken)  # another process may have just made it
        clear_leftovers(store, still_broken)  # we hold the lock: nobody uses them; a rebuild replaces them
        for source in (_from_tarballs, _from_url, _from_debian):
            found = found or source(wanted, store, attempts)
    if found:
        return found
    raise ProvisionError.nothing_worked(f"PgBouncer {spec}", attempts, _HINT)


def _note_newer_release(wanted: Version, found: Binary) -> None:
    """Say so when `wanted` (e.g. 1.24) is served by an older release than the table's newest."""
    try:
        newest = pick_release(wanted).version
    except UnknownRelease:
        return
    if newest > found.version:
        log.info(f"using PgBouncer {found.version} ({found.origin}); the newest {wanted} release leakcheck "
                 f"knows is {newest}: ask for --bouncer={newest} to fetch it")


def given_bouncer(path: Path, raw: str = "") -> Binary:
    """The pgbouncer at a path the user gave; UsageError (one line) when it is not PgBouncer."""
    return given_program(PGBOUNCER, path, f"--bouncer={raw or path}")


def _in_cache(
    wanted: Version, store: Path, attempts: list[str], broken: list[tuple[Path, str]]
) -> Binary | None:
    """The newest cached pgbouncer matching `wanted` that works; the ones that do not go to `broken`."""
    return in_cache(wanted, store, PGBOUNCER, attempts, broken)


def cached_binary(folder: Path, version: Version) -> tuple[Binary | None, str]:
    """The pgbouncer in a cache folder if it runs and reports that folder's version, else why not."""
    return program_cache.cached_binary(folder, version, PGBOUNCER)


def _on_path(wanted: Version, attempts: list[str]) -> Binary | None:
    return on_path(wanted, PGBOUNCER, attempts)  # also /usr/sbin/pgbouncer, often not on a user's PATH


def _checked(folder: Path, wanted: Version, what: str) -> Binary:
    """The pgbouncer a source just put in the cache, if it works and is the version asked for."""
    return checked(folder, wanted, what, PGBOUNCER)


def _from_tarballs(wanted: Version, store: Path, attempts: list[str]) -> Binary | None:
    setting = os.environ.get(TARBALLS_ENV, "").strip()
    if not setting:
        attempts.append(f"{TARBALLS_ENV} (not set)")
        return None
    try:
        tarballs = local_tarballs(setting)
    except LeakcheckError as exc:
        attempts.append(str(exc))
        return None
    matching = [v for v in tarballs if wanted.matches(v)]
    if not matching:
        have = ", ".join(map(str, sorted(tarballs))) or "none"
        attempts.append(f"{TARBALLS_ENV}={setting} (has {have})")
        return None
    tarball = tarballs[max(matching)]
    try:
        folder = build_tarball(tarball, store, f"built from {tarball}")
        return _checked(folder, wanted, tarball.name)
    except LeakcheckError as exc:
        attempts.append(f"{tarball} ({exc})")
        log.info(f"{tarball.name} did not give a pgbouncer: {exc}")
        return None


def _from_url(wanted: Version, store: Path, attempts: list[str]) -> Binary | None:
    """The release the table picks for `wanted`, downloaded (verified, see bouncer_download) and built."""
    template = os.environ.get(URL_ENV, "").strip() or UPSTREAM_TARBALL_URL
    try:
        release = pick_release(wanted)
    except UnknownRelease as exc:
        attempts.append(f"download ({exc})")
        return None
    url = release_url(template, release.version)
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=store))
    try:
        tarball = fetch_release(release.version, template, work)
        folder = build_tarball(tarball, store, f"built from {url} (sha256 verified)")
        return _checked(folder, release.version, url)
    except DownloadError as exc:
        attempts.append(f"download {exc}")  # the message starts with the URL
        log.info(f"could not download PgBouncer {release.version}: {exc}")
    except LeakcheckError as exc:
        attempts.append(f"{url} ({exc})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return None


def _from_debian(wanted: Version, store: Path, attempts: list[str]) -> Binary | None:
    suites = ", ".join(SUITES)
    try:
        archive = DebianArchive(store.parent / "apt")
        available = archive.available("pgbouncer")
    except LeakcheckError as exc:
        attempts.append(f"Debian {suites} ({exc})")
        return None
    entries = choose_debian(wanted, available)
    if not entries:
        have = sorted({v for a in available if (v := debian_upstream(a.version)) is not None})
        attempts.append(f"Debian {suites} (has {', '.join(map(str, have)) or 'no pgbouncer'})")
    for entry in entries:
        kind = "source" if entry.source else "package"
        what = f"Debian {entry.suite} {kind} pgbouncer {entry.version}"
        work = Path(tempfile.mkdtemp(prefix=".debian-", dir=store))
        try:
            if entry.source:
                log.info(f"downloading the {what} ...")
                tarball = archive.download_source("pgbouncer", entry.version, work)
                folder = build_tarball(tarball, store, f"built from {tarball.name} ({what})")
            else:
                debs = archive.download_with_libraries("pgbouncer", entry.version, entry.suite, work)
                folder = unpack_debs(debs, store, f"{what} with its libraries, run by its own ld.so")
            return _checked(folder, wanted, what)
        except LeakcheckError as exc:
            attempts.append(f"{what} ({exc})")
            log.info(f"the {what} did not give a pgbouncer: {exc}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return None
