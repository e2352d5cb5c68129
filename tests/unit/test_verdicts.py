"""The classifier: pure, no database."""

from leakcheck.verdicts import Observation, PidCheck, Relation, Route, Verdict, classify


def shared(pid_a: int = 7, pid_b: int = 7) -> tuple[PidCheck, ...]:
    return (PidCheck("after A's SET", ("A", pid_a), ("B", pid_b)),)


def test_a_leak_seen_on_one_shared_server_is_a_leak() -> None:
    verdict, evidence = classify(Route.TRANSACTION, shared(), Observation("B saw it", leaked=True))
    assert verdict is Verdict.LEAKS
    assert "B saw it" in evidence and "A pid 7, B pid 7" in evidence


def test_nothing_seen_on_one_shared_server_is_isolated() -> None:
    assert classify(Route.TRANSACTION, shared(), Observation("quiet"))[0] is Verdict.ISOLATED


def test_without_a_pid_proof_there_is_no_verdict() -> None:
    verdict, evidence = classify(Route.TRANSACTION, (), Observation("quiet"))
    assert verdict is Verdict.ERROR and "pg_backend_pid" in evidence


def test_different_pids_in_transaction_mode_make_an_error_never_isolated() -> None:
    verdict, evidence = classify(Route.TRANSACTION, shared(7, 8), Observation("quiet"))
    assert verdict is Verdict.ERROR
    assert "expected same" in evidence


def test_controls_require_each_client_on_its_own_session() -> None:
    assert classify(Route.DIRECT, shared(7, 8), Observation("quiet"))[0] is Verdict.ISOLATED
    assert classify(Route.DIRECT, shared(7, 7), Observation("quiet"))[0] is Verdict.ERROR


def test_a_client_moved_to_another_server_is_checked_against_its_own_pid() -> None:
    moved = (PidCheck("A moved", ("A", 7), ("A", 9), Relation.DIFFERENT),)
    assert classify(Route.TRANSACTION, moved, Observation("gone", lost=True))[0] is Verdict.LOST
    # In a control A keeps its session, so the same readings are an error there.
    assert classify(Route.SESSION, moved, Observation("gone", lost=True))[0] is Verdict.ERROR


def test_breaks_wins_over_leaks_and_leaks_over_lost() -> None:
    both = Observation("x", leaked=True, lost=True)
    assert classify(Route.TRANSACTION, shared(), both)[0] is Verdict.LEAKS
    broken = Observation("x", leaked=True, lost=True, broke="42P05: already exists")
    verdict, evidence = classify(Route.TRANSACTION, shared(), broken)
    assert verdict is Verdict.BREAKS and evidence.startswith("42P05")


def test_only_leaks_lost_and_breaks_are_problems() -> None:
    assert {v for v in Verdict if v.is_problem} == {Verdict.LEAKS, Verdict.LOST, Verdict.BREAKS}
