"""Normalizing, comparing and proving traces (no servers)."""

from __future__ import annotations

from leakcheck.discover.compare import canon, compare, observed, proof_problems
from leakcheck.discover.ops import Kind, Op, Who
from leakcheck.discover.render import Names
from leakcheck.discover.trace import Event, Failure, Proof, Trace
from leakcheck.model.verdicts import Route, ServerId

A, B = Who.A, Who.B
ONE, TWO = Names("aaaa1111", 11), Names("bbbb2222", 22)
S1, S2, S3 = ServerId(1, "t1"), ServerId(2, "t2"), ServerId(3, "t3")


def trace(names: Names, *events: Event, route: Route = Route.TRANSACTION, proofs: tuple[Proof, ...] = ()) -> Trace:
    return Trace(route, names, list(events), list(proofs))


def test_canon_tells_null_from_empty_and_shows_display_names() -> None:
    assert canon(None, ONE) == "NULL" and canon("", ONE) == "''"
    assert canon(["lcaaaa1111_s1", True, 3], ONE) == "['lc_s1', true, 3]"


def test_protocol_statement_names_are_normalized_and_sql_prepare_names_kept() -> None:
    event = Event(0, B, Op(B, Kind.OBSERVE), fields=(("prepared", [
        "PGBOUNCER_3=lcaaaa1111_A_p1", "lcaaaa1111_s1=lcaaaa1111_A_s1", "_pg3_0=lcaaaa1111_B_p1"]),))
    assert observed(event, ONE)["prepared"][0] == "['<protocol>=lc_A_p1', '<protocol>=lc_B_p1', 'lc_s1=lc_A_s1']"


def test_two_runs_that_saw_the_same_under_their_own_names_do_not_differ() -> None:
    mine = trace(ONE, Event(0, A, Op(A, Kind.EXECUTE, "s1"), value="lcaaaa1111_A_s1"))
    theirs = trace(TWO, Event(0, A, Op(A, Kind.EXECUTE, "s1"), value="lcbbbb2222_A_s1"))
    assert compare(mine, theirs) == []


def test_errors_compare_by_sqlstate_and_show_their_message() -> None:
    op = Op(B, Kind.EXECUTE, "s1")
    mine = trace(ONE, Event(0, B, op, failure=Failure("26000", 'prepared statement "lcaaaa1111_s1" does not exist')))
    same = trace(TWO, Event(0, B, op, failure=Failure("26000", "another wording")))
    assert compare(mine, same) == []
    other = trace(TWO, Event(0, B, op, value="lcbbbb2222_A_s1"))
    (diff,) = compare(mine, other)
    assert (diff.key, diff.who, diff.reference) == ("result:execute", B, "'lc_A_s1'")
    assert diff.subject == 'error 26000: prepared statement "lc_s1" does not exist'


def test_a_snapshot_differs_column_by_column() -> None:
    fields_a: tuple[tuple[str, object], ...] = (("setting:work_mem", "1111kB"), ("temp", []))
    fields_b: tuple[tuple[str, object], ...] = (("setting:work_mem", "4MB"), ("temp", []))
    diffs = compare(trace(ONE, Event(2, B, None, fields=fields_a)), trace(TWO, Event(2, B, None, fields=fields_b)))
    assert [(d.index, d.key, d.subject, d.reference) for d in diffs] == [(2, "setting:work_mem", "'1111kB'", "'4MB'")]


def _proven(route: Route, a: ServerId, b: ServerId) -> Trace:
    events = (Event(0, A, None, proof_at=0), Event(1, B, None, proof_at=1))
    return trace(ONE, *events, route=route, proofs=(Proof(0, A, a), Proof(1, B, b)))


def test_transaction_mode_needs_both_clients_on_one_server_connection() -> None:
    assert list(proof_problems(_proven(Route.TRANSACTION, S1, S1), set())) == []
    (problem,) = proof_problems(_proven(Route.TRANSACTION, S1, S2), set())
    assert "did not share one server connection" in problem and "A on pid 1; B on pid 2" in problem


def test_direct_sessions_and_session_mode_need_a_server_connection_each() -> None:
    assert list(proof_problems(_proven(Route.DIRECT, S1, S2), set())) == []
    assert list(proof_problems(_proven(Route.SESSION, S1, S1), set()))


def test_an_unproven_step_or_a_reused_server_connection_is_a_problem() -> None:
    unproven = trace(ONE, Event(0, A, Op(A, Kind.SET, "work_mem")), proofs=(Proof(1, A, S1),))
    assert any("carries no proof" in p for p in proof_problems(unproven, set()))
    assert any("not fresh" in p for p in proof_problems(_proven(Route.TRANSACTION, S3, S3), {S3}))


def test_a_step_refused_only_because_its_transaction_failed_earlier_is_left_out() -> None:
    op = Op(A, Kind.SET_LOCAL, "work_mem")
    mine = trace(ONE, Event(0, A, op, failure=Failure("25P02", "current transaction is aborted")))
    assert compare(mine, trace(TWO, Event(0, A, op))) == []


def test_a_fresh_server_connection_right_after_a_closed_connection_is_proven_and_observed() -> None:
    closed = Failure("08003", "connection was closed in the middle of operation")
    events = (Event(0, A, Op(A, Kind.OBSERVE), proof_at=0), Event(1, B, Op(B, Kind.PROTOCOL, "p1"), failure=closed),
              Event(2, A, None, proof_at=2), Event(3, B, None, failure=Failure("?????", "connection is closed")))
    moved = trace(ONE, *events, proofs=(Proof(0, A, S1), Proof(2, A, S2)))
    assert list(proof_problems(moved, set())) == []
    still = trace(TWO, *events[:2], Event(2, A, None, proof_at=2), events[3], route=Route.DIRECT,
                  proofs=(Proof(0, A, S1), Proof(2, A, S1)))
    assert [(d.index, d.key, d.subject, d.reference) for d in compare(moved, still) if d.key == "server connection"] \
        == [(2, "server connection", "#2", "#1")]


def test_a_new_server_connection_without_a_closed_connection_before_it_is_a_problem() -> None:
    events = (Event(0, A, None, proof_at=0), Event(1, B, None, proof_at=1), Event(2, A, None, proof_at=2))
    back = trace(ONE, *events, proofs=(Proof(0, A, S1), Proof(1, B, S2), Proof(2, A, S1)))
    assert any("did not share" in p for p in proof_problems(back, set()))


def test_a_snapshot_that_failed_on_one_side_is_one_difference_not_one_per_column() -> None:
    failed = trace(ONE, Event(0, B, None, failure=Failure("?????", "connection is closed")))
    read = trace(TWO, Event(0, B, None, fields=(("setting:work_mem", "4MB"), ("temp", []))))
    assert [(d.key, d.subject, d.reference) for d in compare(failed, read)] == [
        ("observe", "error ?????: connection is closed", "read")]


def test_the_steps_after_a_client_lost_its_connection_are_left_out_but_the_step_that_lost_it_stays() -> None:
    gone = Failure("08003", "connection was closed in the middle of operation")
    later = Failure("?????", "connection is closed")
    op = Op(A, Kind.SET, "TimeZone")
    mine = trace(ONE, Event(0, A, Op(A, Kind.PROTOCOL, "p1"), failure=gone), Event(1, A, op, failure=later))
    theirs = trace(TWO, Event(0, A, Op(A, Kind.PROTOCOL, "p1"), failure=Failure("26000", "does not exist")),
                   Event(1, A, op))
    assert [(d.index, d.key) for d in compare(mine, theirs)] == [(0, "result:protocol")]
