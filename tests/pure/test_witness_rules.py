"""The witness's rules for a proof (pure: probes/witness.py and Scenario._prove, with a stand-in for the
witness's session that answers as PostgreSQL would)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest

from leakcheck.model.errors import ProbeError
from leakcheck.model.target import Route
from leakcheck.model.verdicts import Proof, ServerId
from leakcheck.probes.scenario import Scenario
from leakcheck.probes.witness import Witness, check_fits, returns, stands_for, tag

SERVER = ServerId(7, "1733000000000000")


class _Session:
    """What the witness's own session reads: the server's clock, track_activity_query_size, no sighting, and
    `last` as the statement the named backend ran last."""

    def __init__(self, size: int = 1024, last: str | None = None) -> None:
        self.size, self.last = size, last

    def execute(self, sql: str, params: Any = None) -> Any:
        if "track_activity_query_size" in sql:
            rows = [(self.size,)]
        elif sql == "SELECT clock_timestamp()":
            rows = [(datetime.now(UTC),)]
        elif "strpos(query" in sql and "RIGHT JOIN" in sql:
            rows = [(datetime.now(UTC), None, None, None, None)]  # the clock; no backend shows the tag: no sighting
        elif "SELECT query FROM pg_stat_activity" in sql:
            rows = [] if self.last is None else [(self.last,)]
        else:
            raise AssertionError(f"unexpected statement: {sql}")
        return SimpleNamespace(fetchone=lambda: rows[0] if rows else None, fetchall=lambda: rows)


def _scenario(session: _Session) -> tuple[Scenario, Any]:
    a: Any = SimpleNamespace(label="A")
    witness = Witness(cast(Any, session))
    return Scenario(a=a, b=cast(Any, SimpleNamespace(label="B")), route=Route.TRANSACTION, witness=witness), a


def test_a_tagged_statement_longer_than_the_server_keeps_in_pg_stat_activity_is_a_probe_error() -> None:
    s, a = _scenario(_Session(size=1024))
    with pytest.raises(ProbeError, match="track_activity_query_size = 1024 bytes"):
        s.tagged(a, "SELECT '" + "x" * 1100 + "'")
    assert s.tagged(a, "SELECT 1").endswith(tag(s.token, "A"))


def test_the_length_rule_counts_bytes_and_the_byte_pg_stat_activity_keeps_for_its_end() -> None:
    check_fits("x" * 1023, 1024)
    with pytest.raises(ProbeError):
        check_fits("x" * 1024, 1024)
    with pytest.raises(ProbeError):
        check_fits("é" * 512, 1024)  # 1024 bytes in UTF-8


def test_a_reported_backend_whose_last_statement_is_another_clients_is_no_proof() -> None:
    session = _Session()
    s, a = _scenario(session)
    session.last = f"SELECT 1, pg_backend_pid() {tag(s.token, 'B')}"
    with pytest.raises(ProbeError, match="another client's"):
        s._prove(a, "read", (SERVER.pid, SERVER.started))
    assert s.proofs == []


def test_a_reported_backend_whose_last_statement_is_its_own_a_reset_or_its_drivers_is_confirmed() -> None:
    for last in ("SELECT 1 {own}", "SET SESSION AUTHORIZATION DEFAULT;RESET ALL;DISCARD TEMP;",
                 "SELECT TYPNAME FROM PG_TYPE WHERE OID=19"):
        session = _Session()
        s, a = _scenario(session)
        session.last = last.format(own=tag(s.token, "A"))
        s._prove(a, "read", (SERVER.pid, SERVER.started))
        assert s.proofs == [Proof("read", "A", SERVER)]


def test_a_statement_of_another_scenario_or_client_never_stands_for_a_clients_step() -> None:
    mine = tag("abcd1234", "A")
    assert stands_for(f"SELECT 1 {mine}", mine)
    assert not stands_for(f"SELECT 1 {tag('abcd1234', 'B')}", mine)
    assert not stands_for(f"SELECT 1 {tag('ffff0000', 'A')}", mine)
    assert stands_for("DISCARD ALL", mine)


def test_another_clients_statement_stands_for_a_step_only_as_the_select_of_the_very_value_the_step_returned() -> None:
    theirs = f"SELECT 'lc1234_B_p1'::text AS v, pg_backend_pid() {tag('1234', 'B')}"
    assert returns(theirs, "lc1234_B_p1")
    assert not returns(theirs, "lc1234_A_p1")  # the client's own value: not what that statement returns
    assert not returns(theirs, "lc1234_B_p")  # a prefix of the literal is not the literal
    assert not returns(theirs, None) and not returns(theirs, "") and not returns(theirs, 1)
    assert not returns(f"SELECT 1, 'lc1234_B_p1' {tag('1234', 'B')}", "lc1234_B_p1")  # not its first column
    # a literal that only begins as the value, with a quote doubled in it (review): not the value
    assert not returns(f"SELECT 'lc1234_B_p1''x'::text AS v, pg_backend_pid() {tag('1234', 'B')}", "lc1234_B_p1")
    # a statement that does not read its backend's identity proves nothing of where it ran
    assert not returns(f"SELECT 'lc1234_B_p1'::text AS v {tag('1234', 'B')}", "lc1234_B_p1")


class _Client:
    """A client whose statements all run on SERVER: a write returns no rows, a read its value and SERVER."""

    label = "A"

    async def query(self, sql: str) -> list[tuple[Any, ...]]:
        return [(1, SERVER.pid, SERVER.started)] if sql.startswith("SELECT") else []


def test_a_write_the_witness_did_not_see_is_proven_by_the_clients_next_statement() -> None:
    session = _Session(last="DISCARD ALL")  # the pooler's reset followed each step: no sighting
    a = _Client()
    witness = Witness(cast(Any, session))
    s = Scenario(a=cast(Any, a), b=cast(Any, SimpleNamespace(label="B")), route=Route.TRANSACTION, witness=witness)
    asyncio.run(s.write(cast(Any, a), "INSERT"))
    assert [p.step for p in s.proofs] == ["INSERT: where"]
    assert [w.told_committed for w in s.ledger.writes] == [True]


class _Clock:
    """The witness's session as a clock only: each `SELECT clock_timestamp()` answers the local time (a
    stand-in for time.time) plus the next of `aheads`."""

    def __init__(self, local: list[float], aheads: list[float]) -> None:
        self.local, self.aheads = local, aheads

    def execute(self, sql: str, params: Any = None) -> Any:
        assert sql == "SELECT clock_timestamp()", sql
        reading = datetime.fromtimestamp(self.local[0] + self.aheads.pop(0), tz=UTC)
        return SimpleNamespace(fetchone=lambda: (reading,))


def test_a_step_begins_at_the_largest_clock_reading_of_the_last_two_seconds_and_older_ones_are_forgotten(
        monkeypatch: pytest.MonkeyPatch) -> None:
    local = [100.0]
    monkeypatch.setattr("leakcheck.probes.witness.time.time", lambda: local[0])
    clock = _Clock(local, [0.5, 0.2, 0.3, 0.1])
    witness = Witness(cast(Any, clock))  # reads the clock once: 0.5 ahead at 100.0
    for at in (100.5, 101.0):  # 0.2, then 0.3 ahead
        local[0] = at
        witness._now()
    grain = 2e-6

    def began_at(at: float) -> float:
        local[0] = at
        witness.start()
        return witness.began.timestamp()

    assert began_at(101.2) == pytest.approx(101.2 + 0.5 - grain, abs=1e-6)  # the largest of the three
    assert began_at(102.3) == pytest.approx(102.3 + 0.3 - grain, abs=1e-6)  # 100.0's is older than 2 s
    assert began_at(103.5) == pytest.approx(103.5 + 0.1, abs=1e-6)  # none recent: the clock is read again
    assert clock.aheads == []
