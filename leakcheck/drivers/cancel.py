"""A CancelRequest sent by hand: the 16 bytes of PostgreSQL's protocol (length 16, code 80877102, the
backend's pid and secret key), to any address, so a probe chooses which process a cancel reaches.

The key is the one the server (or the pooler) gave the client at login: asyncpg keeps it on its
protocol object; psycopg's libpq does not make it public (PQgetCancel is opaque), and the agents'
protocol 1 has no request for it, so only asyncpg clients can have their cancel routed by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct

from leakcheck.drivers.clients import AsyncpgClient, Client
from leakcheck.provision.base import Endpoint

#: PostgreSQL's CancelRequest code (1234 << 16 | 5678).
CANCEL_CODE = 80877102
#: Seconds to connect, send, and see the receiver close the connection (it never answers a cancel).
CANCEL_TIMEOUT = 5.0


def cancel_request(pid: int, key: int) -> bytes:
    """The 16-byte CancelRequest packet (pid and key as the server sent them, signed 32-bit)."""
    return struct.pack("!iiii", 16, CANCEL_CODE, pid, key)


def cancel_key(client: Client) -> tuple[int, int] | None:
    """The (pid, secret key) the client's login was given, when its driver shows them (asyncpg)."""
    if isinstance(client, AsyncpgClient):
        protocol = client.conn._protocol
        return int(protocol.backend_pid), int(protocol.backend_secret)
    return None


async def send_cancel(to: Endpoint, pid: int, key: int) -> None:
    """Send the CancelRequest to `to` (TCP on 127.0.0.1, or a Unix socket folder as libpq names one) and
    wait, within CANCEL_TIMEOUT, until the receiver closes the connection. OSError/TimeoutError if it
    cannot be delivered."""

    async def deliver() -> None:
        if to.host.startswith("/"):
            reader, writer = await asyncio.open_unix_connection(f"{to.host}/.s.PGSQL.{to.port}")
        else:
            reader, writer = await asyncio.open_connection(to.host, to.port)
        try:
            writer.write(cancel_request(pid, key))
            await writer.drain()
            await reader.read()  # until the receiver closes: it has read the request
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    await asyncio.wait_for(deliver(), CANCEL_TIMEOUT)
