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
import shutil
import tempfile
from pathlib import Path

from leakcheck.model.errors import LeakcheckError
from leakcheck.model.versions import Spec, Version
from leakcheck.provision.base import Binary
from leakcheck.provision.pgbouncer.build import build_tarball
from leakcheck.provision.pgbouncer.download import DownloadError, fetch_release, release_url
from leakcheck.provision.pgbouncer.releases import UnknownRelease, pick_release
from leakcheck.provision.pgbouncer.tarballs import TARBALLS_ENV, UPSTREAM_TARBALL_URL, local_tarballs
from leakcheck.provision.sources.debian import Available, DebianArchive
from leakcheck.provision.sources.debian_programs import from_debian
from leakcheck.provision.sources.program_cache import checked, given_program, resolve_in_store
from leakcheck.provision.sources.programs import PGBOUNCER

log = logging.getLogger(__name__)

URL_ENV = "LEAKCHECK_PGBOUNCER_URL"

_HINT = (
    "Releases are downloaded from upstream (needs internet; a mirror: "
    f"{URL_ENV}, a URL template with {{version}}); offline, set {TARBALLS_ENV} to a pgbouncer-X.Y.Z.tar.gz "
    "or a folder of them (several joined with ':'), or give a path to a pgbouncer binary"
)


def resolve_bouncer(spec: Spec, cache: Path) -> Binary:
    """A pgbouncer of the version `spec` asks for (or at its path); ProvisionError listing what was tried.

    Every binary is checked by running it (`--version` must print PgBouncer's banner with the
    right version). A cached one that fails the check is rebuilt, saying so.
    """
    found = resolve_in_store(PGBOUNCER, spec, cache, "--bouncer", [_from_tarballs, _from_url, _from_debian], _HINT,
                             making="building or fetching", again="rebuilding it")
    if spec.version is not None:
        _note_newer_release(spec.version, found)
    return found


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
        return checked(folder, wanted, tarball.name, PGBOUNCER)
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
        return checked(folder, release.version, url, PGBOUNCER)
    except DownloadError as exc:
        attempts.append(f"download {exc}")  # the message starts with the URL
        log.info(f"could not download PgBouncer {release.version}: {exc}")
    except LeakcheckError as exc:
        attempts.append(f"{url} ({exc})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return None


def _from_debian(wanted: Version, store: Path, attempts: list[str]) -> Binary | None:
    """Debian's newest matching pgbouncer: a source package built, else a binary package with its libraries."""

    def build(archive: DebianArchive, entry: Available, work: Path, what: str) -> Path:
        log.info(f"downloading the {what} ...")
        tarball = archive.download_source("pgbouncer", entry.version, work)
        return build_tarball(tarball, store, f"built from {tarball.name} ({what})")

    return from_debian(PGBOUNCER, wanted, store, attempts, build)
