"""Upstream's downloads page read, and the release table of bouncer_releases written (pure).

Used by scripts/update-pgbouncer-releases. The page (https://www.pgbouncer.org/downloads/) lists
every release as a link to files/<version>/pgbouncer-<version>.tar.gz with a link to its .sha256
beside it; only links whose folder and file name give the same version are releases (upstream's
folder 1.23.1 once linked a pgbouncer-1.23.0.tar.gz, a tarball that reports 1.23.0).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from html.parser import HTMLParser

from leakcheck.model.errors import UsageError
from leakcheck.model.versions import Version
from leakcheck.provision.pgbouncer.releases import Release

FIRST_RELEASE = Version((1, 17, 0))
BEGIN = "    # BEGIN RELEASES (written by scripts/update-pgbouncer-releases)\n"
END = "    # END RELEASES\n"
_LINK = re.compile(r"/files/(?P<folder>[^/]+)/pgbouncer-(?P<file>[^/]+)\.tar\.gz$")
_EXACT = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")
_ROW = re.compile(r'^    \("(?P<version>[0-9.]+)", (?:"(?P<sha>[0-9a-f]{64})"|None)\),$')


@dataclass(frozen=True)
class Listed:
    """A release the page links: its version and the absolute URL of its tarball."""

    version: Version
    tarball_url: str


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs.extend(value for name, value in attrs if name == "href" and value)


def parse_downloads_page(html: str, page_url: str) -> tuple[list[Listed], list[str]]:
    """The releases (X.Y.Z from FIRST_RELEASE on, oldest first) the page links, and notes on links skipped."""
    parser = _Links()
    parser.feed(html)
    parser.close()
    found: dict[Version, Listed] = {}
    notes: list[str] = []
    for href in parser.hrefs:
        url = urllib.parse.urljoin(page_url, href.strip())
        match = _LINK.search(urllib.parse.urlsplit(url).path)
        if not match or not _EXACT.match(match["folder"]):
            continue
        if match["folder"] != match["file"]:
            notes.append(f"skipped {url}: its folder says {match['folder']}, its name {match['file']}")
            continue
        version = Version.parse(match["folder"])
        if version >= FIRST_RELEASE:
            found.setdefault(version, Listed(version, url))
    return [found[v] for v in sorted(found)], notes


def render_rows(releases: Iterable[Release]) -> str:
    """The table's lines between BEGIN and END, oldest release first."""
    rows = []
    for release in sorted(releases):
        sha = f'"{release.sha256}"' if release.sha256 else "None"
        rows.append(f'    ("{release.version}", {sha}),\n')
    return "".join(rows)


def read_rows(module_text: str) -> list[Release]:
    """The releases in a releases.py text (the inverse of render_rows)."""
    begin, end = _markers(module_text)
    releases = []
    for line in module_text[begin:end].splitlines():
        row = _ROW.match(line)
        if not row:
            raise UsageError(f"the release table has a line that is not ('X.Y.Z', sha256 or None): {line.strip()!r}")
        releases.append(Release(Version.parse(row["version"]), row["sha"]))
    return releases


def replace_rows(module_text: str, releases: Iterable[Release]) -> str:
    """`module_text` with the table's lines replaced by those of `releases`."""
    begin, end = _markers(module_text)
    return module_text[:begin] + render_rows(releases) + module_text[end:]


def _markers(module_text: str) -> tuple[int, int]:
    start, stop = module_text.find(BEGIN), module_text.find(END)
    if start < 0 or stop < start:
        raise UsageError(f"no release table between {BEGIN.strip()!r} and {END.strip()!r} in the module")
    return start + len(BEGIN), stop


@dataclass(frozen=True)
class Merged:
    """The new table, and what changed or needs a maintainer's look."""

    releases: list[Release]
    added: list[Version]
    pinned: list[Version]
    kept: list[str]  # entries kept although upstream did not confirm them, and why
    conflicts: list[str]  # pins that differ from what upstream publishes now: never overwritten


def merge(current: Iterable[Release], listed: Iterable[Version], published: Mapping[Version, str | None]) -> Merged:
    """The table after reading upstream: every listed release with the checksum read for it.

    A release the table has but the page does not list is kept; a pin is never replaced by
    another (a conflict) nor dropped when upstream's .sha256 could not be read.
    """
    table = {r.version: r.sha256 for r in current}
    added, pinned, kept, conflicts = [], [], [], []
    for version in sorted(set(listed)):
        old, new = table.get(version), published.get(version)
        if version not in table:
            added.append(version)
            table[version] = new
        elif old is None and new is not None:
            pinned.append(version)
            table[version] = new
        elif old is not None and new is None:
            kept.append(f"{version}: its .sha256 could not be read, the pinned checksum stays")
        elif old is not None and new != old:
            conflicts.append(f"{version}: pinned {old}, upstream now publishes {new}")
    for version in sorted(set(table) - set(listed)):
        kept.append(f"{version}: not on the downloads page, kept")
    releases = [Release(v, s) for v, s in sorted(table.items())]
    return Merged(releases, added, pinned, kept, conflicts)
