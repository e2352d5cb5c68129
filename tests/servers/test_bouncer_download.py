"""PgBouncer releases downloaded through the release table, verified, built; and every way it fails.

A web server on 127.0.0.1 serves a real release tarball (Debian's orig tarball of 1.24.1, which is
upstream's tarball unchanged) under upstream's layout; $LEAKCHECK_PGBOUNCER_URL points at it.
The cache is a temp folder (its Debian apt set-up is the shared cache's, read as every run reads
it); the one build (about 20 s) is shared by the session.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from leakcheck.model.errors import ProvisionError
from leakcheck.model.versions import Version, parse_spec
from leakcheck.provision.base import Binary
from leakcheck.provision.containers import images as img
from leakcheck.provision.host.system import cache_root
from leakcheck.provision.pgbouncer.binaries import URL_ENV, resolve_bouncer
from leakcheck.provision.pgbouncer.debian_tarball import debian_tarball
from leakcheck.provision.pgbouncer.download import DownloadError, fetch_release, release_url
from leakcheck.provision.pgbouncer.releases import find_release
from leakcheck.provision.pgbouncer.tarballs import TARBALLS_ENV
from leakcheck.provision.sources.program_folder import check_program
from tests.servers.release_server import ReleaseServer, sha256

pytestmark = pytest.mark.servers

V = Version.parse


def pin(version: str) -> str:
    entry = find_release(V(version))
    assert entry is not None and entry.sha256 is not None, f"the table pins no checksum for {version}"
    return entry.sha256


@pytest.fixture(scope="session")
def orig_tarball(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """pgbouncer_1.24.1.orig.tar.gz from Debian trixie's source package (set-up from Debian's archive)."""
    return debian_tarball(V("1.24.1"), cache_root(), tmp_path_factory.mktemp("orig")).read_bytes()


@pytest.fixture(scope="session")
def server() -> Iterator[ReleaseServer]:
    with ReleaseServer() as running:
        yield running


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A temp cache: its pgbouncer store is new; its apt folder is the shared cache's (package lists only)."""
    root = tmp_path_factory.mktemp("cache")
    (root / "apt").symlink_to(cache_root() / "apt")
    yield root
    (root / "apt").unlink()


@dataclass(frozen=True)
class Built:
    binary: Binary
    requests: list[str]  # what the resolution asked the server for


@pytest.fixture(scope="session")
def built(server: ReleaseServer, cache: Path, orig_tarball: bytes) -> Built:
    """`--bouncer=1.24` resolved once through the table, downloaded from the server and built."""
    if shutil.which("cc") is None or shutil.which("make") is None:
        pytest.skip("building needs cc and make (scripts/bootstrap installs them)")
    server.put_release("1.24.1", orig_tarball, sha256(orig_tarball))
    start = len(server.requests)
    with pytest.MonkeyPatch.context() as env:
        env.setenv(URL_ENV, server.template)
        env.delenv(TARBALLS_ENV, raising=False)
        binary = resolve_bouncer(parse_spec("1.24", "--bouncer"), cache)
    return Built(binary, server.requests[start:])


def _entries(store: Path) -> set[str]:
    """What the store holds, but its lock file."""
    return {p.name for p in store.iterdir() if p.name != ".lock"} if store.is_dir() else set()


def test_debian_s_orig_tarball_is_upstream_s_tarball_pinned_in_the_table(orig_tarball: bytes) -> None:
    assert sha256(orig_tarball) == pin("1.24.1")


def test_a_verified_download_is_built_and_runs_printing_its_banner(built: Built, server: ReleaseServer) -> None:
    reply = check_program(built.binary.argv)
    assert reply.version == V("1.24.1") == built.binary.version
    assert f"built from {release_url(server.template, V('1.24.1'))} (sha256 verified)" in built.binary.origin


def test_a_major_minor_version_resolves_through_the_table_to_its_newest_release(built: Built) -> None:
    assert built.requests == [
        "/downloads/files/1.24.1/pgbouncer-1.24.1.tar.gz.sha256",
        "/downloads/files/1.24.1/pgbouncer-1.24.1.tar.gz",
    ]


def test_the_built_release_is_then_used_from_the_cache_without_asking_the_server(
    built: Built, server: ReleaseServer, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(URL_ENV, server.template)
    start = len(server.requests)
    again = resolve_bouncer(parse_spec("1.24.1", "--bouncer"), cache)
    assert (again.version, again.argv) == (built.binary.version, built.binary.argv)
    assert server.requests[start:] == []


def _cut(data: bytes) -> bytes:
    return data[: len(data) // 2]


# (--bouncer, the release the table picks, what the server holds, what the error says); every
# series here is one Debian does not have, so the whole list of attempts is reported.
CASES = {
    "upstream has no such release": (
        "1.21", "1.21.0", lambda t: (None, None, None), "{url}.sha256: HTTP 404 Not Found"),
    "the tarball is missing beside its checksum": (
        "1.17", "1.17.0", lambda t: (None, pin("1.17.0"), None), "{url}: HTTP 404 Not Found"),
    "the tarball differs from its published checksum": (
        "1.22", "1.22.1", lambda t: (t, pin("1.22.1"), None),
        "{url} has sha256 {got}, but {url}.sha256 gives " + pin("1.22.1")),
    "the published checksum differs from the table's pin": (
        "1.20", "1.20.1", lambda t: (t, sha256(t), None),
        "{url}.sha256 gives sha256 {got}, but leakcheck's release table pins " + pin("1.20.1")),
    "no checksum is published": (
        "1.19", "1.19.1", lambda t: (t, None, None), "{url}.sha256: HTTP 404 Not Found"),
    "the checksum file is not one": (
        "1.25", "1.25.2", lambda t: (t, b"<html>moved</html>\n", None), "{url}.sha256: not a sha256 checksum file"),
    "the server sends fewer bytes than it announced": (
        "1.23", "1.23.1", lambda t: (t, pin("1.23.1"), len(t) // 2),
        "{url}: the server announced {size} bytes but sent {half}"),
    "a cut tarball matches a checksum made of it but does not unpack": (
        "1.24.9", "1.24.9", lambda t: (_cut(t), sha256(_cut(t)), None),
        "{url} matches its checksum but does not unpack"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_download_that_fails_is_one_line_listing_every_attempt_and_caches_nothing(
    case: str, server: ReleaseServer, cache: Path, orig_tarball: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, release, serve, said = CASES[case]
    tarball, checksum, sent = serve(orig_tarball)
    server.put_release(release, tarball, checksum, sent)
    monkeypatch.setenv(URL_ENV, server.template)
    monkeypatch.delenv(TARBALLS_ENV, raising=False)
    store = cache / "pgbouncer"
    before = _entries(store)
    with pytest.raises(ProvisionError) as caught:
        resolve_bouncer(parse_spec(spec, "--bouncer"), cache)
    message = str(caught.value)
    url = release_url(server.template, V(release))
    expected = said.format(url=url, got=sha256(orig_tarball), size=len(orig_tarball), half=len(orig_tarball) // 2)
    assert "\n" not in message
    assert message.startswith(f"could not obtain PgBouncer {spec}: tried cache {store} (no working {spec}); ")
    assert f"; download {expected}" in message
    assert "; Debian bookworm, trixie, sid (has 1.18.0, 1.24.1, 1.26.1)" in message
    assert _entries(store) == before


def test_an_exact_release_the_table_does_not_know_says_what_its_series_has(
    server: ReleaseServer, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.put_release("1.21.7", None, None)
    monkeypatch.setenv(URL_ENV, server.template)
    with pytest.raises(ProvisionError, match=r"\(leakcheck's PgBouncer release table has no 1.21.7 "
                                             r"\(its 1.21 releases: 1.21.0\); "):
        resolve_bouncer(parse_spec("1.21.7", "--bouncer"), cache)


def test_the_containers_build_context_gets_the_tarball_the_same_verified_download_gives(
    server: ReleaseServer, orig_tarball: bytes, tmp_path: Path
) -> None:
    server.put_release("1.24.1", orig_tarball, sha256(orig_tarball))
    context, fetched = tmp_path / "context", tmp_path / "fetched"
    context.mkdir()
    fetched.mkdir()
    img.write_build_context(context, V("1.24.1"), fetch_release(V("1.24.1"), server.template, fetched))
    copied = context / "tarballs" / "pgbouncer-1.24.1.tar.gz"
    assert hashlib.sha256(copied.read_bytes()).hexdigest() == pin("1.24.1")
    server.put_release("1.24.1", _cut(orig_tarball), pin("1.24.1"))
    for leftover in fetched.iterdir():
        leftover.unlink()
    with pytest.raises(DownloadError, match="has sha256 .*, but .* gives "):
        fetch_release(V("1.24.1"), server.template, fetched)
    assert list(fetched.iterdir()) == []
    server.put_release("1.24.1", orig_tarball, sha256(orig_tarball))
