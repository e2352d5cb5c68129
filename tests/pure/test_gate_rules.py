"""The upgrade gate's rules (pure): accepted leaks, differences both ways, --require, --update; the TOML baseline."""

from __future__ import annotations

from pathlib import Path

import pytest

from leakcheck.gate import expectations, record
from leakcheck.gate.baseline import Expectation
from leakcheck.gate.judge import Kind, Policy, judge
from leakcheck.model.errors import UsageError
from leakcheck.model.target import Route
from leakcheck.model.verdicts import Fact, Outcome, Verdict
from leakcheck.probes import PROBES
from tests.pure.outcomes import make, with_controls

PROBE = {p.id: p for p in PROBES}
KEY = "pg16/pgbouncer1.24/psycopg3.3/search_path"


def measured(verdict: Verdict, probe: str = "search_path") -> Outcome:
    return make(probe, "16.14", "1.24.1", Route.TRANSACTION, "psycopg", verdict, "B read 'lc_schema_a, public'",
                driver_version="3.3.9")


def gate(verdict: Verdict, reason: str = "", **rest: object) -> Policy:
    return Policy(expected={KEY: Expectation(verdict, reason)}, **rest)  # type: ignore[arg-type]


def test_an_accepted_leak_is_an_expected_failure_with_its_reason_and_evidence() -> None:
    found = judge(PROBE["search_path"], measured(Verdict.LEAKS), gate(Verdict.LEAKS, "we qualify every name"))
    assert found.kind is Kind.ACCEPTED
    assert found.message == "leaks, as the baseline expects (we qualify every name): B read 'lc_schema_a, public'"


def test_a_new_leak_fails() -> None:
    found = judge(PROBE["search_path"], measured(Verdict.LEAKS), gate(Verdict.ISOLATED))
    assert found.fails and found.message.startswith("new leaks: expected isolated, measured leaks")


def test_a_leak_that_went_away_fails_until_it_is_re_recorded() -> None:
    found = judge(PROBE["search_path"], measured(Verdict.ISOLATED), gate(Verdict.LEAKS))
    assert found.fails and "went away" in found.message and "--update" in found.message


def test_update_records_a_difference_instead_of_failing() -> None:
    assert judge(PROBE["search_path"], measured(Verdict.ISOLATED), gate(Verdict.LEAKS, update=True)).kind \
        is Kind.PASSED
    assert judge(PROBE["search_path"], measured(Verdict.LEAKS), gate(Verdict.ISOLATED, update=True)).kind \
        is Kind.ACCEPTED
    assert judge(PROBE["search_path"], measured(Verdict.ERROR), gate(Verdict.ISOLATED, update=True)).fails


def test_a_required_probe_must_be_isolated_even_when_the_baseline_accepts_its_leak() -> None:
    policy = gate(Verdict.LEAKS, required=frozenset({"search_path"}))
    found = judge(PROBE["search_path"], measured(Verdict.LEAKS), policy)
    assert found.fails and "required (--require) to be isolated" in found.message


def test_without_a_baseline_only_required_probes_must_be_isolated() -> None:
    policy = Policy(required=frozenset({"search_path"}))
    assert judge(PROBE["search_path"], measured(Verdict.LEAKS), policy).fails
    other = judge(PROBE["temp_table"], measured(Verdict.LEAKS, "temp_table"), policy)
    assert other.kind is Kind.ACCEPTED and "not required by --require" in other.message
    assert judge(PROBE["search_path"], measured(Verdict.ISOLATED), policy).kind is Kind.PASSED


@pytest.mark.parametrize("policy", [Policy(), gate(Verdict.ERROR), Policy(required=frozenset())])
def test_an_error_never_passes(policy: Policy) -> None:
    assert judge(PROBE["search_path"], measured(Verdict.ERROR), policy).fails


def test_not_applicable_is_a_skip_unless_the_baseline_expects_otherwise() -> None:
    assert judge(PROBE["search_path"], measured(Verdict.NOT_APPLICABLE), Policy()).kind is Kind.NOT_APPLICABLE
    assert judge(PROBE["search_path"], measured(Verdict.NOT_APPLICABLE), gate(Verdict.ISOLATED)).fails


def test_the_toml_baseline_reads_back_what_it_wrote_with_reasons(tmp_path: Path) -> None:
    entries = {KEY: Expectation(Verdict.LEAKS, 'accepted: "qualified" names'),
               "pg18/pgbouncer1.26[max_prepared_statements=0]/asyncpg/protocol_prepare": Expectation(Verdict.ISOLATED)}
    path = tmp_path / "prod.toml"
    path.write_text(expectations.render(entries, path))
    assert expectations.load(path) == entries
    text = path.read_text()
    assert '["pg16/pgbouncer1.24"."psycopg3.3"]' in text and "search_path = { verdict = " in text


def test_a_hand_written_toml_baseline_is_checked_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "prod.toml"
    path.write_text('format = 2\n["pg16/pgbouncer1.24".psycopg]\ntimezone = "sometimes"\n')
    with pytest.raises(UsageError) as caught:
        expectations.load(path)
    assert "has the verdict 'sometimes'" in str(caught.value) and "\n" not in str(caught.value)
    path.write_text('format = 2\n["pg16/pgbouncer1.24".psycopg]\ntimezone = { verdict = "leaks", why = "x" }\n')
    with pytest.raises(UsageError, match="unknown fields"):
        expectations.load(path)
    path.write_text('format = 2\n["pg16/pgbouncer1.24"]\npsycopg = "leaks"\n')
    with pytest.raises(UsageError, match="not a table of probes"):
        expectations.load(path)


def test_a_re_record_keeps_a_reason_while_the_verdict_stays_and_drops_it_when_it_changes() -> None:
    previous = {KEY: Expectation(Verdict.LEAKS, "accepted"),
                KEY.replace("search_path", "temp_table"): Expectation(Verdict.LEAKS, "accepted too")}
    plan = record.plan(previous, with_controls(measured(Verdict.LEAKS), measured(Verdict.ISOLATED, "temp_table")))
    assert plan.verdicts[KEY] == Expectation(Verdict.LEAKS, "accepted")
    assert plan.verdicts[KEY.replace("search_path", "temp_table")] == Expectation(Verdict.ISOLATED)
    assert any("reasons were dropped" in line for line in record.summary(Path("m.toml"), plan))


def test_a_new_probe_is_recorded_in_the_form_the_file_holds_its_cell_in() -> None:
    anyone = {"pg16/pgbouncer1.24/psycopg/timezone": Expectation(Verdict.ISOLATED)}
    plan = record.plan(anyone, with_controls(measured(Verdict.LEAKS)))  # search_path: no entry yet
    assert "pg16/pgbouncer1.24/psycopg/search_path" in plan.verdicts
    assert record.plan({}, with_controls(measured(Verdict.LEAKS))).verdicts.keys() == {KEY}


def test_a_positive_control_that_broke_and_also_leaked_shows_the_leak_and_passes() -> None:
    shared = make("cleanup_deallocate_all", "16.14", "", Route.SHARED, "asyncpg", Verdict.BREAKS,
                  "A: 26000 after its own session's DEALLOCATE ALL", facts=(Fact.BROKE, Fact.LEAKED))
    assert judge(PROBE["cleanup_deallocate_all"], shared, Policy()).kind is Kind.PASSED


def test_a_positive_control_that_broke_without_leaking_still_fails() -> None:
    shared = make("cleanup_deallocate_all", "16.14", "", Route.SHARED, "asyncpg", Verdict.BREAKS,
                  "A: 26000", facts=(Fact.BROKE,))
    assert judge(PROBE["cleanup_deallocate_all"], shared, Policy()).fails


def test_a_negative_control_that_broke_and_leaked_fails() -> None:
    direct = make("cleanup_deallocate_all", "16.14", "", Route.DIRECT, "asyncpg", Verdict.BREAKS,
                  "A: 26000", facts=(Fact.BROKE, Fact.LEAKED))
    assert judge(PROBE["cleanup_deallocate_all"], direct, Policy()).fails
