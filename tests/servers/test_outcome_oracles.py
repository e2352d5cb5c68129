"""Each outcome oracle (probes/outcomes.py) reports what a real server made the application lose, and nothing
when nothing was lost: every loss below is made by the test itself, through real PostgreSQL and PgBouncer,
between two steps of a probe of its own. Without the oracle the first test of each pair fails."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import psycopg
import pytest

from leakcheck.model.target import Driver, Route
from leakcheck.model.verdicts import Fact, Observation, Outcome, Verdict
from leakcheck.probes import protocol, security
from leakcheck.probes.base import Probe, probe
from leakcheck.probes.outcomes import WRITES_TABLE
from leakcheck.probes.scenario import Scenario
from leakcheck.provision.base import USER
from tests.support.servers import Measure

pytestmark = pytest.mark.servers

Body = Callable[[Scenario], Awaitable[Observation]]


def _probe(body: Body, name: str) -> Probe:
    return probe(f"oracle_{name}", f"the {name} oracle's own check")(body)


def _measured(measure: Measure, body: Body, name: str, route: Route = Route.TRANSACTION) -> Outcome:
    return measure(_probe(body, name), "16", "1.24" if route is Route.TRANSACTION else None, Driver.PSYCOPG, route)


def _superuser(s: Scenario) -> psycopg.Connection[tuple[object, ...]]:
    """The test's own session on PostgreSQL (the witness's connection string: the run's superuser)."""
    assert s.witness is not None
    return psycopg.connect(s.witness.conn.info.dsn, password=s.witness.conn.info.password, user=USER, autocommit=True)


async def _write_then(s: Scenario, lose: bool) -> Observation:
    await s.observe(s.a, "connected", "1")
    await s.write(s.a, "INSERT")
    if lose:  # the test itself deletes the row A was told is committed
        with _superuser(s) as conn:
            conn.execute(f"DELETE FROM {WRITES_TABLE} WHERE who = 'A' AND id LIKE %s", (f"{s.token}-%",))
    await s.observe(s.b, "after A's write", "1")
    return Observation(evidence="A wrote one row")


def test_a_write_deleted_behind_the_applications_back_is_a_silent_lost_write(measure: Measure) -> None:
    async def body(s: Scenario) -> Observation:
        return await _write_then(s, lose=True)

    got = _measured(measure, body, "lost_write")
    assert got.verdict is Verdict.LOSES_WRITES and {Fact.LOST_WRITE, Fact.SILENT} <= set(got.facts), got.evidence
    assert "is not in the database" in got.evidence


def test_a_write_left_alone_is_no_lost_write(measure: Measure) -> None:
    async def body(s: Scenario) -> Observation:
        return await _write_then(s, lose=False)

    got = _measured(measure, body, "kept_write")
    assert got.verdict is Verdict.ISOLATED and Fact.LOST_WRITE not in got.facts, got.evidence
    assert "every write reported committed is in the database (1)" in got.evidence


async def _ended_or_not(s: Scenario, end: bool) -> Observation:
    await s.observe(s.b, "connected", "1")
    await s.observe(s.a, "connected", "1")
    sql = "SELECT pg_terminate_backend(pg_backend_pid())" if end else "SELECT 1"
    ran = await s.run(s.a, "a statement that may end A's connection", sql, may_disconnect=True)
    return Observation(evidence=f"A's statement gave {ran}")


def test_a_client_whose_connection_the_server_ends_is_reported_disconnected(measure: Measure) -> None:
    async def body(s: Scenario) -> Observation:
        return await _ended_or_not(s, end=True)

    got = _measured(measure, body, "disconnected", Route.DIRECT)
    assert got.verdict is Verdict.BREAKS and Fact.DISCONNECTED in got.facts, got.evidence
    assert "A's connection was closed" in got.evidence


def test_a_client_whose_statement_ends_normally_is_not_disconnected(measure: Measure) -> None:
    async def body(s: Scenario) -> Observation:
        return await _ended_or_not(s, end=False)

    got = _measured(measure, body, "connected", Route.DIRECT)
    assert got.verdict is Verdict.ISOLATED and Fact.DISCONNECTED not in got.facts, got.evidence


async def _server_ended_or_not(s: Scenario, end: bool) -> Observation:
    await s.change(s.b, "SET", "SET statement_timeout = '123s'")
    await s.observe(s.b, "on the shared server", "1")
    await s.observe(s.a, "on the shared server", "1")
    if end:  # the test ends the server connection the pool of one holds, between two of B's steps
        server = s.proofs[-1].server
        with _superuser(s) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (server.pid,))
        assert s.witness is not None
        for _ in range(50):  # until it is gone, and PgBouncer has read its end (not handed it to B)
            if not s.witness.alive(server):
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
    seen = await s.observe(s.b, "read statement_timeout", "current_setting('statement_timeout')")
    await s.observe(s.a, "after B", "1")
    return Observation(evidence=f"B then read {seen!r}", lost=seen != "123s")


def test_a_client_handed_a_new_server_connection_after_its_own_ended_is_reported_moved(measure: Measure) -> None:
    async def body(s: Scenario) -> Observation:
        return await _server_ended_or_not(s, end=True)

    got = _measured(measure, body, "moved")
    assert got.verdict is Verdict.LOST and {Fact.MOVED, Fact.SILENT} <= set(got.facts), got.evidence
    assert "B was handed server connection" in got.evidence


def test_clients_that_keep_their_server_connection_are_not_moved(measure: Measure) -> None:
    async def body(s: Scenario) -> Observation:
        return await _server_ended_or_not(s, end=False)

    got = _measured(measure, body, "kept_server")
    assert got.verdict is Verdict.ISOLATED and Fact.MOVED not in got.facts, got.evidence


async def _result(s: Scenario, theirs: bool) -> Observation:
    await s.observe(s.b, "connected", "1")
    value = "'the other client''s'" if theirs else "'mine'"
    await s.prepared(s.a, "its own query", f"{value}::text", own="mine")
    return Observation(evidence="A ran its query")


def test_a_call_that_returns_a_value_not_its_own_is_reported_as_another_clients_result(measure: Measure) -> None:
    async def body(s: Scenario) -> Observation:
        return await _result(s, theirs=True)

    got = _measured(measure, body, "other_result", Route.DIRECT)
    assert got.verdict is Verdict.LEAKS and Fact.OTHER_RESULT in got.facts, got.evidence


def test_a_call_that_returns_its_own_value_is_not_another_clients_result(measure: Measure) -> None:
    async def body(s: Scenario) -> Observation:
        return await _result(s, theirs=False)

    got = _measured(measure, body, "own_result", Route.DIRECT)
    assert got.verdict is Verdict.ISOLATED and Fact.OTHER_RESULT not in got.facts, got.evidence


async def _held_or_not(s: Scenario, hold: bool) -> Observation:
    await s.observe(s.a, "connected", "1")
    await s.begin(s.b, "B's transaction")
    await s.run(s.b, "inside it", "SELECT 1")
    if not hold:
        await s.commit(s.b, "B's transaction")
    await s.observe(s.a, "its next statement", "1")
    return Observation(evidence="A ran after B's transaction")


def test_a_client_waiting_for_a_server_another_clients_open_transaction_holds_is_a_stalled_pool(
        measure: Measure, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("leakcheck.probes.scenario.STEP_BOUND", 1.0)

    async def body(s: Scenario) -> Observation:
        return await _held_or_not(s, hold=True)

    got = _measured(measure, body, "stalled")
    assert got.verdict is Verdict.BREAKS and Fact.STALLED in got.facts, got.evidence
    assert "the pool stalled" in got.evidence


def test_a_stalled_pool_the_pooler_keeps_for_an_open_transaction_is_measured_on_its_word_not_at_the_bound(
        measure: Measure) -> None:
    async def body(s: Scenario) -> Observation:
        return await _held_or_not(s, hold=True)

    got = _measured(measure, body, "stalled_kept")  # STEP_BOUND as shipped (10 s)
    assert got.verdict is Verdict.BREAKS and Fact.STALLED in got.facts, got.evidence
    assert "the pool stalled" in got.evidence and "SHOW SERVERS showed pid" in got.evidence, got.evidence


def test_a_stalled_pool_after_a_statement_that_names_a_timeout_is_measured_at_the_bound(
        measure: Measure, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("leakcheck.probes.scenario.STEP_BOUND", 1.0)

    async def body(s: Scenario) -> Observation:
        # B's session may end an idle transaction by its own timer: the pooler's word is not enough then
        await s.change(s.b, "SET a timer", "SET idle_in_transaction_session_timeout = '60s'")
        return await _held_or_not(s, hold=True)

    got = _measured(measure, body, "stalled_timer")
    assert got.verdict is Verdict.BREAKS and Fact.STALLED in got.facts, got.evidence
    assert "waited 1 s for a server connection" in got.evidence and "SHOW SERVERS" not in got.evidence, got.evidence


def test_a_client_after_another_clients_ended_transaction_does_not_stall(
        measure: Measure, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("leakcheck.probes.scenario.STEP_BOUND", 1.0)

    async def body(s: Scenario) -> Observation:
        return await _held_or_not(s, hold=False)

    got = _measured(measure, body, "not_stalled")
    assert got.verdict is Verdict.ISOLATED and Fact.STALLED not in got.facts, got.evidence


async def _read_only_with_b_insert_vanishing(s: Scenario, lose: bool) -> Observation:
    """The read_only probe itself; when `lose`, PostgreSQL drops B's INSERT while telling B it succeeded (a rule
    on lc_audit for this scenario's row alone, made by the test and removed after it)."""
    rule = f"lc_vanish_{s.token}"
    if lose:
        with _superuser(s) as conn:
            conn.execute(f"CREATE RULE {rule} AS ON INSERT TO public.lc_audit WHERE NEW.note = '{s.name('note')}' "
                         "DO INSTEAD NOTHING")
    try:
        return await security.read_only.body(s)
    finally:
        if lose:
            with _superuser(s) as conn:
                conn.execute(f"DROP RULE IF EXISTS {rule} ON public.lc_audit")


def test_a_security_probes_insert_that_is_not_in_the_database_is_a_silent_lost_write(measure: Measure) -> None:
    async def body(s: Scenario) -> Observation:
        return await _read_only_with_b_insert_vanishing(s, lose=True)

    got = _measured(measure, body, "read_only_lost_insert", Route.DIRECT)
    assert got.verdict is Verdict.LOSES_WRITES and {Fact.LOST_WRITE, Fact.SILENT} <= set(got.facts), got.evidence
    assert "B's row lc_note_" in got.evidence and "is not in the database" in got.evidence


def test_a_security_probes_insert_that_is_there_is_read_back_before_its_clean_up(measure: Measure) -> None:
    async def body(s: Scenario) -> Observation:
        return await _read_only_with_b_insert_vanishing(s, lose=False)

    got = _measured(measure, body, "read_only_kept_insert", Route.DIRECT)
    assert got.verdict is Verdict.ISOLATED and Fact.LOST_WRITE not in got.facts, got.evidence
    assert "every write reported committed is in the database (1)" in got.evidence


async def _copy_with_its_rows_vanishing(s: Scenario) -> Observation:
    """copy_error_autocommit itself, while a trigger the test makes (and removes after it) drops this scenario's rows
    from lc_writes: a COPY that succeeds is told so by PostgreSQL, and none of its rows is kept."""
    name = f"lc_vanish_{s.token}"
    with _superuser(s) as conn:
        conn.execute(f"CREATE FUNCTION public.{name}() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END'")
        conn.execute(f"CREATE TRIGGER {name} BEFORE INSERT ON public.{WRITES_TABLE} FOR EACH ROW "
                     f"WHEN (NEW.id LIKE '{s.token}-%') EXECUTE FUNCTION public.{name}()")
    try:
        return await protocol.copy_error_autocommit.body(s)
    finally:
        with _superuser(s) as conn:
            conn.execute(f"DROP TRIGGER IF EXISTS {name} ON public.{WRITES_TABLE}")
            conn.execute(f"DROP FUNCTION IF EXISTS public.{name}()")


def test_a_copy_told_it_succeeded_whose_rows_are_not_in_the_database_is_a_silent_lost_write(
        measure: Measure, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protocol, "COPY_FIRST", "{token}-first\tA\n")  # well-formed: the COPY succeeds

    async def body(s: Scenario) -> Observation:
        return await _copy_with_its_rows_vanishing(s)

    got = _measured(measure, body, "copy_lost_rows")
    assert got.verdict is Verdict.LOSES_WRITES and {Fact.LOST_WRITE, Fact.SILENT} <= set(got.facts), got.evidence
    assert "A's row" in got.evidence and "-first (COPY) was reported committed" in got.evidence, got.evidence


async def _runs(s: Scenario, times: int | None, sql: str = "SELECT 1") -> None:
    """A's one call: its statement `times` times (None: for ever, a driver's loop), 20 ms apart."""
    done = 0
    while times is None or done < times:
        await s.a.query(s.tagged(s.a, sql))
        done += 1
        await asyncio.sleep(0.02)


def test_a_call_whose_driver_runs_its_statement_a_hundred_times_is_a_loop_stalled_before_the_bound(
        measure: Measure) -> None:
    async def body(s: Scenario) -> Observation:
        await s.observe(s.a, "connected", "1")
        await s._bounded(s.a, "a call that loops", _runs(s, None))
        return Observation(evidence="A's call returned")

    got = _measured(measure, body, "loop")
    assert got.verdict is Verdict.BREAKS and Fact.STALLED in got.facts, got.evidence
    assert "times on pid" in got.evidence and "a loop" in got.evidence, got.evidence  # not the bound's word


def test_a_call_that_runs_its_statement_often_or_long_but_returns_is_no_loop(measure: Measure) -> None:
    async def body(s: Scenario) -> Observation:
        await s.observe(s.a, "connected", "1")
        await s._bounded(s.a, "a call of 99 statements", _runs(s, 99))  # about 2.5 s: looked at all along
        await s._bounded(s.a, "a long statement", _runs(s, 1, "SELECT pg_sleep(1.5)"))
        await s.observe(s.b, "after A's calls", "1")
        return Observation(evidence="A's calls returned")

    got = _measured(measure, body, "no_loop")
    assert got.verdict is Verdict.ISOLATED and Fact.STALLED not in got.facts, got.evidence
