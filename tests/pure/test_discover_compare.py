"""Normalizing, comparing and proving traces (no servers)."""

from __future__ import annotations

from leakcheck.discover.compare import Diff, beyond_start, canon, compare, observed, outcomes, proof_problems, results
from leakcheck.discover.execute import covered
from leakcheck.discover.ops import PREPARED, Kind, Op, Who
from leakcheck.discover.render import Names
from leakcheck.discover.trace import Event, Failure, Loss, Lost, Proof, Trace
from leakcheck.model.target import Route
from leakcheck.model.verdicts import ServerId

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


def _snapshot(index: int, who: Who, date_style: str) -> Event:
    return Event(index, who, None, fields=(("reported:DateStyle", date_style), ("setting:work_mem", "4MB")))


def test_a_difference_the_connections_show_before_any_op_is_left_out_while_a_client_shows_those_values() -> None:
    # PgBouncer reports pgjdbc's DateStyle as pgjdbc sent it; PostgreSQL says its own spelling
    start = compare(trace(ONE, _snapshot(0, A, "ISO"), _snapshot(1, B, "ISO")),
                    trace(TWO, _snapshot(0, A, "ISO, MDY"), _snapshot(1, B, "ISO, MDY")))
    assert [(d.who, d.key) for d in start] == [(A, "reported:DateStyle"), (B, "reported:DateStyle")]
    # a later sequence: A's observe mid-sequence and both final snapshots show the same two values: left out
    observe = Op(A, Kind.OBSERVE)
    later = compare(trace(ONE, Event(0, A, observe, fields=(("reported:DateStyle", "ISO"),)),
                          _snapshot(1, A, "ISO"), _snapshot(2, B, "ISO")),
                    trace(TWO, Event(0, A, observe, fields=(("reported:DateStyle", "ISO, MDY"),)),
                          _snapshot(1, A, "ISO, MDY"), _snapshot(2, B, "ISO, MDY")))
    assert len(later) == 3 and beyond_start(later, tuple(start), (observe,)) == []
    # one client's start is the other's too (one application); a mixed pair's are each its own
    assert beyond_start(later, tuple(d for d in start if d.who is B), (observe,)) == []
    assert [d.who for d in beyond_start(later, tuple(d for d in start if d.who is B), (observe,), False)] == [A, A]
    # an op changed B's value through the route: that compares as read
    changed = compare(trace(ONE, _snapshot(0, A, "ISO"), _snapshot(1, B, "German, DMY")),
                      trace(TWO, _snapshot(0, A, "ISO, MDY"), _snapshot(1, B, "ISO, MDY")))
    assert [(d.who, d.subject) for d in beyond_start(changed, tuple(start))] == [(B, "'German, DMY'")]


def _named(index: int, who: Who, value: str) -> Event:
    return Event(index, who, None, fields=(("setting:application_name", value),))


def test_a_start_value_an_op_may_have_given_compares_as_read() -> None:
    # pgjdbc through PgBouncer 1.18: B's application_name '' where pgjdbc sent its own, on some connections
    start = tuple(compare(trace(ONE, _named(0, B, "")), trace(TWO, _named(0, B, "PostgreSQL JDBC Driver"))))
    shown = (_named(1, B, ""),), (_named(1, B, "PostgreSQL JDBC Driver"),)

    def seen(op: Op) -> list[Diff]:
        return beyond_start(compare(trace(ONE, Event(0, op.who, op), *shown[0]),
                                    trace(TWO, Event(0, op.who, op), *shown[1])), start, (op,))

    assert seen(Op(A, Kind.SET, "application_name", "alt")) != []  # A set it to '' itself: a leak looks so
    assert seen(Op(B, Kind.SET_CONFIG, "application_name", "session")) != []  # B's own value, lost
    assert seen(Op(A, Kind.RESET, "application_name")) != []
    assert seen(Op(A, Kind.SET, "application_name")) == []  # A's 'lc_app_a' cannot show as ''
    assert seen(Op(A, Kind.SET, "work_mem")) == []


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
    assert [(d.index, d.key, d.reference) for d in compare(moved, still)] == [
        (2, "outcome:moved", "on its own server connection throughout")]
    assert compare(moved, still)[0].subject.startswith("on server connection #2, after the one it shared ended")


def test_a_direct_client_on_a_new_server_connection_right_after_its_own_closing_failure_is_proven() -> None:
    # Hibernate: pgjdbc closes its connection on a DateStyle it refuses, and Hikari gives A a new one
    refused = Failure("?????", "its connection closed: A's driver refused to go on")
    events = (Event(0, A, Op(A, Kind.BEGIN), proof_at=0), Event(1, A, Op(A, Kind.SET_CONFIG, "DateStyle"),
                                                                   failure=refused),
              Event(2, A, Op(A, Kind.WRITE), proof_at=2), Event(3, B, None, proof_at=3))
    proofs = (Proof(0, A, S1), Proof(2, A, S2), Proof(3, B, S3))
    assert list(proof_problems(trace(ONE, *events, route=Route.DIRECT, proofs=proofs), set())) == []
    unrefused = (*events[:1], Event(1, A, Op(A, Kind.SET_CONFIG, "DateStyle"), proof_at=1), *events[2:])
    (problem,) = proof_problems(trace(ONE, *unrefused, route=Route.DIRECT, proofs=(*proofs, Proof(1, A, S1))),
                                set())
    assert "did not each keep a server connection of their own" in problem
    onto_bs = (Proof(0, A, S1), Proof(2, A, S3), Proof(3, B, S3))  # a new one, but the other client's
    assert list(proof_problems(trace(ONE, *events, route=Route.SESSION, proofs=onto_bs), set()))
    b_refused = (events[0], Event(1, B, Op(B, Kind.OBSERVE), failure=refused), events[2])  # B's, not A's
    assert list(proof_problems(trace(ONE, *b_refused, route=Route.DIRECT,
                                     proofs=(Proof(0, A, S1), Proof(2, A, S2))), set()))
    # A failed, went on on the same connection, and only later moved with no failure of its own between
    late = (*events[:2], Event(2, A, Op(A, Kind.OBSERVE), proof_at=2), Event(3, A, Op(A, Kind.WRITE), proof_at=3))
    assert list(proof_problems(trace(ONE, *late, route=Route.DIRECT,
                                     proofs=(Proof(0, A, S1), Proof(2, A, S1), Proof(3, A, S2))), set()))


def test_a_new_server_connection_without_a_closed_connection_before_it_is_a_problem() -> None:
    events = (Event(0, A, None, proof_at=0), Event(1, B, None, proof_at=1), Event(2, A, None, proof_at=2))
    back = trace(ONE, *events, proofs=(Proof(0, A, S1), Proof(1, B, S2), Proof(2, A, S1)))
    assert any("did not share" in p for p in proof_problems(back, set()))


def test_a_snapshot_that_failed_on_one_side_is_one_difference_not_one_per_column() -> None:
    failed = trace(ONE, Event(0, B, None, failure=Failure("57014", "canceling statement due to statement timeout")))
    read = trace(TWO, Event(0, B, None, fields=(("setting:work_mem", "4MB"), ("temp", []))))
    assert [(d.key, d.subject, d.reference) for d in compare(failed, read)] == [
        ("observe", "error 57014: canceling statement due to statement timeout", "read")]
    closed = trace(ONE, Event(0, B, None, failure=Failure("?????", "connection is closed")))
    assert [(d.key, d.reference) for d in compare(closed, read)] == [("outcome:disconnected", "read")]


def test_the_steps_after_a_client_lost_its_connection_are_left_out_but_the_step_that_lost_it_stays() -> None:
    gone = Failure("08003", "connection was closed in the middle of operation")
    later = Failure("?????", "connection is closed")
    op = Op(A, Kind.SET, "TimeZone")
    mine = trace(ONE, Event(0, A, Op(A, Kind.PROTOCOL, "p1"), failure=gone), Event(1, A, op, failure=later))
    theirs = trace(TWO, Event(0, A, Op(A, Kind.PROTOCOL, "p1"), failure=Failure("26000", "does not exist")),
                   Event(1, A, op))
    assert [(d.index, d.key) for d in compare(mine, theirs)] == [(0, "outcome:disconnected")]


def _lost_commit(names: Names, lost: bool) -> Trace:
    ops = (Op(A, Kind.BEGIN), Op(A, Kind.WRITE, "", PREPARED), Op(A, Kind.FREE), Op(A, Kind.COMMIT))
    run = trace(names, *(Event(i, A, op, proof_at=1) for i, op in enumerate(ops)), proofs=(Proof(1, A, S1),))
    if lost:
        run.losses.append(Loss(3, A, Lost.WRITE, "lost, and no error reached A", "its commit returned success, ..."))
    return run


def test_a_commit_lost_through_the_route_only_is_a_difference_at_the_commit() -> None:
    (diff,) = compare(_lost_commit(ONE, True), _lost_commit(TWO, False))
    assert (diff.index, diff.who, diff.key) == (3, A, "outcome:lost write")
    assert diff.reference == "the row is in the database"
    assert compare(_lost_commit(ONE, True), _lost_commit(TWO, True)) == []
    # lost on the reference alone (after an error the route never raised): the state behind it is the difference
    assert compare(_lost_commit(ONE, False), _lost_commit(TWO, True)) == []
    assert results(_lost_commit(ONE, True), 4) == ("success",) * 4


def test_a_prepared_call_returning_another_clients_value_is_that_outcome_and_stands_for_its_result() -> None:
    op = Op(B, Kind.PROTOCOL, "p1")
    mine = trace(ONE, Event(0, B, op, value="lcaaaa1111_A_p1", proof_at=0))
    (diff,) = compare(mine, trace(TWO, Event(0, B, op, value="lcbbbb2222_B_p1", proof_at=0)))
    assert (diff.key, diff.subject, diff.reference) == (
        "outcome:other result", "returned 'lc_A_p1', not its own 'lc_B_p1'", "'lc_B_p1'")
    assert outcomes(trace(TWO, Event(0, B, op, value="lcbbbb2222_B_p1"))) == []


def test_a_client_disconnected_through_the_route_only_is_that_outcome_at_its_step() -> None:
    op = Op(A, Kind.BIND, "s1")
    gone = trace(ONE, Event(0, A, op, failure=Failure("08P01", "prepared statement did not exist")))
    (diff,) = compare(gone, trace(TWO, Event(0, A, op, value="lcbbbb2222_A_s1")))
    assert (diff.key, diff.reference) == ("outcome:disconnected", "'lc_A_s1'")
    assert diff.subject == "its connection was closed: error 08P01 prepared statement did not exist"


def test_a_stalled_pool_is_one_difference_and_the_steps_it_kept_from_running_are_left_out() -> None:
    ops = (Op(A, Kind.BEGIN), Op(B, Kind.SET, "work_mem"))
    stalled = trace(ONE, Event(0, A, ops[0]), Event(1, B, ops[1], ran=False), Event(2, A, None, ran=False))
    stalled.losses.append(Loss(1, B, Lost.STALLED, "waited", "B's step waited 10 s: the pool stalled"))
    ran = trace(TWO, Event(0, A, ops[0]), Event(1, B, ops[1]), Event(2, A, None, fields=(("temp", []),)))
    assert [(d.index, d.key) for d in compare(stalled, ran)] == [(1, "outcome:stalled")]
    assert list(proof_problems(stalled, set())) == []


def test_a_driver_call_that_sends_only_the_drivers_own_statement_needs_no_proof_of_its_own() -> None:
    events = (Event(0, A, Op(A, Kind.PROTOCOL, "p1"), proof_at=0), Event(1, A, Op(A, Kind.FREE)),
              Event(2, A, None, proof_at=2), Event(3, B, None, proof_at=3))
    assert list(proof_problems(trace(ONE, *events, proofs=(Proof(0, A, S1), Proof(2, A, S1), Proof(3, B, S1))),
                               set())) == []


def test_a_step_inside_a_transaction_is_covered_by_that_transactions_proven_step_and_nothing_else() -> None:
    ops = (Op(A, Kind.FREE), Op(A, Kind.BEGIN), Op(A, Kind.FREE), Op(A, Kind.WRITE), Op(A, Kind.COMMIT),
           Op(A, Kind.BEGIN), Op(A, Kind.COMMIT))
    events = [Event(i, A, op) for i, op in enumerate(ops)]
    got = covered(events, [Proof(3, A, S1)], ops)
    assert [e.proof_at for e in got] == [None, 3, 3, 3, 3, None, None]


def test_a_client_whose_connection_closed_before_any_proof_needs_none_on_the_reference() -> None:
    refused = Failure("?????", "its connection closed: the driver or the pooler refused to go on: DateStyle")
    events = (Event(0, A, Op(A, Kind.SET, "DateStyle"), failure=refused), Event(1, B, None, proof_at=1))
    assert list(proof_problems(trace(ONE, *events, route=Route.DIRECT, proofs=(Proof(1, B, S2),)), set())) == []
