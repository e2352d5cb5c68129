"""Odyssey and pgpool-II in the matrix: each with its own controls, version in the ids, settings as axes."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.servers


def verdicts(pytester: pytest.Pytester) -> dict[tuple[str, str, str], str]:
    data = json.loads((pytester.path / "r.json").read_text())
    return {(o["route"], o["pooler"]["label"] if o["pooler"] else "-", o["probe"]): o["verdict"]
            for o in data["outcomes"]}


def test_odyssey_runs_every_route_with_its_version_and_settings_in_the_ids(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess(
        "--pg=16", "--pooler=odyssey:1.5", "--drivers=psycopg", "--probes=custom_setting,set_local",
        "--pooler-set=odyssey:pool_discard=no", "--pooler-set=odyssey:pool_smart_discard=no",
        "--pooler-set=odyssey:pool_reserve_prepared_statement=no", "--results=r.json", "-v")
    result.stdout.fnmatch_lines_random([
        "*test_leak?pg16.*-odyssey1.5.*[[]pool_discard=no,pool_smart_discard=no,pool_reserve_prepared_statement=no"
        "[]]-psycopg*-custom_setting? *",
        "*test_control?pg16.*-odyssey1.5.*-session-psycopg*-custom_setting? PASSED*",
        "Odyssey 1.5.*: *",
    ])
    measured = verdicts(pytester)
    label = next(k[1] for k in measured if k[0] == "transaction")
    assert measured[("transaction", label, "set_local")] == "isolated"  # measured, whatever Odyssey discards
    assert measured[("session", label, "custom_setting")] == "isolated"  # the negative control holds here too
    assert measured[("transaction", label, "custom_setting")] in {"leaks", "lost", "isolated"}


def test_pgpool_says_per_probe_that_it_shares_no_server_between_connected_clients(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--pg=16", "--pooler=pgpool:4.3", "--drivers=psycopg",
                                          "--probes=statement_timeout,temp_table", "--results=r.json", "-rs")
    result.stdout.fnmatch_lines(["*not applicable: pgpool-II in session mode gave A and B different server "
                                 "connections while both were connected (A on pid *; B on pid *)*"])
    measured = verdicts(pytester)
    assert measured[("transaction", "pgpool4.3.5", "statement_timeout")] == "not_applicable"
    assert measured[("session", "pgpool4.3.5", "temp_table")] == "isolated"
    assert measured[("direct", "-", "temp_table")] == "isolated"


def test_an_odyssey_value_it_refuses_is_its_own_error_in_one_line(pytester: pytest.Pytester) -> None:
    # A name a team may set (an unknown one is refused before any server starts: test_pooler_doors.py).
    result = pytester.runpytest_inprocess("--pg=16", "--pooler=odyssey:1.5", "--drivers=psycopg", "--controls=no",
                                          "--probes=timezone", "--pooler-set=odyssey:workers=many")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Odyssey 1.5.* did not start: *(Odyssey counts lines from 0: `workers \"many\"`)*"])
