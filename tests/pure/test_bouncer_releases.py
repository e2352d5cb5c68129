"""The PgBouncer release table and verified downloads (pure, or file:// URLs: no network)."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from pathlib import Path

import pytest

from leakcheck.model.versions import Version
from leakcheck.provision.containers import images as img
from leakcheck.provision.pgbouncer.download import (
    DownloadError,
    fetch_verified,
    parse_checksum_file,
    unpack_problem,
    url_file_name,
)
from leakcheck.provision.pgbouncer.releases import (
    RELEASES,
    Release,
    UnknownRelease,
    find_release,
    pick_release,
    releases_matching,
    unknown_release,
)

V = Version.parse
HEX_A, HEX_B = "a" * 64, "b" * 64
TABLE = (
    Release(V("1.20.0"), HEX_A),
    Release(V("1.20.1"), HEX_B),
    Release(V("1.21.0"), HEX_A),
    Release(V("1.22.0"), None),
)


# --- the table ---------------------------------------------------------------------------------


def test_the_table_starts_at_1_17_0_and_holds_each_exact_release_once_in_order() -> None:
    versions = [r.version for r in RELEASES]
    assert versions[0] == V("1.17.0")
    assert versions == sorted(set(versions))
    assert all(len(v.parts) == 3 for v in versions)


def test_every_pin_in_the_table_is_a_lower_case_sha256_or_none() -> None:
    assert all(r.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", r.sha256) for r in RELEASES)
    assert len({r.sha256 for r in RELEASES if r.sha256}) == len([r for r in RELEASES if r.sha256])


def test_the_table_knows_the_releases_published_up_to_1_26_1() -> None:
    known = {str(r.version) for r in RELEASES}
    for release in ("1.17.0", "1.18.0", "1.19.0", "1.19.1", "1.20.0", "1.20.1", "1.21.0", "1.22.0", "1.22.1",
                    "1.23.0", "1.23.1", "1.24.0", "1.24.1", "1.25.0", "1.25.1", "1.25.2", "1.26.0", "1.26.1"):
        assert release in known


def test_a_major_minor_version_picks_the_newest_release_of_its_series() -> None:
    assert pick_release(V("1.20"), TABLE) == Release(V("1.20.1"), HEX_B)
    assert pick_release(V("1.21"), TABLE).version == V("1.21.0")
    assert pick_release(V("1"), TABLE).version == V("1.22.0")


def test_an_exact_version_picks_itself_with_its_pin() -> None:
    assert pick_release(V("1.20.0"), TABLE) == Release(V("1.20.0"), HEX_A)
    assert find_release(V("1.20.0"), TABLE) == Release(V("1.20.0"), HEX_A)
    assert pick_release(V("1.22.0"), TABLE) == Release(V("1.22.0"), None)


def test_an_exact_version_the_table_does_not_know_is_still_picked_without_a_pin() -> None:
    assert pick_release(V("1.20.7"), TABLE) == Release(V("1.20.7"), None)
    assert find_release(V("1.20.7"), TABLE) is None


def test_a_series_the_table_does_not_know_is_a_one_line_error_naming_what_it_knows() -> None:
    with pytest.raises(UnknownRelease) as caught:
        pick_release(V("1.23"), TABLE)
    message = str(caught.value)
    assert "\n" not in message
    assert "has no 1.23 release (it knows 1.20 to 1.22, newest 1.22.0)" in message
    assert "1.23.0" in message and "scripts/update-pgbouncer-releases" in message


def test_an_unknown_exact_version_is_told_the_releases_of_its_series() -> None:
    message = unknown_release(V("1.20.7"), TABLE)
    assert "has no 1.20.7 (its 1.20 releases: 1.20.0, 1.20.1)" in message


def test_the_releases_a_series_matches_are_listed_oldest_first() -> None:
    assert [str(r.version) for r in releases_matching(V("1.20"), TABLE)] == ["1.20.0", "1.20.1"]
    assert releases_matching(V("2"), TABLE) == []


def test_containers_build_the_newest_local_release_first_and_else_the_table_s() -> None:
    known = [r.version for r in TABLE]
    assert img.pick_build_version(V("1.20"), [V("1.20.0")], known) == V("1.20.0")
    assert img.pick_build_version(V("1.20"), [], known) == V("1.20.1")
    assert img.pick_build_version(V("1.23"), [], known) is None


# --- checksum files and downloads (file:// URLs: no network) -----------------------------------


def test_upstream_s_checksum_file_gives_the_digest_of_its_tarball() -> None:
    text = f"{HEX_A}  pgbouncer-1.24.1.tar.gz\n"
    assert parse_checksum_file(text, "pgbouncer-1.24.1.tar.gz") == HEX_A


def test_binary_mode_upper_case_a_bare_digest_and_several_lines_are_read() -> None:
    assert parse_checksum_file(f"{HEX_A.upper()} *pgbouncer-1.24.1.tar.gz", "pgbouncer-1.24.1.tar.gz") == HEX_A
    assert parse_checksum_file(f"{HEX_B}\n", "pgbouncer-1.24.1.tar.gz") == HEX_B
    two = f"{HEX_A}  pgbouncer-1.23.0.tar.gz\n{HEX_B}  pgbouncer-1.23.1.tar.gz\n"
    assert parse_checksum_file(two, "pgbouncer-1.23.1.tar.gz") == HEX_B


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "an empty checksum file"),
        ("<html><body>404 Not Found</body></html>", "not a sha256 checksum file"),
        ("abc123  pgbouncer-1.24.1.tar.gz", "not a sha256 checksum file"),
        (f"{HEX_A}  pgbouncer-1.24.0.tar.gz", "names pgbouncer-1.24.0.tar.gz, not pgbouncer-1.24.1.tar.gz"),
    ],
)
def test_a_malformed_checksum_file_is_a_one_line_error(text: str, said: str) -> None:
    with pytest.raises(DownloadError) as caught:
        parse_checksum_file(text, "pgbouncer-1.24.1.tar.gz")
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_the_file_name_of_a_url_is_its_last_path_part() -> None:
    assert url_file_name("https://h/downloads/files/1.24.1/pgbouncer-1.24.1.tar.gz?x=1") == "pgbouncer-1.24.1.tar.gz"
    assert url_file_name("file:///srv/mirror/pgbouncer%2D1.24.1.tar.gz") == "pgbouncer-1.24.1.tar.gz"


def _tarball(folder: Path, name: str = "pgbouncer-9.9.9.tar.gz") -> Path:
    path = folder / name
    with tarfile.open(path, "w:gz") as tar:
        data = bytes(range(256)) * 2000  # not very compressible: a cut lands inside the member
        info = tarfile.TarInfo("pgbouncer-9.9.9/configure")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_a_whole_tarball_unpacks_and_a_cut_or_foreign_one_does_not(tmp_path: Path) -> None:
    whole = _tarball(tmp_path)
    assert unpack_problem(whole) is None
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert unpack_problem(cut)
    foreign = tmp_path / "foreign.tar.gz"
    foreign.write_bytes(b"<html>not a tarball</html>")
    assert unpack_problem(foreign)


def _publish(tarball: Path, digest: str | None = None) -> str:
    digest = digest or hashlib.sha256(tarball.read_bytes()).hexdigest()
    Path(f"{tarball}.sha256").write_text(f"{digest}  {tarball.name}\n")
    return tarball.as_uri()


def test_a_download_that_matches_its_published_checksum_and_the_pin_is_kept(tmp_path: Path) -> None:
    source = _tarball(tmp_path)
    url = _publish(source)
    dest = tmp_path / "dest"
    dest.mkdir()
    got = fetch_verified(url, dest / source.name, hashlib.sha256(source.read_bytes()).hexdigest())
    assert got.read_bytes() == source.read_bytes()
    assert sorted(p.name for p in dest.iterdir()) == [source.name]


@pytest.mark.parametrize("case", ["published differs", "pin differs", "no checksum"])
def test_a_download_that_cannot_be_verified_is_a_one_line_error_and_leaves_nothing(tmp_path: Path, case: str) -> None:
    source = _tarball(tmp_path)
    url = _publish(source, HEX_A) if case == "published differs" else source.as_uri()
    if case == "pin differs":
        _publish(source)
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(DownloadError) as caught:
        fetch_verified(url, dest / source.name, HEX_B if case == "pin differs" else None)
    message = str(caught.value)
    assert "\n" not in message
    assert {"published differs": f"but {url}.sha256 gives {HEX_A}",
            "pin differs": f"but leakcheck's release table pins {HEX_B}",
            "no checksum": f"{url}.sha256: "}[case] in message
    assert list(dest.iterdir()) == []
