"""Every PgBouncer release from 1.17.0 on, with the sha256 upstream publishes beside its tarball (pure).

Upstream keeps each release at files/<version>/pgbouncer-<version>.tar.gz under
https://www.pgbouncer.org/downloads/, with `<tarball>.sha256` beside it (`<hex>  <file name>`).
The table below is written by scripts/update-pgbouncer-releases from that page and those files;
a release whose .sha256 could not be read when the table was written has no pin (None) and is
verified against the .sha256 published beside it only.

Upstream's folder 1.23.1 also holds a pgbouncer-1.23.0.tar.gz: the first 1.23.1 tarball, built
from the old tag (it reports 1.23.0). Releases here are always the file named after its folder.
"""

from __future__ import annotations

from dataclasses import dataclass

from leakcheck.model.errors import ProvisionError
from leakcheck.model.versions import Version

#: (version, sha256 upstream publishes beside its tarball, or None when none was read)
_TABLE: tuple[tuple[str, str | None], ...] = (
    # BEGIN RELEASES (written by scripts/update-pgbouncer-releases)
    ("1.17.0", "657309b7bc5c7a85cbf70a9a441b535f7824123081eabb7ba86d00349a256e23"),
    ("1.18.0", "9349c9e59f6f88156354f4f6af27cdb014a235b00ae184cbaa37688bd0df544c"),
    ("1.19.0", "af0b05e97d0e1fd9ad45fe00ea6d2a934c63075f67f7e2ccef2ca59e3d8ce682"),
    ("1.19.1", "3c234133bc24cb540e256b144653f43860edea77602da124c4123b31e5d7a8fe"),
    ("1.20.0", "e70d5a7cb8b71dd7dbabfd3571d71a4b6b99f2e85d8d71af1e734f6d86635f0e"),
    ("1.20.1", "24992cf557d73426d7048698dffc7b019e6364d4d8757ae2cf5e2471286a2088"),
    ("1.21.0", "7e1dd620c8d85a8490aff25061d5055d7aef9cf3e8bfe2d9e7719b8ee59114e2"),
    ("1.22.0", "c6ee37a8d7ddbebbf8442d8f08ec07c3da46afb2aae3967388c1481698a77858"),
    ("1.22.1", "2b018aa6ce7f592c9892bb9e0fd90262484eb73937fd2af929770a45373ba215"),
    ("1.23.0", "1804219c301ef035e7f41ea9aff1e5180b4baf8845d61061e9a1085936323226"),
    ("1.23.1", "1963b497231d9a560a62d266e4a2eae6881ab401853d93e5d292c3740eec5084"),
    ("1.24.0", "e76adf941a3191a416e223c0b2cdbf73159eef80a2a32314af6fbd82e41a1d41"),
    ("1.24.1", "da72a3aba13072876d055a3e58dd4aba4a5de4ed6148e73033185245598fd3e0"),
    ("1.25.0", "290bad449e4580f0174d3677c26c1076d4ce5dd7ca116ae1fca10272ef74d10e"),
    ("1.25.1", "6e566ae92fe3ef7f6a1b9e26d6049f7d7ca39c40e29e7b38f6d5500ae15d8465"),
    ("1.25.2", "924ad35113fd0a71c8e2dbe85b5d03445532e2b7b37a9f8a48983beea238b332"),
    ("1.26.0", "afd25dd61ee6775d37b40629b87ce08736b3e6955f3057bb212e410fbf21c71d"),
    ("1.26.1", None),
    # END RELEASES
)


@dataclass(frozen=True, order=True)
class Release:
    """One upstream release and the checksum leakcheck pins for its tarball (None: not pinned)."""

    version: Version
    sha256: str | None = None


RELEASES: tuple[Release, ...] = tuple(sorted(Release(Version.parse(v), s) for v, s in _TABLE))


class UnknownRelease(ProvisionError):
    """The table has no release matching a major.minor (or major) version."""


def releases_matching(wanted: Version, table: tuple[Release, ...] = RELEASES) -> list[Release]:
    """The releases `wanted` matches (1.24 -> 1.24.0, 1.24.1), oldest first."""
    return sorted(r for r in table if wanted.matches(r.version))


def find_release(version: Version, table: tuple[Release, ...] = RELEASES) -> Release | None:
    """The table's entry for exactly `version`, else None."""
    return next((r for r in table if r.version == version), None)


def pick_release(wanted: Version, table: tuple[Release, ...] = RELEASES) -> Release:
    """The release to download for `wanted`: itself when exact, else the newest of its series.

    An exact version (three numbers or more) the table does not know is returned unpinned, so a
    release newer than the table can still be downloaded (checked against its published .sha256).
    A shorter version with no release in the table raises UnknownRelease.
    """
    if len(wanted.parts) >= 3:
        return find_release(wanted, table) or Release(wanted, None)
    matching = releases_matching(wanted, table)
    if not matching:
        raise UnknownRelease(unknown_release(wanted, table))
    return matching[-1]


def unknown_release(wanted: Version, table: tuple[Release, ...] = RELEASES) -> str:
    """One line on what the table knows instead of `wanted`: the releases of its series, or the series."""
    series = wanted.prefix(2) if len(wanted.parts) >= 2 else wanted
    same = [str(r.version) for r in releases_matching(series, table)]
    if same and series != wanted:
        return (
            f"leakcheck's PgBouncer release table has no {wanted} (its {series} releases: {', '.join(same)}); "
            "ask for one of those, or run scripts/update-pgbouncer-releases if it is newer"
        )
    minors = sorted({r.version.prefix(2) for r in table})
    known = f"it knows {minors[0]} to {minors[-1]}, newest {max(table).version}" if minors else "it is empty"
    exact = f"{wanted}.0" if len(wanted.parts) == 2 else "X.Y.Z"
    return (
        f"leakcheck's PgBouncer release table has no {wanted} release ({known}); ask for an exact "
        f"release such as {exact} to download it anyway, or run scripts/update-pgbouncer-releases"
    )
