"""The witness: the harness's own session on PostgreSQL, which confirms on the server itself where each
client's step ran. A client's word (the pid a driver or an agent reports) is never a proof on its own.

Every statement a probe's client sends carries a tag, a comment naming the scenario and the client
(`/* leakcheck <token> A */`). Right after the step the witness looks in pg_stat_activity for the backend whose
last statement holds that tag and started after the witness's own previous look (the server's clock):
that backend ran the client's step, whatever the client says. A step no backend shows (the pooler
answered it itself, or ran its own statement on that server afterwards, e.g. a reset after every
transaction) has no sighting; a client that reported an identity for it is then believed only for a
backend that exists with that start time and whose last statement, run after the step began, may stand for
the client's step (`stands_for`): its own, the pooler's reset, its driver's own; never another client's. A
step that failed before PostgreSQL showed its text is proven on its client's last server connection when that
backend became ready again during the step and ran no statement meanwhile (`failed_unshown`, Scenario.prove_failed).

One witness per lane thread and PostgreSQL (a superuser session straight to the server, never
through the pooler: on the server's own Unix socket where leakcheck started it, Endpoint.for_harness), reused
by the lane's probes: a synchronous psycopg connection, since each probe
runs on an event loop of its own.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from leakcheck.model.errors import ProbeError
from leakcheck.model.verdicts import ServerId
from leakcheck.provision.base import QUERY_SIZE, Endpoint

#: Statements a pooler runs on a server connection of its own accord after a transaction (PgBouncer's
#: server_reset_query_always, Odyssey's pool_discard): seen after a client's step, they mean no session state
#: survives between a client's statements there.
RESETS = ("DISCARD ", "RESET ALL", "DEALLOCATE ALL", "UNLISTEN *", "SET SESSION AUTHORIZATION DEFAULT")


#: How every client's tag begins, in upper case (`tag`): a statement without it is no client's.
_TAGGED = "/* LEAKCHECK "


def is_reset(statement: str) -> bool:
    """A statement that resets session state and is no client's (it carries no leakcheck tag): Odyssey's is
    `SET SESSION AUTHORIZATION DEFAULT;RESET ALL;CLOSE ALL;UNLISTEN *;...;DISCARD TEMP;`."""
    text = statement.upper()
    return _TAGGED not in text and any(word in text for word in RESETS)

def stands_for(statement: str, own_tag: str) -> bool:
    """Whether the statement a backend a client named ran last (no sighting of the client's step) may stand for
    that step: the client's own tagged statement, the pooler's reset, or an untagged statement of the client's
    driver after its step (PDO reads a column's type); never a statement tagged for another client or scenario,
    which only says that the backend exists."""
    text = statement.upper()
    if own_tag.upper() in text:
        return True
    return _TAGGED not in text


def returns(statement: str, value: Any) -> bool:
    """Whether the statement is a SELECT whose first column is exactly that text literal (a prepared SELECT of a
    client's own value, `lc_B_p1`): a backend that ran it during a client's step whose call returned that value,
    with that backend's identity read in the same statement, ran that client's step, whoever's text it was (the
    client's driver executed another client's statement under its own name: another client's result)."""
    if not isinstance(value, str) or not value:
        return False
    head = "SELECT '" + value.replace("'", "''") + "'"
    text = statement.lstrip()
    # the literal whole (then its cast or the next column), and the backend's identity read in the same statement
    return text.startswith(head) and text[len(head):len(head) + 1] in (":", ",") and "pg_backend_pid()" in text


def check_fits(statement: str, size: int) -> None:
    """pg_stat_activity keeps a statement's first `size` - 1 bytes (track_activity_query_size): a tagged
    statement longer than that loses its tag there, so the witness could never see it. A ProbeError then."""
    length = len(statement.encode())
    if length >= size:
        raise ProbeError(f"a tagged statement of {length} bytes is longer than the server keeps of a statement in "
                         f"pg_stat_activity (track_activity_query_size = {size} bytes): the witness could never see "
                         f"its tag; start that PostgreSQL with track_activity_query_size = {QUERY_SIZE} (leakcheck's "
                         "own servers have it)")


#: Seconds after which the witness reads the server's clock again rather than reckon it from its latest reading.
CLOCK_FRESH = 2.0
#: Seconds taken off a reckoned server time: datetime rounds to microseconds, the server's reading is one too.
CLOCK_GRAIN = 2e-6
#: Seconds a backend whose connection was just closed may still show in pg_stat_activity while it exits.
ENDING_BOUND = 1.0
#: Seconds a backend may take to become ready for a query again after its client got the error of a step that failed
#: before PostgreSQL showed its text: PostgreSQL sends an ErrorResponse at once, and a driver that returns on it
#: (tokio-postgres, postgres.js) returns before the backend read the Sync after it and marked its new state.
READY_BOUND = 1.0
#: How many clock readings the witness keeps at most: a full window drops its first, the largest, so the begin it
#: reckons is then earlier, never later.
CLOCK_READINGS = 64

#: A backend's identity as the proofs carry it: pid and backend start in epoch microseconds (text).
_IDENTITY = "pid, (extract(epoch FROM backend_start) * 1000000)::bigint::text"


def tag(token: str, label: str) -> str:
    """The comment that marks a client's statements in one scenario: letters, digits and spaces only (a
    driver that rewrites placeholders, PDO's `:name` and `?`, must leave it as it is)."""
    return f"/* leakcheck {token} {label} */"


@dataclass(frozen=True)
class Sighting:
    """A backend whose last statement held a tag and started after the witness's previous look."""

    server: ServerId
    state: str  #: pg_stat_activity.state then (`active`: still running)


class Witness:
    """The harness's own direct session: sightings of tagged steps, the existence of backends, values
    spelled as the server spells them, and rows read back after a run."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        #: the witness's latest readings of the server's clock: when each answer was in (local time.time()) and the
        #: server's reading minus that time, which is how far the server's clock is ahead of this process's, at least.
        #: Only the readings no later one bettered are kept (a sliding window's maximum), so the first is the largest.
        self._ahead: deque[tuple[float, float]] = deque(maxlen=CLOCK_READINGS)
        self._mark = self._now()  #: the server's clock at the witness's last look
        self._since = self._mark  #: the look before it: when the step now being proven began, at the latest
        self._size: int | None = None  #: track_activity_query_size, read on first use

    def _read_clock(self, server: datetime) -> datetime:
        """Keep `server`, the clock_timestamp() of a statement whose answer is in now: read before it arrived, so
        the server's time at any later local moment t is at least t + (server - now)."""
        answered = time.time()
        ahead = server.timestamp() - answered
        while self._ahead and self._ahead[-1][1] <= ahead:  # a later reading at least as large outlives it
            self._ahead.pop()
        self._ahead.append((answered, ahead))
        return server

    def _now(self) -> datetime:
        row = self.conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        return self._read_clock(row[0])

    def start(self) -> None:
        """A probe, or a client's step, starts: statements before this moment are never sighted or confirmed.
        The moment in the server's clock is the local time plus how far the server's clock is ahead at least: the
        largest of the readings of the last CLOCK_FRESH seconds, each a lower bound (on one host the clocks are
        one), so it is earlier than the truth by the quickest recent look's return at most, never later: no
        statement of the step is missed, and one sent before the step began is let in only within that margin.
        Without a recent reading (a server on another host drifts; this clock went back) it is read again."""
        now = time.time()
        while self._ahead and now - self._ahead[0][0] > CLOCK_FRESH:
            self._ahead.popleft()
        if not self._ahead or self._ahead[0][0] > now:  # none recent, or this clock went back
            self._mark = self._since = self._now()
            return
        self._mark = self._since = datetime.fromtimestamp(now + self._ahead[0][1] - CLOCK_GRAIN, tz=UTC)

    @property
    def began(self) -> datetime:
        """When the step now being proven began (the server's clock), at the latest."""
        return self._since

    def fits(self, statement: str) -> str:
        """The tagged statement, if pg_stat_activity keeps all of it on this server (`check_fits`)."""
        if self._size is None:
            row = self.conn.execute("SELECT setting::int FROM pg_settings "
                                    "WHERE name = 'track_activity_query_size'").fetchone()
            assert row is not None
            self._size = int(row[0])
        check_fits(statement, self._size)
        return statement

    def look(self, tag_text: str) -> Sighting | None:
        """The backend that ran a statement holding `tag_text` since the previous look, if one did. Two
        such backends for one step is a harness error (a tag names one client of one scenario)."""
        rows = self.conn.execute(
            f"SELECT clock_timestamp(), a.* FROM (SELECT {_IDENTITY}, coalesce(state, ''), query_start > %s "
            "FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND strpos(query, %s) > 0) AS a RIGHT JOIN "
            "(VALUES (1)) AS one ON true", (self._mark, tag_text)).fetchall()
        fresh = [r[1:] for r in rows if r[4]]
        self._since = self._mark  # what `confirms` compares with, for this step
        self._mark = self._read_clock(rows[0][0])
        if len(fresh) > 1:
            raise ProbeError(f"the statement tagged {tag_text} ran on {len(fresh)} backends at once "
                             f"({', '.join(str(r[0]) for r in fresh)}): a tag names one client's step")
        if not fresh:
            return None
        pid, started, state = fresh[0][:3]
        return Sighting(ServerId(int(pid), str(started)), str(state))

    def running(self, marker: str) -> ServerId | None:
        """The backend now running (and waiting in) a statement that holds `marker`, if any: on its lock or
        sleep (`active` alone also shows during a Parse; `Client` waits between extended-protocol messages)."""
        rows = self.conn.execute(
            f"SELECT {_IDENTITY} FROM pg_stat_activity WHERE state = 'active' AND wait_event_type IS NOT NULL "
            "AND wait_event_type <> 'Client' AND pid <> pg_backend_pid() AND strpos(query, %s) > 0",
            (marker,)).fetchall()
        if len(rows) > 1:
            raise ProbeError(f"the statement marked {marker} runs on {len(rows)} backends at once")
        return ServerId(int(rows[0][0]), str(rows[0][1])) if rows else None

    def holding(self, servers: set[ServerId], *, reading: bool = False) -> list[tuple[ServerId, str]]:
        """Which of these backends sit in an open transaction (and its state): what a pool that stalled waits for.
        `reading`: only those waiting to read their client's next message (wait event ClientRead: PostgreSQL
        sent its ReadyForQuery)."""
        waiting = " AND wait_event = 'ClientRead'" if reading else ""
        rows = self.conn.execute(
            f"SELECT {_IDENTITY}, state FROM pg_stat_activity WHERE state LIKE 'idle in transaction%%' "
            f"AND pid = ANY(%s){waiting}", ([s.pid for s in servers],)).fetchall()
        return [(server, str(r[2])) for r in rows if (server := ServerId(int(r[0]), str(r[1]))) in servers]

    def idle(self, servers: set[ServerId]) -> list[ServerId]:
        """Which of these backends sit idle: no statement running, no transaction open (a client that waits for
        one of them then waits for the pooler, not for PostgreSQL)."""
        rows = self.conn.execute(f"SELECT {_IDENTITY} FROM pg_stat_activity WHERE state = 'idle' AND pid = ANY(%s)",
                                 ([s.pid for s in servers],)).fetchall()
        return [server for r in rows if (server := ServerId(int(r[0]), str(r[1]))) in servers]

    def reading(self, servers: set[ServerId]) -> list[ServerId]:
        """Which of these backends sit idle waiting to read their client's next message (wait event ClientRead):
        PostgreSQL sends its ReadyForQuery before it waits so, whereas it reports `idle` just before it."""
        rows = self.conn.execute(
            f"SELECT {_IDENTITY} FROM pg_stat_activity WHERE state = 'idle' AND wait_event = 'ClientRead' "
            "AND pid = ANY(%s)", ([s.pid for s in servers],)).fetchall()
        return [server for r in rows if (server := ServerId(int(r[0]), str(r[1]))) in servers]

    def failed_copy(self, servers: set[ServerId]) -> bool:
        """Whether one of these backends' latest statement is a COPY FROM STDIN it has ended and it now waits for
        its client's next message (`idle`, ClientRead: its ReadyForQuery is sent): a COPY it failed while its
        client was still sending, for it is the client's own end of the copy that ends one otherwise."""
        row = self.conn.execute(
            f"SELECT count(*) FROM pg_stat_activity WHERE ({_IDENTITY}) IN (SELECT * FROM unnest(%s::int[], "
            "%s::text[])) AND state = 'idle' AND wait_event = 'ClientRead' AND strpos(upper(query), 'FROM STDIN') > 0",
            ([s.pid for s in servers], [s.started for s in servers])).fetchone()
        return bool(row and row[0])

    def idle_timers(self) -> list[str]:
        """PostgreSQL's own timer that ends an idle session (idle_session_timeout), where the server or a
        database or role setting gives it one."""
        rows = self.conn.execute(
            "SELECT 'idle_session_timeout = ' || setting FROM pg_settings WHERE name = 'idle_session_timeout' "
            "AND setting <> '0' UNION ALL SELECT c FROM pg_db_role_setting, unnest(setconfig) AS c "
            "WHERE split_part(c, '=', 1) = 'idle_session_timeout'").fetchall()
        return [str(r[0]) for r in rows]

    def transaction_timers(self) -> list[str]:
        """PostgreSQL's own timers that end a session idle in a transaction (idle_in_transaction_session_timeout,
        and 17's transaction_timeout), where the server or a database or role setting gives it one."""
        names = ("idle_in_transaction_session_timeout", "transaction_timeout")
        rows = self.conn.execute(
            "SELECT name || ' = ' || setting FROM pg_settings WHERE name = ANY(%s) AND setting <> '0' UNION ALL "
            "SELECT c FROM pg_db_role_setting, unnest(setconfig) AS c WHERE split_part(c, '=', 1) = ANY(%s)",
            (list(names), list(names))).fetchall()
        return [str(r[0]) for r in rows]

    def busy(self, server: ServerId) -> str | None:
        """The statement that backend started within the last two seconds, if it did: a driver that keeps
        sending (a retry loop) while its caller waits."""
        row = self.conn.execute(
            f"SELECT query FROM pg_stat_activity WHERE ({_IDENTITY}) = (%s, %s) "
            "AND query_start > clock_timestamp() - interval '2 seconds'", (server.pid, server.started)).fetchone()
        return None if row is None else str(row[0] or "")

    def runs(self, tag_text: str, within: float) -> set[tuple[ServerId, str]]:
        """The statements holding `tag_text` that the server shows started within the last `within` seconds: each
        a backend and its statement's start (pg_stat_activity shows a backend's latest statement only, so
        looks taken one after another count runs at least as many as these)."""
        rows = self.conn.execute(
            f"SELECT {_IDENTITY}, query_start::text FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
            "AND strpos(query, %s) > 0 AND query_start > clock_timestamp() - make_interval(secs => %s)",
            (tag_text, within)).fetchall()
        return {(ServerId(int(r[0]), str(r[1])), str(r[2])) for r in rows}

    def terminate(self, server: ServerId) -> None:
        """End that backend (the harness's own clean-up of a stalled pool: the probe has measured already)."""
        self.conn.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE ({_IDENTITY}) = (%s, %s)",
                          (server.pid, server.started))

    def end_runs(self, tag_text: str, servers: set[ServerId]) -> int:
        """End those of `servers` (the backends a driver's loop was counted on) whose statement still holds
        `tag_text`: the harness's own end of a loop its probe has measured already (its call then fails and
        returns); never another backend (an idle one an earlier step used; a running pooler's, the team's too).
        How many there were."""
        rows = self.conn.execute(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
            f"AND strpos(query, %s) > 0 AND ({_IDENTITY}) IN (SELECT * FROM unnest(%s::int[], %s::text[]))",
            (tag_text, [s.pid for s in servers], [s.started for s in servers])).fetchall()
        return len(rows)

    def alive(self, server: ServerId) -> bool:
        """Whether that backend (pid and start time) still exists."""
        row = self.conn.execute(
            f"SELECT count(*) FROM pg_stat_activity WHERE ({_IDENTITY}) = (%s, %s)",
            (server.pid, server.started)).fetchone()
        return bool(row and row[0])

    def ended(self, server: ServerId, within: float = ENDING_BOUND) -> bool:
        """Whether that backend is gone, or goes within `within` seconds: a backend whose connection the pooler
        has just closed still shows in pg_stat_activity for a moment while it exits."""
        deadline = time.monotonic() + within
        while self.alive(server):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def confirms(self, server: ServerId) -> str | None:
        """A client's word about the step `look` just found no sighting for: that backend exists with that start
        time and ran a statement since the step began (a statement of the pooler's, or of the driver's own
        after the client's: PDO reads a column's table after a query; `stands_for` judges it). That
        statement's text, or None when the server shows no such backend."""
        row = self.conn.execute(
            f"SELECT query FROM pg_stat_activity WHERE ({_IDENTITY}) = (%s, %s) AND query_start > %s",
            (server.pid, server.started, self._since)).fetchone()
        return None if row is None else str(row[0] or "")

    def failed_unshown(self, server: ServerId, *, in_transaction: bool, within: float = READY_BOUND) -> bool:
        """Whether that backend answered a message that failed before PostgreSQL showed any statement text (a Bind
        of a prepared statement that does not exist) since the step `look` just found no sighting for began: it
        became ready for a query again after that moment (PostgreSQL marks the state at every ReadyForQuery),
        either idle in an aborted transaction block (`in_transaction`: no pooler's statement leaves one, and none
        runs inside a client's transaction), or idle with no client's statement started meanwhile: none at all, or
        one no client tagged, the pooler's own that linked the client's step to that server (PgBouncer's `SET
        client_encoding`, where the server's value differs from the client's after a DISCARD ALL). Within `within`
        seconds: the client may have its error before the backend is ready again (READY_BOUND)."""
        if in_transaction:
            state, started = "idle in transaction (aborted)", "infinity"
        else:
            state, started = "idle", self._since.isoformat()
        deadline = time.monotonic() + within
        while self.conn.execute(
                f"SELECT 1 FROM pg_stat_activity WHERE ({_IDENTITY}) = (%s, %s) AND state = %s AND state_change > %s "
                "AND (query_start <= %s::timestamptz OR strpos(upper(query), %s) = 0)",
                (server.pid, server.started, state, self._since, started, _TAGGED)).fetchone() is None:
            if time.monotonic() > deadline:  # never ready again in that state: no proof
                return False
            time.sleep(0.01)
        return True

    def spell(self, name: str, value: str) -> str | None:
        """How the server spells `SET name = value` (a value as written after `=`), read in the witness's own
        transaction, rolled back: nothing of it reaches any client's session."""
        with self.conn.transaction(force_rollback=True):
            self.conn.execute(f"SET LOCAL {name} = {value}")
            row = self.conn.execute("SELECT current_setting(%s, true)", (name,)).fetchone()
        return None if row is None else row[0]

    def present(self, table: str, ids: list[str], column: str = "id") -> set[str]:
        """Which of `ids` are in `table`'s `column` now, as text (written and committed by anyone)."""
        if not ids:
            return set()
        rows = self.conn.execute(f"SELECT {column}::text FROM {table} WHERE {column}::text = ANY(%s)",
                                 (ids,)).fetchall()
        return {str(r[0]) for r in rows}

    def close(self) -> None:
        self.conn.close()


_lanes = threading.local()
_all: list[Witness] = []
_lock = threading.Lock()


def witness_for(endpoint: Endpoint) -> Witness:
    """This lane thread's witness on that PostgreSQL (connected on first use, kept for the run)."""
    by: dict[tuple[str, int, str], Witness] = _lanes.__dict__.setdefault("by", {})
    key = (endpoint.host, endpoint.port, endpoint.dsn)
    found = by.get(key)
    if found is not None and not found.conn.closed:
        return found
    made = open_witness(endpoint)
    by[key] = made
    with _lock:
        _all.append(made)
    return made


def open_witness(endpoint: Endpoint) -> Witness:
    """A witness of its own on that PostgreSQL, which the caller closes (discovery runs a sequence through
    the pooler and its reference side by side on one thread: each needs its own marks)."""
    conn = psycopg.connect(endpoint.conninfo(), autocommit=True, connect_timeout=10,
                           application_name="leakcheck witness")
    return Witness(conn)


def close_all() -> None:
    """Close every witness of the run (its end, or Ctrl-C)."""
    with _lock:
        gone = list(_all)
        _all.clear()
    for w in gone:
        with contextlib.suppress(Exception):  # closing at the end: nothing to report
            w.close()
