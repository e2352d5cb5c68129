"""Choosing a PostgreSQL release from the npm package list (pure functions, no I/O)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leakcheck.model.errors import UsageError
from leakcheck.model.versions import Version, parse_spec
from leakcheck.provision.postgres.binaries import choose_npm_release, pg_version_of_npm, resolve_pg

RELEASES = [
    "15.18.0-beta.17",
    "16.1.1-beta.9",
    "16.1.1-beta.11",
    "16.13.0-beta.16",
    "16.13.0-beta.17",
    "16.14.0-beta.17",
    "17.10.0-beta.17",
    "18.0.0-beta.15",
    "18.4.0-beta.17",
]


def v(text: str) -> Version:
    return Version.parse(text)


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        ("16.14.0-beta.17", "16.14"),
        ("18.0.0-beta.15", "18.0"),
        ("15.5.1-beta.11", "15.5"),
        ("16.2.0", "16.2"),
    ],
)
def test_an_npm_release_maps_to_the_two_part_postgres_version(release: str, expected: str) -> None:
    assert pg_version_of_npm(release) == v(expected)


def test_a_pre_10_release_keeps_its_three_parts() -> None:
    assert pg_version_of_npm("9.6.24-beta.1") == v("9.6.24")


@pytest.mark.parametrize("text", ["", "latest", "16.x", "v16.14.0", "16.14.0-beta.17 extra"])
def test_text_that_is_not_a_release_maps_to_nothing(text: str) -> None:
    assert pg_version_of_npm(text) is None


def test_a_major_version_picks_the_newest_matching_npm_release() -> None:
    assert choose_npm_release(v("16"), RELEASES) == ("16.14.0-beta.17", v("16.14"))


def test_an_exact_version_picks_the_newest_build_of_that_release() -> None:
    assert choose_npm_release(v("16.13"), RELEASES) == ("16.13.0-beta.17", v("16.13"))
    assert choose_npm_release(v("16.1"), RELEASES) == ("16.1.1-beta.11", v("16.1"))


def test_release_order_is_numeric_not_textual() -> None:
    assert choose_npm_release(v("16"), ["16.9.0-beta.15", "16.10.0-beta.15"]) == (
        "16.10.0-beta.15",
        v("16.10"),
    )
    assert choose_npm_release(v("16.4"), ["16.4.0-beta.9", "16.4.0-beta.14"]) == ("16.4.0-beta.14", v("16.4"))


def test_a_final_release_beats_its_pre_releases() -> None:
    releases = ["16.4.0-alpha.30", "16.4.0", "16.4.0-beta.2", "16.4.0-rc.1"]
    assert choose_npm_release(v("16"), releases) == ("16.4.0", v("16.4"))


def test_a_version_npm_does_not_have_picks_nothing() -> None:
    assert choose_npm_release(v("19"), RELEASES) is None
    assert choose_npm_release(v("16.99"), RELEASES) is None
    assert choose_npm_release(v("16"), ["garbage", ""]) is None


release_text = st.builds(
    lambda major, minor, patch, tag, serial: f"{major}.{minor}.{patch}" + (f"-{tag}.{serial}" if tag else ""),
    st.integers(10, 20),
    st.integers(0, 30),
    st.integers(0, 2),
    st.sampled_from(["", "alpha", "beta", "rc"]),
    st.integers(0, 30),
)


@given(st.lists(release_text, max_size=30), st.integers(10, 20))
def test_the_chosen_release_matches_the_major_and_nothing_matching_is_newer(
    releases: list[str], major: int
) -> None:
    chosen = choose_npm_release(Version((major,)), releases)
    matching = [r for r in releases if r.startswith(f"{major}.")]
    if not matching:
        assert chosen is None
        return
    assert chosen is not None
    release, version = chosen
    assert release in matching
    assert version.parts[0] == major
    assert all((pg_version_of_npm(r) or v("0")) <= version for r in matching)


def test_a_path_that_does_not_exist_is_a_usage_error_naming_it() -> None:
    with pytest.raises(UsageError, match="/no/such/pg/bin does not exist"):
        resolve_pg(parse_spec("/no/such/pg/bin", "--pg"), Path("/no/such/cache"))
