"""PgBouncer's admin console (both backends): readiness, SHOW CONFIG, cancels in flight, and resetting a
pool between probes. Each command is bounded (provision/console.py's `execute`)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from leakcheck.model.errors import StartError, one_line
from leakcheck.model.versions import Version
from leakcheck.provision import console
from leakcheck.provision.base import DBNAME, Endpoint
from leakcheck.provision.host.proc_sockets import Ends

#: How messages name it.
CONSOLE = "PgBouncer's admin console"


def execute(conn: psycopg.Connection[Any], command: str) -> list[dict[str, str]]:
    """A command on PgBouncer's admin console, bounded (console.execute); its rows as dicts."""
    return console.execute(conn, command, CONSOLE)


def connect(endpoint: Endpoint) -> psycopg.Connection[Any]:
    """The admin console as the admin user (the run's superuser role), with its password."""
    return psycopg.connect(endpoint.conninfo("pgbouncer"), autocommit=True, connect_timeout=console.CONNECT_TIMEOUT)


def show_version(endpoint: Endpoint) -> str:
    """PgBouncer's SHOW VERSION, e.g. 'PgBouncer 1.24.1'."""
    with connect(endpoint) as conn:
        rows = execute(conn, "SHOW VERSION")
    return next(iter(rows[0].values())) if rows else ""


def show_config(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """PgBouncer's SHOW CONFIG: the value it runs with, by key."""
    return {row["key"]: row["value"] for row in execute(conn, "SHOW CONFIG")}


def check_config(endpoint: Endpoint, expected: dict[str, str], ini: str, unset: dict[str, str] | None = None) -> None:
    """SHOW CONFIG shows each of `expected` (leakcheck's HARNESS_KEYS values) and, where it shows them, each
    of `unset` (the keys leakcheck leaves unset, at their defaults), else a one-line StartError naming the
    first key that differs: the caller stops that PgBouncer."""
    try:
        with connect(endpoint) as conn:
            shown = show_config(conn)
    except psycopg.Error as exc:
        raise StartError(f"could not read SHOW CONFIG of PgBouncer at port {endpoint.port} ({one_line(exc, 160)})"
                         ) from None
    expected = expected | {key: want for key, want in (unset or {}).items() if key in shown}
    for key, want in expected.items():
        if shown.get(key) != want:
            raise StartError(
                f"PgBouncer started from {ini} runs with {key} = {shown.get(key)!r} (SHOW CONFIG), not leakcheck's "
                f"{want!r}: stopped it; the ini reached PgBouncer otherwise than leakcheck wrote it, report this")


def answers(endpoint: Endpoint) -> str | None:
    """None when the admin console answers SHOW VERSION, else why not (for wait_until)."""
    try:
        show_version(endpoint)
        return None
    except (psycopg.Error, StartError) as exc:
        return one_line(exc, 160)


def _pools(conn: psycopg.Connection[Any]) -> list[dict[str, str]]:
    """SHOW POOLS' rows of the run's database."""
    return [row for row in execute(conn, "SHOW POOLS") if row.get("database") == DBNAME]


def cancels_in_flight(conn: psycopg.Connection[Any]) -> int:
    """How many cancel requests PgBouncer is forwarding for the database, by SHOW POOLS: its client
    columns about cancels (1.18-1.26: cl_active_cancel_req, cl_waiting_cancel_req; 1.16-1.17:
    cl_cancel_req). The server columns (sv_active_cancel, sv_being_canceled) count the same requests."""
    return sum(int(value or 0) for row in _pools(conn) for name, value in row.items()
               if name.startswith("cl_") and "cancel" in name)


#: SHOW POOLS' columns (1.18+) that count a cancel request from when PgBouncer read it until PostgreSQL closed
#: the connection it was forwarded on, which PostgreSQL does once it acted on it (server.c: a server in
#: SV_ACTIVE_CANCEL until that connection ends, then "successfully sent cancel request"). 1.16-1.17's
#: cl_cancel_req stopped counting once the request was written to PostgreSQL, before PostgreSQL acted.
UNTIL_CLOSED = ("cl_active_cancel_req", "cl_waiting_cancel_req")


def cancels_until_closed(endpoint: Endpoint) -> int | None:
    """How many cancel requests PgBouncer holds for the database until PostgreSQL closes their connections
    (UNTIL_CLOSED), or None when it cannot say: no such columns, no pool for the database, or no console
    answering there (each wait bounded: console.CONNECT_TIMEOUT, console.CONSOLE_TIMEOUT)."""
    try:
        with connect(endpoint) as conn:
            rows = _pools(conn)
    except (psycopg.Error, StartError):
        return None
    if not rows or any(name not in rows[0] for name in UNTIL_CLOSED):
        return None
    return sum(int(row[name] or 0) for row in rows for name in UNTIL_CLOSED)


#: The first release whose KILL leakcheck measured safe with a cancel request in flight: the KILL closes the cancel's
#: client and server connections with the rest of the pool (janitor.c's kill_pool, as in 1.18.0), PgBouncer stays up,
#: and SHOW POOLS then counts no cancel (tests/servers/test_cancel_in_flight.py, on 1.24.1 and 1.26.1). 1.18.0
#: crashed on that KILL (pgbouncer#801); the fixes are in 1.19.0 (#815) and 1.19.1 (#846, #849), but 1.19.1-1.24.0
#: were not measured, so their resets still wait. Later releases (1.25.x, and any newer) are taken as safe without a
#: measurement of their own: kill_pool and the cancel fixes are unchanged in PgBouncer's source up to its 2026 head.
KILL_SURVIVES_CANCELS = Version((1, 24, 1))


def settles_cancels(version: Version) -> bool:
    """Whether a reset of this PgBouncer waits until no cancel request is in flight before its KILL."""
    return version < KILL_SURVIVES_CANCELS


def _settle_cancels(conn: psycopg.Connection[Any], port: int, timeout: float) -> None:
    """Until no cancel request is in flight (bounded): a KILL while PgBouncer 1.18.0 forwards one crashes it
    (`FATAL ... disconnect_client(): bad client state: 1`, pgbouncer#801, fixed in 1.19.1). A driver
    may send its cancel after its statement already returned (pgx v4 does, from a goroutine)."""
    deadline = time.monotonic() + timeout
    while (left := cancels_in_flight(conn)) > 0:
        if time.monotonic() > deadline:
            raise StartError(f"PgBouncer at port {port} still forwarded {left} cancel request(s) {timeout:g} s after "
                             "a probe (PostgreSQL did not close their connections): not reset, since a KILL "
                             "then crashes PgBouncer before 1.19.1 (pgbouncer#801)")
        time.sleep(0.005)


def reset_pool(endpoint: Endpoint, conn: psycopg.Connection[Any] | None = None, timeout: float = 5.0,
               settle: bool = True) -> None:
    """Wait until no cancel request is in flight (_settle_cancels; only when `settle`: see settles_cancels),
    close every server (and client) connection of the database (KILL), let clients in again (RESUME), and
    wait until PgBouncer holds no server connection for it, cancel connections included (SHOW SERVERS lists
    them as active_cancel and being_canceled): the next probe starts from fresh server connections (the
    runner also checks that no server identity comes back). `conn`: an open admin console connection to
    reuse (KILL never closes those). Each wait has `timeout` seconds."""
    try:
        with contextlib.ExitStack() as stack:
            admin = conn if conn is not None else stack.enter_context(connect(endpoint))
            if settle:
                _settle_cancels(admin, endpoint.port, timeout)
            execute(admin, f"KILL {DBNAME}")
            execute(admin, f"RESUME {DBNAME}")
            deadline = time.monotonic() + timeout
            while any(row.get("database") == DBNAME for row in execute(admin, "SHOW SERVERS")):
                if time.monotonic() > deadline:
                    raise StartError(f"PgBouncer at port {endpoint.port} still holds server connections after KILL")
                time.sleep(0.002)
    except psycopg.Error as exc:
        raise StartError(
            f"could not reset PgBouncer's pool at {endpoint.host}:{endpoint.port} ({one_line(exc, 160)})"
        ) from None


#: PgBouncer's timers that may end a client's hold on a server connection, or end or serve a client waiting for
#: one (reserve_pool_timeout only with a reserve pool): set within a bound, a stall is only known at the bound.
HOLD_TIMERS = ("query_timeout", "query_wait_timeout", "idle_transaction_timeout", "transaction_timeout",
               "client_idle_timeout", "reserve_pool_timeout")


@dataclass(frozen=True)
class HoldSettings:
    """What PgBouncer runs the run's database's pool with, read once per probe (`KeptWatch`): its timers (SHOW
    CONFIG), its reserve pools and its pool's size (SHOW DATABASES)."""

    config: dict[str, str]
    reserve: tuple[int, ...]  #: SHOW DATABASES' reserve_pool of the database (and SHOW CONFIG's reserve_pool_size)
    #: SHOW DATABASES' pool_size of the database (its own, else default_pool_size); 0 when not shown
    pool_size: int


def hold_settings(conn: psycopg.Connection[Any]) -> HoldSettings:
    """PgBouncer's settings of the run's database's pool (`HoldSettings`)."""
    config = show_config(conn)
    pools = [row for row in execute(conn, "SHOW DATABASES") if row.get("name") == DBNAME]
    reserve = tuple(int(row.get("reserve_pool") or row.get("reserve_pool_size") or 0) for row in pools)
    sizes = [int(row.get("pool_size") or 0) for row in pools]
    return HoldSettings(config, (*reserve, int(config.get("reserve_pool_size") or 0)), min(sizes, default=0))


#: One console read of the run's database: SHOW SERVERS', SHOW CLIENTS' and SHOW POOLS' rows.
Read = tuple[list[dict[str, str]], list[dict[str, str]], list[dict[str, str]]]


@dataclass(frozen=True)
class HoldLook:
    """What PgBouncer's console said of the run's database: its settings (read once per probe) and, twice in a
    row (each read sent once the one before was answered), SHOW SERVERS, SHOW CLIENTS and SHOW POOLS."""

    settings: HoldSettings
    reads: tuple[Read, ...]


def hold_reads(conn: psycopg.Connection[Any]) -> tuple[Read, ...]:
    """Two console reads of who holds and who waits for the run's database's server connections (`HoldLook`)."""
    reads = []
    for _ in range(2):
        servers = [row for row in execute(conn, "SHOW SERVERS") if row.get("database") == DBNAME]
        clients = [row for row in execute(conn, "SHOW CLIENTS") if row.get("database") == DBNAME]
        reads.append((servers, clients, _pools(conn)))
    return tuple(reads)


class KeptWatch:
    """PgBouncer's word, at each look of one probe, that it keeps server connections for a client while the waiting
    client itself waits (`kept`): its settings read at the first look only, the console's two reads at every look.
    None when its console does not answer (each wait bounded: console.CONNECT_TIMEOUT, console.CONSOLE_TIMEOUT)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.settings: HoldSettings | None = None

    def __call__(self, pids: set[int], bound: float, waiter: set[Ends]) -> str | None:
        """`waiter`: the TCP connections of the client whose call waits (its driver's, read just before)."""
        # its connections to this PgBouncer, by address and port (a team's agent may hold others, to other servers)
        ends = {(near, port) for near, port, far, far_port in waiter
                if (far, far_port) == (self.endpoint.host, self.endpoint.port)}
        if not ends:
            return None
        try:
            with connect(self.endpoint) as conn:
                if self.settings is None:
                    self.settings = hold_settings(conn)
                look = HoldLook(self.settings, hold_reads(conn))
        except (psycopg.Error, StartError):
            return None
        return kept(look, pids, bound, ends)


def full(servers: int, size: int) -> bool:
    """Whether a pool holding `servers` server connections (SHOW POOLS' sv_* columns: every one PgBouncer counts
    against the pool's size, logins and cancel connections too) opens no other one for a waiting client."""
    return size > 0 and servers >= size


def kept(look: HoldLook, pids: set[int], bound: float, waiter: set[tuple[str, int]]) -> str | None:
    """Whether PgBouncer keeps every one of these server connections (PostgreSQL pids) for a client while
    the client whose call waits (`waiter`: its address and port, as SHOW CLIENTS shows them) waits in a full pool
    (`full`: no server connection is opened for it), in both reads, with no timer of its own (HOLD_TIMERS) that
    could change that within `bound` seconds: in words, else None. Another client waiting proves nothing of that
    call, which may wait on something else. A server
    PostgreSQL showed idle and reading before the first read had handed PgBouncer its ReadyForQuery already;
    PgBouncer, one event loop, had read it by the second: kept then, it stays kept until that client sends
    something or a timer fires."""
    config, size = look.settings.config, look.settings.pool_size
    timers = [f"{key} = {config[key]}" for key in HOLD_TIMERS if 0 < _seconds(config.get(key)) <= bound
              and (key != "reserve_pool_timeout" or any(look.settings.reserve))]
    if timers or session_timers(config) or not pids:
        return None
    links: list[dict[int, str]] = []
    for servers, clients, pools in look.reads:
        linked = {int(row.get("remote_pid") or 0): row.get("link") or "" for row in servers
                  if row.get("state") == "active"}
        held = {row.get("user"): sum(int(value or 0) for name, value in row.items() if name.startswith("sv_"))
                for row in pools}
        waiting = [row.get("user") for row in clients if row.get("state") == "waiting" and _end(row) in waiter]
        if (not all(linked.get(pid) for pid in pids) or not waiting
                or not all(full(held.get(user, 0), size) for user in waiting)):
            return None
        links.append({pid: linked[pid] for pid in pids})
    if any(got != links[0] for got in links):
        return None
    shown = ", ".join(f"{near}:{port}" for near, port in sorted(waiter))
    return (f"SHOW SERVERS showed {', '.join(f'pid {pid}' for pid in sorted(pids))} active for a client and SHOW "
            f"CLIENTS the waiting client ({shown}) waiting in a full pool of {size} (SHOW POOLS), twice, with no "
            f"timer of PgBouncer's within {bound:g} s")


def _end(row: dict[str, str]) -> tuple[str, int]:
    """A SHOW CLIENTS row's client address and port."""
    try:
        return row.get("addr") or "", int(row.get("port") or 0)
    except ValueError:
        return "", 0


def session_timers(config: dict[str, str]) -> list[str]:
    """The settings PgBouncer runs with (SHOW CONFIG) whose value names a timeout: not a timer of its own (those
    are numbers) but a session's, which it would set on its server connections. track_extra_parameters naming
    idle_in_transaction_session_timeout, say, hands each client's own value of it (its startup packet's, which a
    team's agent may send unseen) to whatever server connection the client is linked to: a timer PostgreSQL would
    run on a held transaction, that neither the witness nor the harness sees."""
    return [f"{key} = {value}" for key, value in config.items() if "timeout" in value.lower()]


def _seconds(value: str | None) -> float:
    try:
        return float(value or 0)
    except ValueError:
        return 0.0
