"""Reporters and the expected-verdict gate: pure functions over outcomes."""

import json
from pathlib import Path

import pytest

from leakcheck.gate import expectations
from leakcheck.gate.baseline import Expectation
from leakcheck.gate.judge import problem
from leakcheck.model.errors import UsageError
from leakcheck.model.target import Route
from leakcheck.model.verdicts import Fact, Outcome, Verdict
from leakcheck.probes import PROBES
from leakcheck.reports.terminal import render_counts, render_matrix
from tests.pure.outcomes import make

PROBE = {p.id: p for p in PROBES}


def outcome(probe: str, verdict: Verdict, pg: str = "16.14", bouncer: str = "1.24.1", driver: str = "psycopg",
            route: Route = Route.TRANSACTION) -> Outcome:
    return make(probe, pg, bouncer, route, driver, verdict, f"{probe} evidence")


def test_the_matrix_has_probes_as_rows_and_pooler_driver_columns_per_pg() -> None:
    text = render_matrix([
        outcome("search_path", Verdict.LEAKS),
        outcome("search_path", Verdict.ISOLATED, driver="asyncpg"),
        outcome("timezone", Verdict.ISOLATED, bouncer="1.18.0"),
    ])
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("PostgreSQL 16.14"))
    assert header.split()[2:] == ["pgbouncer1.18.0/psycopg", "pgbouncer1.24.1/asyncpg", "pgbouncer1.24.1/psycopg"]
    row = next(line for line in lines if line.startswith("search_path"))
    assert row.split()[1:] == ["-", "isolated", "LEAKS"]


def test_controls_are_counted_per_route() -> None:
    text = render_matrix([
        outcome("timezone", Verdict.ISOLATED, route=Route.DIRECT, bouncer=""),
        outcome("set_role", Verdict.LEAKS, route=Route.SESSION),
        outcome("set_role", Verdict.LEAKS, route=Route.SHARED, bouncer=""),
    ])
    assert "direct control (two direct sessions, must be isolated): 1 isolated" in text
    assert "session control (the pooler in session mode, must be isolated): 1 leaks" in text
    assert "shared control (A and B on one direct session): 1 leaks" in text


def test_a_cell_shows_the_facts_besides_its_verdict_and_security_probes_are_marked() -> None:
    broke = make("protocol_prepare", "16.14", "1.18.0", Route.TRANSACTION, "psycopg", Verdict.BREAKS, "e",
                    facts=(Fact.BROKE, Fact.LEAKED))
    secret = make("rls_tenant", "16.14", "1.18.0", Route.TRANSACTION, "psycopg", Verdict.LEAKS, "e",
                     facts=(Fact.LEAKED,), security=True)
    lines = render_matrix([broke, secret]).splitlines()
    assert next(line for line in lines if line.startswith("protocol_prepare")).split()[1] == "BREAKS+leaked"
    assert any(line.startswith("rls_tenant [security]") for line in lines)


def test_counts_name_each_verdict() -> None:
    assert render_counts([outcome("a", Verdict.LEAKS), outcome("b", Verdict.LEAKS),
                          outcome("c", Verdict.ERROR)]) == "1 error, 2 leaks"


def test_matrix_keys_use_the_pg_major_and_the_bouncer_minor() -> None:
    assert expectations.key(outcome("search_path", Verdict.LEAKS)) == "pg16/pgbouncer1.24/psycopg/search_path"


def test_a_recorded_matrix_loads_back_and_controls_are_not_recorded(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(expectations.dump([outcome("search_path", Verdict.LEAKS),
                                       outcome("timezone", Verdict.ISOLATED, route=Route.DIRECT)], path))
    assert expectations.load(path) == {"pg16/pgbouncer1.24/psycopg/search_path": Expectation(Verdict.LEAKS)}


def test_the_gate_passes_on_the_expected_verdict_and_explains_a_difference() -> None:
    expected = {"pg16/pgbouncer1.24/psycopg/search_path": Expectation(Verdict.LEAKS)}
    assert problem(PROBE["search_path"], outcome("search_path", Verdict.LEAKS), expected) is None
    diff = problem(PROBE["search_path"], outcome("search_path", Verdict.ISOLATED), expected)
    assert diff is not None and diff.startswith("the expected leaks went away")
    missing = problem(PROBE["timezone"], outcome("timezone", Verdict.ISOLATED), expected)
    assert missing is not None and "no expected verdict" in missing


@pytest.mark.parametrize("content", ["not json", json.dumps({"verdicts": {"k": "maybe"}}), json.dumps([])])
def test_a_broken_matrix_file_is_a_usage_error_naming_it(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(UsageError, match="bad.json"):
        expectations.load(path)


def test_a_missing_matrix_file_says_how_to_record_one(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--record="):
        expectations.load(tmp_path / "none.json")


def test_a_key_names_the_pooler_settings_and_the_driver_release() -> None:
    measured = make("search_path", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.LEAKS, "e",
                    driver_version="3.3.9", settings=(("max_prepared_statements", "0"),))
    assert expectations.key(measured) == "pg16/pgbouncer1.24[max_prepared_statements=0]/psycopg3.3/search_path"


def test_an_entry_without_a_driver_release_holds_for_every_release_and_a_release_entry_wins() -> None:
    measured = make("search_path", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.LEAKS, "e",
                    driver_version="3.3.9")
    anyone = {"pg16/pgbouncer1.24/psycopg/search_path": Expectation(Verdict.LEAKS)}
    assert problem(PROBE["search_path"], measured, anyone) is None
    release = {**anyone, "pg16/pgbouncer1.24/psycopg3.3/search_path": Expectation(Verdict.ISOLATED)}
    assert expectations.lookup(measured, release) == Expectation(Verdict.ISOLATED)


def test_keys_with_settings_and_driver_releases_load_back(tmp_path: Path) -> None:
    measured = make("search_path", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.NOT_APPLICABLE, "e",
                    driver_version="3.3.9", settings=(("pool_mode", "statement"),))
    path = tmp_path / "m.toml"
    path.write_text(expectations.dump([measured], path))
    assert expectations.load(path) == {"pg16/pgbouncer1.24[pool_mode=statement]/psycopg3.3/search_path":
                                       Expectation(Verdict.NOT_APPLICABLE)}


def test_long_columns_are_numbered_and_named_under_the_table() -> None:
    cells = [make("timezone", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.ISOLATED, "e",
                  driver_version="3.3.9", settings=(("max_prepared_statements", v), ("pool_mode", "transaction")))
             for v in ("0", "200")]
    lines = render_matrix(cells).splitlines()
    assert next(line for line in lines if line.startswith("PostgreSQL")).split()[2:] == ["(1)", "(2)"]
    assert "  (1) pgbouncer1.24.1[max_prepared_statements=0,pool_mode=transaction]/psycopg3.3.9" in lines
