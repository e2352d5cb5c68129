"""A lost write no error told the application (loses_writes) fails every gate a person did not write it into,
with a reason (pure: gate/judge.py, gate/expectations.py, gate/record.py)."""

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

PROBE = next(p for p in PROBES if p.id == "tx_free_before_commit")
KEY = "pg16/pgbouncer1.24/pdo8.2/tx_free_before_commit"


def lost() -> Outcome:
    return make("tx_free_before_commit", "16.14", "1.24.1", Route.TRANSACTION, "pdo", Verdict.LOSES_WRITES,
                "A's row is not in the database", driver_version="8.2.36", facts=(Fact.LOST_WRITE, Fact.SILENT))


def test_no_policy_accepts_a_lost_write_not_even_one_that_accepts_every_leak() -> None:
    found = judge(PROBE, lost(), Policy(required=frozenset()))
    assert found.fails and found.message.startswith("LOSES WRITES")


def test_a_baseline_that_accepts_leaks_there_does_not_accept_a_lost_write() -> None:
    found = judge(PROBE, lost(), Policy(expected={KEY: Expectation(Verdict.LEAKS, "we live with it")}))
    assert found.fails and "expected leaks, measured loses_writes" in found.message


def test_update_never_accepts_a_lost_write() -> None:
    found = judge(PROBE, lost(), Policy(expected={KEY: Expectation(Verdict.ISOLATED)}, update=True))
    assert found.fails


def test_a_baseline_entry_with_a_reason_accepts_it_as_an_expected_failure() -> None:
    found = judge(PROBE, lost(), Policy(expected={KEY: Expectation(Verdict.LOSES_WRITES, "PDO frees before COMMIT")}))
    assert found.kind is Kind.ACCEPTED and "PDO frees before COMMIT" in found.message


def test_a_baseline_entry_without_a_reason_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    path.write_text('format = 2\n\n["pg16/pgbouncer1.24"."pdo8.2"]\ntx_free_before_commit = "loses_writes"\n')
    with pytest.raises(UsageError, match="accepted only by hand, with a reason"):
        expectations.load(path)
    path.write_text('format = 2\n\n["pg16/pgbouncer1.24"."pdo8.2"]\n'
                    'tx_free_before_commit = { verdict = "loses_writes", reason = "known" }\n')
    assert expectations.load(path)[KEY].reason == "known"


def test_record_never_writes_a_lost_write_by_itself_and_keeps_one_a_person_wrote() -> None:
    fresh = record.plan({}, with_controls(lost()))
    assert KEY not in fresh.verdicts and "by hand" in fresh.unrecorded[KEY]
    kept = record.plan({KEY: Expectation(Verdict.LOSES_WRITES, "known")}, with_controls(lost()))
    assert kept.verdicts[KEY] == Expectation(Verdict.LOSES_WRITES, "known")


def test_a_control_that_loses_writes_says_so_and_not_that_the_probe_cannot_be_trusted() -> None:
    on_control = make("tx_free_before_commit", "16.14", "4.3.5", Route.SESSION, "asyncpg", Verdict.LOSES_WRITES,
                      "B's row is not in the database", facts=(Fact.LOST_WRITE, Fact.SILENT))
    found = judge(PROBE, on_control, Policy())
    assert found.fails and "LOSES WRITES on the session control too" in found.message
    assert "cannot be trusted" not in found.message
