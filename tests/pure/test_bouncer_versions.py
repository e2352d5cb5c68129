"""Choosing a PgBouncer release from Debian's lists, and reading apt's and builds' output (pure)."""

import shutil
import signal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leakcheck.model.versions import Version
from leakcheck.provision.pgbouncer.admin import settles_cancels
from leakcheck.provision.pgbouncer.build import build_failure
from leakcheck.provision.pgbouncer.process import shutdown_signal
from leakcheck.provision.sources.debian import (
    DEFAULT_ARCHIVE,
    Available,
    DebianArchive,
    archive_source,
    depends_groups,
    parse_madison,
    parse_stanzas,
    upstream_of,
)
from leakcheck.provision.sources.debian_programs import choose_debian, debian_upstream

MADISON = """\
 pgbouncer |   1.26.1-1 | http://deb.debian.org/debian sid/main amd64 Packages
 pgbouncer | 1.24.1-1+deb13u2 | http://deb.debian.org/debian trixie/main amd64 Packages
 pgbouncer | 1.18.0-1+deb12u1 | http://deb.debian.org/debian bookworm/main amd64 Packages
 pgbouncer | 1.18.0-1+deb12u1 | http://deb.debian.org/debian bookworm/main Sources
 pgbouncer | 1.24.1-1+deb13u2 | http://deb.debian.org/debian trixie/main Sources
 pgbouncer |   1.26.1-1 | http://deb.debian.org/debian sid/main Sources
"""
AVAILABLE = parse_madison(MADISON)

numbers = st.lists(st.integers(min_value=0, max_value=99), min_size=2, max_size=3)
revisions = st.from_regex(r"[0-9][0-9a-z+.~]{0,12}", fullmatch=True)


def test_madison_lines_become_binary_and_source_entries_per_suite() -> None:
    assert AVAILABLE[1] == Available("pgbouncer", "1.24.1-1+deb13u2", "trixie", source=False)
    assert AVAILABLE[5] == Available("pgbouncer", "1.26.1-1", "sid", source=True)
    assert len(AVAILABLE) == 6


def test_lines_that_are_not_madison_entries_are_ignored() -> None:
    assert parse_madison("N: Unable to locate package pgbouncer\n\n") == []


@given(numbers, revisions, st.integers(min_value=0, max_value=3))
def test_the_upstream_release_is_the_debian_version_without_epoch_and_revision(
    parts: list[int], revision: str, epoch: int
) -> None:
    upstream = ".".join(map(str, parts))
    debian = f"{epoch}:{upstream}-{revision}" if epoch else f"{upstream}-{revision}"
    assert upstream_of(debian) == upstream
    assert debian_upstream(debian) == Version(tuple(parts))


def test_repacked_upstream_tarballs_keep_their_release_and_pre_releases_have_none() -> None:
    assert debian_upstream("1.21.0+dfsg-1") == Version((1, 21, 0))
    assert debian_upstream("1.25.0~rc1-1") is None
    assert debian_upstream("1.24.1") == Version((1, 24, 1))


def test_a_minor_version_chooses_the_newest_release_and_its_source_first() -> None:
    chosen = choose_debian(Version((1, 24)), AVAILABLE)
    assert [(a.suite, a.source) for a in chosen] == [("trixie", True), ("trixie", False)]


def test_an_exact_version_chooses_exactly_that_release() -> None:
    assert {a.version for a in choose_debian(Version((1, 18, 0)), AVAILABLE)} == {"1.18.0-1+deb12u1"}
    assert choose_debian(Version((1, 18, 1)), AVAILABLE) == []


def test_a_version_debian_does_not_have_chooses_nothing() -> None:
    assert choose_debian(Version((1, 21)), AVAILABLE) == []


def test_a_major_version_chooses_the_newest_minor() -> None:
    assert {a.version for a in choose_debian(Version((1,)), AVAILABLE)} == {"1.26.1-1"}


suites = st.sampled_from(["bookworm", "trixie", "sid"])


@given(st.lists(st.tuples(numbers, suites, st.booleans()), max_size=8))
def test_the_choice_is_the_newest_matching_release_with_sources_before_binaries(
    entries: list[tuple[list[int], str, bool]],
) -> None:
    available = [Available("pgbouncer", ".".join(map(str, p)) + "-1", s, src) for p, s, src in entries]
    wanted = Version((1,))
    chosen = choose_debian(wanted, available)
    releases = [v for a in available if (v := debian_upstream(a.version)) and wanted.matches(v)]
    assert {debian_upstream(a.version) for a in chosen} == ({max(releases)} if releases else set())
    kinds = [a.source for a in chosen]
    assert kinds == sorted(kinds, reverse=True)


def test_depends_become_alternatives_without_versions_or_architectures() -> None:
    stanza = {
        "Pre-Depends": "libc6 (>= 2.38)",
        "Depends": "libssl3t64 (>= 3.0.0), debconf (>= 0.5) | debconf-2.0,\n libfoo:any, libbar [amd64]",
    }
    expected = [["libc6"], ["libssl3t64"], ["debconf", "debconf-2.0"], ["libfoo"], ["libbar"]]
    assert depends_groups(stanza) == expected


def test_stanzas_are_split_on_blank_lines_and_join_continuation_lines() -> None:
    text = "Package: a\nDepends: x,\n y\n\nPackage: b\nVersion: 1\n"
    assert parse_stanzas(text) == [{"Package": "a", "Depends": "x,\ny"}, {"Package": "b", "Version": "1"}]


def test_the_archive_is_the_machines_debian_mirror_not_its_security_archive() -> None:
    deb822 = (
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian/\nSuites: bookworm\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
    keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
    assert archive_source(deb822) == ("http://mirror.example/debian", keyring)


def test_a_one_line_sources_list_also_names_the_archive() -> None:
    one_line = "# x\ndeb [arch=amd64] http://ftp.example/debian bookworm main\n"
    assert archive_source("", one_line) == ("http://ftp.example/debian", None)


def test_a_machine_without_a_debian_mirror_uses_debians_default_archive() -> None:
    ubuntu = "Types: deb\nURIs: http://archive.ubuntu.com/ubuntu\nSuites: noble\n"
    assert archive_source(ubuntu) == (DEFAULT_ARCHIVE, None)


def test_a_failed_configure_names_the_packages_to_install() -> None:
    log = "checking for libevent... no\nconfigure: error: Package requirements (libevent) were not met:\n"
    message = build_failure(log)
    assert message.startswith("Package requirements (libevent) were not met; install the build dependencies")
    assert "libevent-dev" in message and "\n" not in message


def test_a_failed_make_reports_its_last_error_line() -> None:
    log = "CC a.c\nsrc/a.c:1: error: boom\nmake: *** [all] Error 2\n"
    assert build_failure(log) == "make: *** [all] Error 2"


def test_immediate_shutdown_is_sigterm_before_1_23_and_sigquit_since() -> None:
    assert shutdown_signal(Version((1, 18, 0))) == signal.SIGTERM
    assert shutdown_signal(Version((1, 22, 1))) == signal.SIGTERM
    assert shutdown_signal(Version((1, 23, 0))) == signal.SIGQUIT
    assert shutdown_signal(Version((1, 26, 1))) == signal.SIGQUIT


def test_a_reset_waits_for_cancels_in_flight_before_1_24_1_only() -> None:
    # 1.18.0 crashes on a KILL with a cancel in flight (pgbouncer#801); 1.24.1 and 1.26.1 were measured safe
    assert settles_cancels(Version((1, 18, 0))) and settles_cancels(Version((1, 19, 1)))
    assert settles_cancels(Version((1, 24, 0)))
    assert not settles_cancels(Version((1, 24, 1))) and not settles_cancels(Version((1, 26, 1)))


def test_an_apt_folder_reached_through_a_symlink_writes_the_same_apt_conf(tmp_path: Path) -> None:
    real = tmp_path / "cache" / "apt"
    real.mkdir(parents=True)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "apt").symlink_to(real)
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("not a Debian-like system")
    assert DebianArchive(tmp_path / "other" / "apt")._conf() == DebianArchive(real)._conf()
