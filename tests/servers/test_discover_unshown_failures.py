"""A failed step PostgreSQL shows no text of (a Bind of a prepared statement that does not exist) is proven on its
client's server connection by the witness (Scenario.prove_failed, Witness.failed_unshown) through every driver and
PgBouncer: a driver that returns on the ErrorResponse before the backend is ready again (tokio-postgres), and a
pooler that sent its own statement to the server for the step (PgBouncer 1.18's `SET client_encoding` after a
DISCARD ALL). Before, discovery stopped on both (exit 3, "carries no proof of its server connection")."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

from leakcheck.discover.differential import Differential
from leakcheck.discover.ops import Kind, Op, Who
from leakcheck.drivers.agents import client as agents
from leakcheck.model.target import Driver, Route
from leakcheck.model.verdicts import ServerId
from leakcheck.model.versions import parse_spec
from leakcheck.probes.witness import open_witness
from leakcheck.provision.base import USER
from leakcheck.provision.native import NativeBackend
from leakcheck.provision.postgres.fixtures import APP_ROLE
from tests.support.discover_lab import discover_lab

pytestmark = pytest.mark.servers

A, B = Who.A, Who.B
#: A's cached statement run again after DISCARD ALL (DEALLOCATE ALL) dropped it, in autocommit and in a transaction.
RUN_AGAIN = (
    (Op(A, Kind.PROTOCOL, "p1"), Op(A, Kind.DISCARD, "ALL"), Op(A, Kind.PROTOCOL, "p1")),
    (Op(A, Kind.PROTOCOL, "p1"), Op(A, Kind.DEALLOCATE_ALL), Op(A, Kind.BEGIN), Op(A, Kind.PROTOCOL, "p1"),
     Op(A, Kind.COMMIT)),
)


@pytest.fixture(autouse=True)
def _stop_agents() -> Iterator[None]:
    yield
    agents.stop_all()


@pytest.mark.parametrize("route", [Route.SESSION, Route.DIRECT])
def test_a_failed_call_whose_driver_returns_before_its_server_is_ready_again_is_proven(
        native: NativeBackend, route: Route) -> None:
    # tokio-postgres returns the error as soon as it arrives; PostgreSQL sends it before it reads the Sync and marks
    # its backend idle: before, 1 to 3 of these 8 runs stopped with "carries no proof of its server connection"
    with Differential(discover_lab(native, route, "1.24"), Driver("tokio-postgres")) as measure:
        for ops in RUN_AGAIN * 4:
            comparison = measure(ops)
            assert comparison.diffs == ()
            assert "26000" in comparison.results[-1 if len(ops) == 3 else -2]


def test_the_witness_waits_for_a_backend_to_be_ready_again_after_the_error_it_sent_at_once(
        native: NativeBackend) -> None:
    server = native.postgres(native.resolve_pg(parse_spec("16", "--pg")))
    witness = open_witness(server.as_user(USER))
    pg = psycopg.pq.PGconn.connect(server.as_user(APP_ROLE).conninfo().encode())
    try:
        assert pg.status == psycopg.pq.ConnStatus.OK
        row = witness.conn.execute("SELECT (extract(epoch FROM backend_start) * 1000000)::bigint::text "
                                   "FROM pg_stat_activity WHERE pid = %s", (pg.backend_pid,)).fetchone()
        assert row is not None
        backend = ServerId(pg.backend_pid, str(row[0]))
        witness.start()
        pg.enter_pipeline_mode()
        pg.send_query_prepared(b"no_such_statement", [])  # Bind and Execute, no Sync yet: the error comes at once
        pg.send_flush_request()
        pg.flush()
        assert witness.look("/* no tag */") is None
        sync = threading.Timer(0.2, lambda: (pg.pipeline_sync(), pg.flush()))
        sync.start()  # the backend becomes idle only when it reads the Sync, after the error reached the client
        try:
            assert witness.failed_unshown(backend, in_transaction=False)
        finally:
            sync.join()
    finally:
        pg.finish()
        witness.close()


@pytest.mark.parametrize("driver", ["asyncpg", "ruby-pg"])
def test_a_failed_call_after_pgbouncers_own_statement_for_it_is_proven_on_its_clients_server(
        native: NativeBackend, driver: str) -> None:
    # after DISCARD ALL the server's client_encoding is its default again, and PgBouncer 1.18 sends the client's own
    # (`SET client_encoding='utf-8'`) before relaying the Bind that fails: that statement started during the step
    with Differential(discover_lab(native, Route.TRANSACTION, "1.18"), Driver(driver)) as measure:
        comparison = measure(RUN_AGAIN[0])  # before: "transaction: step 3 (A: A:protocol(p1)) carries no proof"
        assert "26000" in comparison.results[2]
        other = measure((Op(A, Kind.PROTOCOL, "p1"), Op(B, Kind.PROTOCOL, "p1"), Op(A, Kind.PROTOCOL, "p1"),
                         Op(B, Kind.DISCARD, "ALL"), Op(B, Kind.PROTOCOL, "p1"), Op(A, Kind.PROTOCOL, "p1")))
        assert "26000" in other.results[5]
