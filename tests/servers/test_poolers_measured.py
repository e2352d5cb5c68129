"""What Odyssey and pgpool-II do with two psycopg clients, A and B, below the probes: each test
asserts the behaviour its name states (the premises the probes build on), and prints what it saw
(`pytest -s`).

Each observation reads the server connection's identity (pg_backend_pid() and its backend_start) in
the same statement as the value it observes.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from leakcheck.model.pool_settings import PoolMode, PoolSettings
from leakcheck.model.versions import parse_spec
from leakcheck.provision.base import Endpoint
from leakcheck.provision.host.system import ServerUser, cache_root
from leakcheck.provision.odyssey.process import OdysseyProcess
from leakcheck.provision.odyssey.product import resolve_odyssey
from leakcheck.provision.pgpool.process import PgpoolProcess
from leakcheck.provision.pgpool.product import resolve_pgpool
from leakcheck.provision.postgres.server import PgServer

pytestmark = pytest.mark.servers

READ = ("SELECT pg_backend_pid(), (pg_stat_get_activity(pg_backend_pid())).backend_start, "
        "current_setting('statement_timeout')")


def client(endpoint: Endpoint) -> psycopg.Connection[Any]:
    return psycopg.connect(endpoint.as_user("leakcheck_app").conninfo(), autocommit=True, connect_timeout=10)


def read(conn: psycopg.Connection[Any]) -> tuple[int, str, str]:
    """(backend pid, backend_start, statement_timeout), all from one statement."""
    row = conn.execute(READ).fetchone()
    assert row is not None and row[0] and row[1] is not None, "no proof of the server connection"
    return int(row[0]), row[1].isoformat(), str(row[2])


def show(title: str, **seen: object) -> None:
    print(f"\nMEASURED {title}:")
    for name, value in seen.items():
        print(f"  {name}: {value}")


@pytest.mark.parametrize("extra", [
    (),
    (("pool_reserve_prepared_statement", "no"),),
    (("pool_reserve_prepared_statement", "no"), ("pool_discard", "no"), ("pool_smart_discard", "no")),
], ids=["defaults", "no-prepared-reserve", "no-discard"])
def test_odyssey_gives_two_clients_of_a_pool_of_one_one_server_and_without_discard_a_set_reaches_the_other(
    extra: tuple[tuple[str, str], ...], postgres: PgServer, user: ServerUser
) -> None:
    binary = resolve_odyssey(parse_spec("1.5", "--odyssey"), cache_root())
    with OdysseyProcess(binary, PoolSettings(PoolMode.TRANSACTION, 1), extra, postgres.endpoint(), user) as pooler:
        with client(pooler.endpoint()) as a, client(pooler.endpoint()) as b:
            a_first, b_first = read(a), read(b)
            a.execute("SET statement_timeout = '123ms'")
            b_after, a_after = read(b), read(a)
        show(f"Odyssey {binary.version} transaction pool_size=1 {dict(extra) or 'defaults'}",
             A=a_first, B=b_first, same_server=a_first[:2] == b_first[:2],
             B_after_A_SET=b_after, A_after_its_SET=a_after,
             B_saw_A_timeout=b_after[2] == "123ms", A_kept_its_timeout=a_after[2] == "123ms")
    assert a_first[:2] == b_first[:2] == b_after[:2] == a_after[:2], "A and B did not share Odyssey's one server"
    if dict(extra).get("pool_discard") == "no":  # nothing cleans A's SET between transactions
        assert b_after[2] == "123ms", f"B read {b_after[2]!r} after A's SET, on A's server"


@pytest.mark.parametrize("version", ["4.3", "4.6", "4.7"])
def test_pgpool_gives_connected_clients_two_servers_and_the_next_client_the_cached_one_reset_unless_abort(
    version: str, postgres: PgServer, user: ServerUser
) -> None:
    binary = resolve_pgpool(parse_spec(version, "--pgpool"), cache_root())
    with PgpoolProcess(binary, PoolSettings(PoolMode.SESSION, 2), (), postgres.endpoint(), user) as pooler:
        with client(pooler.endpoint()) as a, client(pooler.endpoint()) as b:
            a_first, b_first = read(a), read(b)
            a.execute("SET statement_timeout = '123ms'")
            b_after = read(b)
        show(f"pgpool-II {binary.version} pool_size=2 (2 children), A and B connected at once",
             A=a_first, B=b_first, same_server=a_first[:2] == b_first[:2], B_saw_A_timeout=b_after[2] == "123ms")
        assert a_first[:2] != b_first[:2], "pgpool-II gave two connected clients one server connection"
        assert b_after[2] != "123ms", "B, on its own server, read A's statement_timeout"
    for extra in ((), (("reset_query_list", "ABORT"),)):
        with PgpoolProcess(binary, PoolSettings(PoolMode.SESSION, 1), extra, postgres.endpoint(), user) as pooler:
            with client(pooler.endpoint()) as a:
                a_seen = read(a)
                a.execute("SET statement_timeout = '123ms'")
            with client(pooler.endpoint()) as b:
                b_seen = read(b)
            show(f"pgpool-II {binary.version} pool_size=1 (1 child), A disconnects, then B connects, "
                 f"{dict(extra) or 'default reset_query_list'}",
                 A=a_seen, B=b_seen, B_on_A_cached_backend=a_seen[:2] == b_seen[:2],
                 B_saw_A_timeout=b_seen[2] == "123ms")
            assert a_seen[:2] == b_seen[:2], "with one child, B did not get the backend A left"
            aborts_only = dict(extra).get("reset_query_list") == "ABORT"
            assert (b_seen[2] == "123ms") is aborts_only, f"B read {b_seen[2]!r} with {dict(extra) or 'the default'}"


def test_pgpool_pool_of_one_makes_a_second_client_wait_for_the_first(postgres: PgServer, user: ServerUser) -> None:
    binary = resolve_pgpool(parse_spec("4.7", "--pgpool"), cache_root())
    with PgpoolProcess(binary, PoolSettings(PoolMode.SESSION, 1), (), postgres.endpoint(), user) as pooler:
        waited: list[float] = []
        a_closed = threading.Event()
        b_in_before_a_closed: list[bool] = []
        a = client(pooler.endpoint())
        read(a)

        def second() -> None:
            start = time.monotonic()
            with client(pooler.endpoint()) as b:
                read(b)
                b_in_before_a_closed.append(not a_closed.is_set())
            waited.append(time.monotonic() - start)

        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(1.0)
        a_closed.set()
        a.close()
        thread.join(15)
        show(f"pgpool-II {binary.version} pool_size=1: B connects while A holds the only child for 1 s",
             B_connected_after_seconds=round(waited[0], 2) if waited else "never (15 s)")
        assert waited, "B never connected after A closed (15 s)"
        assert b_in_before_a_closed == [False], "B was served while A still held the only child"
