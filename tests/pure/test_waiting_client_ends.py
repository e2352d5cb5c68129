"""The client whose call waits is named to the pooler's console by its own connection's ends: SHOW CLIENTS shows a
client by the address and port its TCP connection comes from. An agent's are read from /proc (its process and what
it started), leakcheck's own drivers' from their socket."""

from __future__ import annotations

import os
import socket

from leakcheck.drivers.clients import PsycopgClient
from leakcheck.provision.host.proc_sockets import parse_tcp_ends, tcp_connections

#: /proc/net/tcp: 127.0.0.1:50001 connected to 127.0.0.1:6432 (ESTABLISHED), inode 4242
TABLE = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
         "   0: 0100007F:C351 0100007F:1920 01 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0 20 4 "
         "30 10 -1\n")


def test_a_tcp_table_line_gives_its_socket_s_own_and_its_peer_s_address_and_port() -> None:
    assert parse_tcp_ends(TABLE, {4242}) == {4242: ("127.0.0.1", 50001, "127.0.0.1", 6432)}
    assert parse_tcp_ends(TABLE, {4243}) == {}


def test_a_process_s_tcp_connections_are_read_with_both_ends() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as conn:
            near = conn.getsockname()
            assert (near[0], near[1], "127.0.0.1", port) in tcp_connections(os.getpid())


class _PgConn:
    def __init__(self, fd: int) -> None:
        self.socket = fd


class _Conn:
    def __init__(self, fd: int) -> None:
        self.pgconn = _PgConn(fd)


def test_a_psycopg_client_s_connection_is_read_from_its_socket_which_it_keeps() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as conn:
            client = PsycopgClient("A", _Conn(conn.fileno()))  # type: ignore[arg-type]
            near = conn.getsockname()
            assert client.connections() == {(near[0], near[1], "127.0.0.1", port)}
            assert conn.getpeername()[1] == port  # the driver's own socket is still open


