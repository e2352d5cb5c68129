"""When different server connections for A and B mean "not applicable", and when they stay an error."""

from __future__ import annotations

from leakcheck.model.target import Driver, Route, Target
from leakcheck.model.verdicts import Proof, ServerId
from leakcheck.model.versions import Version
from leakcheck.probes import PROBES
from leakcheck.run.runner import never_shared, plan_of
from tests.pure.outcomes import pooler

PROBE = next(p for p in PROBES if p.id == "statement_timeout")


def target(kind: str, version: str, settings: tuple[tuple[str, str], ...] = ()) -> Target:
    return Target(Version.parse("16.14"), pooler(kind, version, settings), Route.TRANSACTION, Driver("psycopg"))


def proofs(*steps: tuple[str, int]) -> tuple[Proof, ...]:
    return tuple(Proof(f"step {i}", who, ServerId(pid, f"{pid}000")) for i, (who, pid) in enumerate(steps))


def test_pgpool_giving_a_and_b_one_server_each_is_not_applicable_with_both_pids() -> None:
    said = never_shared(plan_of(PROBE, target("pgpool", "4.3.5")), proofs(("A", 1), ("B", 2), ("A", 1)))
    assert said is not None and "A on pid 1; B on pid 2" in said


def test_a_client_that_changed_servers_in_session_mode_stays_an_error() -> None:
    assert never_shared(plan_of(PROBE, target("pgpool", "4.3.5")), proofs(("A", 1), ("B", 3), ("A", 2))) is None
    assert never_shared(plan_of(PROBE, target("pgpool", "4.3.5")), proofs(("A", 1), ("B", 3), ("B", 4))) is None


def test_sharing_or_a_missing_client_is_never_not_applicable() -> None:
    assert never_shared(plan_of(PROBE, target("pgpool", "4.3.5")), proofs(("A", 1), ("B", 1))) is None
    assert never_shared(plan_of(PROBE, target("pgpool", "4.3.5")), proofs(("A", 1))) is None


def test_in_transaction_mode_different_servers_are_a_harness_failure() -> None:
    assert never_shared(plan_of(PROBE, target("pgbouncer", "1.24.1")), proofs(("A", 1), ("B", 2))) is None


def test_a_proof_without_backend_start_is_an_error_not_a_proof() -> None:
    from types import SimpleNamespace
    from typing import Any, cast

    import pytest

    from leakcheck.model.errors import ProbeError
    from leakcheck.probes.scenario import Scenario

    a: Any = SimpleNamespace(label="A")
    s = Scenario(a=cast(Any, a), b=cast(Any, SimpleNamespace(label="B")), route=Route.TRANSACTION)
    with pytest.raises(ProbeError, match="backend_start is not visible"):
        s._prove(a, "read", (7, None))
    s._prove(a, "read", (7, "1733000000000000"))
    assert s.proofs == [Proof("read", "A", ServerId(7, "1733000000000000"))]


def test_a_hand_over_in_session_mode_not_handed_the_server_a_left_is_not_applicable_with_both_identities() -> None:
    from leakcheck.probes.handover import handover_setting

    said = never_shared(plan_of(handover_setting, target("pgpool", "4.7.3")), proofs(("A", 1), ("A", 1), ("B", 2)))
    assert said is not None and "did not hand B the server connection A left" in said
    assert "pid 1 (started 1000)" in said and "pid 2 (started 2000)" in said


def test_a_hand_over_in_transaction_mode_not_handed_the_server_stays_an_error() -> None:
    from leakcheck.probes.handover import handover_setting

    assert never_shared(plan_of(handover_setting, target("pgbouncer", "1.24.1")), proofs(("A", 1), ("B", 2))) is None


def test_a_silent_lost_write_where_a_and_b_never_shared_a_server_is_loses_writes_not_not_applicable() -> None:
    # pgpool-II 4.3 in session mode, asyncpg's autocommitted INSERT rolled back (pgpool2#172): A and B each on a
    # server of their own, and the application's committed write is not in the database, no error told.
    from leakcheck.model.verdicts import Fact, Observation, Verdict
    from leakcheck.run.runner import decide

    tx = next(p for p in PROBES if p.id == "tx_free_before_commit")
    lost = Observation(evidence="B's INSERT afterwards gave ok", lost_write="B's INSERT after A's commit",
                       silent=True)
    verdict, evidence = decide(plan_of(tx, target("pgpool", "4.3.5")), proofs(("A", 1), ("B", 2)), lost)
    assert verdict is Verdict.LOSES_WRITES and {Fact.LOST_WRITE, Fact.SILENT} <= set(lost.facts)
    assert "B's INSERT after A's commit lost" in evidence and "A on pid 1; B on pid 2" in evidence
    told = Observation(evidence="A's COMMIT failed", lost_write="A's INSERT", broke="A's COMMIT: 25P02")
    assert decide(plan_of(tx, target("pgpool", "4.3.5")), proofs(("A", 1), ("B", 2)), told)[0] is Verdict.BREAKS
    kept = Observation(evidence="every write reported committed is in the database")
    assert decide(plan_of(tx, target("pgpool", "4.3.5")), proofs(("A", 1), ("B", 2)), kept)[0] is Verdict.NOT_APPLICABLE


def test_a_driver_refusing_a_value_is_not_applicable_only_for_its_own_setting_or_before_b_acted() -> None:
    from leakcheck.model.errors import DriverRefused
    from leakcheck.model.verdicts import Fact
    from leakcheck.run.runner import refusal_outcome

    def refused(who: str, closed: bool = True, own: bool = False) -> DriverRefused:
        exc = DriverRefused(f"{who}'s driver refused to go on: The server's DateStyle parameter was changed", who,
                            closed)
        exc.own = own
        return exc

    assert refusal_outcome(refused("A"), proofs(("A", 1))) is None  # before B acted: only A's own value
    assert refusal_outcome(refused("A", own=True), proofs(("B", 1), ("A", 1))) is None  # at A's own SET
    after = refusal_outcome(refused("A"), proofs(("A", 1), ("B", 1)))
    assert after is not None and {Fact.BROKE, Fact.DISCONNECTED} <= set(after.facts)
    b = refusal_outcome(refused("B", closed=False), proofs(("B", 1), ("A", 1)))  # B proved its server first
    assert b is not None and Fact.BROKE in b.facts and Fact.DISCONNECTED not in b.facts


def test_b_refusing_a_value_before_it_proved_any_server_is_an_error_not_a_break_on_a_s_proof_alone() -> None:
    import pytest

    from leakcheck.model.errors import DriverRefused, ProbeError
    from leakcheck.model.verdicts import Verdict, classify
    from leakcheck.run.runner import refusal_outcome

    exc = DriverRefused("B's driver refused to go on: The server's DateStyle parameter was changed", "B", True)
    with pytest.raises(ProbeError, match="no proof that B shared a server connection with A"):
        refusal_outcome(exc, proofs(("A", 1), ("A", 1)))
    # an earlier step of B proves it on A's server: the break rests on that proof (classify checks the sharing)
    broke = refusal_outcome(exc, proofs(("A", 1), ("B", 1)))
    assert broke is not None
    assert classify(Route.TRANSACTION, proofs(("A", 1), ("B", 1)), broke)[0] is Verdict.BREAKS


def test_a_lost_write_where_a_and_b_never_shared_is_named_by_its_own_facts_not_by_unproven_ones() -> None:
    from leakcheck.model.verdicts import Observation, Verdict, unshared

    told_and_leaked = Observation(evidence="e", lost_write="B's INSERT", leaked=True)
    assert unshared(told_and_leaked, "apart")[0] is Verdict.BREAKS


def test_b_refusing_the_value_b_set_itself_is_not_applicable() -> None:
    from leakcheck.model.errors import DriverRefused
    from leakcheck.run.runner import refusal_outcome

    exc = DriverRefused("B's driver refused to go on: The server's DateStyle parameter was changed", "B", True)
    exc.own = True
    assert refusal_outcome(exc, proofs(("A", 1), ("B", 1))) is None
