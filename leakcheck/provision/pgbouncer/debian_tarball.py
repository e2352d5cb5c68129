"""PgBouncer's upstream release tarball for image builds (docker/pgbouncer), from Debian's source packages.

Debian ships the upstream release tarball unchanged as pgbouncer_X.Y.Z.orig.tar.gz. It is kept as
DEST/pgbouncer-X.Y.Z.tar.gz, the name LEAKCHECK_PGBOUNCER_TARBALLS and docker/pgbouncer read; a
tarball already there for an exact version is used without asking Debian's archive again.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

from leakcheck.model.errors import ProvisionError
from leakcheck.model.versions import Version
from leakcheck.provision.sources.debian import SUITES, DebianArchive
from leakcheck.provision.sources.debian_programs import choose_debian, debian_upstream

log = logging.getLogger(__name__)


def debian_tarball(wanted: Version, cache: Path, dest: Path) -> Path:
    """DEST/pgbouncer-X.Y.Z.tar.gz for the newest release `wanted` matches that Debian has a source package of."""
    if len(wanted.parts) == 3 and _kept(dest / f"pgbouncer-{wanted}.tar.gz"):
        return dest / f"pgbouncer-{wanted}.tar.gz"
    archive = DebianArchive(cache / "apt")  # the lists the native backend uses too
    available = archive.available("pgbouncer")
    sources = [entry for entry in choose_debian(wanted, available) if entry.source]
    if not sources:
        have = sorted({v for a in available if a.source and (v := debian_upstream(a.version)) is not None})
        raise ProvisionError(
            f"Debian {', '.join(SUITES)} has no source package of PgBouncer {wanted} "
            f"(it has {', '.join(map(str, have)) or 'none'}): ask for one of those, or put the upstream "
            f"pgbouncer-X.Y.Z.tar.gz into {dest} yourself"
        )
    entry = sources[0]
    target = dest / f"pgbouncer-{debian_upstream(entry.version)}.tar.gz"
    if _kept(target):
        return target
    dest.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".debian-", dir=dest))
    try:
        log.info(f"downloading the Debian {entry.suite} source package pgbouncer {entry.version} ...")
        os.replace(archive.download_source("pgbouncer", entry.version, work), target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _kept(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0
