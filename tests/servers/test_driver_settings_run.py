"""Driver settings as matrix axes (--driver-set), end to end on real servers."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.servers

ONE = ["--pg=16", "--bouncer=1.24", "--controls=no", "--probes=protocol_prepare", "--results=r.json", "-v"]


def test_a_driver_setting_reaches_the_driver_and_names_its_cell(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess(*ONE, "--drivers=psycopg,asyncpg",
                                          "--driver-set=psycopg:prepare_threshold=None,5",
                                          "--driver-set=asyncpg:statement_cache_size=0")
    result.stdout.fnmatch_lines_random([
        "*test_leak?pg16.*-pgbouncer1.24.*-psycopg3.*[[]prepare_threshold=None[]]-protocol_prepare*",
        "*test_leak?pg16.*-pgbouncer1.24.*-psycopg3.*[0-9]-protocol_prepare*",  # the default: the id as before
        "*test_leak?pg16.*-pgbouncer1.24.*-asyncpg0.*[[]statement_cache_size=0[]]-protocol_prepare*",
        "*prepare_threshold=None is no longer needed*",
    ])
    outcomes = json.loads((pytester.path / "r.json").read_text())["outcomes"]
    measured = {(o["driver"], tuple(map(tuple, o["driver_settings"]))): o for o in outcomes}
    assert set(measured) == {("psycopg", (("prepare_threshold", "None"),)), ("psycopg", ()),
                             ("asyncpg", (("statement_cache_size", "0"),))}
    # Neither driver prepares with these settings: the probe says so instead of a verdict.
    for tuned in (measured[("psycopg", (("prepare_threshold", "None"),))],
                  measured[("asyncpg", (("statement_cache_size", "0"),))]):
        assert tuned["verdict"] == "not_applicable" and tuned["evidence"].startswith("the driver never prepared")
    assert measured[("psycopg", ())]["verdict"] != "error"  # the default prepares: a measurement


@pytest.mark.parametrize(("axis", "message"), [
    ("psycopg:prepare_treshold=None", "psycopg has no setting 'prepare_treshold'; its settings are: "
                                      "prepare_threshold, prepared_max"),
    ("psycopg:prepare_threshold=never", "a whole number such as 5, or None"),
    ("pgjdbc:prepareThreshold=0", "pgjdbc is not among --drivers"),
])
def test_a_driver_setting_leakcheck_cannot_run_is_one_line_before_anything_starts(
    pytester: pytest.Pytester, axis: str, message: str,
) -> None:
    result = pytester.runpytest_inprocess(*ONE, "--drivers=psycopg", f"--driver-set={axis}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and message in errors[0]
