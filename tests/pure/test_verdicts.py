"""The classifier: pure, no database."""

from leakcheck.model.target import Route
from leakcheck.model.verdicts import Fact, Observation, Proof, ServerId, Slot, Verdict, classify
from tests.pure.outcomes import make

S1, S2 = ServerId(7, "1000.5"), ServerId(8, "1000.6")


def proofs(a: ServerId = S1, b: ServerId = S1) -> tuple[Proof, ...]:
    return (Proof("SET", "A", a), Proof("read", "B", b), Proof("read", "A", a))


def test_a_leak_seen_on_one_shared_server_is_a_leak() -> None:
    verdict, evidence = classify(Route.TRANSACTION, proofs(), Observation("B saw it", leaked=True))
    assert verdict is Verdict.LEAKS
    assert "B saw it" in evidence and "A on pid 7" in evidence and "B on pid 7" in evidence


def test_nothing_seen_on_one_shared_server_is_isolated() -> None:
    assert classify(Route.TRANSACTION, proofs(), Observation("quiet"))[0] is Verdict.ISOLATED


def test_without_a_proof_there_is_no_verdict() -> None:
    verdict, evidence = classify(Route.TRANSACTION, (), Observation("quiet"))
    assert verdict is Verdict.ERROR and "proof" in evidence


def test_a_verdict_other_than_breaks_needs_proofs_from_both_clients() -> None:
    only_a = (Proof("SET", "A", S1),)
    assert classify(Route.TRANSACTION, only_a, Observation("quiet"))[0] is Verdict.ERROR
    assert classify(Route.TRANSACTION, only_a, Observation("x", broke="42P05"))[0] is Verdict.BREAKS


def test_different_servers_in_transaction_mode_make_an_error_never_isolated() -> None:
    verdict, evidence = classify(Route.TRANSACTION, proofs(S1, S2), Observation("quiet"))
    assert verdict is Verdict.ERROR
    assert "should be the same" in evidence


def test_a_reused_pid_with_another_backend_start_is_another_server() -> None:
    reused = ServerId(7, "2000.1")
    assert classify(Route.TRANSACTION, proofs(S1, reused), Observation("quiet"))[0] is Verdict.ERROR


def test_one_observation_on_the_wrong_server_spoils_the_whole_probe() -> None:
    late = (*proofs(), Proof("read again", "B", S2))
    assert classify(Route.TRANSACTION, late, Observation("B saw it", leaked=True))[0] is Verdict.ERROR


def test_negative_controls_require_each_client_on_its_own_session() -> None:
    assert classify(Route.DIRECT, proofs(S1, S2), Observation("quiet"))[0] is Verdict.ISOLATED
    assert classify(Route.SESSION, proofs(S1, S1), Observation("quiet"))[0] is Verdict.ERROR


def test_the_positive_control_requires_one_session_for_both() -> None:
    assert classify(Route.SHARED, proofs(S1, S1), Observation("x", leaked=True))[0] is Verdict.LEAKS
    assert classify(Route.SHARED, proofs(S1, S2), Observation("x", leaked=True))[0] is Verdict.ERROR


def test_a_client_moved_to_another_server_must_really_be_elsewhere() -> None:
    moved = (Proof("SET", "A", S1), Proof("holds", "B", S1), Proof("read elsewhere", "A", S2, Slot.AWAY))
    assert classify(Route.TRANSACTION, moved, Observation("gone", lost=True))[0] is Verdict.LOST
    stayed = (*moved[:2], Proof("read elsewhere", "A", S1, Slot.AWAY))
    assert classify(Route.TRANSACTION, stayed, Observation("gone", lost=True))[0] is Verdict.ERROR


def test_breaks_wins_over_leaks_and_leaks_over_lost_and_every_fact_is_kept() -> None:
    both = Observation("x", leaked=True, lost=True)
    assert classify(Route.TRANSACTION, proofs(), both)[0] is Verdict.LEAKS
    broken = Observation("x", leaked=True, lost=True, broke="42P05: already exists", misreported=True)
    verdict, evidence = classify(Route.TRANSACTION, proofs(), broken)
    assert verdict is Verdict.BREAKS and evidence.startswith("42P05")
    assert broken.facts == (Fact.BROKE, Fact.LEAKED, Fact.LOST, Fact.MISREPORTED)


def test_an_outcome_names_the_facts_its_verdict_does_not() -> None:
    outcome = make("p", "16.14", "1.18.0", Route.TRANSACTION, "psycopg", Verdict.BREAKS, "e",
                      facts=(Fact.BROKE, Fact.LEAKED))
    assert outcome.other_facts == (Fact.LEAKED,)


def test_only_leaks_lost_breaks_and_lost_writes_are_problems() -> None:
    assert {v for v in Verdict if v.is_problem} == {Verdict.LEAKS, Verdict.LOST, Verdict.BREAKS, Verdict.LOSES_WRITES}


def test_a_recovery_is_a_fact_that_never_names_the_verdict() -> None:
    proofs = [Proof("run", "A", ServerId(1, "t")), Proof("run", "B", ServerId(1, "t"))]
    seen = Observation(evidence="A's next run worked after 26000", recovered="A's next run worked after 26000")
    verdict, _ = classify(Route.TRANSACTION, proofs, seen)
    assert Fact.RECOVERED in seen.facts and verdict is Verdict.ISOLATED
