"""The witness times a client's step in the server's clock without asking the server (Witness.start): from its
latest look, how far the server's clock is ahead at least. A step's own statement is never before that moment,
and a statement from before the witness's previous look is never after it."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from leakcheck.model.versions import parse_spec
from leakcheck.probes.witness import Witness, open_witness, tag
from leakcheck.provision.base import USER, Endpoint
from leakcheck.provision.native import NativeBackend
from leakcheck.provision.postgres.fixtures import APP_ROLE

pytestmark = pytest.mark.servers


@pytest.fixture(scope="module")
def server(native: NativeBackend) -> Endpoint:
    return native.postgres(native.resolve_pg(parse_spec("16", "--pg")))


@pytest.fixture
def witness(server: Endpoint) -> Iterator[Witness]:
    made = open_witness(server.as_user(USER))
    yield made
    made.close()


def test_a_step_begins_no_later_than_the_servers_clock_says(witness: Witness, server: Endpoint) -> None:
    with psycopg.connect(server.as_user(APP_ROLE).conninfo(), autocommit=True) as other:
        for _ in range(50):
            witness.look("/* no such tag */")
            witness.start()
            row = other.execute("SELECT clock_timestamp()").fetchone()
            assert row is not None and witness.began <= row[0]


def test_a_statement_sent_right_after_its_step_began_is_always_sighted(witness: Witness, server: Endpoint) -> None:
    with psycopg.connect(server.as_user(APP_ROLE).conninfo(), autocommit=True) as client:
        for n in range(200):
            marker = tag(f"clock{n}", "A")
            witness.start()
            client.execute(f"SELECT 1 {marker}")
            assert witness.look(marker) is not None, f"step {n} was not sighted"


def test_a_statement_from_before_the_previous_look_is_never_sighted_again(witness: Witness, server: Endpoint) -> None:
    with psycopg.connect(server.as_user(APP_ROLE).conninfo(), autocommit=True) as client:
        for n in range(50):
            marker = tag(f"again{n}", "A")
            client.execute(f"SELECT 1 {marker}")
            assert witness.look(marker) is not None
            witness.start()
            assert witness.look(marker) is None, f"step {n}'s statement was sighted again after the next step began"


def test_the_lanes_witness_talks_to_postgresql_on_its_own_socket_and_clients_still_get_tcp(
        native: NativeBackend, server: Endpoint) -> None:
    from leakcheck.model.target import Driver, Route, Target
    from leakcheck.run.runner import witness_of

    pg = native.resolve_pg(parse_spec("16", "--pg"))
    witness = witness_of(native, Target(pg, None, Route.DIRECT, Driver.PSYCOPG))
    try:
        assert witness.conn.info.host == server.own_socket and server.own_socket.startswith("/")
    finally:
        witness.close()
    assert server.host == "127.0.0.1" and f"host={server.host} " in server.conninfo()
