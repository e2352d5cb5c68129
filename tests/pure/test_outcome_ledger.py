"""The outcome ledger and the verdict it leads to (pure: probes/outcomes.py, model/verdicts.py)."""

from __future__ import annotations

from leakcheck.model.target import Route
from leakcheck.model.verdicts import Fact, Observation, Proof, ServerId, Slot, Verdict, classify, headline
from leakcheck.probes.outcomes import Ledger, Write

NOTHING = Observation(evidence="the probe saw nothing")
PROOFS = [Proof("a", "A", ServerId(1, "1")), Proof("b", "B", ServerId(1, "1"))]


def _wrote(ledger: Ledger, row: str, *, in_transaction: bool = False, failed: str | None = None) -> None:
    ledger.wrote(Write(row, "A", "INSERT"), in_transaction=in_transaction, failed=failed)


def test_a_row_reported_committed_and_missing_is_a_silent_lost_write_and_the_gravest_verdict() -> None:
    ledger = Ledger()
    _wrote(ledger, "r1")
    seen = ledger.facts(set(), NOTHING)
    assert {Fact.LOST_WRITE, Fact.SILENT} <= set(seen.facts)
    assert classify(Route.TRANSACTION, PROOFS, seen)[0] is Verdict.LOSES_WRITES


def test_a_row_that_is_there_is_no_lost_write_and_says_so() -> None:
    ledger = Ledger()
    _wrote(ledger, "r1")
    seen = ledger.facts({"r1"}, NOTHING)
    assert Fact.LOST_WRITE not in seen.facts
    assert "every write reported committed is in the database (1)" in seen.evidence


def test_a_write_whose_transaction_was_told_it_failed_is_no_lost_write() -> None:
    ledger = Ledger()
    _wrote(ledger, "r1", in_transaction=True)
    ledger.ended("A", committed=False, error="25P02: aborted")
    assert Fact.LOST_WRITE not in ledger.facts(set(), NOTHING).facts


def test_a_write_lost_after_an_error_reached_its_client_is_a_break_not_a_silent_loss() -> None:
    ledger = Ledger()
    _wrote(ledger, "r1", in_transaction=True)
    ledger.errored("A", "26000: prepared statement does not exist")
    ledger.ended("A", committed=True)
    seen = ledger.facts(set(), NOTHING)
    assert Fact.LOST_WRITE in seen.facts and Fact.SILENT not in seen.facts
    assert classify(Route.TRANSACTION, PROOFS, seen)[0] is Verdict.BREAKS


def test_a_write_still_in_an_open_transaction_is_not_reported_committed() -> None:
    ledger = Ledger()
    _wrote(ledger, "r1", in_transaction=True)
    assert ledger.told_committed() == []


def test_a_disconnect_is_a_break_that_names_itself_beside_the_verdict() -> None:
    ledger = Ledger()
    ledger.disconnected("A", "bind", "08P01: prepared statement did not exist")
    seen = ledger.facts(set(), NOTHING)
    verdict, named = headline(seen.facts)
    assert verdict is Verdict.BREAKS and named == (Fact.DISCONNECTED,)


def test_a_silent_move_loses_the_session_and_a_loud_one_is_not_silent() -> None:
    quiet, loud = Ledger(), Ledger()
    quiet.moved("B", "read", ServerId(1, "1"), ServerId(2, "2"), silent=True)
    loud.moved("B", "read", ServerId(1, "1"), ServerId(2, "2"), silent=False)
    assert headline(quiet.facts(set(), NOTHING).facts)[0] is Verdict.LOST
    assert Fact.SILENT in quiet.facts(set(), NOTHING).facts and Fact.SILENT not in loud.facts(set(), NOTHING).facts


def test_another_clients_result_is_a_leak() -> None:
    ledger = Ledger()
    ledger.other_result("A", "prepared run", "theirs", "mine")
    assert headline(ledger.facts(set(), NOTHING).facts)[0] is Verdict.LEAKS


def test_a_disconnect_outranks_a_leak_as_a_break_does_and_a_silent_lost_write_outranks_everything() -> None:
    assert headline((Fact.LEAKED, Fact.DISCONNECTED))[0] is Verdict.BREAKS
    assert headline((Fact.BROKE, Fact.LEAKED, Fact.LOST_WRITE, Fact.SILENT))[0] is Verdict.LOSES_WRITES


def test_proofs_of_two_epochs_must_name_two_server_connections() -> None:
    moved = [Proof("a", "A", ServerId(1, "1")), Proof("b", "B", ServerId(2, "2"), Slot.HOME, epoch=1)]
    assert classify(Route.TRANSACTION, moved, NOTHING)[0] is Verdict.ISOLATED
    same = [Proof("a", "A", ServerId(1, "1")), Proof("b", "B", ServerId(1, "1"), Slot.HOME, epoch=1)]
    assert classify(Route.TRANSACTION, same, NOTHING)[0] is Verdict.ERROR
