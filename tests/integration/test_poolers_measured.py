"""What Odyssey and pgpool-II do with two psycopg clients, A and B: measured and printed, never asserted.

Each observation reads the server connection's identity (pg_backend_pid() and its backend_start) in
the same statement as the value it observes. The tests assert only that the proofs were read; what
was seen is printed (`pytest -s`) for people and the lead's probes to judge.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from leakcheck.provision.base import Endpoint
from leakcheck.provision.bouncer_ini import PoolMode, PoolSettings
from leakcheck.provision.odyssey_process import OdysseyProcess
from leakcheck.provision.pg_server import PgServer
from leakcheck.provision.pgpool_process import PgpoolProcess
from leakcheck.provision.pooler_binaries import resolve_odyssey, resolve_pgpool
from leakcheck.provision.system import ServerUser, cache_root
from leakcheck.versions import parse_spec

pytestmark = pytest.mark.integration

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
def test_odyssey_transaction_pool_of_one_with_two_clients(
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


@pytest.mark.parametrize("version", ["4.3", "4.6", "4.7"])
def test_pgpool_two_clients_at_once_and_one_after_the_other(version: str, postgres: PgServer, user: ServerUser) -> None:
    binary = resolve_pgpool(parse_spec(version, "--pgpool"), cache_root())
    with PgpoolProcess(binary, PoolSettings(PoolMode.SESSION, 2), (), postgres.endpoint(), user) as pooler:
        with client(pooler.endpoint()) as a, client(pooler.endpoint()) as b:
            a_first, b_first = read(a), read(b)
            a.execute("SET statement_timeout = '123ms'")
            b_after = read(b)
        show(f"pgpool-II {binary.version} pool_size=2 (2 children), A and B connected at once",
             A=a_first, B=b_first, same_server=a_first[:2] == b_first[:2], B_saw_A_timeout=b_after[2] == "123ms")
        same = 0
        for _ in range(5):
            pooler.reset()
            with client(pooler.endpoint()) as a:
                a_seen = read(a)
            with client(pooler.endpoint()) as b:
                same += read(b)[:2] == a_seen[:2]
        show(f"pgpool-II {binary.version} pool_size=2, A disconnects, then B connects, 5 times",
             B_on_A_cached_backend=f"{same} of 5")
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


def test_pgpool_pool_of_one_makes_a_second_client_wait_for_the_first(postgres: PgServer, user: ServerUser) -> None:
    binary = resolve_pgpool(parse_spec("4.7", "--pgpool"), cache_root())
    with PgpoolProcess(binary, PoolSettings(PoolMode.SESSION, 1), (), postgres.endpoint(), user) as pooler:
        waited: list[float] = []
        a = client(pooler.endpoint())
        read(a)

        def second() -> None:
            start = time.monotonic()
            with client(pooler.endpoint()) as b:
                read(b)
            waited.append(time.monotonic() - start)

        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(1.0)
        a.close()
        thread.join(15)
        show(f"pgpool-II {binary.version} pool_size=1: B connects while A holds the only child for 1 s",
             B_connected_after_seconds=round(waited[0], 2) if waited else "never (15 s)")
