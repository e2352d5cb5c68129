"""PgBouncer release tarballs: where upstream publishes them, and the local ones a user names.

Both backends use these (the native backend builds from a tarball; the containers backend copies
one into its image build).
"""

from __future__ import annotations

import re
from pathlib import Path

from leakcheck.model.errors import UsageError
from leakcheck.model.versions import Version

UPSTREAM_TARBALL_URL = "https://www.pgbouncer.org/downloads/files/{version}/pgbouncer-{version}.tar.gz"
#: A tarball file, or a folder of pgbouncer-X.Y.Z.tar.gz; several joined with ":".
TARBALLS_ENV = "LEAKCHECK_PGBOUNCER_TARBALLS"
_TARBALL = re.compile(r"^pgbouncer[-_](\d+\.\d+\.\d+)(?:\.orig)?\.tar\.gz$")


def local_tarballs(setting: str | None) -> dict[Version, Path]:
    """The PgBouncer release tarballs named by $LEAKCHECK_PGBOUNCER_TARBALLS, by version.

    Each ':'-separated item is a file or a folder; names are pgbouncer-X.Y.Z.tar.gz or Debian's
    pgbouncer_X.Y.Z.orig.tar.gz (the same upstream tarball).
    """
    found: dict[Version, Path] = {}
    for item in (setting or "").split(":"):
        if not item.strip():
            continue
        path = Path(item.strip()).expanduser()
        if path.is_dir():
            files = sorted(path.iterdir())
        elif path.is_file():
            if not _TARBALL.match(path.name):
                raise UsageError.bad_value(
                    TARBALLS_ENV, item, "files named pgbouncer-X.Y.Z.tar.gz, or folders of them"
                )
            files = [path]
        else:
            raise UsageError.bad_value(TARBALLS_ENV, item, "an existing file or folder")
        for file in files:
            match = _TARBALL.match(file.name)
            if match and file.is_file():
                found.setdefault(Version.parse(match.group(1)), file)
    return found
