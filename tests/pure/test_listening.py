"""What a pooler's processes listen on, read from the kernel's tables, and what of it is beyond
127.0.0.1 and the run's own folder (pure: the tables are given as text and bytes)."""

from __future__ import annotations

import socket
import struct

import pytest

from leakcheck.provision.host.proc_sockets import (
    Listening,
    beyond,
    parse_diag,
    parse_inet_listening,
    parse_unix_listening,
)

TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000   101        0 11 1
   1: 00000000:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000   101        0 12 1
   2: 0100007F:D431 0100007F:1538 01 00000000:00000000 00:00000000 00000000   101        0 13 1
   3: 00000000:1F92 00000000:0000 0A 00000000:00000000 00:00000000 00000000   101        0 99 1
"""
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000   101        0 21 1
   1: 0000000000000000FFFF00000100007F:1F93 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000   101        0 22 1
"""  # noqa: E501 (the kernel's lines)
UDP = """\
   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  1: 00000000:14E9 00000000:0000 07 00000000:00000000 00:00000000 00000000   101        0 31 2 0 0
  2: 0100007F:D432 0100007F:0035 01 00000000:00000000 00:00000000 00000000   101        0 32 2 0 0
  3: 00000000:0000 00000000:0000 07 00000000:00000000 00:00000000 00000000   101        0 33 2 0 0
"""
UNIX = """\
Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 41 /tmp/leakcheck-pgpool4.3.5-ab/.s.PGSQL.6432
0000000000000000: 00000002 00000000 00010000 0001 01 42 /tmp/leakcheck run with space/.s.PGSQL.9898
0000000000000000: 00000002 00000000 00010000 0001 01 43 @pgpool-abstract
0000000000000000: 00000003 00000000 00000000 0001 03 44
0000000000000000: 00000002 00000000 00000000 0002 01 45 /tmp/elsewhere/dgram
0000000000000000: 00000002 00000000 00000000 0001 01 46 /tmp/elsewhere/bound-not-listening
"""


def test_tcp_sockets_in_listen_are_read_with_their_address_and_port_connections_are_not() -> None:
    assert parse_inet_listening(TCP, "tcp", {11, 12, 13}) == [Listening("tcp", "127.0.0.1", 8080),
                                                             Listening("tcp", "0.0.0.0", 8081)]
    assert parse_inet_listening(TCP6, "tcp", {21, 22}) == [Listening("tcp", "::", 8080),
                                                          Listening("tcp", "127.0.0.1", 8083)]  # IPv4-mapped


def test_an_unconnected_bound_udp_socket_listens_a_connected_or_unbound_one_does_not() -> None:
    assert parse_inet_listening(UDP, "udp", {31, 32, 33}) == [Listening("udp", "0.0.0.0", 5353)]


def test_unix_sockets_that_accept_or_receive_are_read_with_their_whole_path() -> None:
    assert parse_unix_listening(UNIX, {41, 42, 43, 44, 45, 46}) == [
        Listening("unix", "/tmp/leakcheck-pgpool4.3.5-ab/.s.PGSQL.6432"),
        Listening("unix", "/tmp/leakcheck run with space/.s.PGSQL.9898"),
        Listening("unix", "@pgpool-abstract"), Listening("unix", "/tmp/elsewhere/dgram")]


def test_only_the_processes_own_sockets_are_read() -> None:
    assert parse_inet_listening(TCP, "tcp", {99}) == [Listening("tcp", "0.0.0.0", 8082)]
    assert parse_unix_listening(UNIX, set()) == []


def diag_message(family: int, address: bytes, port: int, inode: int) -> bytes:
    body = struct.pack("=BBBB", family, 10, 0, 0) + struct.pack("!HH", port, 0) + address.ljust(16, b"\0")
    body += bytes(16) + struct.pack("=I8xIIIII", 0, 0, 0, 0, 101, inode)
    return struct.pack("=IHHII", 16 + len(body), 20, 2, 1, 0) + body


def test_sock_diag_s_answer_gives_each_listener_s_address_port_and_inode() -> None:
    done = struct.pack("=IHHII", 20, 3, 2, 1, 0) + bytes(4)
    data = (diag_message(socket.AF_INET, bytes([127, 0, 0, 1]), 6432, 71)
            + diag_message(socket.AF_INET6, bytes(16), 6433, 72)
            + diag_message(socket.AF_INET6, bytes(10) + b"\xff\xff" + bytes([127, 0, 0, 1]), 6434, 73))
    assert parse_diag(data) == ([("127.0.0.1", 6432, 71), ("::", 6433, 72), ("127.0.0.1", 6434, 73)], False)
    assert parse_diag(done) == ([], True)


def test_an_error_from_sock_diag_is_an_os_error() -> None:
    with pytest.raises(OSError):
        parse_diag(struct.pack("=IHHIIi", 36, 2, 0, 1, 0, -1) + bytes(16))


def test_beyond_is_every_address_but_127_0_0_1_and_every_socket_outside_the_folders() -> None:
    found = [Listening("tcp", "127.0.0.1", 6432), Listening("tcp", "0.0.0.0", 6432), Listening("tcp", "::", 1),
             Listening("tcp", "::1", 2), Listening("udp", "0.0.0.0", 5353),
             Listening("unix", "/tmp/run/.s.PGSQL.6432"), Listening("unix", "/tmp/run-other/.s.PGSQL.1"),
             Listening("unix", "/tmp/run/../x/.s.PGSQL.2"), Listening("unix", "@abstract"),
             Listening("unix", "relative/.s.PGSQL.3")]
    assert [str(s) for s in beyond(found, ["/tmp/run"])] == [
        "tcp:0.0.0.0:6432", "tcp:[::]:1", "tcp:[::1]:2", "udp:0.0.0.0:5353", "unix:/tmp/run-other/.s.PGSQL.1",
        "unix:/tmp/run/../x/.s.PGSQL.2", "unix:@abstract", "unix:relative/.s.PGSQL.3"]
