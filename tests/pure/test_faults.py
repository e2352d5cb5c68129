"""The machine-fault table: which SQLSTATEs a probe sees are the machine's, never a verdict."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leakcheck.model.faults import RULES, Kind, kind, machine_fault

CONCEPTS = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"


@pytest.mark.parametrize("sqlstate", ["53100", "53200", "53300", "53400", "58030", "58P01", "XX000", "XX001",
                                      "F0000", "57P02", "57P03"])
def test_a_resource_system_or_internal_error_is_a_machine_fault(sqlstate: str) -> None:
    assert machine_fault(sqlstate) is not None


@pytest.mark.parametrize("sqlstate", ["42P05", "26000", "34000", "55000", "55P03", "42501", "25006", "23503",
                                      "22023", "57014", "40P01", "0A000"])
def test_an_error_the_feature_raises_is_a_measurement(sqlstate: str) -> None:
    assert machine_fault(sqlstate) is None


@pytest.mark.parametrize("sqlstate", ["08006", "08003", "08P01", "57P01", "57P05", "25P03"])
def test_a_session_end_is_a_fault_unless_the_step_observes_it(sqlstate: str) -> None:
    assert machine_fault(sqlstate) is not None
    assert machine_fault(sqlstate, session_end_observed=True) is None


def test_no_sqlstate_is_a_session_end_only_when_the_connection_is_closed() -> None:
    assert machine_fault("?????") is None  # e.g. a driver that cannot decode a value
    assert machine_fault("?????", closed=True) is not None
    assert machine_fault("?????", closed=True, session_end_observed=True) is None


def test_a_code_rule_wins_over_its_class_rule() -> None:
    assert kind("57014")[0] is Kind.MEASURED
    assert kind("57P02")[0] is Kind.MACHINE
    assert kind("57P01")[0] is Kind.SESSION_END


def test_the_concepts_page_shows_the_same_table_as_the_code() -> None:
    text = CONCEPTS.read_text(encoding="utf-8")
    shown = set(re.findall(r"^\| `([0-9A-Z]{2}|[0-9A-Z]{5})` \| (\w+) \|", text, re.MULTILINE))
    assert shown == {(code, found.value) for code, found, _ in RULES}
