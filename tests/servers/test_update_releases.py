"""scripts/update-pgbouncer-releases against a web server on 127.0.0.1 playing upstream's site.

The server's downloads page is written here in the shape of upstream's (one row per release, a
link to the tarball and one to its .sha256); the checksums it publishes are the table's own, so
an unchanged upstream must leave the module byte for byte as it was.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakcheck.provision.pgbouncer.releases import RELEASES
from tests.servers.release_server import ReleaseServer, Served

pytestmark = pytest.mark.servers

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "update-pgbouncer-releases"
MODULE = ROOT / "leakcheck" / "provision" / "pgbouncer" / "releases.py"
NEW = "c0ffee" * 10 + "c0ff"


def _page(versions: list[str]) -> bytes:
    rows = "".join(
        f'<tr><td><a href="files/{v}/pgbouncer-{v}.tar.gz">pgbouncer-{v}.tar.gz</a></td><td>2026-01-01</td>'
        f'<td align="right">700000 bytes</td><td><a href="files/{v}/pgbouncer-{v}.tar.gz.sha256">sha256</a></td></tr>\n'
        for v in versions
    )
    old = '<tr><td><a href="files/1.16.1/pgbouncer-1.16.1.tar.gz">pgbouncer-1.16.1.tar.gz</a></td></tr>\n'
    return f"<html><body><h1>Source releases</h1><table>\n{rows}{old}</table></body></html>\n".encode()


@pytest.fixture
def upstream() -> Iterator[ReleaseServer]:
    """The table's releases, each .sha256 published as pinned (none for a release without a pin)."""
    with ReleaseServer() as server:
        for release in RELEASES:
            server.put_release(str(release.version), None, release.sha256)
        server.files["/downloads/"] = Served(_page([str(r.version) for r in reversed(RELEASES)]))
        yield server


@pytest.fixture
def module(tmp_path: Path) -> Path:
    copy = tmp_path / "bouncer_releases.py"
    copy.write_bytes(MODULE.read_bytes())
    return copy


def _run(server: ReleaseServer, module: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(SCRIPT), "--base-url", server.base, "--module", str(module), *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_an_upstream_with_nothing_new_leaves_the_table_byte_for_byte(upstream: ReleaseServer, module: Path) -> None:
    done = _run(upstream, module)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"the table is up to date ({len(RELEASES)} releases; without a pin ")
    assert module.read_bytes() == MODULE.read_bytes()
    assert _run(upstream, module, "--check").returncode == 0


def test_a_new_release_is_added_with_its_published_checksum(upstream: ReleaseServer, module: Path) -> None:
    upstream.put_release("1.26.2", None, NEW)
    upstream.files["/downloads/"] = Served(_page(["1.26.2", *(str(r.version) for r in RELEASES)]))
    check = _run(upstream, module, "--check")
    assert check.returncode == 1 and "out of date: added 1.26.2;" in check.stdout
    assert module.read_bytes() == MODULE.read_bytes()
    done = _run(upstream, module)
    assert done.returncode == 0, done.stderr
    assert f'    ("1.26.2", "{NEW}"),\n    # END RELEASES\n' in module.read_text()
    assert _run(upstream, module).stdout.startswith("the table is up to date")


def test_a_release_without_a_readable_checksum_is_added_without_a_pin_saying_so(
    upstream: ReleaseServer, module: Path
) -> None:
    upstream.files["/downloads/"] = Served(_page(["1.27.0", *(str(r.version) for r in RELEASES)]))
    done = _run(upstream, module)
    assert done.returncode == 0, done.stderr
    assert "note: 1.27.0: no checksum read (" in done.stderr and "HTTP 404" in done.stderr
    assert '    ("1.27.0", None),\n' in module.read_text()


def test_a_pin_that_upstream_no_longer_publishes_stops_the_script_and_changes_nothing(
    upstream: ReleaseServer, module: Path
) -> None:
    upstream.put_release("1.24.1", None, NEW)
    done = _run(upstream, module)
    assert done.returncode == 2
    assert "CONFLICT: 1.24.1: pinned " in done.stderr and f"upstream now publishes {NEW}" in done.stderr
    assert module.read_bytes() == MODULE.read_bytes()


def test_an_unreachable_site_is_one_line_and_exit_1(module: Path) -> None:
    with ReleaseServer() as empty:
        done = _run(empty, module)
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0 and "/downloads/: HTTP 404" in done.stderr
