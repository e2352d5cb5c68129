"""Finding PgBouncer: a given path, the cache, PATH, local tarballs, a download, then Debian packages.

What is already here comes first (no network, and a version asked for as 1.24 keeps meaning the
1.24.x this machine has, as for PostgreSQL); then the upstream tarball of the release the table
in bouncer_releases picks (verified by bouncer_download), which serves every version; Debian's
packages last (three versions only, and 1.26.1 only as sid's binary run by its own loader).
Everything fetched or built lands in cache/pgbouncer/<exact version> (see bouncer_build); the
exact version is always the one the binary itself reports.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ..errors import LeakcheckError, ProvisionError, UsageError
from ..versions import Spec, Version
from .base import Binary
from .bouncer_build import build_tarball, check_program, stored_argv, stored_origin, unpack_debs
from .bouncer_download import DownloadError, fetch_release, release_url
from .bouncer_releases import UnknownRelease, pick_release
from .debian import SUITES, Available, DebianArchive, upstream_of
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
        for leftover in store.glob(".*-*"):  # temp folders of a run that died (we hold the lock)
            shutil.rmtree(leftover, ignore_errors=True)
        still_broken: list[tuple[Path, str]] = []
        found = _in_cache(wanted, store, [], still_broken)  # another process may have just made it
        for folder, _why in still_broken:  # we hold the lock: nobody uses them; a rebuild replaces them
            shutil.rmtree(folder, ignore_errors=True)
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
    option = f"--bouncer={raw or path}"
    what = "give the path of a pgbouncer binary (e.g. /usr/sbin/pgbouncer) or a version such as 1.24"
    program = path.expanduser().absolute()  # never looked up on PATH
    if not os.path.lexists(program):
        raise UsageError(f"{option}: there is no file {program}; {what}")
    if program.is_dir():
        raise UsageError(f"{option}: {program} is a folder, not a program; {what}")
    reply = check_program([str(program)])
    if reply.version is None:
        raise UsageError(f"{option} is not PgBouncer: {reply} (PgBouncer prints e.g. 'PgBouncer 1.24.1'); {what}")
    return Binary(reply.version, (str(program),), f"given path {program}")


def _in_cache(
    wanted: Version, store: Path, attempts: list[str], broken: list[tuple[Path, str]]
) -> Binary | None:
    """The newest cached pgbouncer matching `wanted` that works; the ones that do not go to `broken`."""
    versions = []
    with contextlib.suppress(OSError):
        for entry in store.iterdir():
            try:
                versions.append(Version.parse(entry.name))
            except UsageError:
                continue
    for version in sorted((v for v in versions if wanted.matches(v)), reverse=True):
        folder = store / str(version)
        binary, why = cached_binary(folder, version)
        if binary is not None:
            return binary
        broken.append((folder, why))
        attempts.append(f"cached PgBouncer {version} in {folder} ({why})")
    attempts.append(f"cache {store} (no working {wanted})")
    return None


def cached_binary(folder: Path, version: Version) -> tuple[Binary | None, str]:
    """The pgbouncer in a cache folder if it runs and reports that folder's version, else why not."""
    try:
        argv = stored_argv(folder)
    except LeakcheckError as exc:
        return None, f"cannot be run: {exc}"
    if argv is None:
        return None, "holds no pgbouncer"
    reply = check_program(argv)
    if reply.version is None:
        return None, f"does not run ({reply})"
    if reply.version != version:
        return None, f"reports {reply.version}, not {version}"
    return Binary(version, argv, f"cache: {stored_origin(folder)}"), ""


def _on_path(wanted: Version, attempts: list[str]) -> Binary | None:
    places = (shutil.which("pgbouncer"), "/usr/sbin/pgbouncer")  # Debian's, often not on a user's PATH
    candidates = [p for p in places if p and os.access(p, os.X_OK)]
    for path in dict.fromkeys(candidates):
        reply = check_program([path])
        if reply.version is not None and wanted.matches(reply.version):
            return Binary(reply.version, (path,), f"installed ({path})")
        attempts.append(f"{path} (is {reply})")
    if not candidates:
        attempts.append("PATH (no pgbouncer)")
    return None


def _checked(folder: Path, wanted: Version, what: str) -> Binary:
    """The pgbouncer a source just put in the cache, if it works and is the version asked for."""
    binary, why = cached_binary(folder, Version.parse(folder.name))
    if binary is None:
        raise ProvisionError(f"{what} gave a pgbouncer that {why}")
    if not wanted.matches(binary.version):
        raise ProvisionError(f"{what} gave PgBouncer {folder.name}, not {wanted} (kept in the cache)")
    return Binary(binary.version, binary.argv, stored_origin(folder))


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
