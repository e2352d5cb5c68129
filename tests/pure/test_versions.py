"""Version numbers and option values (hypothesis for the parsers)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leakcheck.model.errors import UsageError
from leakcheck.model.versions import Version, parse_spec, parse_spec_list, version_in_output

parts = st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=4)


@given(parts)
def test_a_version_prints_back_to_what_was_parsed(numbers: list[int]) -> None:
    text = ".".join(map(str, numbers))
    assert str(Version.parse(text)) == text


@given(parts, parts)
def test_a_version_matches_every_release_that_starts_with_it(head: list[int], tail: list[int]) -> None:
    short = Version(tuple(head))
    assert short.matches(Version(tuple(head + tail)))


def test_a_minor_release_does_not_match_a_neighbour() -> None:
    assert not Version.parse("1.2").matches(Version.parse("1.24.1"))
    assert Version.parse("16").matches(Version.parse("16.14"))
    assert not Version.parse("16.1").matches(Version.parse("16.14"))


def test_versions_order_numerically() -> None:
    assert Version.parse("1.9") < Version.parse("1.18.0") < Version.parse("1.24.1")


@given(st.text())
def test_parsing_any_text_either_works_or_raises_a_usage_error(text: str) -> None:
    try:
        parse_spec_list(text, "--pg")
    except UsageError as exc:
        assert "--pg" in str(exc)


def test_a_path_is_taken_as_a_path() -> None:
    spec = parse_spec("/usr/lib/postgresql/16/bin", "--pg")
    assert spec.path is not None and spec.version is None


def test_a_list_drops_duplicates_and_keeps_order() -> None:
    assert [s.raw for s in parse_spec_list("18,16,18", "--pg")] == ["18", "16"]


@pytest.mark.parametrize("bad", ["", "16,", "sixteen", "1..2", ",18"])
def test_bad_values_name_the_option_and_the_expected_form(bad: str) -> None:
    with pytest.raises(UsageError, match="--bouncer"):
        parse_spec_list(bad, "--bouncer")


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("postgres (PostgreSQL) 16.14", "16.14"),
        ("PgBouncer 1.24.1\nlibevent 2.1.12-stable\nadns: c-ares 1.34.5", "1.24.1"),
        ("pgbouncer version 1.18.0", "1.18.0"),
    ],
)
def test_the_version_is_read_from_version_output(output: str, expected: str) -> None:
    assert str(version_in_output(output)) == expected



@pytest.mark.parametrize("bad", ["１６", "16.a", "1.2٤", "१६", "16.14.1.2.3", "16 .14", "16,1.2٤"])
def test_a_version_is_ascii_digits_and_dots_only(bad: str) -> None:
    with pytest.raises(UsageError, match="--pg"):
        parse_spec_list(bad, "--pg")


def test_a_version_in_text_is_read_from_ascii_digits_only() -> None:
    assert version_in_output("PgBouncer ١.٢٤") is None
    with pytest.raises(UsageError):
        Version.parse("１.２")
