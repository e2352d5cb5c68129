"""Upstream's downloads page read, and the release table's text written back (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from leakcheck.model.errors import UsageError
from leakcheck.model.versions import Version
from leakcheck.provision.pgbouncer import release_page as page
from leakcheck.provision.pgbouncer.releases import RELEASES, Release

V = Version.parse
HEX_A, HEX_B = "a" * 64, "b" * 64
TABLE = (
    Release(V("1.20.0"), HEX_A),
    Release(V("1.20.1"), HEX_B),
    Release(V("1.21.0"), HEX_A),
    Release(V("1.22.0"), None),
)
MODULE = Path(__file__).resolve().parents[2] / "leakcheck" / "provision" / "pgbouncer" / "releases.py"


# Written for these tests in the shape of the downloads page (one table row per release).
PAGE = """<html><body><h1>Source releases</h1><table>
<tr><th colspan="4">PgBouncer 1.23</th></tr>
<tr><td><a href="files/1.23.1/pgbouncer-1.23.1.tar.gz">pgbouncer-1.23.1.tar.gz</a></td><td>2024-08-02</td>
  <td>700025 bytes</td><td><a href="files/1.23.1/pgbouncer-1.23.1.tar.gz.sha256">sha256</a></td></tr>
<tr><td><a href='files/1.23.1/pgbouncer-1.23.0.tar.gz'>an early 1.23.1</a></td></tr>
<tr><td><a class="dl" href="files/1.23.0/pgbouncer-1.23.0.tar.gz">pgbouncer-1.23.0.tar.gz</a></td></tr>
<tr><td><a href="/downloads/files/1.17.0/pgbouncer-1.17.0.tar.gz">pgbouncer-1.17.0.tar.gz</a></td></tr>
<tr><td><a href="files/1.16.1/pgbouncer-1.16.1.tar.gz">pgbouncer-1.16.1.tar.gz</a></td></tr>
<tr><td><a href="files/1.8/pgbouncer-1.8.tar.gz">pgbouncer-1.8.tar.gz</a></td></tr>
<tr><td><a href="https://apt.postgresql.org/">apt</a> <a name="top">x</a></td></tr>
</table></body></html>"""
PAGE_URL = "https://www.example.org/downloads/"


def test_the_page_s_release_links_become_absolute_tarball_urls_oldest_first() -> None:
    listed, _notes = page.parse_downloads_page(PAGE, PAGE_URL)
    assert listed == [
        page.Listed(V("1.17.0"), "https://www.example.org/downloads/files/1.17.0/pgbouncer-1.17.0.tar.gz"),
        page.Listed(V("1.23.0"), "https://www.example.org/downloads/files/1.23.0/pgbouncer-1.23.0.tar.gz"),
        page.Listed(V("1.23.1"), "https://www.example.org/downloads/files/1.23.1/pgbouncer-1.23.1.tar.gz"),
    ]


def test_a_link_whose_folder_and_file_name_disagree_is_skipped_with_a_note() -> None:
    _listed, notes = page.parse_downloads_page(PAGE, PAGE_URL)
    assert notes == ["skipped https://www.example.org/downloads/files/1.23.1/pgbouncer-1.23.0.tar.gz: "
                     "its folder says 1.23.1, its name 1.23.0"]


def test_rows_read_back_what_was_rendered_and_the_real_table_rerenders_unchanged() -> None:
    text = MODULE.read_text()
    assert page.read_rows(text) == sorted(RELEASES)
    assert page.replace_rows(text, page.read_rows(text)) == text
    assert page.render_rows(TABLE).splitlines()[-1] == '    ("1.22.0", None),'


def test_a_table_without_markers_or_with_a_foreign_line_is_refused() -> None:
    with pytest.raises(UsageError, match="no release table between"):
        page.read_rows("RELEASES = ()\n")
    with pytest.raises(UsageError, match="not \\('X.Y.Z', sha256 or None\\)"):
        page.read_rows(page.BEGIN + '    ("1.24.1", "short"),\n' + page.END)


def test_merging_adds_new_releases_and_fills_a_missing_pin() -> None:
    published = {V("1.22.0"): HEX_B, V("1.22.1"): None, V("1.20.0"): HEX_A}
    merged = page.merge(TABLE, [V("1.20.0"), V("1.22.0"), V("1.22.1")], published)
    assert merged.added == [V("1.22.1")] and merged.pinned == [V("1.22.0")] and merged.conflicts == []
    assert Release(V("1.22.0"), HEX_B) in merged.releases and Release(V("1.22.1"), None) in merged.releases


def test_merging_never_drops_an_entry_or_a_pin_and_reports_a_changed_one() -> None:
    merged = page.merge(TABLE, [V("1.20.0"), V("1.20.1")], {V("1.20.0"): HEX_B, V("1.20.1"): None})
    assert merged.releases == sorted(TABLE)
    assert merged.conflicts == [f"1.20.0: pinned {HEX_A}, upstream now publishes {HEX_B}"]
    assert "1.20.1: its .sha256 could not be read, the pinned checksum stays" in merged.kept
    assert "1.21.0: not on the downloads page, kept" in merged.kept
